"""Reductions: a program's values folded to one value, over everything or over one axis.

``kd.reduction(map=, reduce=, identity=, post=)`` declares one; ``kd.ops.sum`` and friends are
reductions too. The kernels come from ``templates/reduction.cu.j2`` as ``Kernel`` objects.

Results are deterministic for every dtype, floats included: each thread folds a fixed
grid-stride subset, blocks combine with warp shuffles and one shared-memory step, and a full
reduction of more than ``DIRECT_MAX`` elements writes per-block partials that the last block to
finish (elected by an integer ticket, the only atomic) folds in index order, in the same launch.
No value is ever added atomically; the tree depends only on the size and the device's SM count. Axis reductions give each output to a warp or block (reduced axis innermost) or to one
thread (reduced axis outer), so they are deterministic too.

Accumulation dtype: NumPy's result dtype (``sum`` of int8 accumulates in int64, of uint8 in
uint64, ``mean`` of ints in float64), except that float16 and bfloat16 always accumulate in
float32 and round once at the end (NumPy sums float16 pairwise in float16: we are more
accurate); float32 accumulates in float32, float64 in float64. Float results therefore differ
from NumPy's by summation order only: tests allow ``rtol = eps(acc) * sqrt(n)``-ish bounds.
NaN propagates through min/max/sum like NumPy; argmax/argmin return the first NaN's index.

Known limits: one axis (or all) per call; an axis reduction with few outputs gets little
parallelism (``(2**20, 4).sum(axis=0)`` runs 4 threads): reduce a 1-D array (always the
full path) or transpose first when that matters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes, promotion
from .codegen import render
from .elementwise import (
    BLOCK,
    SCALAR_TYPES,
    ElementwiseFunction,
    Graph,
    Program,
    Traced,
    array_leaves,
    arg_key,
    check_out,
    check_placement,
    compute_ctype,
    loads,
    make_kernel,
    place,
    program_context,
    sm_count,
    storage_ctype,
    unsigned_ctype,
    vector_width,
)
from .errors import FusionError
from .kernel import Kernel
from .runtime.memory import DeviceArray
from .runtime.session import default_session
from .signature import In, InOut, Out, Scalar

DIRECT_MAX = 16384  # full reductions up to this size run as one single-block launch
PARTIAL_BLOCKS_PER_SM = 8  # blocks of the first pass of a full reduction, per SM
ROWS_BLOCK_MIN = 2048  # reduced extent from which a whole block (not a warp) takes one output

_HALF = ("float16", "bfloat16")
_SHUFFLE = {"bool": "int", "int8": "int", "int16": "int", "uint8": "unsigned int", "uint16": "unsigned int"}


def _acc(dt: np.dtype) -> np.dtype:
    """float16/bfloat16 accumulate in float32."""
    return np.dtype(np.float32) if dtypes.element_type(dt).name in _HALF else dt


def _numpy_dtype(func: Callable[..., Any]) -> Callable[[np.dtype], np.dtype]:
    def rule(dt: np.dtype) -> np.dtype:
        with np.errstate(all="ignore"):
            return promotion.supported(np.asarray(func(np.ones(1, dt))).dtype)
    return rule


def _same(dt: np.dtype) -> np.dtype:
    return dt


def _int64(dt: np.dtype) -> np.dtype:
    return np.dtype(np.int64)


def identity_literal(which: str, dt: np.dtype) -> str:
    """C text of 0, 1, +inf / the maximum (``"max"``) or -inf / the minimum (``"min"``) of ``dt``."""
    if which in ("0", "1"):
        return f"(kdA){which}"
    et = dtypes.element_type(dt)
    high = which == "max"
    if et.kind == "b":
        return "true" if high else "false"
    if et.kind == "f":
        inf = "__longlong_as_double(0x7ff0000000000000LL)" if dt == np.float64 else "__int_as_float(0x7f800000)"
        return f"{'' if high else '-'}(kdA){inf}"
    info = np.iinfo(dt)
    value = int(info.max if high else info.min)
    if value == -(2**63):
        return "(kdA)(-9223372036854775807LL - 1)"
    return f"(kdA)({value}{'ULL' if et.kind == 'u' else 'LL'})"


@dataclass(frozen=True, eq=False)
class Reducer:
    """How values fold: ``combine`` over ``a``, ``b`` (or ``better`` over ``a, ai, b, bi`` when
    ``indexed``); ``identity`` names the starting value; ``pre`` maps each value ``v`` (already in
    the accumulation dtype) first; ``post`` turns the result ``r`` (``n`` values, index ``i``) into
    the output."""

    name: str
    combine: dict[str, str]  # dtype kinds -> expression
    identity: str  # "0", "1", "max", "min" or a C expression
    result: Callable[[np.dtype], np.dtype]  # output dtype from the value dtype
    accumulate: Callable[[np.dtype], np.dtype]  # accumulation dtype from the value dtype
    pre: str = "v"
    post: str = "r"
    pre_param: str = "v"
    indexed: bool = False
    needs_values: bool = False  # an empty reduction has no result (min, max, argmax)

    def expression(self, acc: np.dtype) -> str:
        k = dtypes.element_type(acc).kind
        for kinds, expr in self.combine.items():
            if k in kinds:
                return expr
        raise TypeError(f"reduction {self.name} does not support accumulation dtype {acc}")

    def identity_text(self, acc: np.dtype) -> str:
        return identity_literal(self.identity, acc) if self.identity in ("0", "1", "max", "min") else f"(kdA)({self.identity})"


_ADD = {"f": "a + b", "iu": "(kdA)(0u + (kdU)a + (kdU)b)", "b": "a || b"}
_MUL = {"f": "a * b", "iu": "(kdA)(1u * (kdU)a * (kdU)b)", "b": "a && b"}
_MIN = {"fiub": "(a < b || a != a) ? a : b"}
_MAX = {"fiub": "(a > b || a != a) ? a : b"}
_ARGMAX = "b > a || (b != b && a == a) || ((b == a || (b != b && a != a)) && bi < ai)"
_ARGMIN = "b < a || (b != b && a == a) || ((b == a || (b != b && a != a)) && bi < ai)"


def _sum_dtype(dt: np.dtype) -> np.dtype:
    return _numpy_dtype(np.sum)(dt)


REDUCERS: dict[str, Reducer] = {
    "sum": Reducer("sum", _ADD, "0", _sum_dtype, lambda dt: _acc(_sum_dtype(dt))),
    "prod": Reducer("prod", _MUL, "1", _numpy_dtype(np.prod), lambda dt: _acc(_numpy_dtype(np.prod)(dt))),
    "min": Reducer("min", _MIN, "max", _same, _acc, needs_values=True),
    "max": Reducer("max", _MAX, "min", _same, _acc, needs_values=True),
    "mean": Reducer("mean", _ADD, "0", _numpy_dtype(np.mean), lambda dt: _acc(_numpy_dtype(np.mean)(dt)),
                    post="r / (kdA)n"),
    "argmax": Reducer("argmax", {"fiub": _ARGMAX}, "min", _int64, _acc, post="i", indexed=True, needs_values=True),
    "argmin": Reducer("argmin", {"fiub": _ARGMIN}, "max", _int64, _acc, post="i", indexed=True, needs_values=True),
    "norm": Reducer("norm", _ADD, "0", _numpy_dtype(np.linalg.norm), lambda dt: _acc(_numpy_dtype(np.linalg.norm)(dt)),
                    pre="v * v", post="sqrt(r)"),
    "dot": Reducer("dot", _ADD, "0", _same, _acc),
}


# --- kernels ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The reduction geometry: value shape, reduced axis (None: all), and whether leaves broadcast."""

    ndim: int
    axis: int | None
    broadcast: bool
    ranks: tuple[int | None, ...]


