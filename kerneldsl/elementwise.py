"""Elementwise programs: a small SSA graph of per-element expressions, run as one generated kernel.

Every elementwise thing kerneldsl runs (``@kd.elementwise`` functions, the ``kd.ops`` math,
``@kd.fuse`` chains) is a ``Program``: leaves (array or scalar inputs) and nodes (an operator's
C expression over earlier values). A program plus a layout becomes a ``kerneldsl.kernel.Kernel``
whose body is rendered from ``templates/elementwise.cu.j2``, so it gets the same binding,
NVRTC, disk cache, adapter and warm dispatch as ``@kd.kernel``.

Semantics (documented, tested against NumPy):

- Dtypes follow NumPy 2 (``kerneldsl.promotion``); each node converts its operands to its loop
  dtype, computes, and float16/bfloat16 values are computed in float32 and rounded back to
  their dtype after every node, exactly like NumPy's loops. Kernels are compiled with
  ``--fmad=false`` so ``a * x + y`` rounds twice, as in NumPy: fused and unfused results agree
  bit for bit for + - * / and differ only where CUDA's math functions (sin, exp, ...) differ from
  NumPy's (a few ulp).
- Broadcasting follows NumPy. Layout ``flat``: every array has the result's shape (one flat
  grid-stride loop; 16-byte vector loads/stores when every pointer is 16-byte aligned, scalar
  tail). Layout ``broadcast``: offsets are decomposed per element from the result index.
- Indexing is 32-bit whenever every size fits in int32 (the specializer decides), else 64-bit.
- Results: DeviceArray in -> DeviceArray out (async on the session stream); numpy in -> numpy
  out (copied in and back within the call); ``out=`` follows NumPy's ``same_kind`` casting.
  Foreign CUDA arrays (CAI / DLPack) are adopted zero-copy; a strided one is refused; strided
  numpy inputs are materialized.
"""

from __future__ import annotations

import inspect
import re
import threading
from threading import get_ident
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes, fastpath, promotion
from .codegen import render
from .errors import DeclarationError, FusionError
from .kernel import Kernel
from .launch import BoundLaunch
from .runtime import driver
from .runtime.interop import as_device_view
from .runtime.memory import DeviceArray
from .runtime.session import default_session
from .signature import (
    RESERVED_NAMES,
    ArrayAnnotation,
    Expr,
    In,
    Out,
    Scalar,
    ScalarAnnotation,
    as_expr,
    cdiv,
    dmin,
    parse_signature,
    sym,
)

BLOCK = 256
# "stride": about BLOCKS_PER_SM blocks per SM loop over the data; "one": one vector per thread.
# Read when a plan is made (the grid limit is folded into the generated launcher).
GRID_POLICY = "one"
BLOCKS_PER_SM = 8
DEFAULT_SMS = 132  # for kernels built without a device (inspect on a CPU machine): an H100/H200
OPTIONS = ("--fmad=false",)  # NumPy rounds a*b+c twice; so do we
SCALAR_TYPES = (bool, int, float, np.generic)

_HALF = ("float16", "bfloat16")
_UNSIGNED = {
    "bool": "unsigned char",
    "int8": "unsigned char",
    "int16": "unsigned short",
    "int32": "unsigned int",
    "int64": "unsigned long long",
}


# --- the program -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """An input of a program: an array read per element, or a scalar kernel parameter."""

    kind: str  # "array" or "scalar"
    dtype: np.dtype


@dataclass(frozen=True)
class Node:
    """One operator application: ``expr`` names its operands ``params``; ``args`` are value ids."""

    op: str
    params: tuple[str, ...]
    expr: str
    args: tuple[int, ...]
    loop: tuple[np.dtype, ...]  # the dtype each operand is converted to
    dtype: np.dtype  # the result; also the type the expression computes in (kdT)


