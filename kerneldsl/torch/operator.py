"""``kd.torch.op``: a declaration registered as a torch operator.

Registration goes through ``torch.library.Library`` ``define`` / ``impl`` (the ``custom_op``
wrapper adds several microseconds of Python to every call): one implementation for the CPU and
CUDA dispatch keys, a fake kernel (``register_fake``) for tracing, and, with ``backward=``, an
autograd formula (``register_autograd``). The operator is tagged ``needs_contiguous_strides``:
kerneldsl kernels index their arrays as C-contiguous, so Inductor hands it contiguous tensors; an
eager call makes a strided input contiguous (a copy) and refuses a strided ``InOut``.

The implementation bound to the dispatcher is, for a kernel, a function generated once per
operator and dispatch key (``templates/torch/warm.py.j2``): a warm call makes one key (thread,
for CUDA the device, each input's shape, dtype and alignment), finds the arrays kept for it,
points them at the tensors, allocates each output (``torch.empty_like`` of the input it is the
twin of, else ``torch.empty`` of the recorded shape and dtype) and calls the kernel (its C launch
path; for CUDA on torch's current stream). The general path, which checks everything, serves a
key's first call, anything the warm call does not take, and fused functions. Nothing
synchronizes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from threading import get_ident
from typing import Any, cast

import torch
from torch import empty, empty_like

from ..dtypes import is_dtype_name
from ..errors import ClosedError, TorchOpError
from ..jit.codegen import render
from ..jit.signature import ArrayParam, Expr, ScalarParam
from .autograd import refuse_mutating, register_backward, register_gradients
from .declaration import OpDeclaration, defaults_allowed, read_declaration, split_name
from .derivative import DERIVE, Gradient, derive
from .shapes import bind_outputs
from .tensors import MAX_ADOPTED, Device, device_of, torch_dtype

LIVE: dict[str, TorchOp] = {}  # every registered operator, by name: alive for the process, as torch's own


class TorchOp:
    """A kerneldsl kernel, fused function or op registered as ``torch.ops.<namespace>.<name>``.

    Call it as the operator (``op(x, alpha)``, or ``torch.ops.mylib.scale(x, alpha)``): arrays the
    declaration reads or mutates and scalars by position, sizes, dtypes and constants by keyword;
    it returns its ``Out`` arrays (one tensor, a tuple, or None). ``overload`` is the
    ``OpOverload``, ``schema`` its schema, ``declaration`` what both were read from.
    """

    def __init__(
        self,
        qualname: str,
        target: Any,
        *,
        declare: Callable[..., Any] | None = None,
        backward: Any = None,
    ) -> None:
        namespace, name = split_name(qualname)
        self.qualname = qualname
        self.target = target
        self.declaration = read_declaration(qualname, target, declare)
        self.schema = self.declaration.schema()
        self.backward: TorchOp | None = None
        self.gradients: dict[str, TorchOp] = {}  # backward="derive": the gradient of each input, by its name
        derived = []
        if backward is not None:
            refuse_mutating(qualname, self.declaration)
        if isinstance(backward, str):
            if backward != DERIVE:
                raise TorchOpError(
                    qualname, "backward", f"is a kernel, a fused function or {DERIVE!r}, not {backward!r}"
                )
            derived = derive(qualname, target, self.declaration)
            backward = None
        # torch.library.Library is untyped; the operator lives as long as its library, which the
        # process keeps (LIVE) once registration has succeeded, and which a failure destroys
        self._library: Any = cast(Any, torch.library.Library)(namespace, "FRAGMENT")
        try:
            self._register(name, backward, derived)
        except BaseException:
            self._library._destroy()
            raise
        LIVE[qualname] = self

    def _register(self, name: str, backward: Any, derived: list[Gradient]) -> None:
        try:
            self._library.define(f"{name}{self.schema}", tags=(torch.Tag.needs_contiguous_strides,))
        except RuntimeError as exc:
            raise TorchOpError(self.qualname, None, f"cannot be defined: {str(exc).splitlines()[0]}") from None
        namespace = self.qualname.split("::")[0]
        self.overload: torch._ops.OpOverload = getattr(getattr(torch.ops, namespace), name).default
        self._run = _Runner(self.declaration, self.target)
        self._library.impl(name, self._run.impls["CPU"], "CPU")
        self._library.impl(name, self._run.impls["CUDA"], "CUDA")
        torch.library.register_fake(self.qualname, self._fake, lib=self._library)
        if backward is not None:
            self.backward = TorchOp(f"{self.qualname}_backward", backward)
            try:
                register_backward(self, self.backward, self._library)
            except BaseException:
                _withdraw(self.backward)
                raise
        if derived:
            try:
                for gradient in derived:
                    self.gradients[gradient.name] = TorchOp(
                        f"{self.qualname}_grad_{gradient.name}", gradient.fused, declare=gradient.declare
                    )
                register_gradients(self, {g.position: self.gradients[g.name] for g in derived}, self._library)
            except BaseException:
                for op in self.gradients.values():
                    _withdraw(op)
                raise

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.overload(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kd.torch.op {self.qualname}{self.schema}>"

    def _fake(self, *args: Any, **kwargs: Any) -> Any:
        """Outputs of the right shape, dtype and device, from the declaration; no data is read."""
        specs = bind_outputs(self.declaration, named_arguments(self.declaration, args, kwargs))
        device = _first_tensor(args).device
        outs = tuple(torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs)
        return _returned(outs)


def _withdraw(op: TorchOp) -> None:
    """Undo the registration of ``op`` (an operator made for one that failed to register)."""
    LIVE.pop(op.qualname, None)
    op._library._destroy()


def named_arguments(decl: OpDeclaration, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by parameter name (defaults left out, as the dispatcher passes them)."""
    named = {p.name: a for p, a in zip(decl.positional, args)}
    named.update(kwargs)
    return named


