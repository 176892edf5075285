"""``backward="derive"``: the gradients of a ``@kd.fuse`` function, derived from its trace.

The function is traced once, at registration, by ``@kd.fuse``'s own tracer on stand-ins of the
declared shapes and dtypes: its program is a graph of ``kd.ops`` applications. For each
floating-point tensor input that reaches the result, a ``@kd.fuse`` function is made that
recomputes the forward values it needs and carries the result's gradient back through the graph
(reverse mode, one rule per op, each written in ``kd.ops``), so every gradient is one fused kernel
of its own, registered as the operator ``<name>_grad_<input>``.

Derived (``DERIVED``): ``add``, ``subtract``, ``multiply``, ``divide``, ``negative``, ``positive``,
``square``, ``reciprocal``, ``power``, ``fma``, ``exp``, ``expm1``, ``log``, ``log1p``, ``sqrt``,
``abs``, ``sin``, ``cos``, ``tan``, ``arcsin``, ``arccos``, ``arctan``, ``sinh``, ``cosh``,
``tanh``, ``arcsinh``, ``arccosh``, ``arctanh``, ``erf``, ``erfc``, ``logaddexp``, ``hypot``,
``maximum``, ``minimum`` (a tie splits the gradient in halves, as PyTorch's), ``clip`` and
``where`` (the condition and comparisons feeding it carry no gradient). A gradient flows only into
floating-point values: ``x * (x > 0)`` is differentiable, its comparison is not differentiated.

An input of fewer axes than the result, its shape the result's trailing axes (a per-feature
weight ``w: kd.In[T, n]`` against ``x: kd.In[T, m, n]``), gets its gradient summed over the
leading axes (the gradient function ends in ``kd.ops.sum``). Refused with ``TorchOpError`` naming
the op or the input: any other op on a path from an input to the result (``floor``, ``sign``,
``astype``, an ``@kd.elementwise`` function ...), a reduction (``kd.ops.sum`` ...), a tuple
result, keyword arguments, and an input that broadcasts against the result otherwise (along an
axis of extent 1).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..array import ops
from ..array.fusion import Fused
from ..array.program import Leaf, Node
from ..dtypes import element_type, is_dtype_name
from ..errors import TorchOpError
from ..jit.signature import ArrayParam, Expr, ScalarParam
from ..jit.signature.spelling import ArrayAnnotation, ScalarAnnotation
from .declaration import OpDeclaration

DERIVE = "derive"  # backward=DERIVE: the gradients derived from the trace

_TRACE_EXTENT = 3  # symbols get 3, 4, 5, ...: distinct extents tell a broadcast input from one of the result's shape
_TRACE_DTYPE = "float64"  # what a dtype variable is traced as

Rule = Callable[[int, Any, tuple[Any, ...], Any], Any]  # (operand index, result's gradient, operands, result)


def _extremum(better: Callable[[Any, Any], Any]) -> Rule:
    """maximum / minimum: the gradient goes to the operand chosen; a tie splits it in halves."""

    def rule(k: int, g: Any, a: tuple[Any, ...], r: Any) -> Any:
        mine, other = a[k], a[1 - k]
        return ops.where(better(mine, other), g, ops.where(ops.equal(mine, other), g * 0.5, 0.0))

    return rule


def _clip(k: int, g: Any, a: tuple[Any, ...], r: Any) -> Any:
    x, lo, hi = a
    if k == 0:
        return ops.where(ops.logical_and(ops.greater_equal(x, lo), ops.less_equal(x, hi)), g, 0.0)
    return ops.where(ops.less(x, lo), g, 0.0) if k == 1 else ops.where(ops.greater(x, hi), g, 0.0)


_TWO_OVER_ROOT_PI = 2.0 / math.sqrt(math.pi)

RULES: dict[str, Rule] = {
    "add": lambda k, g, a, r: g,
    "subtract": lambda k, g, a, r: g if k == 0 else ops.negative(g),
    "multiply": lambda k, g, a, r: g * a[1 - k],
    "divide": lambda k, g, a, r: g / a[1] if k == 0 else ops.negative(g * r / a[1]),
    "negative": lambda k, g, a, r: ops.negative(g),
    "positive": lambda k, g, a, r: g,
    "square": lambda k, g, a, r: g * a[0] * 2.0,
    "reciprocal": lambda k, g, a, r: ops.negative(g * r * r),
    "power": lambda k, g, a, r: g * a[1] * ops.power(a[0], a[1] - 1) if k == 0 else g * r * ops.log(a[0]),
    "fma": lambda k, g, a, r: g * a[1 - k] if k < 2 else g,
    "exp": lambda k, g, a, r: g * r,
    "expm1": lambda k, g, a, r: g * (r + 1.0),
    "log": lambda k, g, a, r: g / a[0],
    "log1p": lambda k, g, a, r: g / (a[0] + 1.0),
    "sqrt": lambda k, g, a, r: g / (r * 2.0),
    "abs": lambda k, g, a, r: g * ops.sign(a[0]),
    "sin": lambda k, g, a, r: g * ops.cos(a[0]),
    "cos": lambda k, g, a, r: ops.negative(g * ops.sin(a[0])),
    "tan": lambda k, g, a, r: g * (r * r + 1.0),
    "arcsin": lambda k, g, a, r: g / ops.sqrt(1.0 - a[0] * a[0]),
    "arccos": lambda k, g, a, r: ops.negative(g / ops.sqrt(1.0 - a[0] * a[0])),
    "arctan": lambda k, g, a, r: g / (a[0] * a[0] + 1.0),
    "sinh": lambda k, g, a, r: g * ops.cosh(a[0]),
    "cosh": lambda k, g, a, r: g * ops.sinh(a[0]),
    "tanh": lambda k, g, a, r: g * (1.0 - r * r),
    "arcsinh": lambda k, g, a, r: g / ops.sqrt(a[0] * a[0] + 1.0),
    "arccosh": lambda k, g, a, r: g / ops.sqrt(a[0] * a[0] - 1.0),
    "arctanh": lambda k, g, a, r: g / (1.0 - a[0] * a[0]),
    "erf": lambda k, g, a, r: g * ops.exp(ops.negative(a[0] * a[0])) * _TWO_OVER_ROOT_PI,
    "erfc": lambda k, g, a, r: ops.negative(g * ops.exp(ops.negative(a[0] * a[0])) * _TWO_OVER_ROOT_PI),
    "logaddexp": lambda k, g, a, r: g * ops.exp(a[k] - r),
    "hypot": lambda k, g, a, r: g * a[k] / r,
    "maximum": _extremum(ops.greater),
    "minimum": _extremum(ops.less),
    "clip": _clip,
    "where": lambda k, g, a, r: ops.where(a[0], g, 0.0) if k == 1 else ops.where(a[0], 0.0, g),  # k 0: none
}
DERIVED = tuple(RULES)


@dataclass(frozen=True)
class Graph:
    """A traced function's program: ``values`` (leaves and nodes, by id, in creation order), where
    each leaf's value comes from (``("arg", position)`` or ``("const", value)``) and the result's id."""

    values: tuple[Leaf | Node, ...]
    sources: dict[int, tuple[str, Any]]
    root: int

    def dtype(self, value: int) -> np.dtype:
        return self.values[value].dtype

    def nodes(self) -> list[tuple[int, Node]]:
        return [(i, v) for i, v in enumerate(self.values) if isinstance(v, Node)]

    def reached_from(self, leaf: int) -> set[int]:
        """The values computed from ``leaf``: the paths its gradient may take."""
        reached = {leaf}
        for i, node in self.nodes():
            if any(a in reached for a in node.args):
                reached.add(i)
        return reached


@dataclass(frozen=True)
class Gradient:
    """The gradient of forward input ``position``: a fused function of the forward's positional
    arguments and the result's gradient, and the function declaring it (``declare=``)."""

    position: int
    name: str
    fused: Fused
    declare: Callable[..., Any]