@dataclass(frozen=True)
class Program:
    """Leaves are values ``0..L-1``, node ``k`` is value ``L + k``; ``root`` is the result."""

    name: str
    leaves: tuple[Leaf, ...]
    nodes: tuple[Node, ...]
    root: int

    def dtype_of(self, value: int) -> np.dtype:
        if value < len(self.leaves):
            return self.leaves[value].dtype
        return self.nodes[value - len(self.leaves)].dtype

    @property
    def dtype(self) -> np.dtype:
        return self.dtype_of(self.root)


def compute_ctype(dt: np.dtype) -> str:
    """The C type values of ``dt`` are held in: 16-bit floats compute in float."""
    et = dtypes.element_type(dt)
    return "float" if et.name in _HALF else et.ctype


def storage_ctype(dt: np.dtype) -> str:
    return dtypes.element_type(dt).ctype


def unsigned_ctype(dt: np.dtype) -> str:
    et = dtypes.element_type(dt)
    return _UNSIGNED.get(et.name, compute_ctype(dt))


def kind(dt: np.dtype) -> str:
    return dtypes.element_type(dt).kind


def program_context(p: Program) -> dict[str, Any]:
    """What the ``element`` template macro needs of a program."""
    leaves = [{"id": i, "cctype": compute_ctype(leaf.dtype)} for i, leaf in enumerate(p.leaves)]
    nodes = []
    for k, n in enumerate(p.nodes):
        name = dtypes.element_type(n.dtype).name
        nodes.append({
            "id": len(p.leaves) + k,
            "op": n.op,
            "cctype": compute_ctype(n.dtype),
            "kdT": compute_ctype(n.dtype),
            "kdU": unsigned_ctype(n.dtype),
            "operands": [
                {"name": pn, "cctype": compute_ctype(dt), "src": a} for pn, a, dt in zip(n.params, n.args, n.loop)
            ],
            "expr": n.expr,
            "round": storage_ctype(n.dtype) if name in _HALF else None,
        })
    return {"leaves": leaves, "nodes": nodes, "root": p.root}


# --- tracing: building programs --------------------------------------------------------------------


