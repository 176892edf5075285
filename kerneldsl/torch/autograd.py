"""``backward=``: another kerneldsl kernel or fused function as an operator's autograd formula.

The backward is registered as an operator of its own (``<namespace>::<name>_backward``), so a
compiled graph's backward calls it like any other op, and wired to the forward by names:

- each of its array and scalar parameters is a forward input or output of the same name (saved
  for backward: tensors with ``save_for_backward``, numbers on the context), or ``grad_<output>``,
  the gradient of a forward output (``grad_out`` for a fused function's single result, ``grad_out0``
  ... for a tuple); its keyword arguments (sizes, dtypes, constants) are the forward's of the same
  name;
- its results are gradients of forward inputs: a kernel's ``Out`` parameters are named
  ``grad_<input>``; a fused function's results are the gradients of the forward's tensor inputs
  in order (fewer results: the remaining inputs get none).

What to save is what the backward names; nothing else is kept alive. Operators that mutate an
input (``InOut``) take no ``backward=``: PyTorch's autograd formulas are for functional ops.

``backward="derive"`` (``derivative``) registers one operator per input instead, each taking the
forward's positional arguments and the result's gradient: every tensor input is saved, and only
the gradients autograd asks for (``ctx.needs_input_grad``) are computed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from ..errors import TorchOpError
from ..jit.signature import ArrayParam
from .declaration import OpDeclaration


class Operator(Protocol):
    """What autograd reads of a registered operator (``operator.TorchOp`` is one): its name, the
    declaration its schema was read from, and the ``OpOverload`` a formula calls."""

    @property
    def qualname(self) -> str: ...

    @property
    def declaration(self) -> OpDeclaration: ...

    @property
    def overload(self) -> Callable[..., Any]: ...


def refuse_mutating(qualname: str, declaration: OpDeclaration) -> None:
    """An operator that mutates an input takes no ``backward=`` (checked before the backward is registered)."""
    mutated = declaration.mutated
    if mutated:
        raise TorchOpError(
            qualname,
            mutated[0].name,
            "an InOut parameter leaves the op without backward=: autograd "
            "formulas are for operators that mutate nothing (declare it In and return an Out)",
        )


def register_backward(forward: Operator, op: Operator, library: Any) -> None:
    """Register the operator ``op`` as ``forward``'s autograd formula, in ``forward``'s ``library``
    (the ``torch.library.Library`` that defined it)."""
    decl = forward.declaration
    sources = _sources(forward, op)
    keywords = _keywords(forward, op)
    targets = _targets(forward, op)
    saved_inputs = [i for kind, i in sources if kind == "input" and isinstance(decl.positional[i], ArrayParam)]
    saved_outputs = [i for kind, i in sources if kind == "output"]
    kw_only = bool(decl.keyword_names)
    overload = op.overload

    def save(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any) -> None:
        outs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*(inputs[i] for i in saved_inputs), *(outs[i] for i in saved_outputs))
        ctx.numbers = {i: v for i, v in enumerate(inputs) if not isinstance(v, torch.Tensor)}
        ctx.keywords = {k: keyword_only_inputs[k] for k in keywords if k in keyword_only_inputs}

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        save(ctx, inputs, {}, output)

    def backward_formula(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        saved = iter(ctx.saved_tensors)
        taken_inputs = {i: next(saved) for i in saved_inputs}
        taken_outputs = {i: next(saved) for i in saved_outputs}
        args = []
        for kind, i in sources:
            if kind == "grad":
                args.append(grads[i].contiguous())
            elif kind == "output":
                args.append(taken_outputs[i])
            else:
                args.append(taken_inputs[i] if i in taken_inputs else ctx.numbers[i])
        results = overload(*args, **ctx.keywords)
        results = results if isinstance(results, tuple) else (results,)
        gradients: list[Any] = [None] * len(decl.positional)
        for i, g in zip(targets, results):
            gradients[i] = g
        return tuple(gradients)

    torch.library.register_autograd(
        forward.qualname,
        backward_formula,
        setup_context=(
            (lambda ctx, inputs, keyword_only_inputs, output: save(ctx, inputs, keyword_only_inputs, output))
            if kw_only
            else setup_context
        ),
        lib=library,
    )


def register_gradients(forward: Operator, gradients: Mapping[int, Operator], library: Any) -> None:
    """Register ``gradients`` (forward positional index -> the operator computing that input's
    gradient from the forward's positional arguments and the result's gradient) as ``forward``'s
    autograd formula, in ``forward``'s ``library``."""
    positional = forward.declaration.positional
    tensors = [i for i, p in enumerate(positional) if isinstance(p, ArrayParam)]
    defaults = {i: p.default for i, p in enumerate(positional) if not isinstance(p, ArrayParam)}
    overloads = [(i, op.overload) for i, op in gradients.items()]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*(inputs[i] for i in tensors))
        ctx.numbers = {i: v for i, v in enumerate(inputs) if not isinstance(v, torch.Tensor)}

    def backward_formula(ctx: Any, grad: Any) -> tuple[Any, ...]:
        saved = dict(zip(tensors, ctx.saved_tensors))
        args = [saved[i] if i in saved else ctx.numbers.get(i, defaults[i]) for i in range(len(positional))]
        results: list[Any] = [None] * len(positional)
        for i, overload in overloads:
            if ctx.needs_input_grad[i]:
                results[i] = overload(*args, grad.contiguous())
        return tuple(results)

    torch.library.register_autograd(forward.qualname, backward_formula, setup_context=setup_context, lib=library)