def derive(qualname: str, target: Any, decl: OpDeclaration) -> list[Gradient]:
    """The gradient of every floating-point tensor input of ``target`` (a ``@kd.fuse`` function)
    that reaches its result; ``TorchOpError`` for what cannot be derived."""
    if not isinstance(target, Fused):
        raise TorchOpError(qualname, "backward", "backward='derive' derives the gradients of a @kd.fuse function")
    if len(decl.outputs) != 1:
        raise TorchOpError(qualname, "backward", "backward='derive' takes a function of one result, not a tuple")
    if decl.keyword_names:
        raise TorchOpError(
            qualname, decl.keyword_names[0], "backward='derive' takes functions without keyword arguments"
        )
    graph, shapes = _trace(qualname, target, decl)
    (out,) = decl.outputs
    gradients = []
    for position, p in enumerate(decl.positional):
        if not isinstance(p, ArrayParam) or not _floating(p.dtype):
            continue
        leaf = next(i for i, s in graph.sources.items() if s == ("arg", position))
        reached = graph.reached_from(leaf)
        if graph.root not in reached:
            continue  # the result does not depend on it: its gradient is None (zeros)
        carriers = _carriers(qualname, graph, reached)
        if leaf not in carriers:
            continue  # only through values that carry no gradient (a where's condition)
        leading = len(shapes[-1]) - len(shapes[position])
        if leading < 0 or shapes[-1][leading:] != shapes[position]:
            raise TorchOpError(
                qualname,
                p.name,
                f"its shape {p.shape} broadcasts against the result's {out.shape} along an axis of extent 1: "
                "backward='derive' sums a gradient over leading axes only (pass backward=)",
            )
        fused = _gradient(graph, leaf, carriers, leading, target.name, p.name)
        gradients.append(Gradient(position, p.name, fused, _declaration(decl, p)))
    return gradients