class Traced:
    """A value of a program being built; ``kd.fuse`` gives it operators (see fuse.Tracer)."""

    __slots__ = ("graph", "id", "dtype", "shape", "reduction", "argument")

    def __init__(self, graph: Graph, id: int, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.graph = graph
        self.id = id
        self.dtype = dtype
        self.shape = shape
        self.reduction: Any = None  # (Reduction, axis, reduced value) when this ends a chain
        self.argument: Any = None  # (position, value) of a scalar argument of the traced function

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class Graph:
    """A program under construction: values (leaves and nodes) in creation order.

    ``sources`` says where each leaf's value comes from at call time: ``("arg", position)`` or
    ``("const", value)`` (a scalar written in the traced function).
    """

    name: str
    values: list[Leaf | Node] = field(default_factory=list)
    sources: list[tuple[str, Any]] = field(default_factory=list)
    shapes: list[tuple[int, ...] | None] = field(default_factory=list)  # per leaf; None for scalars
    make: Callable[..., Traced] = Traced

    def leaf(self, kind: str, dtype: np.dtype, source: tuple[str, Any], shape: tuple[int, ...] | None) -> int:
        self.values.append(Leaf(kind, np.dtype(dtype)))
        self.sources.append(source)
        self.shapes.append(shape)
        return len(self.values) - 1

    def value(self, id: int, dtype: np.dtype, shape: tuple[int, ...]) -> Traced:
        return self.make(self, id, dtype, shape)

    def apply(self, fn: ElementwiseFunction, operands: Sequence[Any]) -> Traced:
        """Record ``fn(*operands)``: traced values, scalars (new scalar leaves), nothing else."""
        for o in operands:
            if isinstance(o, Traced):
                if o.graph is not self:
                    raise FusionError(f"{fn.name}: a value traced by another kd.fuse function was used here")
                if o.reduction is not None:
                    raise FusionError(
                        f"{fn.name} is applied to the result of reduction {o.reduction[0].name!r}: a reduction can only "
                        "end a fused chain (split the function, or reduce last)"
                    )
            elif not isinstance(o, SCALAR_TYPES):
                raise FusionError(
                    f"{fn.name}: an operand of type {type(o).__name__} cannot be fused; pass arrays as arguments "
                    "of the fused function"
                )
        result, loops = fn.resolve([_promoted(o) for o in operands])
        args = []
        for o, loop in zip(operands, loops):
            if not isinstance(o, Traced):
                args.append(self.leaf("scalar", loop, ("const", o), None))
            elif o.argument is not None:  # a scalar argument: its dtype is decided here, by promotion
                args.append(self.leaf("scalar", loop, ("arg", o.argument[0]), None))
            else:
                args.append(o.id)
        shape = broadcast_shape([o.shape for o in operands if isinstance(o, Traced)], fn.name)
        self.values.append(Node(fn.name, fn.params, fn.expression(result), tuple(args), tuple(loops), result))
        return self.value(len(self.values) - 1, result, shape)

    def program(self, root: Traced) -> Program:
        """Freeze, renumbering leaves ahead of nodes (the layout kernels expect)."""
        leaves = [i for i, v in enumerate(self.values) if isinstance(v, Leaf)]
        nodes = [i for i, v in enumerate(self.values) if isinstance(v, Node)]
        new = {old: k for k, old in enumerate(leaves + nodes)}
        renumbered = []
        for i in nodes:
            n = self.values[i]
            assert isinstance(n, Node)
            renumbered.append(Node(n.op, n.params, n.expr, tuple(new[a] for a in n.args), n.loop, n.dtype))
        return Program(self.name, tuple(self.values[i] for i in leaves), tuple(renumbered), new[root.id])  # type: ignore[misc]


def _promoted(operand: Any) -> Any:
    """What promotion sees: a traced array's dtype, a scalar's (weak or numpy) value."""
    if isinstance(operand, Traced):
        return operand.dtype if operand.argument is None else operand.argument[1]
    return operand


def broadcast_shape(shapes: Sequence[tuple[int, ...]], what: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else ()
    except ValueError:
        raise ValueError(f"{what}: operands could not be broadcast together with shapes {' '.join(map(str, shapes))}") from None


# --- kernels ------------------------------------------------------------------------------------------


def layout_of(shapes: Sequence[tuple[int, ...] | None], out_shape: tuple[int, ...]) -> tuple[Any, ...]:
    """``("flat", ndim)`` when every array has the result's shape, else ``("broadcast", ndim, ranks)``."""
    if all(s is None or s == out_shape for s in shapes):
        return ("flat", len(out_shape))
    return ("broadcast", len(out_shape), tuple(None if s is None else len(s) for s in shapes))


def _c_name(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name).strip("_") or "program"
    return cleaned if cleaned[0].isalpha() else f"k{cleaned}"


def make_kernel(name: str, params: list[tuple[str, Any]], body: Callable[[dict[str, Any]], str],
                grid: Expr | int = 1) -> Kernel:
    """A ``Kernel`` over generated parameters whose body text comes from ``body(proxies)``."""

    def kernel_body(**proxies: Any) -> str:
        return body(proxies)

    kernel_body.__name__ = kernel_body.__qualname__ = _c_name(name)
    kernel_body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=a) for n, a in params]
    )
    sig = parse_signature(kernel_body, grid=grid, block=BLOCK, allow_alias=True)
    return Kernel(kernel_body, sig, OPTIONS)


_kernels: dict[tuple[Any, ...], Kernel] = {}
_kernels_lock = threading.Lock()