def _sources(forward: Operator, backward: Operator) -> list[tuple[str, int]]:
    """Where each positional argument of the backward comes from: ``("input", i)``, ``("output", i)``
    or ``("grad", i)``, by its name."""
    decl = forward.declaration
    inputs = {p.name: i for i, p in enumerate(decl.positional)}
    outputs = {p.name: i for i, p in enumerate(decl.outputs)}
    grads = {f"grad_{p.name}": i for i, p in enumerate(decl.outputs)}
    found = []
    for p in backward.declaration.positional:
        if p.name in grads:
            found.append(("grad", grads[p.name]))
        elif p.name in inputs:
            found.append(("input", inputs[p.name]))
        elif p.name in outputs:
            found.append(("output", outputs[p.name]))
        else:
            raise TorchOpError(
                backward.qualname,
                p.name,
                f"names no input or output of {forward.qualname} (inputs {sorted(inputs)}, outputs {sorted(outputs)}) "
                f"and no gradient of an output ({', '.join(sorted(grads))})",
            )
    return found


def _keywords(forward: Operator, backward: Operator) -> list[str]:
    ours = set(forward.declaration.keyword_names)
    for k in backward.declaration.keyword_names:
        if k not in ours:
            raise TorchOpError(backward.qualname, k, f"is no keyword argument of {forward.qualname} ({sorted(ours)})")
    return list(backward.declaration.keyword_names)


def _targets(forward: Operator, backward: Operator) -> list[int]:
    """The forward positional argument each result of the backward is the gradient of."""
    decl = forward.declaration
    tensors = [i for i, p in enumerate(decl.positional) if isinstance(p, ArrayParam)]
    results = backward.declaration.outputs
    if backward.declaration.kind == "fused":
        if len(results) > len(tensors):
            raise TorchOpError(
                backward.qualname,
                None,
                f"returns {len(results)} gradients for {len(tensors)} tensor inputs of {forward.qualname}",
            )
        return tensors[: len(results)]
    by_name = {f"grad_{decl.positional[i].name}": i for i in tensors}
    for p in results:
        if p.name not in by_name:
            raise TorchOpError(
                backward.qualname,
                p.name,
                f"an output of a backward kernel is named grad_<input> ({', '.join(sorted(by_name))})",
            )
    return [by_name[p.name] for p in results]