def _floating(dtype: str) -> bool:
    return not is_dtype_name(dtype) or element_type(dtype).kind == "f"


def _traced_dtype(dtype: str) -> np.dtype:
    return element_type(dtype if is_dtype_name(dtype) else _TRACE_DTYPE).numpy


def _trace(qualname: str, target: Fused, decl: OpDeclaration) -> tuple[Graph, list[tuple[int, ...]]]:
    """Trace ``target`` on stand-ins of the declared shapes (distinct extents per symbol) and
    dtypes; the graph and each positional argument's traced shape, then the result's."""
    extents = {s: _TRACE_EXTENT + i for i, s in enumerate(decl.signature.symbols)}
    stand_ins: list[Any] = []
    for p in decl.positional:
        if isinstance(p, ArrayParam):
            shape = tuple(
                d if isinstance(d, int) else d.evaluate(extents) if isinstance(d, Expr) else extents[d] for d in p.shape
            )
            stand_ins.append(SimpleNamespace(shape=shape, dtype=_traced_dtype(p.dtype), ptr=0))
        else:
            stand_ins.append(_traced_dtype(p.dtype).type(1))
    builder, results, _ = target.trace(*stand_ins)
    (result,) = results
    if result.reduction is not None or builder.reductions:
        name = (result.reduction or (None,))[0]
        raise TorchOpError(
            qualname,
            "backward",
            f"{getattr(name, 'name', 'a reduction')}: backward='derive' derives elementwise pipelines; a reduction "
            "needs backward=",
        )
    leaves = [i for i, v in enumerate(builder.values) if isinstance(v, Leaf)]
    graph = Graph(tuple(builder.values), dict(zip(leaves, builder.sources)), result.id)
    return graph, [tuple(getattr(s, "shape", ())) for s in stand_ins] + [tuple(result.shape)]


_NO_GRADIENT = {("where", 0)}  # (op, operand): the operands a rule gives no gradient