def elementwise_kernel(program: Program, layout: tuple[Any, ...], out_dtype: np.dtype, max_blocks: int) -> Kernel:
    """The (cached) Kernel that evaluates ``program`` into an output of ``out_dtype``.

    Its launcher computes the grid itself: one 16-byte vector per thread, at most ``max_blocks``.
    """
    key = (program, layout, out_dtype, max_blocks)
    found = _kernels.get(key)
    if found is None:
        with _kernels_lock:
            found = _kernels.get(key)
            if found is None:
                found = _kernels[key] = _build_elementwise(program, layout, out_dtype, max_blocks)
    return found


def leaf_dims(layout: tuple[Any, ...], i: int) -> tuple[str, ...]:
    if layout[0] == "flat":
        return tuple(f"kdn{j}" for j in range(layout[1]))
    return tuple(f"kds{i}x{m}" for m in range(layout[2][i]))


def out_dims(layout: tuple[Any, ...]) -> tuple[str, ...]:
    prefix = "kdn" if layout[0] == "flat" else "kdo"
    return tuple(f"{prefix}{j}" for j in range(layout[1]))


def leaf_params(program: Program, layout: tuple[Any, ...]) -> list[tuple[str, Any]]:
    params: list[tuple[str, Any]] = []
    for i, leaf in enumerate(program.leaves):
        name = dtypes.element_type(leaf.dtype).name
        if leaf.kind == "array":
            params.append((f"kdp{i}", In[name, leaf_dims(layout, i)]))
        else:
            params.append((f"kdp{i}", Scalar[name]))
    return params


