"""Reductions: a program's values folded to one value, over everything or over one axis.

``kd.reduction(map=, reduce=, identity=, post=)`` declares one; ``kd.ops.sum`` and friends are
reductions too. The kernels come from ``templates/reduction.cu.j2`` as ``Kernel`` objects; a
full reduction is one launch (one kernel), an axis reduction one launch of a "rows" (reduced
axis innermost) or "columns" kernel.

Results are deterministic for every dtype, floats included: each thread folds a fixed
grid-stride subset, blocks combine with warp shuffles and one shared-memory step, and a full
reduction of more than ``DIRECT_MAX`` elements writes per-block partials that the last block to
finish (elected by an integer ticket, the only atomic) folds in index order, in the same launch.
No value is ever added atomically; the tree depends only on the size and the device's SM count.
Axis reductions give each output to a warp or block (reduced axis innermost) or to one thread
(reduced axis outer), so they are deterministic too.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes, promotion
from ..build import Build
from ..codegen import Decisions, GeneratedBody, render
from ..dispatch import Kernel
from ..errors import FusionError
from ..routing import public
from ..runtime import driver
from ..runtime.memory import DeviceArray
from ..runtime.session import default_session
from .elementwise import ElementwiseFunction
from .kernels import (
    BLOCK,
    KERNELS,
    all_aligned,
    array_leaves,
    array_param,
    leaf_params,
    loads,
    make_kernel,
    scalar_param,
    vector_width,
)
from .placement import check_out
from .plan import Plan, PlanCache
from .program import Program, ProgramBuilder, Traced, compute_ctype, program_context, storage_ctype, unsigned_ctype

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
        if self.identity in ("0", "1", "max", "min"):
            return identity_literal(self.identity, acc)
        return f"(kdA)({self.identity})"


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
    "mean": Reducer(
        "mean", _ADD, "0", _numpy_dtype(np.mean), lambda dt: _acc(_numpy_dtype(np.mean)(dt)), post="r / (kdA)n"
    ),
    "argmax": Reducer("argmax", {"fiub": _ARGMAX}, "min", _int64, _acc, post="i", indexed=True, needs_values=True),
    "argmin": Reducer("argmin", {"fiub": _ARGMIN}, "max", _int64, _acc, post="i", indexed=True, needs_values=True),
    "norm": Reducer(
        "norm",
        _ADD,
        "0",
        _numpy_dtype(np.linalg.norm),
        lambda dt: _acc(_numpy_dtype(np.linalg.norm)(dt)),
        pre="v * v",
        post="sqrt(r)",
    ),
    "dot": Reducer("dot", _ADD, "0", _same, _acc),
}


# --- kernels ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """The reduction geometry: value rank, reduced axis (None: all), and whether leaves broadcast."""

    ndim: int
    axis: int | None
    broadcast: bool
    ranks: tuple[int | None, ...]


def reduction_kernel(
    program: Program, reducer: Reducer, geometry: Geometry, stage: str, acc: np.dtype, result: np.dtype, group: int = 32
) -> Kernel:
    key = ("reduction", program, reducer, geometry, stage, acc, result, group)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build(program, reducer, geometry, stage, acc, result, group))
    return kernel


_INT64 = np.dtype(np.int64)


def _build(
    program: Program, reducer: Reducer, geometry: Geometry, stage: str, acc: np.dtype, result: np.dtype, group: int
) -> Kernel:
    layout = ("broadcast", geometry.ndim, geometry.ranks)
    params = leaf_params(program, layout)
    if stage == "partial":
        params.append(("kdpart", array_param("out", acc, "kdm")))
        if reducer.indexed:
            params.append(("kdpidx", array_param("out", _INT64, "kdm")))
        params.append(("kdticket", array_param("inout", np.dtype(np.uint32), (1,))))
    out_rank = 0 if geometry.axis is None else geometry.ndim - 1
    params.append(("kdout", array_param("out", result, tuple(f"kdq{j}" for j in range(out_rank)))))
    params.append(("kdcount", scalar_param(_INT64)))
    if stage in ("rows", "columns"):
        params += [("kdouter", scalar_param(_INT64)), ("kdinner", scalar_param(_INT64))]
    params += [(f"kdd{j}", scalar_param(_INT64)) for j in range(geometry.ndim)]
    arrays = array_leaves(program, layout)
    vec = vector_width(program)
    acc_name = dtypes.element_type(acc).name

    def body(proxies: dict[str, Any]) -> GeneratedBody:
        aligned = all_aligned(proxies, [a["param"] for a in arrays])
        vector = stage in ("partial", "direct") and not geometry.broadcast and aligned and vec > 1
        text = render(
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
            acc={
                "cctype": compute_ctype(acc),
                "kdU": unsigned_ctype(acc),
                "shfl": _SHUFFLE.get(acc_name, compute_ctype(acc)),
            },
            result={"storage": storage_ctype(result), "cctype": compute_ctype(result)},
            combine=reducer.expression(acc),
            better=reducer.expression(acc),
            identity=reducer.identity_text(acc),
            pre=reducer.pre,
            pre_param=reducer.pre_param,
            post=reducer.post,
        )
        layout_name = "broadcast" if geometry.broadcast else "flat"
        decisions = Decisions(
            layout=layout_name,
            vector_width=vec if vector else 1,
            stage=stage,
            accumulation=acc,
            group=group if stage == "rows" else None,
        )
        return GeneratedBody(text, decisions)

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


_sm_counts: dict[int, int] = {}


def blocks_per_device(device: int) -> int:
    """How many blocks fill device ``device``: ``PARTIAL_BLOCKS_PER_SM`` per SM."""
    found = _sm_counts.get(device)
    if found is None:
        found = _sm_counts[device] = driver.multiprocessor_count(device)
    return found * PARTIAL_BLOCKS_PER_SM


def normalize_axis(axis: Any, ndim: int, what: str) -> int | None:
    if axis is None:
        return None
    if isinstance(axis, tuple):
        if len(axis) != 1:
            raise NotImplementedError(
                f"{what}: reducing over several axes at once is not supported; reduce one at a time"
            )
        (axis,) = axis
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{what}: axis must be an int or None, not {axis!r}")
    if not -ndim <= axis < max(ndim, 1) or ndim == 0:
        raise np.exceptions.AxisError(int(axis), ndim)
    return int(axis) % ndim


@dataclass(frozen=True)
class Step:
    """The one launch a reduction call makes: which kernel (stage) and how many blocks."""

    stage: str
    kernel: Kernel
    blocks: int


@dataclass(eq=False)
class ReductionPlan(Plan):
    """A compiled reduction for one combination of argument dtypes and shapes."""

    name: str
    reducer: Reducer
    sources: tuple[tuple[str, Any], ...]
    program: Program
    geometry: Geometry
    value_shape: tuple[int, ...]
    shape: tuple[int, ...]
    acc: np.dtype
    dtype: np.dtype  # of the output

    def run_host(self, values: list[Any], out: Any) -> Any:
        session = default_session()
        device = [session.to_device(v) if isinstance(v, np.ndarray) else v for v in values]
        result = session.empty(self.shape, self.dtype)
        try:
            self.launch(device, result, session)
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

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        self._check_not_empty(out.size)
        if self.geometry.axis is not None and out.size == 0:
            return
        step = self._step(blocks_per_device(session.device))
        partials: tuple[Any, ...] = ()
        if step.stage == "partial":
            partials = (scratch(session, "values", self.acc, step.blocks),)
            if self.reducer.indexed:
                partials += (scratch(session, "indices", _INT64, step.blocks),)
            partials += (ticket(session),)
        step.kernel(*values, *self._output_arguments(partials, out), grid=(step.blocks, 1, 1))

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        """The Build of the kernel a call with these operands runs (``decisions.stage`` names it)."""
        step = self._step(1)
        partials: tuple[Any, ...] = ()
        if step.stage == "partial":
            index = [np.empty(1, np.int64)] if self.reducer.indexed else []
            partials = (np.empty(1, self.acc), *index, np.zeros(1, np.uint32))
        target = out if out is not None else np.empty(self.shape, self.dtype)
        return step.kernel.inspect(*self.values(args), *self._output_arguments(partials, target), arch=arch)

    def _check_not_empty(self, outputs: int) -> None:
        g, r = self.geometry, self.reducer
        count = int(np.prod(self.value_shape, dtype=np.int64)) if g.axis is None else self.value_shape[g.axis]
        if count == 0 and r.needs_values and (g.axis is None or outputs):
            raise ValueError(f"zero-size array to reduction operation {r.name} which has no identity")

    def _output_arguments(self, before: tuple[Any, ...], out: Any) -> tuple[Any, ...]:
        """The arguments from the partials on: ``before``, the output, counts and extents."""
        g = self.geometry
        dims = tuple(int(d) for d in self.value_shape)
        size = int(np.prod(self.value_shape, dtype=np.int64))
        if g.axis is None:
            return (*before, out, size, *dims)
        count = self.value_shape[g.axis]
        outer = int(np.prod(self.value_shape[: g.axis], dtype=np.int64))
        inner = int(np.prod(self.value_shape[g.axis + 1 :], dtype=np.int64))
        return (*before, out, count, outer, inner, *dims)

    def _kernel(self, stage: str, group: int = 32) -> Kernel:
        return reduction_kernel(self.program, self.reducer, self.geometry, stage, self.acc, self.dtype, group)

    def _step(self, max_blocks: int) -> Step:
        """The strategy for this shape, on a device where ``max_blocks`` blocks fill the GPU."""
        g = self.geometry
        size = int(np.prod(self.value_shape, dtype=np.int64))
        if g.axis is None:
            if size <= DIRECT_MAX:
                return Step("direct", self._kernel("direct"), 1)
            blocks = min(max_blocks, -(-size // (BLOCK * vector_width(self.program))))
            return Step("partial", self._kernel("partial"), blocks)
        count = self.value_shape[g.axis]
        outer = int(np.prod(self.value_shape[: g.axis], dtype=np.int64))
        inner = int(np.prod(self.value_shape[g.axis + 1 :], dtype=np.int64))
        if inner == 1:
            group = BLOCK if count >= ROWS_BLOCK_MIN else 32
            return Step("rows", self._kernel("rows", group), min(max_blocks, -(-outer // (BLOCK // group))))
        return Step("columns", self._kernel("columns"), min(max_blocks, -(-(outer * inner) // BLOCK)))


def plan_reduction(builder: ProgramBuilder, root: Traced, reducer: Reducer, axis: Any, out: Any) -> ReductionPlan:
    """Compile ``reducer`` over the values of ``builder``'s ``root`` for these arguments."""
    program = builder.program(root)
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
    shapes = builder.shapes
    broadcast = any(s is not None and s != value_shape for s in shapes)
    ranks = tuple(None if s is None else len(s) for s in shapes)
    geometry = Geometry(len(value_shape), ax, broadcast, ranks)
    return ReductionPlan(
        reducer.name, reducer, tuple(builder.sources), program, geometry, value_shape, shape, acc, result
    )