def _carriers(qualname: str, graph: Graph, reached: set[int]) -> set[int]:
    """The values the result's gradient reaches on its way back to the values in ``reached``:
    floating-point values only. Every op it passes through has a rule, and every value a rule
    reads can be recomputed by ``kd.ops``; the op at fault is named."""
    carriers = {graph.root}
    for i, node in reversed(graph.nodes()):
        if i not in carriers:
            continue
        if node.op not in RULES:
            raise TorchOpError(
                qualname,
                "backward",
                f"kd.ops.{node.op} (or a function of that name) has no derived gradient: backward='derive' "
                f"derives {', '.join(DERIVED)}; pass backward= for the rest",
            )
        for value in (i, *node.args):
            _check_recomputable(qualname, graph, value)
        for k, a in enumerate(node.args):
            if a in reached and graph.dtype(a).kind == "f" and (node.op, k) not in _NO_GRADIENT:
                carriers.add(a)
    return carriers


def _check_recomputable(qualname: str, graph: Graph, value: int) -> None:
    found = graph.values[value]
    if isinstance(found, Node):
        if not isinstance(getattr(ops, found.op, None), ops.Op):
            raise TorchOpError(
                qualname,
                "backward",
                f"{found.op} is no kd.ops function: backward='derive' cannot recompute what it computes",
            )
        for a in found.args:
            _check_recomputable(qualname, graph, a)


def _gradient(graph: Graph, leaf: int, carriers: set[int], leading: int, function: str, name: str) -> Fused:
    """The fused function computing the gradient of the input whose leaf is ``leaf``, carried
    back through ``carriers`` and summed over the ``leading`` axes the input was broadcast along
    (a gradient of the result's shape, summed where the input stood for many elements)."""

    def gradient(*values: Any) -> Any:
        args, grad = values[:-1], values[-1]
        known: dict[int, Any] = {}

        def value(i: int) -> Any:  # a forward value, recomputed once where a rule reads it
            if i not in known:
                found = graph.values[i]
                if isinstance(found, Node):
                    known[i] = getattr(ops, found.op)(*(value(a) for a in found.args))
                else:
                    kind, source = graph.sources[i]
                    known[i] = args[source] if kind == "arg" else source
            return known[i]

        adjoint: dict[int, Any] = {graph.root: grad}
        for i, node in reversed(graph.nodes()):
            g = adjoint.pop(i, None)
            if g is None:
                continue
            operands = tuple(value(a) for a in node.args)
            for k, a in enumerate(node.args):
                if a in carriers and (node.op, k) not in _NO_GRADIENT:
                    partial = RULES[node.op](k, g, operands, value(i))
                    adjoint[a] = partial if a not in adjoint else adjoint[a] + partial
        result = adjoint[leaf]
        own = value(leaf).dtype
        result = result if result.dtype == own else ops.astype(result, own)
        return ops.sum(result, axis=tuple(range(leading))) if leading else result

    gradient.__name__ = f"{function}_grad_{name}"
    return Fused(gradient)


def _declaration(decl: OpDeclaration, input_param: ArrayParam) -> Callable[..., Any]:
    """A function whose annotations declare a gradient: the forward's positional arguments, then
    ``grad_out`` (the result's gradient), returning the gradient of ``input_param``."""
    (out,) = decl.outputs
    params = [
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_annotation(p, "in"))
        for p in decl.positional
    ]
    params.append(
        inspect.Parameter(
            f"grad_{out.name}", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_annotation(out, "in")
        )
    )
    returned = _annotation(input_param, "out")

    def declared(*args: Any) -> Any:
        raise TypeError("a declaration is never called")

    declared.__signature__ = inspect.Signature(params, return_annotation=returned)  # type: ignore[attr-defined]
    return declared


def _annotation(p: ArrayParam | ScalarParam, direction: str) -> ArrayAnnotation | ScalarAnnotation:
    if isinstance(p, ScalarParam):
        return ScalarAnnotation(p.dtype)
    return ArrayAnnotation(direction, p.dtype, tuple(p.shape), False)