def array_leaves(program: Program, layout: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [
        {"id": i, "param": f"kdp{i}", "dims": leaf_dims(layout, i), "itemsize": leaf.dtype.itemsize,
         "storage": storage_ctype(leaf.dtype)}
        for i, leaf in enumerate(program.leaves)
        if leaf.kind == "array"
    ]


def loads(program: Program, array_load: Callable[[int], str]) -> dict[int, str]:
    """Per leaf, the C expression of its stored value at the current element."""
    return {i: array_load(i) if leaf.kind == "array" else f"kdp{i}" for i, leaf in enumerate(program.leaves)}


def vector_width(program: Program, out_dtype: np.dtype | None = None) -> int:
    """Elements per 16-byte access of the widest array (the output too, for elementwise kernels)."""
    sizes = [leaf.dtype.itemsize for leaf in program.leaves if leaf.kind == "array"]
    if out_dtype is not None:
        sizes.append(out_dtype.itemsize)
    return max(1, 16 // max(sizes, default=1))


def _build_elementwise(program: Program, layout: tuple[Any, ...], out_dtype: np.dtype, max_blocks: int) -> Kernel:
    params = leaf_params(program, layout)
    params.append(("kdout", Out[dtypes.element_type(out_dtype).name, out_dims(layout)]))
    arrays = array_leaves(program, layout)
    vec = vector_width(program, out_dtype)

    def body(proxies: dict[str, Any]) -> str:
        aligned = all(proxies[a["param"]].aligned16 for a in arrays) and proxies["kdout"].aligned16
        vector = layout[0] == "flat" and aligned and vec > 1
        broadcast = layout[0] == "broadcast"
        return render(
            "elementwise.cu.j2",
            name=program.name,
            layout=layout[0] if layout[0] == "flat" else "broadcast",
            vector=vector,
            vec=vec,
            size_expr=" * ".join(f"(index_t){d}" for d in out_dims(layout)) or "1",
            arrays=arrays,
            out={"storage": storage_ctype(out_dtype), "cctype": compute_ctype(out_dtype), "itemsize": out_dtype.itemsize},
            out_dims=out_dims(layout),
            program=program_context(program),
            vector_loads=loads(program, lambda i: f"kdl{i}.v[kdk]"),
            scalar_loads=loads(program, lambda i: f"kdp{i}[kdoff{i}]" if broadcast else f"kdp{i}[kdi]"),
        )

    total: Expr = as_expr(1)
    for d in out_dims(layout):
        total = total * sym(d)
    return make_kernel(program.name, params, body, grid=dmin(cdiv(total, BLOCK * vec), max_blocks))


# --- running ------------------------------------------------------------------------------------------

_sm_counts: dict[int, int] = {}


def sm_count(device: int) -> int:
    found = _sm_counts.get(device)
    if found is None:
        d = driver.api()
        attr = d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        found = _sm_counts[device] = int(driver.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(attr, driver.device(device))))
    return found


def grid_limit(device: int) -> int:
    """The most blocks an elementwise launch uses under ``GRID_POLICY``."""
    if GRID_POLICY == "one":
        return 2**31 - 1
    try:
        sms = sm_count(device)
    except Exception:  # no driver or device: building for inspection only
        sms = DEFAULT_SMS
    return sms * BLOCKS_PER_SM


def adopt(value: Any, session: Any) -> DeviceArray:
    """A foreign CUDA array (CAI / DLPack) as a zero-copy DeviceArray; strided ones are refused."""
    view = as_device_view(value)
    if view is None:
        raise TypeError(f"expected an array or a scalar, got {type(value).__name__}")
    if session is None:
        session = default_session(view.device or 0)
    if not view.c_contiguous:
        raise ValueError(
            f"a strided (non C-contiguous) {type(value).__name__} of shape {view.shape} cannot be used: "
            "make it contiguous first"
        )
    return DeviceArray.borrow(session, view)


def is_array(value: Any) -> bool:
    return isinstance(value, (DeviceArray, np.ndarray)) or hasattr(value, "__cuda_array_interface__") or hasattr(
        value, "__dlpack__"
    )


def place(values: Sequence[Any]) -> tuple[list[Any], Any]:
    """Decide where a call runs: ``(values, session)``, session None for the numpy path.

    Any device array (ours or foreign, adopted zero-copy) sends the call to the device; numpy
    operands are then uploaded (kept alive until the stream passes them). Otherwise
    everything stays on the host.
    """
    session = next((v.session for v in values if type(v) is DeviceArray), None)
    if session is None:
        foreign = next((v for v in values if not isinstance(v, (np.ndarray, *SCALAR_TYPES)) and is_array(v)), None)
        if foreign is None:
            return list(values), None
        session = adopt(foreign, None).session
    out = []
    for v in values:
        if isinstance(v, np.ndarray):
            d = session.to_device(v)
            session.keep_alive(d, session.stream)
        elif type(v) is DeviceArray or isinstance(v, SCALAR_TYPES):
            d = v
        else:
            d = adopt(v, session)
        out.append(d)
    return out, session


def check_out(out: Any, shape: tuple[int, ...], result: np.dtype, what: str) -> None:
    """NumPy's rules for ``out=``: the exact result shape, a ``same_kind`` cast from the result dtype."""
    if tuple(out.shape) != shape:
        raise ValueError(f"{what}: out= has shape {tuple(out.shape)}, the result has shape {shape}")
    if not np.can_cast(result, out.dtype, "same_kind"):
        raise TypeError(f"{what}: cannot cast the {result} result to out= dtype {out.dtype} (casting rule 'same_kind')")
    promotion.supported(out.dtype)


def check_placement(out: Any, session: Any, what: str) -> None:
    """Host operands write host results, device operands device results."""
    if session is None and not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: the operands are on the host, so out= must be a numpy array")
    if session is not None and type(out) is not DeviceArray:
        raise TypeError(f"{what}: the operands are on the device, so out= must be a kerneldsl DeviceArray")


def arg_key(value: Any) -> Any:
    """The part of the plan-cache key one call argument contributes.

    A DeviceArray contributes its ``dispatch_tag`` (session, dtype, alignment, index width), so a
    plan's key decides everything the kernel's own dispatch would: plans keep its result.
    """
    t = type(value)
    if t is DeviceArray:
        return (value.dispatch_tag, value.shape)
    if t is np.ndarray:
        return (t, value.dtype, value.shape)
    if isinstance(value, np.generic):
        return value.dtype
    shape = getattr(value, "shape", None)  # foreign arrays (CuPy, PyTorch): adopted per call
    if shape is not None:
        return (t, getattr(value, "dtype", None), tuple(shape))
    return t


@dataclass
class ElementwisePlan:
    """One compiled program for one combination of argument dtypes and shapes: the warm path."""

    kernel: Kernel
    sources: tuple[tuple[str, Any], ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    size: int
    broadcast: bool
    direct: bool = False  # every argument is a leaf, in order: no reordering needed
    plain: tuple[int, ...] = ()  # argument positions holding ml_dtypes scalars, passed as float
    bound: dict[int, BoundLaunch] = field(default_factory=dict)  # per thread: the kernel's dispatch result
    c_launch: Any = None  # the C path's Launch for ``op(*args, out=out)`` once made (False: it cannot)

    def remember(self, function: Any, values: Sequence[Any], out: Any, session: Any) -> None:
        """Let the C path take later ``function(*values, out=out)`` calls like this one: device
        operands in kernel order, the same shape everywhere (no broadcasting to check) and no
        ml_dtypes scalars to convert."""
        if out is None or session is None or not self.direct or self.broadcast or self.plain or session._captures:
            return
        bound = self.bound.get(get_ident())
        if bound is not None:
            fastpath.remember(function, self, lambda: fastpath.c_launch(bound, (*values, out), out_keyword=True))

    def run(self, args: Sequence[Any], out: Any, session: Any) -> Any:
        if self.plain:
            args = [float(a) if i in self.plain else a for i, a in enumerate(args)]
        values = args if self.direct else [args[s] if kind == "arg" else s for kind, s in self.sources]
        if out is not None:
            check_placement(out, session, self.kernel.signature.name)
        if session is None:
            return self._run_host(values, out)
        if out is None:
            out = session.empty(self.shape, self.dtype)
        if self.size:
            if self.broadcast:
                values = [_unalias_device(v, out, session) for v in values]
            self._launch(values, out, session)
        return out

    def _launch(self, values: Sequence[Any], out: Any, session: Any) -> None:
        """Launch through the bound kernel this plan's key selects, skipping a second dispatch."""
        bound = self.bound.get(get_ident())
        if bound is None:
            found = self.kernel.lookup((*values, out), {})
            if found is None or found[1]:  # foreign or host operands: the general path
                self.kernel(*values, out)
                return
            bound = self.bound[get_ident()] = found[0]
        bound.call(*values, out, None, None, None, None)
        if session._captures:
            session.keep_alive((values, out))

    def _run_host(self, values: list[Any], out: Any) -> Any:
        target = out
        if out is None or not (out.flags.c_contiguous and out.flags.writeable) or any(
            isinstance(v, np.ndarray) and np.shares_memory(v, out) for v in values
        ):
            target = np.empty(self.shape, self.dtype if out is None else out.dtype)
        if self.size:
            self.kernel(*values, target)
        if out is not None and target is not out:
            out[...] = target
            return out
        return target


def _unalias_device(value: Any, out: DeviceArray, session: Any) -> Any:
    """A broadcast input that overlaps the output would be overwritten while still read: copy it."""
    if type(value) is DeviceArray and value.shape != out.shape and value.nbytes and out.nbytes:
        if value.ptr < out.ptr + out.nbytes and out.ptr < value.ptr + value.nbytes:
            return session.copy(value)
    return value


def plan_program(graph: Graph, root: Traced, args: Sequence[Any], out: Any) -> ElementwisePlan:
    """Compile ``graph`` (result ``root``) for these call arguments."""
    program = graph.program(root)
    shapes = list(graph.shapes)
    shape = root.shape
    out_dtype = program.dtype
    if out is not None:
        check_out(out, shape, out_dtype, program.name)
        out_dtype = np.dtype(out.dtype)
    layout = layout_of(shapes, shape)
    session = next((a.session for a in args if type(a) is DeviceArray), None)
    kernel = elementwise_kernel(program, layout, out_dtype, grid_limit(0 if session is None else session.device))
    sources = tuple(graph.sources)
    return ElementwisePlan(
        kernel=kernel,
        sources=sources,
        shape=shape,
        dtype=out_dtype,
        size=int(np.prod(shape, dtype=np.int64)),
        broadcast=layout[0] == "broadcast",
        direct=sources == tuple(("arg", i) for i in range(len(args))),
        plain=tuple(i for i, a in enumerate(args) if isinstance(a, np.generic) and not isinstance(a, (np.number, np.bool_))),
    )


# --- elementwise functions: ops and user expressions ----------------------------------------------------


class ElementwiseFunction(fastpath.Front):
    """Something that maps operands to one result element by element (an op or a user expression).

    Subclasses give ``params`` (the names the expression uses), ``resolve`` (result and loop
    dtypes from the operand dtypes / scalars) and ``expression`` (C text for a loop dtype).
    """

    name: str
    params: tuple[str, ...]

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        raise NotImplementedError

    def expression(self, dtype: np.dtype) -> str:
        raise NotImplementedError

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], ElementwisePlan] = {}

    def _call(self, *operands: Any, out: Any = None) -> Any:
        """The Python path of a call (``fastpath.Front`` first tries what the C path remembered)."""
        key = tuple(map(arg_key, operands)) + (arg_key(out),)
        plan = self._plans.get(key)  # never holds traced operands: their key is only their type
        if plan is not None:
            values, session = _fast_place(operands)
            result = plan.run(values, out, session)
            plan.remember(self, values, out, session)
            return result
        if len(operands) != len(self.params):
            raise TypeError(f"{self.name}() takes {len(self.params)} operand(s) ({', '.join(self.params)}), got {len(operands)}")
        for o in operands:
            if isinstance(o, Traced):
                if out is not None:
                    raise FusionError(f"{self.name}: out= cannot be used inside a fused function")
                return o.graph.apply(self, operands)
        if len(self._plans) > 4096:
            self._plans.clear()
        values, session = place(operands)
        plan = self._plans[key] = self._plan(values, out)
        result = plan.run(values, out, session)
        plan.remember(self, values, out, session)
        return result

    def inspect(self, *operands: Any, out: Any = None, arch: str | None = None) -> Any:
        """The Build (CUDA source, adapter, cubin) a call with these operands runs; no GPU needed.

        Operands may be numpy arrays, scalars, or anything with ``shape`` and ``dtype`` (and
        ``ptr``: a pointer that is not 16-byte aligned selects the scalar path).
        """
        plan = self._plan(operands, out)
        values = [operands[s] if kind == "arg" else s for kind, s in plan.sources]
        target = out if out is not None else np.empty(plan.shape, plan.dtype)
        return plan.kernel.inspect(*values, target, arch=arch)

    def _plan(self, values: Sequence[Any], out: Any) -> ElementwisePlan:
        graph = Graph(self.name)
        traced = []
        for i, v in enumerate(values):
            if isinstance(v, SCALAR_TYPES):
                traced.append(v)
            elif hasattr(v, "shape") and hasattr(v, "dtype"):
                promotion.supported(v.dtype)
                leaf = graph.leaf("array", v.dtype, ("arg", i), tuple(v.shape))
                traced.append(graph.value(leaf, np.dtype(v.dtype), tuple(v.shape)))
            else:
                raise TypeError(f"{self.name}: operand {i} of type {type(v).__name__} is neither an array nor a scalar")
        root = graph.apply(self, traced)
        # scalar operands became ("const", value) leaves; at call time they come from the arguments
        scalars = iter(i for i, v in enumerate(values) if isinstance(v, SCALAR_TYPES))
        graph.sources = [("arg", next(scalars)) if kind == "const" else (kind, s) for kind, s in graph.sources]
        return plan_program(graph, root, values, out)