def _first_tensor(args: tuple[Any, ...]) -> torch.Tensor:
    return next(a for a in args if isinstance(a, torch.Tensor))


def _returned(outs: tuple[torch.Tensor, ...]) -> Any:
    return outs[0] if len(outs) == 1 else (outs or None)


class _Kept:
    """What the warm calls of one key reuse: the device (its place, its CUDA ordinal and wrapped
    streams), the arrays kept for its inputs then its outputs, and the outputs' shapes and dtypes
    (for those that are no input's twin)."""

    __slots__ = ("device", "place", "ordinal", "streams", "arrays", "shapes", "dtypes")

    def __init__(
        self,
        device: Device,
        arrays: tuple[Any, ...],
        shapes: tuple[tuple[int, ...], ...],
        dtypes: tuple[torch.dtype, ...],
    ) -> None:
        self.device = device
        self.place = device.place
        self.ordinal = device.ordinal
        self.streams = device.streams
        self.arrays = arrays
        self.shapes = shapes
        self.dtypes = dtypes


class _Runner:
    """The real kernel: what each call does is decided here once, from the declaration.

    ``arrays`` and ``scalars`` place the schema's positional arguments in the kerneldsl call; each
    output has a recipe for its shape (an input's whole shape, or per axis a fixed extent, an
    input's axis or a size argument; None for a computed extent, which ``bind_outputs`` computes) and its dtype (a fixed
    dtype, an input's, or a dtype argument), read with no checks. When reading fails, the call
    raises what ``bind_outputs``
    raises; a mismatch reading does not see (two inputs disagreeing on a symbol) is the kernel's
    own binding error, of the same class. A fused function broadcasts instead of binding, so its
    calls run ``bind_outputs`` first. ``impls``, what the dispatcher calls for its CPU and CUDA
    keys, are the generated warm calls where the declaration allows them (a kernel without size
    or dtype arguments), else this general path.
    """

    def __init__(self, decl: OpDeclaration, target: Any) -> None:
        self.decl = decl
        self.target = target
        self.name = decl.signature.name
        order = [p.name for p in decl.signature.runtime_params]
        self.width = len(order)
        self.fused = decl.kind == "fused"
        self.arrays = tuple(
            (order.index(p.name), i, p.name, p.direction == "inout")
            for i, p in enumerate(decl.positional)
            if isinstance(p, ArrayParam)
        )
        self.scalars = tuple(
            (order.index(p.name), i, p.default) for i, p in enumerate(decl.positional) if not isinstance(p, ArrayParam)
        )
        self.first_array = self.arrays[0][1]
        sources: dict[str, tuple[int, int]] = {}
        dtypes: dict[str, int] = {}
        for i, p in enumerate(decl.positional):
            if isinstance(p, ArrayParam):
                for axis, d in enumerate(p.shape):
                    if isinstance(d, str):
                        sources.setdefault(d, (i, axis))
                dtypes.setdefault(p.dtype, i)
        # (slot, name, shape recipe, dtype recipe, the input it is the twin of: same shape and dtype, or -1)
        outputs = []
        for p in decl.outputs:
            shape, dtype = _shape_recipe(p, decl.positional, sources), _dtype_recipe(p.dtype, dtypes)
            twin = shape if type(shape) is int and decl.positional[shape].dtype == p.dtype else -1
            outputs.append((order.index(p.name), p.name, shape, dtype, twin))
        self.outputs = tuple(outputs)
        self.consts = tuple(c.name for c in decl.consts)
        self.single = len(decl.outputs) == 1
        # the warm path: kernels whose outputs' shapes and dtypes follow from the inputs' alone
        # (keywords, if any, are constants passed through); a fused function broadcasts, so it binds
        self.kept: dict[str, dict[tuple[Any, ...], _Kept]] = {"CPU": {}, "CUDA": {}}
        warm = not self.fused and not decl.sizes and not decl.dtype_args
        self.impls: dict[str, Callable[..., Any]] = {
            key: self._warm_function(key) if warm else self for key in ("CPU", "CUDA")
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Any call, by the general path."""
        return self._returned(self._general(args, kwargs))

    def _warm_function(self, dispatch_key: str) -> Callable[..., Any]:
        """The generated warm call for ``dispatch_key`` (``templates/torch/warm.py.j2``): straight-line
        code for this declaration's arguments, with the general path (``__call__``) for anything it
        does not take. The dispatcher hands it a Tensor for every tensor argument (the schema says so)."""
        slots: list[str] = [""] * self.width
        for slot, i, _, _ in self.arrays:
            slots[slot] = f"a{i}"
        for slot, i, _ in self.scalars:
            slots[slot] = f"s{i}"
        for j, (slot, _, _, _, _) in enumerate(self.outputs):
            slots[slot] = f"b{j}"
        positional = self.decl.positional
        names = [f"{'t' if isinstance(p, ArrayParam) else 's'}{i}" for i, p in enumerate(positional)]
        # an argument equal to its schema default is left out by the dispatcher: it takes the default
        params = [f"{n}=d{i}" if d else n for i, (n, d) in enumerate(zip(names, defaults_allowed(positional)))]
        source = render(
            "torch/warm.py.j2",
            op=self.decl.op,
            cuda=dispatch_key == "CUDA",
            names=names,
            params=params,
            keywords=bool(self.consts),
            arrays=[i for _, i, _, _ in self.arrays],
            kept=[f"a{i}" for _, i, _, _ in self.arrays] + [f"b{j}" for j in range(len(self.outputs))],
            outputs=[twin for _, _, _, _, twin in self.outputs],
            call=slots,
        )
        table = self.kept[dispatch_key]
        namespace: dict[str, Any] = {
            "empty": empty,
            "empty_like": empty_like,
            "get_ident": get_ident,
            "ClosedError": ClosedError,
            "table": table,
            "general": self._general_returned,
            "first": partial(self._first, table),
            "target": self.target,
            **{f"d{i}": p.default for i, p in enumerate(positional) if isinstance(p, ScalarParam)},
        }
        if dispatch_key == "CUDA":  # a CPU build of torch has no CUDA tensors, and no such function
            namespace["raw_stream"] = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        exec(compile(source, f"<kerneldsl torch op {self.decl.op} {dispatch_key}>", "exec"), namespace)
        warm: Callable[..., Any] = namespace["warm"]
        return warm

    def _general_returned(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The general path as the warm call's fallback (arguments as a tuple and a dict)."""
        return self._returned(self._general(args, kwargs))

    def _returned(self, outs: list[torch.Tensor]) -> Any:
        return outs[0] if self.single else (tuple(outs) or None)

    def _first(
        self, table: dict[tuple[Any, ...], _Kept], key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """The general path, then what later calls of this key reuse (kept in ``table``, a warm
        call's): arrays borrowed from the inputs and outputs (holding no reference to any tensor)
        and the outputs' shapes and dtypes."""
        outs = self._general(args, kwargs)
        if any(t.data_ptr() % 16 for t in outs):
            return self._returned(outs)
        device = device_of(args[self.first_array])
        arrays = tuple(device.borrow(args[i], self.name, name) for _, i, name, _ in self.arrays) + tuple(
            device.borrow(t, self.name, name) for (_, name, _, _, _), t in zip(self.outputs, outs)
        )
        if len(table) >= MAX_ADOPTED:
            table.clear()
        table[key] = _Kept(device, arrays, tuple(tuple(t.shape) for t in outs), tuple(t.dtype for t in outs))
        return self._returned(outs)

    def _general(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        """Any call: checks what the warm path takes for granted, copies strided inputs, adopts
        each tensor, allocates each output from its recipe and runs the kernel or fused function."""
        first = args[self.first_array]
        device = device_of(first)
        adopt = device.adopt
        call: list[Any] = [None] * self.width
        copies = []  # contiguous copies of strided inputs: alive until the kernel has read them
        for slot, i, name, writes in self.arrays:
            t = args[i]
            if not isinstance(t, torch.Tensor):
                bind_outputs(self.decl, named_arguments(self.decl, args, kwargs))  # raises why
            if not writes:
                c = t.contiguous()
                if c is not t:
                    copies.append(c)
                    t = c
            call[slot] = adopt(t, self.name, name)
        for slot, i, default in self.scalars:
            call[slot] = args[i] if i < len(args) else default  # the dispatcher leaves defaults out
        outs = []
        bound = None
        if self.fused:  # a fused function broadcasts: the declaration's extents are checked here
            bound = bind_outputs(self.decl, named_arguments(self.decl, args, kwargs))
        try:
            for j, (_, _, shape, dtype, twin) in enumerate(self.outputs):
                if twin >= 0 and not copies:  # empty_like of a contiguous input: a fraction of empty's cost
                    outs.append(torch.empty_like(args[twin]))
                    continue
                if type(shape) is int:
                    size = args[shape].shape
                elif shape is None:  # a computed extent: the declaration computes it
                    bound = bound or bind_outputs(self.decl, named_arguments(self.decl, args, kwargs))
                    size = bound[j][0]
                else:
                    size = _shape(shape, args, kwargs)
                outs.append(
                    torch.empty(
                        size,
                        dtype=args[dtype].dtype if type(dtype) is int else _dtype(dtype, kwargs),
                        device=device.place,
                    )
                )
        except (IndexError, KeyError, TypeError, AttributeError):
            bind_outputs(self.decl, named_arguments(self.decl, args, kwargs))  # raises the declared error
            raise
        consts = {c: kwargs[c] for c in self.consts if c in kwargs} if self.consts else {}
        if self.fused:
            self._call_fused(device, call, outs)
        else:
            for (slot, name, _, _, _), t in zip(self.outputs, outs):
                call[slot] = adopt(t, self.name, name)
            stream = device.current_stream()
            if stream is None:
                self.target(*call, **consts)
            else:
                self.target(*call, stream=stream, **consts)
        return outs

    def _call_fused(self, device: Device, call: list[Any], outs: list[torch.Tensor]) -> None:
        """A fused function or op runs on its session's stream: on CUDA that stream first waits
        for torch's, and torch's then waits for it (events, no host synchronization)."""
        inputs = call[: self.width - len(outs)]
        adopted = [device.adopt(t, self.name, name) for (_, name, _, _, _), t in zip(self.outputs, outs)]
        stream = device.current_stream()
        session = device.session
        if stream is not None:
            session.stream.wait(session.create_event(timing=False).record(stream))
        if self.single:
            self.target(*inputs, out=adopted[0])
        else:  # fused pipelines returning a tuple take no out=: their results are copied over
            for result, out in zip(self.target(*inputs), adopted):
                result.copy_to(out)
        if stream is not None:
            stream.wait(session.create_event(timing=False).record())


def _dtype_recipe(declared: str, dtypes: dict[str, int]) -> Any:
    if is_dtype_name(declared):
        return torch_dtype(declared)
    return dtypes.get(declared, declared)  # an input's index, or the dtype argument's name


def _shape_recipe(
    out: ArrayParam, positional: tuple[ArrayParam | ScalarParam, ...], sources: dict[str, tuple[int, int]]
) -> Any:
    """How a call finds an output's shape: the index of an input of the very same shape (its
    ``shape`` is taken whole), else per axis a fixed extent, an ``(input, axis)`` or a size
    argument's name; None when an extent is computed (``bind_outputs`` computes it)."""
    if any(isinstance(d, Expr) for d in out.shape):
        return None
    for i, p in enumerate(positional):
        if (
            isinstance(p, ArrayParam)
            and p.shape == out.shape
            and all(isinstance(d, int) or sources[cast(str, d)] == (i, axis) for axis, d in enumerate(p.shape))
        ):
            return i
    return tuple(d if isinstance(d, int) else sources.get(cast(str, d), d) for d in out.shape)


def _shape(recipe: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    return [d if type(d) is int else (args[d[0]].shape[d[1]] if type(d) is tuple else kwargs[d]) for d in recipe]


def _dtype(recipe: Any, kwargs: dict[str, Any]) -> torch.dtype:
    return recipe if isinstance(recipe, torch.dtype) else kwargs[recipe]


def op(qualname: str, *, declare: Callable[..., Any] | None = None, backward: Any = None) -> Callable[[Any], TorchOp]:
    """Register a kernel, fused function or op as the torch operator ``qualname``
    (``"namespace::name"``): ``kd.torch.op("mylib::scale")(scale)``, or stacked as a decorator
    above ``@kd.kernel`` / ``@kd.fuse``.

    ``declare=``: a function whose annotations declare what ``kd.ops`` functions (and fused
    functions written without annotations) take and return. ``backward=``: a kernel or fused
    function computing the gradients (see ``kerneldsl.torch.autograd``), or ``"derive"`` for a
    ``@kd.fuse`` function of differentiable ``kd.ops`` (see ``kerneldsl.torch.derivative``).
    """

    def register(target: Any) -> TorchOp:
        return TorchOp(qualname, target, declare=declare, backward=backward)

    return register