class Reduction:
    """A callable reduction: ``f(x, axis=None, out=None)`` (``map`` may take several operands)."""

    def __init__(
        self, reducer: Reducer, map: ElementwiseFunction | None = None, operands: int = 1, home: str | None = None
    ) -> None:
        """``home``: the module that holds this reduction under its name (``kd.ops``'s pickle by name)."""
        self.home = home
        self.reducer = reducer
        self.name = reducer.name
        self.__name__ = reducer.name
        self.map = map
        self.operands = operands
        self._plans = PlanCache()

    def __repr__(self) -> str:
        return f"<kd reduction {self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by name when a module holds it, else as its declaration, without the plans compiled here."""
        if self.home is not None:
            return (public, (self.home, self.name))
        return (Reduction, (self.reducer, self.map, self.operands))

    def __call__(self, *operands: Any, axis: Any = None, out: Any = None) -> Any:
        if len(operands) != self.operands:
            raise TypeError(f"{self.name}() takes {self.operands} operand(s), got {len(operands)}")
        if any(isinstance(o, Traced) for o in operands):
            return self._trace(operands, axis, out)
        make = lambda values, o: self._plan(values, axis, o)  # noqa: E731
        return self._plans.call(
            self.name, operands, out, axis, make, remote=(self, {} if axis is None else {"axis": axis})
        )

    def inspect(self, *operands: Any, axis: Any = None, out: Any = None, arch: str | None = None) -> Build:
        """The Build (source, cubin, ``decisions``) of the kernel a call with these operands runs;
        no GPU needed. Operands may be numpy arrays or anything with ``shape`` and ``dtype``
        (and ``ptr`` to control alignment)."""
        return self._plan(operands, axis, out).inspect(operands, out, arch)

    def _root(self, builder: ProgramBuilder, traced: Sequence[Any]) -> Traced:
        if self.map is not None:
            return builder.apply(self.map, traced)
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
                raise FusionError(
                    f"{self.name} is applied to the result of reduction {o.reduction[0].name!r}: "
                    "a reduction can only end a fused chain"
                )
        root = self._root(t.builder, operands)
        if root.argument is not None:
            raise FusionError(f"{self.name}: a scalar argument cannot be reduced")
        ax = normalize_axis(axis, root.ndim, self.name)
        shape = () if ax is None else root.shape[:ax] + root.shape[ax + 1 :]
        result = t.builder.value(root.id, self.reducer.result(root.dtype), shape)
        result.reduction = (self, axis, root)
        return result

    def _plan(self, values: Sequence[Any], axis: Any, out: Any) -> ReductionPlan:
        builder = ProgramBuilder(self.name)
        root = self._root(builder, builder.operands(values, self.name))
        builder.scalars_from_arguments(values)
        return plan_reduction(builder, root, self.reducer, axis, out)


def reduction(
    map: str = "x",
    reduce: str = "a + b",
    identity: str = "0",
    post: str = "r",
    dtype: Any = None,
    name: str = "reduction",
) -> Reduction:
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