_kernels: dict[tuple[Any, ...], Kernel] = {}
_lock = threading.Lock()


def reduction_kernel(program: Program, reducer: Reducer, geometry: Shape, stage: str, acc: np.dtype,
                     result: np.dtype, group: int = 32) -> Kernel:
    key = (program, reducer, geometry, stage, acc, result, group)
    found = _kernels.get(key)
    if found is None:
        with _lock:
            found = _kernels.get(key)
            if found is None:
                found = _kernels[key] = _build(program, reducer, geometry, stage, acc, result, group)
    return found


def _leaf_params(program: Program, geometry: Shape) -> list[tuple[str, Any]]:
    params: list[tuple[str, Any]] = []
    for i, leaf in enumerate(program.leaves):
        name = dtypes.element_type(leaf.dtype).name
        if leaf.kind == "array":
            params.append((f"kdp{i}", In[name, tuple(f"kds{i}x{m}" for m in range(geometry.ranks[i] or 0))]))
        else:
            params.append((f"kdp{i}", Scalar[name]))
    return params


def _build(program: Program, reducer: Reducer, geometry: Shape, stage: str, acc: np.dtype,
           result: np.dtype, group: int) -> Kernel:
    acc_name = dtypes.element_type(acc).name
    result_name = dtypes.element_type(result).name
    params = _leaf_params(program, geometry)
    if stage == "partial":
        params.append(("kdpart", Out[acc_name, "kdm"]))
        if reducer.indexed:
            params.append(("kdpidx", Out["int64", "kdm"]))
        params.append(("kdticket", InOut["uint32", 1]))
    out_rank = 0 if geometry.axis is None else geometry.ndim - 1
    params.append(("kdout", Out[result_name, tuple(f"kdq{j}" for j in range(out_rank))]))
    params.append(("kdcount", Scalar["int64"]))
    if stage in ("rows", "columns"):
        params += [("kdouter", Scalar["int64"]), ("kdinner", Scalar["int64"])]
    params += [(f"kdd{j}", Scalar["int64"]) for j in range(geometry.ndim)]
    layout = ("broadcast", geometry.ndim, geometry.ranks)
    arrays = array_leaves(program, layout)
    for a in arrays:
        a["dims"] = tuple(f"kds{a['id']}x{m}" for m in range(geometry.ranks[a["id"]] or 0))
    vec = vector_width(program)

    def body(proxies: dict[str, Any]) -> str:
        aligned = all(proxies[a["param"]].aligned16 for a in arrays)
        vector = stage in ("partial", "direct") and not geometry.broadcast and aligned and vec > 1
        return render(
            "reduction.cu.j2",
            name=reducer.name,
            stage=stage,
            broadcast=geometry.broadcast,
            vector=vector,
            vec=vec,
            group=group,
            indexed=reducer.indexed,
            size_expr=" * ".join(f"(index_t)kdd{j}" for j in range(geometry.ndim)) or "1",
            dims=[f"kdd{j}" for j in range(geometry.ndim)],
            arrays=arrays,
            program=program_context(program),
            vector_loads=loads(program, lambda i: f"kdl{i}.v[kdk]"),
            flat_loads=loads(program, lambda i: f"kdp{i}[kdflat]"),
            offset_loads=loads(program, lambda i: f"kdp{i}[kdoff{i}]"),
            acc={"cctype": compute_ctype(acc), "kdU": unsigned_ctype(acc), "shfl": _SHUFFLE.get(acc_name, compute_ctype(acc))},
            result={"storage": storage_ctype(result), "cctype": compute_ctype(result)},
            combine=reducer.expression(acc),
            better=reducer.expression(acc),
            identity=reducer.identity_text(acc),
            pre=reducer.pre,
            pre_param=reducer.pre_param,
            post=reducer.post,
        )

    name = f"{program.name}_{reducer.name}_{stage}"
    return make_kernel(name, params, body)