def _fast_place(values: Sequence[Any]) -> tuple[Sequence[Any], Any]:
    """``place`` for the warm path: DeviceArrays and scalars only need their session found."""
    session = None
    for v in values:
        t = type(v)
        if t is DeviceArray:
            session = v.session
        elif t is not float and t is not int and t is not bool and not isinstance(v, np.generic):
            return place(values)
    return values, session


# --- @kd.elementwise ------------------------------------------------------------------------------------


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Elementwise(ElementwiseFunction):
    """A user elementwise function: ``@kd.elementwise def f(a: kd.Scalar["T"], x: kd.In["T"]) -> kd.Out["T"]``.

    The function returns a C expression in which each parameter name is that operand's value at
    the current element (already converted to the parameter's dtype; float16/bfloat16 values are
    float). A dtype variable binds to the NumPy promotion of every operand declared with it
    (Python scalars are weak); a concrete dtype converts its operand. The result has the return
    annotation's dtype. Names starting with ``kd`` are reserved for generated code; ``kdT`` is
    the C type the expression computes in. Statements fit in an immediately invoked lambda:
    ``"[&] { float t = x * x; return t > a ? t : a; }()"``.
    """

    def __init__(self, func: Callable[..., str]) -> None:
        super().__init__()
        self.__wrapped__ = func
        self.__doc__ = func.__doc__
        self.name = func.__name__
        sig = inspect.signature(func, eval_str=True)
        decls = []
        for p in sig.parameters.values():
            ann = p.annotation
            ok = isinstance(ann, ScalarAnnotation) or (isinstance(ann, ArrayAnnotation) and ann.direction == "in")
            if not ok:
                raise DeclarationError(self.name, p.name, "annotate each operand with kd.In[dtype] or kd.Scalar[dtype]")
            if not _NAME.match(p.name) or p.name in RESERVED_NAMES or p.name.startswith("kd"):
                raise DeclarationError(self.name, p.name, "name clashes with a C++ keyword or the reserved kd prefix")
            decls.append((p.name, self._dtype_spec(p.name, ann.dtype)))
        ret = sig.return_annotation
        if not (isinstance(ret, ArrayAnnotation) and ret.direction == "out"):
            raise DeclarationError(self.name, None, "the return annotation must be kd.Out[dtype]")
        self.params = tuple(n for n, _ in decls)
        self._decls = tuple(d for _, d in decls)
        self._out = self._dtype_spec("return", ret.dtype)
        if not dtypes.is_dtype_name(self._out) and self._out not in self._decls:
            raise DeclarationError(self.name, None, f"the result's dtype variable {self._out!r} is bound by no operand")
        expr = func(*self.params)
        if not isinstance(expr, str) or not expr.strip():
            raise DeclarationError(self.name, None, "the function must return the element expression as a str")
        self._expr = expr.strip()

    def _dtype_spec(self, param: str, spec: Any) -> str:
        if isinstance(spec, str) and not dtypes.is_dtype_name(spec):
            return spec
        try:
            return dtypes.element_type(spec).name
        except KeyError as exc:
            raise DeclarationError(self.name, param, exc.args[0]) from None

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        bound: dict[str, np.dtype] = {}
        for var in dict.fromkeys(d for d in self._decls if not dtypes.is_dtype_name(d)):
            members = [promotion._probe(o) for o, d in zip(operands, self._decls) if d == var]
            bound[var] = promotion.supported(np.result_type(*members))
        def concrete(spec: str) -> np.dtype:
            return bound[spec] if spec in bound else dtypes.ELEMENT_TYPES[spec].numpy
        return concrete(self._out), tuple(concrete(d) for d in self._decls)

    def expression(self, dtype: np.dtype) -> str:
        return self._expr

    def __repr__(self) -> str:
        return f"<kd.elementwise {self.name}: {self._expr}>"


def elementwise(func: Callable[..., str]) -> Elementwise:
    """Declare an elementwise function from a C expression over its operands (see ``Elementwise``)."""
    return Elementwise(func)
