"""Reductions: a program's values folded over all axes, one axis or a tuple of axes.

``kd.reduction(map=, reduce=, identity=, post=)`` declares one; ``kd.ops.sum`` and friends are
reductions too. Every call is one launch of one kernel from ``templates/reduction.cu.j2``; which
kernel is decided per call from the extents (``Reduction.strategy`` shows it, ``inspect`` the
Build, whose ``decisions`` name the stage):

- all axes: "direct" (one block) for small inputs, else "partial" (blocks fold grid-stride
  slices, the last block to finish folds their partials in the same launch);
- reduced axes innermost ("rows", outer x count): a few lanes of a warp per output for short
  rows, a block per output for long ones, and when rows are few and long, each row split over
  several blocks so that the GPU fills;
- kept axes after the reduced ones ("columns", outer x count x inner): threads across the kept
  axis read whole rows coalesced, the block's other threads and, when tiles are few, other
  blocks split the reduced axis;
- reduced axes that kept ones interleave ("gather"): a warp per output.

Results are deterministic for every dtype, floats included: each value has a fixed place in a
fixed tree, and work split over blocks is folded by the last block to finish (elected by an
integer ticket, the only atomic) in index order. No value is ever added atomically; the tree
depends only on the extents and the device's SM count.

Accumulation dtype: NumPy's result dtype (``sum`` of int8 accumulates in int64, of uint8 in
uint64, ``mean`` of ints in float64), except that float16 and bfloat16 always accumulate in
float32 and round once at the end (NumPy sums float16 pairwise in float16: we are more
accurate); float32 accumulates in float32, float64 in float64. Float results therefore differ
from NumPy's by summation order only: tests allow ``rtol = eps(acc) * sqrt(n)``-ish bounds.
NaN propagates through min/max/sum like NumPy; argmax/argmin return the first NaN's index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .. import dtypes, promotion
from ..build import Build
from ..codegen import Decisions, GeneratedBody, render
from ..dispatch import Kernel
from ..errors import FusionError
from ..routing import public
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
from .scratch import SCRATCH, multiprocessors

if TYPE_CHECKING:
    from ..distributed.handles import RemoteArray
    from ..runtime.memory import DeviceArray
    from .operands import DeviceOperand, HostArray, HostOperand, RemoteOperand, TracedOperand

DIRECT_MAX = 16384  # full reductions up to this size run as one single-block launch
PARTIAL_BLOCKS_PER_SM = 8  # blocks that fill one SM: what a split reduction aims for
COLUMN_BLOCKS_PER_SM = 2  # split columns with many partials per thread aim lower (8 loads in flight each)
COLUMN_LANES_WIDE = 64  # from this many threads across the kept axis, ...
COLUMN_DOWN_WIDE = 4  # ... this many rows of threads share the reduced axis,
ROWS_PER_COLUMN_THREAD = 16  # unless that leaves a thread fewer rows than this
FINAL_FOLDS = 16  # partials per thread the last block of a split column tile folds at most, by choice
GRID_BLOCKS_PER_SM = 16  # grid cap per SM for the grid-stride axis stages
ROWS_BLOCK_MIN = 2048  # reduced extent from which a whole block (not a warp) takes one output
LOADS_PER_THREAD = 16  # fewest loads per thread worth splitting a row over one more block
ROWS_PER_THREAD = 8  # fewest rows per thread worth splitting columns over one more block
COLUMN_BYTES_PER_THREAD = 64  # accumulator bytes per thread up to which columns use 16-byte loads
INSPECT_MULTIPROCESSORS = 132  # inspect() without a GPU plans for an H100/H200

_HALF = ("float16", "bfloat16")
_SHUFFLE = {"bool": "int", "int8": "int", "int16": "int", "uint8": "unsigned int", "uint16": "unsigned int"}


def accumulation_dtype(dt: np.dtype) -> np.dtype:
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
    "sum": Reducer("sum", _ADD, "0", _sum_dtype, lambda dt: accumulation_dtype(_sum_dtype(dt))),
    "prod": Reducer("prod", _MUL, "1", _numpy_dtype(np.prod), lambda dt: accumulation_dtype(_numpy_dtype(np.prod)(dt))),
    "min": Reducer("min", _MIN, "max", _same, accumulation_dtype, needs_values=True),
    "max": Reducer("max", _MAX, "min", _same, accumulation_dtype, needs_values=True),
    "mean": Reducer(
        "mean",
        _ADD,
        "0",
        _numpy_dtype(np.mean),
        lambda dt: accumulation_dtype(_numpy_dtype(np.mean)(dt)),
        post="r / (kdA)n",
    ),
    "argmax": Reducer(
        "argmax", {"fiub": _ARGMAX}, "min", _int64, accumulation_dtype, post="i", indexed=True, needs_values=True
    ),
    "argmin": Reducer(
        "argmin", {"fiub": _ARGMIN}, "max", _int64, accumulation_dtype, post="i", indexed=True, needs_values=True
    ),
    "norm": Reducer(
        "norm",
        _ADD,
        "0",
        _numpy_dtype(np.linalg.norm),
        lambda dt: accumulation_dtype(_numpy_dtype(np.linalg.norm)(dt)),
        pre="v * v",
        post="sqrt(r)",
    ),
    "dot": Reducer("dot", _ADD, "0", _same, accumulation_dtype),
}


# --- kernels ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """What a reduction kernel's parameters depend on: the value's rank, whether its leaves
    broadcast (and each leaf's rank), and the rank of the output it writes."""

    ndim: int
    broadcast: bool
    ranks: tuple[int | None, ...]
    out_rank: int


@dataclass(frozen=True)
class Variant:
    """The compile-time choices of one reduction kernel.

    ``stage``: "direct" (one block folds everything), "partial" (blocks fold slices, the last to
    finish folds their partials), "rows" (the reduced axes are innermost: ``lanes`` threads per
    output, a whole block when ``lanes == BLOCK``), "columns" (kept axes follow the reduced ones:
    ``lanes`` threads across the kept extent, the rest of the block down the reduced one) or
    "gather" (reduced axes interleaved with kept ones; ``reduced`` names them).
    ``vector``: 16-byte loads; ``split``: several blocks share an output and the last of them to
    finish folds their partials in index order (deterministic, no float atomics)."""

    stage: str
    lanes: int = BLOCK
    vector: bool = False
    split: bool = False
    reduced: tuple[int, ...] = ()


def reduction_kernel(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> Kernel:
    key = ("reduction", program, reducer, geometry, variant, acc, result)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build(program, reducer, geometry, variant, acc, result))
    return kernel


_INT64 = np.dtype(np.int64)


def _params(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> list[tuple[str, Any]]:
    params = leaf_params(program, ("broadcast", geometry.ndim, geometry.ranks))
    if variant.stage == "partial" or variant.split:
        params.append(("kdpart", array_param("out", acc, "kdm")))
        if reducer.indexed:
            params.append(("kdpidx", array_param("out", _INT64, "kdmi")))
        params.append(("kdticket", array_param("inout", np.dtype(np.uint32), "kdt")))
    params.append(("kdout", array_param("out", result, tuple(f"kdq{j}" for j in range(geometry.out_rank)))))
    params.append(("kdcount", scalar_param(_INT64)))
    if variant.stage not in ("partial", "direct"):
        params += [(f"kd{name}", scalar_param(_INT64)) for name in ("outer", "inner", "splits")]
    params += [(f"kdd{j}", scalar_param(_INT64)) for j in range(geometry.ndim)]
    return params


def _build(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> Kernel:
    layout = ("broadcast", geometry.ndim, geometry.ranks)
    arrays = array_leaves(program, layout)
    vec = vector_width(program)
    acc_name = dtypes.element_type(acc).name
    stage = variant.stage

    def body(proxies: dict[str, Any]) -> GeneratedBody:
        aligned = all_aligned(proxies, [a["param"] for a in arrays])
        vector = not geometry.broadcast and aligned and vec > 1 and (stage in ("partial", "direct") or variant.vector)
        text = render(
            "reduction.cu.j2",
            name=reducer.name,
            stage=stage,
            lanes=variant.lanes,
            block=BLOCK,
            split=variant.split,
            broadcast=geometry.broadcast,
            vector=vector,
            vec=vec,
            width=vec if vector else 1,
            indexed=reducer.indexed,
            size_expr=" * ".join(f"(index_t)kdd{j}" for j in range(geometry.ndim)) or "1",
            dims=[f"kdd{j}" for j in range(geometry.ndim)],
            kept=[j for j in range(geometry.ndim) if j not in variant.reduced],
            reduced=list(variant.reduced),
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
        decisions = Decisions(
            layout="broadcast" if geometry.broadcast else "flat",
            vector_width=vec if vector else 1,
            stage=stage,
            accumulation=acc,
            group=variant.lanes if stage in ("rows", "columns", "gather") else None,
            split=variant.split,
        )
        return GeneratedBody(text, decisions)

    name = f"{program.name}_{reducer.name}_{stage}"
    return make_kernel(name, _params(program, reducer, geometry, variant, acc, result), body)


# --- strategy ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Extents:
    """A reduction seen as ``outer`` x ``count`` x ``inner`` values (kept, reduced, kept axes), or
    ``count`` values per output of ``outer`` gathered ones when ``gather`` names reduced axes that
    kept axes interleave."""

    outer: int
    count: int
    inner: int
    gather: tuple[int, ...] = ()


def extents(shape: tuple[int, ...], axes: tuple[int, ...]) -> Extents:
    """The (outer, count, inner) view of reducing ``axes`` of ``shape``; axes of extent 1 are
    neither kept nor reduced, so ``(a, 1, b)`` over axes (0, 2) is still one block."""
    before = count = after = 1
    state = "before"
    for j, d in enumerate(shape):
        if d == 1:
            continue
        if j in axes:
            if state == "after":
                kept = [k for k in range(len(shape)) if k not in axes]
                outputs = int(np.prod([shape[k] for k in kept], dtype=np.int64))
                reduced = int(np.prod([shape[k] for k in axes], dtype=np.int64))
                return Extents(outputs, reduced, 1, axes)
            state = "reduced"
            count *= d
        elif state == "before":
            before *= d
        else:
            state = "after"
            after *= d
    return Extents(before, count, after)


@dataclass(frozen=True)
class Step:
    """The one launch a reduction call makes: its kernel, grid, and for split stages how many
    blocks share an output and how many partials and tickets they need."""

    variant: Variant
    kernel: Kernel
    blocks: int
    splits: int = 1
    partials: int = 0
    tickets: int = 0


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _pow2_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def full_variant(size: int) -> Variant:
    return Variant("direct" if size <= DIRECT_MAX else "partial")


def full_blocks(size: int, vec: int, sms: int) -> int:
    return 1 if size <= DIRECT_MAX else min(sms * PARTIAL_BLOCKS_PER_SM, _ceil(size, BLOCK * vec))


def rows_step(e: Extents, vec: int, sms: int) -> tuple[Variant, int, int]:
    """Rows (inner == 1): a block per row, split over several blocks when rows are few and long;
    a power-of-two group of a warp's lanes per row when rows are short."""
    vector = vec > 1 and e.count % vec == 0
    units = _ceil(e.count, vec if vector else 1)  # loads per row
    cap = sms * GRID_BLOCKS_PER_SM
    if e.count >= ROWS_BLOCK_MIN:
        splits = max(1, min(_ceil(units, BLOCK * LOADS_PER_THREAD), sms * PARTIAL_BLOCKS_PER_SM // e.outer))
        return Variant("rows", BLOCK, vector, splits > 1), min(e.outer * splits, cap), splits
    lanes = min(32, _pow2_at_least(units))
    return Variant("rows", lanes, vector), min(_ceil(e.outer, BLOCK // lanes), cap), 1


def columns_step(e: Extents, vec: int, acc_bytes: int, sms: int) -> tuple[Variant, int, int, int]:
    """Columns (inner > 1): threads across the kept extent read coalesced rows, the block's other
    threads and, when tiles are few, other blocks split the reduced extent. Returns the variant,
    blocks, splits and tiles."""
    vector = vec > 1 and e.inner % vec == 0 and vec * acc_bytes <= COLUMN_BYTES_PER_THREAD
    width = vec if vector else 1
    needed = _pow2_at_least(_ceil(e.inner, width))  # threads that cover the kept extent
    down = BLOCK // min(needed, BLOCK) if needed < COLUMN_LANES_WIDE else COLUMN_DOWN_WIDE
    down = min(down, _pow2_at_most(max(1, e.count // ROWS_PER_COLUMN_THREAD)))
    across = BLOCK // down
    tiles = e.outer * _ceil(e.inner, across * width)
    # Enough blocks to fill the GPU in one wave, unless the last block of a tile would then fold more than
    # FINAL_FOLDS partials per thread: then as few as fill it at COLUMN_BLOCKS_PER_SM.
    one_wave = max(1, sms * PARTIAL_BLOCKS_PER_SM // tiles)
    wanted = min(one_wave, max(_ceil(sms * COLUMN_BLOCKS_PER_SM, tiles), down * FINAL_FOLDS))
    splits = max(1, min(wanted, _ceil(e.count, down * ROWS_PER_THREAD)))
    return Variant("columns", across, vector, splits > 1), min(tiles * splits, sms * GRID_BLOCKS_PER_SM), splits, tiles


# --- running -----------------------------------------------------------------------------------------


def normalize_axes(axis: Any, ndim: int, what: str, single: bool = False) -> tuple[int, ...] | None:
    """NumPy's ``axis=``: None (every axis), an int, or (unless ``single``) a tuple of distinct ints."""
    if axis is None:
        return None
    items = axis if isinstance(axis, tuple) else (axis,)
    if single and isinstance(axis, tuple):
        raise TypeError(f"{what}: axis must be an int or None, not a tuple")
    normalized = []
    for a in items:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"{what}: axis must be an int, a tuple of ints or None, not {axis!r}")
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(int(a), ndim)
        normalized.append(int(a) % ndim)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{what}: duplicate value in axis {axis!r}")
    return tuple(sorted(normalized))


@dataclass(eq=False)
class ReductionPlan(Plan):
    """A compiled reduction for one combination of argument dtypes and shapes."""

    name: str
    reducer: Reducer
    sources: tuple[tuple[str, Any], ...]
    program: Program
    geometry: Geometry
    value_shape: tuple[int, ...]
    axes: tuple[int, ...]  # reduced axes, sorted
    shape: tuple[int, ...]
    acc: np.dtype
    dtype: np.dtype  # of the output
    _steps: dict[int, Step] = field(default_factory=dict, init=False, repr=False)  # by SM count

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
        if out.size == 0:
            return
        step = self.step(multiprocessors(session.device))
        scratch: tuple[Any, ...] = ()
        if step.partials:
            scratch = (SCRATCH.get(session, "values", self.acc, step.partials),)
            if self.reducer.indexed:
                scratch += (SCRATCH.get(session, "indices", _INT64, step.partials),)
            scratch += (SCRATCH.get(session, "tickets", np.dtype(np.uint32), step.tickets, zeroed=True),)
        step.kernel(*values, *self._output_arguments(step, scratch, out), grid=(step.blocks, 1, 1))

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        """The Build of the kernel a call with these operands runs (``decisions.stage`` names it)."""
        step = self.step(INSPECT_MULTIPROCESSORS)
        scratch: tuple[Any, ...] = ()
        if step.partials:
            index = [np.empty(1, np.int64)] if self.reducer.indexed else []
            scratch = (np.empty(1, self.acc), *index, np.zeros(1, np.uint32))
        target = out if out is not None else np.empty(self.shape, self.dtype)
        return step.kernel.inspect(*self.values(args), *self._output_arguments(step, scratch, target), arch=arch)

    def _check_not_empty(self, outputs: int) -> None:
        if self.extents.count == 0 and self.reducer.needs_values and (outputs or not self.shape):
            raise ValueError(f"zero-size array to reduction operation {self.reducer.name} which has no identity")

    def _output_arguments(self, step: Step, before: tuple[Any, ...], out: Any) -> tuple[Any, ...]:
        """The arguments from the partials on: ``before``, the output, counts and extents."""
        e = self.extents
        if step.variant.stage in ("direct", "partial"):
            return (*before, out, e.count, *self.value_shape)
        return (*before, out, e.count, e.outer, e.inner, step.splits, *self.value_shape)

    def _kernel(self, variant: Variant) -> Kernel:
        return reduction_kernel(self.program, self.reducer, self.geometry, variant, self.acc, self.dtype)

    @cached_property
    def extents(self) -> Extents:
        return extents(self.value_shape, self.axes)

    def step(self, sms: int) -> Step:
        """The strategy for this shape on a device with ``sms`` multiprocessors (see ``Variant``),
        decided once per plan and SM count: warm calls only look it up."""
        found = self._steps.get(sms)
        if found is None:
            found = self._steps[sms] = self._decide(sms)
        return found

    def _decide(self, sms: int) -> Step:
        e = self.extents
        vec = 1 if self.geometry.broadcast else vector_width(self.program)
        if e.gather:
            variant = Variant("gather", 32, reduced=e.gather)
            return Step(variant, self._kernel(variant), min(_ceil(e.outer, BLOCK // 32), sms * GRID_BLOCKS_PER_SM))
        if e.outer * e.inner == 1:
            variant = full_variant(e.count)
            blocks = full_blocks(e.count, vector_width(self.program), sms)
            partials = blocks if variant.stage == "partial" else 0
            return Step(variant, self._kernel(variant), blocks, 1, partials, 1 if partials else 0)
        if e.inner == 1:
            variant, blocks, splits = rows_step(e, vec, sms)
            partials, tickets = (e.outer * splits, e.outer) if variant.split else (0, 0)
            return Step(variant, self._kernel(variant), blocks, splits, partials, tickets)
        acc_bytes = self.acc.itemsize + (8 if self.reducer.indexed else 0)
        variant, blocks, splits, tiles = columns_step(e, vec, acc_bytes, sms)
        partials, tickets = (e.outer * e.inner * splits, tiles) if variant.split else (0, 0)
        return Step(variant, self._kernel(variant), blocks, splits, partials, tickets)


def plan_reduction(
    builder: ProgramBuilder, root: Traced, reducer: Reducer, axis: Any, out: Any, keepdims: bool = False
) -> ReductionPlan:
    """Compile ``reducer`` over the values of ``builder``'s ``root`` for these arguments."""
    program = builder.program(root)
    value_shape = tuple(int(d) for d in root.shape)
    ndim = len(value_shape)
    axes = normalize_axes(axis, ndim, reducer.name, single=reducer.indexed)
    reduced = tuple(range(ndim)) if axes is None else axes
    shape = result_shape(value_shape, reduced, keepdims)
    value = program.dtype
    acc = reducer.accumulate(value)
    result = reducer.result(value)
    if out is not None:
        check_out(out, shape, result, reducer.name)
        result = np.dtype(out.dtype)
    shapes = builder.shapes
    broadcast = any(s is not None and s != value_shape for s in shapes)
    ranks = tuple(None if s is None else len(s) for s in shapes)
    geometry = Geometry(ndim, broadcast, ranks, len(shape))
    return ReductionPlan(
        reducer.name, reducer, tuple(builder.sources), program, geometry, value_shape, reduced, shape, acc, result
    )


def result_shape(value_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """NumPy's: the reduced axes dropped, or kept with extent 1 under ``keepdims``."""
    if keepdims:
        return tuple(1 if j in axes else d for j, d in enumerate(value_shape))
    return tuple(d for j, d in enumerate(value_shape) if j not in axes)


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

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, *operands: HostOperand, axis: Any = None, out: HostArray | None = None, keepdims: bool = False
    ) -> HostArray: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, *operands: TracedOperand, axis: Any = None, out: None = None, keepdims: bool = False
    ) -> Traced: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, *operands: RemoteOperand, axis: Any = None, out: RemoteArray | None = None, keepdims: bool = False
    ) -> RemoteArray: ...
    @overload
    def __call__(
        self, *operands: DeviceOperand, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray: ...
    def __call__(self, *operands: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        """The operands' kind decides the result's (``operands``): numpy, DeviceArray or RemoteArray."""
        if len(operands) != self.operands:
            raise TypeError(f"{self.name}() takes {self.operands} operand(s), got {len(operands)}")
        keepdims = _check_keepdims(keepdims, self.name)
        if any(isinstance(o, Traced) for o in operands):
            return self._trace(operands, axis, out, keepdims)
        make = lambda values, o: self._plan(values, axis, o, keepdims)  # noqa: E731
        remote = {k: v for k, v in (("axis", axis), ("keepdims", keepdims)) if v is not None and v is not False}
        return self._plans.call(self.name, operands, out, (axis, keepdims), make, remote=(self, remote))

    def inspect(
        self, *operands: Any, axis: Any = None, out: Any = None, keepdims: bool = False, arch: str | None = None
    ) -> Build:
        """The Build (source, cubin, ``decisions``) of the kernel a call with these operands runs;
        no GPU needed. Operands may be numpy arrays or anything with ``shape`` and ``dtype``
        (and ``ptr`` to control alignment)."""
        return self._plan(operands, axis, out, keepdims).inspect(operands, out, arch)

    def strategy(self, *operands: Any, axis: Any = None, keepdims: bool = False, multiprocessors: int = 132) -> Step:
        """The launch a call with these operands makes on a GPU with ``multiprocessors`` SMs: the
        kernel's variant (stage, lanes, split), its grid and how many blocks share an output."""
        return self._plan(operands, axis, None, keepdims).step(multiprocessors)

    def _root(self, builder: ProgramBuilder, traced: Sequence[Any]) -> Traced:
        if self.map is not None:
            return builder.apply(self.map, traced)
        (root,) = traced
        if not isinstance(root, Traced):
            raise TypeError(f"{self.name}: expected an array, got {type(root).__name__}")
        return root

    def _trace(self, operands: Sequence[Any], axis: Any, out: Any, keepdims: bool) -> Traced:
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
        axes = normalize_axes(axis, root.ndim, self.name, single=self.reducer.indexed)
        shape = result_shape(tuple(root.shape), tuple(range(root.ndim)) if axes is None else axes, keepdims)
        result = t.builder.value(root.id, self.reducer.result(root.dtype), shape)
        result.reduction = (self, axis, keepdims, root)
        return result

    def _plan(self, values: Sequence[Any], axis: Any, out: Any, keepdims: bool = False) -> ReductionPlan:
        builder = ProgramBuilder(self.name)
        root = self._root(builder, builder.operands(values, self.name))
        builder.scalars_from_arguments(values)
        return plan_reduction(builder, root, self.reducer, axis, out, keepdims)


def _check_keepdims(keepdims: Any, what: str) -> bool:
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"{what}: keepdims must be True or False, not {keepdims!r}")
    return bool(keepdims)


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
    return Reduction(user_reducer(name, reduce, identity, map, dtype, post))


def user_reducer(name: str, combine: str, identity: str, map: str, dtype: Any, post: str = "r") -> Reducer:
    """A Reducer declared from C expressions (``kd.reduction``, ``kd.scan``): every dtype kind
    combines with ``combine``, values accumulate in their own dtype (float16/bfloat16 in float32)
    and the result is ``dtype`` or the input's."""
    out_dtype = None if dtype is None else promotion.supported(dtype)
    return Reducer(
        name,
        {"fiub": combine},
        identity,
        (lambda dt: dt) if out_dtype is None else (lambda dt: out_dtype),
        accumulation_dtype,
        pre=map,
        post=post,
        pre_param="x",
    )