# --- running -----------------------------------------------------------------------------------------

_scratch: dict[tuple[int, int, str, np.dtype, int], DeviceArray] = {}


def scratch(session: Any, role: str, dtype: np.dtype, count: int) -> DeviceArray:
    """Partials buffers, reused per (session, thread, role): each use is ordered on the session
    stream, and one thread's launch cannot overwrite another's before its last block reads.
    The role keeps a reduction's value and index partials apart even when both are int64."""
    key = (session.session_id, threading.get_ident(), role, dtype, count)
    found = _scratch.get(key)
    if found is None or found.closed:
        found = _scratch[key] = session.empty(count, dtype)
    return found


_tickets: dict[tuple[int, int], DeviceArray] = {}


def ticket(session: Any) -> DeviceArray:
    """The zeroed counter that elects a full reduction's last block, per (session, thread); the
    elected block resets it, so every launch on the stream finds it at zero."""
    key = (session.session_id, threading.get_ident())
    found = _tickets.get(key)
    if found is None or found.closed:
        found = _tickets[key] = session.zeros(1, np.uint32)
    return found


def normalize_axis(axis: Any, ndim: int, what: str) -> int | None:
    if axis is None:
        return None
    if isinstance(axis, tuple):
        if len(axis) != 1:
            raise NotImplementedError(f"{what}: reducing over several axes at once is not supported; reduce one at a time")
        (axis,) = axis
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{what}: axis must be an int or None, not {axis!r}")
    if not -ndim <= axis < max(ndim, 1) or ndim == 0:
        raise np.exceptions.AxisError(int(axis), ndim)
    return int(axis) % ndim


@dataclass
class ReductionPlan:
    """A compiled reduction for one combination of argument dtypes and shapes."""

    reducer: Reducer
    sources: tuple[tuple[str, Any], ...]
    program: Program
    geometry: Shape
    value_shape: tuple[int, ...]
    shape: tuple[int, ...]
    acc: np.dtype
    dtype: np.dtype  # of the output

    def run(self, args: Sequence[Any], out: Any, session: Any) -> Any:
        values = [args[s] if kind == "arg" else s for kind, s in self.sources]
        if out is not None:
            check_placement(out, session, self.reducer.name)
        if session is None:
            return self._run_host(values, out)
        if out is None:
            out = session.empty(self.shape, self.dtype)
        self._launch(values, out, session)
        return out

    def _run_host(self, values: list[Any], out: Any) -> Any:
        session = default_session()
        device = [session.to_device(v) if isinstance(v, np.ndarray) else v for v in values]
        result = session.empty(self.shape, self.dtype)
        try:
            self._launch(device, result, session)
            host = result.to_host()
        finally:
            result.close()
            for d, v in zip(device, values):
                if d is not v:
                    d.close()
        if out is not None:
            out[...] = host
            return out
        return host[()] if host.ndim == 0 else host

    def _launch(self, values: list[Any], out: Any, session: Any) -> None:
        r = self.reducer
        size = int(np.prod(self.value_shape, dtype=np.int64))
        dims = [int(d) for d in self.value_shape]
        g = self.geometry
        if g.axis is None:
            if size == 0 and r.needs_values:
                raise ValueError(f"zero-size array to reduction operation {r.name} which has no identity")
            self._full(values, out, session, size, dims)
            return
        count = self.value_shape[g.axis]
        if out.size == 0:
            return
        if count == 0 and r.needs_values:
            raise ValueError(f"zero-size array to reduction operation {r.name} which has no identity")
        outer = int(np.prod(self.value_shape[: g.axis], dtype=np.int64))
        inner = int(np.prod(self.value_shape[g.axis + 1 :], dtype=np.int64))
        blocks = sm_count(session.device) * 8
        if inner == 1:
            group = BLOCK if count >= ROWS_BLOCK_MIN else 32
            grid = min(blocks, -(-outer // (BLOCK // group)))
            k = reduction_kernel(self.program, r, g, "rows", self.acc, self.dtype, group)
            k(*values, out, count, outer, inner, *dims, grid=(grid, 1, 1))
        else:
            grid = min(blocks, -(-(outer * inner) // BLOCK))
            k = reduction_kernel(self.program, r, g, "columns", self.acc, self.dtype)
            k(*values, out, count, outer, inner, *dims, grid=(grid, 1, 1))

    def inspect(self, args: Sequence[Any], arch: str | None) -> list[Any]:
        values = [args[s] if kind == "arg" else s for kind, s in self.sources]
        r, g = self.reducer, self.geometry
        size = int(np.prod(self.value_shape, dtype=np.int64))
        dims = [int(d) for d in self.value_shape]
        out = np.empty(self.shape, self.dtype)
        if g.axis is not None:
            count = self.value_shape[g.axis]
            inner = int(np.prod(self.value_shape[g.axis + 1 :], dtype=np.int64))
            stage = "rows" if inner == 1 else "columns"
            group = BLOCK if stage == "rows" and count >= ROWS_BLOCK_MIN else 32
            k = reduction_kernel(self.program, r, g, stage, self.acc, self.dtype, group)
            return [k.inspect(*values, out, count, size // max(count, 1) // inner, inner, *dims, arch=arch)]
        if size <= DIRECT_MAX:
            k = reduction_kernel(self.program, r, g, "direct", self.acc, self.dtype)
            return [k.inspect(*values, out, size, *dims, arch=arch)]
        partials = [np.empty(1, self.acc)] + ([np.empty(1, np.int64)] if r.indexed else [])
        k = reduction_kernel(self.program, r, g, "partial", self.acc, self.dtype)
        return [k.inspect(*values, *partials, np.zeros(1, np.uint32), out, size, *dims, arch=arch)]

    def _full(self, values: list[Any], out: Any, session: Any, size: int, dims: list[int]) -> None:
        r, g = self.reducer, self.geometry
        if size <= DIRECT_MAX:
            k = reduction_kernel(self.program, r, g, "direct", self.acc, self.dtype)
            k(*values, out, size, *dims, grid=(1, 1, 1))
            return
        vec = vector_width(self.program)
        blocks = min(sm_count(session.device) * PARTIAL_BLOCKS_PER_SM, -(-size // (BLOCK * vec)))
        partials = [scratch(session, "values", self.acc, blocks)]
        if r.indexed:
            partials.append(scratch(session, "indices", np.dtype(np.int64), blocks))
        k = reduction_kernel(self.program, r, g, "partial", self.acc, self.dtype)
        k(*values, *partials, ticket(session), out, size, *dims, grid=(blocks, 1, 1))


def plan_reduction(graph: Graph, root: Traced, reducer: Reducer, axis: Any, args: Sequence[Any], out: Any) -> ReductionPlan:
    """Compile ``reducer`` over the values of ``graph``'s ``root`` for these arguments."""
    program = graph.program(root)
    value_shape = tuple(root.shape)
    ax = normalize_axis(axis, len(value_shape), reducer.name)
    if ax is not None and len(value_shape) == 1:
        ax = None  # the only axis: the full reduction uses the whole GPU
    shape = () if ax is None else value_shape[:ax] + value_shape[ax + 1 :]
    value = program.dtype
    acc = reducer.accumulate(value)
    result = reducer.result(value)
    if out is not None:
        check_out(out, shape, result, reducer.name)
        result = np.dtype(out.dtype)
    shapes = graph.shapes
    broadcast = any(s is not None and s != value_shape for s in shapes)
    ranks = tuple(None if s is None else len(s) for s in shapes)
    geometry = Shape(len(value_shape), ax, broadcast, ranks)
    return ReductionPlan(reducer, tuple(graph.sources), program, geometry, value_shape, shape, acc, result)


class Reduction:
    """A callable reduction: ``f(x, axis=None, out=None)`` (``map`` may take several operands)."""

    def __init__(self, reducer: Reducer, map: ElementwiseFunction | None = None, operands: int = 1) -> None:
        self.reducer = reducer
        self.name = reducer.name
        self.__name__ = reducer.name
        self.map = map
        self.operands = operands
        self._plans: dict[tuple[Any, ...], ReductionPlan] = {}

    def __repr__(self) -> str:
        return f"<kd reduction {self.name}>"

    def __call__(self, *operands: Any, axis: Any = None, out: Any = None) -> Any:
        if len(operands) != self.operands:
            raise TypeError(f"{self.name}() takes {self.operands} operand(s), got {len(operands)}")
        if any(isinstance(o, Traced) for o in operands):
            return self._trace(operands, axis, out)
        key = tuple(map(arg_key, operands)) + (axis, arg_key(out))
        plan = self._plans.get(key)
        values, session = place(operands)
        if plan is None:
            if len(self._plans) > 4096:
                self._plans.clear()
            plan = self._plans[key] = self._plan(values, axis, out)
        return plan.run(values, out, session)

    def inspect(self, *operands: Any, axis: Any = None, arch: str | None = None) -> list[Any]:
        """The Builds (sources, cubins) of the kernels a call with these operands runs, no GPU needed.

        Operands may be numpy arrays or anything with ``shape`` and ``dtype`` (and ``ptr`` to
        control alignment); a full reduction above ``DIRECT_MAX`` elements has two kernels.
        """
        plan = self._plan(operands, axis, None)
        return plan.inspect(operands, arch)

    def _root(self, graph: Graph, traced: Sequence[Any]) -> Traced:
        if self.map is not None:
            return graph.apply(self.map, traced)
        (root,) = traced
        if not isinstance(root, Traced):
            raise TypeError(f"{self.name}: expected an array, got {type(root).__name__}")
        return root

    def _trace(self, operands: Sequence[Any], axis: Any, out: Any) -> Traced:
        if out is not None:
            raise FusionError(f"{self.name}: out= cannot be used inside a fused function")
        t = next(o for o in operands if isinstance(o, Traced))
        for o in operands:
            if isinstance(o, Traced) and o.reduction is not None:
                raise FusionError(f"{self.name} is applied to the result of reduction {o.reduction[0].name!r}: "
                                  "a reduction can only end a fused chain")
        root = self._root(t.graph, operands)
        if root.argument is not None:
            raise FusionError(f"{self.name}: a scalar argument cannot be reduced")
        ax = normalize_axis(axis, root.ndim, self.name)
        shape = () if ax is None else root.shape[:ax] + root.shape[ax + 1 :]
        result = t.graph.value(root.id, self.reducer.result(root.dtype), shape)
        result.reduction = (self, axis, root)
        return result

    def _plan(self, values: Sequence[Any], axis: Any, out: Any) -> ReductionPlan:
        graph = Graph(self.name)
        traced: list[Any] = []
        for i, v in enumerate(values):
            if isinstance(v, SCALAR_TYPES):
                traced.append(v)
                continue
            if not (hasattr(v, "shape") and hasattr(v, "dtype")):
                raise TypeError(f"{self.name}: operand {i} of type {type(v).__name__} is not an array")
            promotion.supported(v.dtype)
            leaf = graph.leaf("array", v.dtype, ("arg", i), tuple(v.shape))
            traced.append(graph.value(leaf, np.dtype(v.dtype), tuple(v.shape)))
        root = self._root(graph, traced)
        scalars = iter(i for i, v in enumerate(values) if isinstance(v, SCALAR_TYPES))
        graph.sources = [("arg", next(scalars)) if kind == "const" else (kind, s) for kind, s in graph.sources]
        return plan_reduction(graph, root, self.reducer, axis, values, out)


def reduction(map: str = "x", reduce: str = "a + b", identity: str = "0", post: str = "r",
              dtype: Any = None, name: str = "reduction") -> Reduction:
    """Declare a reduction from C expressions.

    ``map``: the contribution of element ``x`` (in the accumulation type); ``reduce``: combines two
    partial results ``a`` and ``b`` (must be associative and commutative); ``identity``: the
    neutral value (C expression, or ``"max"`` / ``"min"`` for the dtype's largest / smallest);
    ``post``: the output from the total ``r`` and the count ``n``. The accumulation dtype is the
    input's (float16/bfloat16 -> float32); the result dtype is ``dtype`` or the input's.
    """
    out_dtype = None if dtype is None else promotion.supported(dtype)
    reducer = Reducer(
        name,
        {"fiub": reduce},
        identity,
        (lambda dt: dt) if out_dtype is None else (lambda dt: out_dtype),
        _acc,
        pre=map,
        post=post,
        pre_param="x",
    )
    return Reduction(reducer)
