"""Fused pipelines over rows: one kernel for a ``@kd.fuse`` function whose reductions (over one
axis set) feed later elementwise work and later reductions (softmax, norms, logsumexp).

Decisions, from the extents and dtypes only (``FusedRowsPlan.inspect`` shows them, no GPU):

- a *row* is the reduced axes' values of one output position (rows of a matrix for ``axis=-1``);
  rows up to ``WARP_MAX`` elements take a group of up to 32 lanes of a warp (row-per-warp, several
  rows per block), longer ones a whole block of 256, 512 or 1024 threads (row-per-block);
- few long rows (fewer than ``SPLIT_ROWS_PER_SM`` per SM, sm_90+), and rows too long for one
  block's registers, take a thread-block cluster of
  up to ``SPLIT_MAX`` blocks each (split): every block folds its share, then reads the cluster's
  partials from their shared memory in rank order (distributed shared memory, cluster barriers),
  so the fold is deterministic and the row still one kernel and one pass;
- the row's full inputs are loaded once into registers when they fit (``items`` units of
  16 bytes per thread, a compile-time constant, at most ``HOLD_BYTES`` per thread), so every
  reduction and the outputs read them there: one pass over memory; a full value a later phase
  needs again (softmax's ``exp(x - m)``) is kept in registers too when held inputs and kept values
  fit in ``HOLD_BYTES``, counting only what is live at the start of each pass in rows of one
  block or less (``FusedRowsDecisions.carried``; else recomputed: spilling would cost more than
  computing again). Rows that do not fit are read again by each phase (from L2 when they fit
  there), ``passes`` says how many times;
- each reduction is a fixed tree (per-thread folds in element order, butterfly shuffles, then
  a butterfly over the warps' results), so results are the same bits run to run and every thread
  holds them;
- reduced axes innermost (``layout="rows"``) read 16-byte vectors when every pointer is aligned.
  When the row length is not a multiple of the vector (``FusedRowsDecisions.shifted``), each row's units
  are the aligned vectors its elements fall in, from the row's shift (its offset modulo the
  vector, so one unit more than the row needs at most, which ``items`` plans for): interior units
  are one 16-byte access, the first and last per element on the row's own columns, so no row
  touches a neighbour's elements; a unit's elements inside the row are a bit mask computed once a
  unit, so an element tests one bit rather than comparing its column with the row's ends.
  An array whose rows have another shift (another row stride) is read and written per element,
  by a branch uniform in the row; one that does not vary along the kept axes (a norm's weight)
  is read per element at its column. Short rows (``INTERLEAVE_MAX``)
  that are not whole vectors are not shifted but interleaved (``vector_width`` 1): lane l of a
  row's group takes its elements l, l + lanes, ..., so each load of the group is one contiguous
  run and no lane branches on an edge, as PyTorch's warp softmax does (``INTERLEAVE_MAX`` says up
  to which length that beats shifted units, per vector width). Other axis sets
  (``layout="permuted"``) decompose offsets per element: correct for every axis set, not tuned;
- ``kerneldsl bench fuse`` checks these choices on a GPU against PyTorch, Triton and the copy
  floor (its ``--only sweep`` takes odd row lengths, which shift or interleave); a change to a
  threshold below is justified by its figures before and after;
- on the CPU device (``host_strategy``) a thread takes a row alone ("row-per-thread", blocks of
  one thread), folding each element of a unit into its own accumulator and combining them as a
  tree: no shuffle or barrier, so the host runs the kernel as a plain loop the compiler
  vectorizes, where a GPU's warps and blocks would run as fibers (``KERNELDSL_CPU_PLAN=gpu``
  keeps the GPU's strategy; ``FusedRowsDecisions.host_plan`` names the host's).

Values follow NumPy's dtypes per op, as unfused ``kd.ops`` calls do, but the arithmetic is a
fused kernel's, as PyTorch's and Triton's are: float16/bfloat16 values compute in float32 through
the whole pipeline and round once where stored, and the kernel is built with ``--use_fast_math``
(exp, log, division and square roots to within a few float32 ulp, fused multiply-adds, float32
denormals flushed), which ``FusedRowsDecisions.fast_math`` records. The tolerance against NumPy float64 is
then 2e-5 relative (plus 2e-6 of the row's largest value) in float32, four 16-bit ulp otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..jit.codegen import GeneratedBody
from ..launch.dispatch import Kernel
from .body_store import rendered
from .decisions import FusedRowsDecisions
from .kernels import KERNELS, all_aligned, array_param, make_kernel, scalar_param
from .pipeline import Phase, Pipeline, phase
from .program import Leaf, compute_ctype, program_context, storage_ctype
from .reduction.reducers import accumulator_context

WARP_MAX = 1024  # rows up to this many elements take (part of) a warp each
HOLD_BYTES = 128  # register bytes per thread that may hold a row's inputs
HOST_HOLD_BYTES = 16384  # ... on the CPU device (a row per thread, held in its stack and L1)
BLOCKS = (256, 512, 1024)  # row-per-block sizes, the smallest that holds the row wins ...
NARROW_BLOCK = 128  # ... but a 16-bit row takes this many threads ...
PREFER_HELD_BYTES = 64  # ... when each then holds at most this much of it
WARP_BLOCK = 256  # threads per block for row-per-warp
SHORT_ROW_ITEMS = 4  # units a thread of a short row holds (fewer lanes, more rows per warp): one each
# leaves too few loads in flight to hide memory latency
SPLIT_MIN = 8192  # rows from this many elements may be split over a cluster of blocks ...
SPLIT_ROWS_PER_SM = 2  # ... when there are fewer rows than this many per SM
UNHELD_SPLIT_ROWS_PER_SM = 16  # ... or than this many when one block's registers cannot hold a row
SPLIT_MAX = 8  # blocks per cluster (the portable limit)
SPLIT_UNITS = 512  # fewest units a block of a split row takes
CLUSTER_MAJOR = 9  # thread-block clusters: sm_90 and newer
# by vector width (2: float64, 4: float32, 8: 16-bit, 16: 8-bit): the longest rows that, not whole
# vectors, interleave their elements (one a unit) rather than shift their vectors: up to 13 values a
# lane for float32, 5 for 16-bit types, SHORT_ROW_ITEMS for the others, the lengths up to which
# interleaving was the faster in ``kerneldsl bench fuse --only sweep``
INTERLEAVE_MAX = {2: 32 * SHORT_ROW_ITEMS, 4: 32 * 13, 8: 32 * 5, 16: 32 * SHORT_ROW_ITEMS}
REGISTERS = 64  # per thread: 1024 threads per SM stay resident, their loads in flight hide memory latency
HOST_PLAN = "a thread takes a row alone, an accumulator per element of a unit (no barrier or collective)"
# how a thread reads and writes a unit of a row (templates/fused_rows_<mode>.cuh.j2): element by
# element before the row's end, one aligned 16-byte vector, or aligned vectors from the row's shift
LoadMode = Literal["scalar", "vector", "shifted"]
_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)
# float32 max / min folds as one sm_80+ instruction that returns NaN when either side is one (a NaN
# row's result is NaN either way; the generic fold's compare-and-select is four instructions)
_NAN_EXTREMES = {"max": "max.NaN.f32", "min": "min.NaN.f32"}


@dataclass(frozen=True)
class Strategy:
    """The compile-time choices of a fused rows kernel."""

    strategy: (
        str  # "row-per-warp", "row-per-block", "split" (a row per cluster of ``cluster`` blocks) or "row-per-thread"
    )
    lanes: int  # threads per row in one block
    threads: int  # per block
    width: int  # elements per unit (16 bytes of the widest full array; 1 for interleaved short rows)
    items: int | None  # units per thread held in registers; None: each phase re-reads the row
    passes: int
    cluster: int = 1


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def decide(count: int, width: int, held_bytes: int, reads: int, rows: int, sms: int, clusters: bool) -> Strategy:
    """The strategy for ``rows`` rows of ``count`` elements whose held inputs take ``held_bytes``
    per element on ``sms`` SMs (``clusters``: the device has thread-block clusters); ``reads``:
    the phases that read the row (the passes when it is not held)."""
    if count % width and count <= INTERLEAVE_MAX.get(width, 0):
        return decide(count, 1, held_bytes, reads, rows, sms, clusters)  # interleaved elements
    units = max(1, _ceil(count, width) + (count % width != 0))  # a shifted row's extra unit
    cluster = 1
    if count <= WARP_MAX:
        per_thread = max(1, min(SHORT_ROW_ITEMS, HOLD_BYTES // (width * held_bytes))) if held_bytes else 1
        lanes = min(32, 1 << (_ceil(units, per_thread) - 1).bit_length())
        threads, name = WARP_BLOCK, "row-per-warp"
    else:
        unheld = held_bytes > 0 and _ceil(units, BLOCKS[-1]) * width * held_bytes > HOLD_BYTES
        per_sm = UNHELD_SPLIT_ROWS_PER_SM if unheld else SPLIT_ROWS_PER_SM
        if clusters and count >= SPLIT_MIN and rows < sms * per_sm:
            cluster = min(SPLIT_MAX, 1 << (_ceil(sms * per_sm, rows) - 1).bit_length())
            while cluster > 1 and units < cluster * SPLIT_UNITS:
                cluster //= 2
            if (
                unheld
                and rows >= sms * SPLIT_ROWS_PER_SM
                and _ceil(units, cluster * BLOCKS[-1]) * width * held_bytes > HOLD_BYTES
            ):
                cluster = 1  # not even a cluster holds the row: the GPU is full without splitting it
        lanes = threads = _block(_ceil(units, cluster), width, held_bytes, narrow=width >= 8 and cluster == 1)
        name = "split" if cluster > 1 else "row-per-block"
    items = _ceil(_ceil(units, cluster), lanes)
    if held_bytes == 0 or items * width * held_bytes > HOLD_BYTES:
        return Strategy(name, lanes, threads, width, None, reads, cluster)
    return Strategy(name, lanes, threads, width, items, 1, cluster)


def host_strategy(count: int, width: int, held_bytes: int, reads: int) -> Strategy:
    """The CPU device's strategy: a row per thread, units of ``width`` as the GPU's, the row's
    inputs held (``items``: all its units, one pass, values a later phase reads computed once)
    when they fit ``HOST_HOLD_BYTES``, else read again by each of its ``reads`` phases (from the
    core's cache)."""
    units = max(1, _ceil(count, width) + (count % width != 0))  # a shifted row's extra unit
    if held_bytes and units * width * held_bytes <= HOST_HOLD_BYTES:
        return Strategy("row-per-thread", 1, 1, width, units, 1)
    return Strategy("row-per-thread", 1, 1, width, None, reads)


def _block(units: int, width: int, held_bytes: int, narrow: bool) -> int:
    """Threads for a block's ``units`` of a row: the fewest that hold it in ``HOLD_BYTES`` per
    thread (else the most: the row is read again per phase), or ``NARROW_BLOCK`` for a ``narrow``
    row (16-bit values, one block) of which each would hold at most ``PREFER_HELD_BYTES``: more,
    smaller blocks per SM then fold their rows side by side (``kerneldsl bench fuse``'s bfloat16
    softmax over 4096 columns checks it; larger blocks than the fewest that hold the row, or split
    rows, were slower there)."""
    if held_bytes == 0:
        return BLOCKS[0]
    if narrow and _ceil(units, NARROW_BLOCK) * width * held_bytes <= PREFER_HELD_BYTES:
        return NARROW_BLOCK
    fits = [t for t in BLOCKS if _ceil(units, t) * width * held_bytes <= HOLD_BYTES]
    return fits[0] if fits else BLOCKS[-1]


# --- the kernel ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowsGeometry:
    """What a kernel's text depends on besides the pipeline's values: each value's class (full or
    per row), each array leaf's rank and the axes of the reduced shape it varies along, each
    output's dtype and class, whether rows divide into units, and the strategy."""

    axes: tuple[int, ...]
    ndim: int
    full: tuple[bool, ...]  # per value
    leaves: tuple[tuple[int, int, tuple[bool, ...]], ...]  # per array leaf: (value id, rank, varies)
    outputs: tuple[tuple[np.dtype, bool], ...]  # per output: (dtype, full)
    divisible: bool  # the row length is a multiple of ``strategy.width``
    strategy: Strategy

    @property
    def rows_innermost(self) -> bool:
        """The reduced axes are the innermost ones."""
        return self.axes == tuple(range(self.ndim - len(self.axes), self.ndim))


def _array(
    geometry: RowsGeometry, id: str, param: str, dtype: np.dtype, rank: int, varies: tuple[bool, ...]
) -> dict[str, Any]:
    """An array's offsets: its stride along each axis of the reduced shape it varies along, and
    whether its column offset is the element index itself (rows laid out last, no broadcast)."""
    ndim = geometry.ndim
    strides = [f"{param}_stride{j - (ndim - rank)}" if varies[j] else None for j in range(ndim)]
    full = any(varies[a] for a in geometry.axes)
    plain = geometry.rows_innermost and all(varies[a] for a in geometry.axes)
    return {
        "id": id,
        "param": param,
        "storage": storage_ctype(dtype),
        "compute": compute_ctype(dtype),
        "itemsize": dtype.itemsize,
        "strides": strides,
        "full": full,
        "general": full and not plain,
        "rowmajor": plain and all(varies),
        "col": "kdcolumn" if plain else f"kdcoloff{id}",
    }


def fused_rows_kernel(pipeline: Pipeline, geometry: RowsGeometry) -> Kernel:
    """The (cached) kernel of ``pipeline`` for ``geometry``: a new row count with the same geometry reuses it."""
    kinds = tuple(s if s[0] == "reduced" else s[0] for s in pipeline.sources)  # not the constants' values
    key = ("fused_rows", pipeline.values, kinds, pipeline.reductions, pipeline.outputs, geometry)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build(pipeline, geometry))
    return kernel


def _params(pipeline: Pipeline, geometry: RowsGeometry) -> list[tuple[str, Any]]:
    """Per leaf an input array or a scalar (reduced leaves are none); per output an array; the
    reduced shape's extents."""
    ranks = {v: rank for v, rank, _ in geometry.leaves}
    params: list[tuple[str, Any]] = []
    for v in pipeline.leaf_ids:
        leaf = _leaf(pipeline, v)
        if leaf.kind == "array":
            params.append((f"kdp{v}", array_param("in", leaf.dtype, tuple(f"kds{v}x{m}" for m in range(ranks[v])))))
        elif leaf.kind == "scalar":
            params.append((f"kdp{v}", scalar_param(leaf.dtype)))
    for k, (dtype, full) in enumerate(geometry.outputs):
        rank = geometry.ndim if full else len(pipeline.output_shapes[k])
        params.append((f"kdout{k}", array_param("out", dtype, tuple(f"kdq{k}x{m}" for m in range(rank)))))
    params += [(f"kdd{j}", scalar_param(_INT64)) for j in range(geometry.ndim)]
    return params


def _leaf(pipeline: Pipeline, v: int) -> Leaf:
    value = pipeline.values[v]
    assert isinstance(value, Leaf)
    return value


def phases(pipeline: Pipeline, outputs_full: Sequence[bool], carry: bool = False) -> tuple[list[Phase], Phase]:
    """Each reduction's pass and the outputs' pass; ``carry``: a full value an earlier pass computed
    is read from the registers it left it in (rows held in registers), not computed again."""
    available: set[int] = set()
    reductions = []
    for r in pipeline.reductions:
        reductions.append(phase(pipeline, [r.root], carried=available))
        if carry:
            available |= {v for v, _ in reductions[-1].computed}
    full = [o for o, f in zip(pipeline.outputs, outputs_full) if f]
    row = [o for o, f in zip(pipeline.outputs, outputs_full) if not f]
    return reductions, phase(pipeline, full, row, carried=available)


def held_leaves(
    pipeline: Pipeline, leaves: Sequence[tuple[int, int, tuple[bool, ...]]], axes: tuple[int, ...]
) -> list[int]:
    """The array leaves a row's threads can hold in registers: used per element, laid out like
    the reduced shape itself with the reduced axes innermost."""
    reduction_phases, last = phases(pipeline, [pipeline.full(o) for o in pipeline.outputs])
    used = {v for ph in (*reduction_phases, last) for v in ph.element_leaves}
    ndim = len(pipeline.shape)
    rows_innermost = axes == tuple(range(ndim - len(axes), ndim))
    return [v for v, _, varies in leaves if v in used and rows_innermost and all(varies)]


def reads(pipeline: Pipeline) -> int:
    """The passes over a row that read it element by element."""
    reduction_phases, last = phases(pipeline, [pipeline.full(o) for o in pipeline.outputs])
    return sum(1 for ph in (*reduction_phases, last) if ph.element is not None)


class _Context:
    """The template's context for one pipeline and geometry (what each phase evaluates and loads)."""

    def __init__(self, pipeline: Pipeline, geometry: RowsGeometry) -> None:
        self.pipeline = pipeline
        self.geometry = geometry
        self.arrays: dict[int | str, dict[str, Any]] = {}
        for v, rank, varies in geometry.leaves:
            self.arrays[v] = _array(geometry, str(v), f"kdp{v}", _leaf(pipeline, v).dtype, rank, varies)
        for k, (dtype, full) in enumerate(geometry.outputs):
            if full:
                varies = (True,) * geometry.ndim  # the reduced shape itself: every stride exists
                self.arrays[f"o{k}"] = _array(geometry, f"o{k}", f"kdout{k}", dtype, geometry.ndim, varies)
        items = geometry.strategy.items
        self.hold = HOST_HOLD_BYTES if geometry.strategy.strategy == "row-per-thread" else HOLD_BYTES
        held = held_leaves(pipeline, geometry.leaves, geometry.axes) if items else []
        self._passes(carry=items is not None)
        if items is not None and items * geometry.strategy.width * self._live_bytes(held, False) > self.hold:
            self._passes(carry=False)  # carried values must fit beside the held inputs, or they spill
        self.held = [self.arrays[v] for v in held]
        self.held_ids = {str(v) for v in held}
        self.widened = items is not None and self._widen(held, items)

    def _widen(self, held: list[int], items: int) -> bool:
        """Whether held 16-bit inputs are converted to float32 once, as they are loaded, rather than
        in every phase that reads them: when the wider copies fit in ``HOLD_BYTES`` beside the
        carried values (a float16 conversion that keeps a NaN's sign is several instructions)."""
        if not any(_leaf(self.pipeline, v).dtype.itemsize == 2 for v in held):
            return False
        return items * self.geometry.strategy.width * self._live_bytes(held, True) <= self.hold

    def _live_bytes(self, held: list[int], widened: bool) -> int:
        """The most register bytes per element that held inputs (float32 copies when ``widened``)
        and carried values take at once. Where a row takes one block or less, that is the most at
        the start of any pass: an input no later pass reads, and a carried value outside the
        passes from the one that computes it to its last reader, take none (softmax's
        ``exp(x - m)`` takes the registers ``x`` leaves). In split rows ptxas was seen to spill
        then, so every held and carried value counts there, as if all lived at once."""
        if self.geometry.strategy.cluster > 1:
            return sum(self._size(v, widened) for v in (*held, *self.carried))
        everything = (*self.phases, self.last)
        computed = {v: k for k, stores in enumerate(self.stores) for v, _ in stores}
        last_read = {v: max(k for k, ph in enumerate(everything) if v in ph.element_leaves) for v in (*held, *computed)}
        live = [
            sum(self._size(v, widened) for v in held if last_read[v] >= k)
            + sum(self._size(v, widened) for v, made in computed.items() if made < k <= last_read[v])
            for k in range(len(everything))
        ]
        return max(live)

    def _size(self, v: int, widened: bool) -> int:
        """Register bytes per element of held input or carried value ``v`` (16-bit values carry,
        and widen, as float32)."""
        itemsize = int(self.pipeline.values[v].dtype.itemsize)
        return 4 if itemsize == 2 and (widened or v in self.carried) else itemsize

    def _passes(self, carry: bool) -> None:
        """The passes, and which full values each leaves in registers for a later one (``carry``)."""
        self.phases, self.last = phases(self.pipeline, [full for _, full in self.geometry.outputs], carry=carry)
        everything = (*self.phases, self.last)
        read_later = {v for k, ph in enumerate(everything) for v in ph.element_leaves if k}
        self.stores = [[(v, local) for v, local in ph.computed if v in read_later] for ph in everything]
        self.carried = {v for stores in self.stores for v, _ in stores}

    def _row_loads(self, ph: Phase) -> dict[int, str]:
        reduced = {r.leaf: k for k, r in enumerate(self.pipeline.reductions)}
        loads = {}
        for local, v in enumerate(ph.row_leaves):
            leaf = _leaf(self.pipeline, v)
            if leaf.kind == "scalar":
                loads[local] = f"kdp{v}"
            elif leaf.kind == "reduced":
                loads[local] = f"kdred{reduced[v]}"
            else:
                loads[local] = f"kdp{v}[kdrowoff{v}]"
        return loads

    def _element_loads(self, ph: Phase, load: LoadMode) -> dict[int, str]:
        """Each element leaf's C expression: from registers, from the unit the load mode loaded
        (a shifted row loads the arrays that share its layout), else from memory per element."""
        loads = {}
        for local, v in enumerate(ph.element_leaves):
            register = self._register_read(v)
            if register is not None:
                loads[local] = register
            elif load == "vector" or (load == "shifted" and self.arrays[v]["rowmajor"]):
                loads[local] = f"kd_wide(kdloaded{v}.v, kdpos)"
            else:
                a = self.arrays[v]
                loads[local] = f"kdp{v}[kdrowoff{v} + {a['col']}]"
        return loads

    def _register_read(self, v: int) -> str | None:
        """Element leaf ``v`` read from registers (a scalar, a carried or per-row value, a held
        input), or None when a phase reads it from memory. A shifted row's phase that reads only
        registers computes every element of a unit and tests the unit's mask only to fold it:
        nothing it reads can fault, and work outside a branch shares its per-row parts
        (softmax's division by the row's sum takes one reciprocal a unit, not one an element, as
        the kernel's SASS shows)."""
        value = self.pipeline.values[v]
        if isinstance(value, Leaf) and value.kind == "scalar":
            return f"kdp{v}"
        if v in self.carried:
            return f"kdcar{v}[kditem][kdpos]"
        if not self.pipeline.full(v):
            return f"kdrv{v}"
        if str(v) in self.held_ids:
            return f"kdwidened{v}[kditem][kdpos]" if self.widened else f"kd_wide(kdheld{v}[kditem].v, kdpos)"
        return None

    def phase_context(self, ph: Phase, load: LoadMode, stores: list[tuple[int, int]]) -> dict[str, Any]:
        p = self.pipeline
        streamed = [
            self.arrays[v] for v in ph.element_leaves if p.full(v) and v in self.arrays and str(v) not in self.held_ids
        ]
        return {
            "row_program": program_context(ph.row, round_halves=False),
            "row_loads": self._row_loads(ph),
            "row_exports": list(ph.row_exports),
            "row_ctypes": {v: compute_ctype(p.values[v].dtype) for v, _ in ph.row_exports},
            "element_program": None if ph.element is None else program_context(ph.element, round_halves=False),
            "element_loads": {} if ph.element is None else self._element_loads(ph, load),
            "in_registers": all(self._register_read(v) is not None for v in ph.element_leaves),
            "element_roots": list(ph.element_roots),
            "streamed": streamed,
            "stores": [{"value": v, "local": local} for v, local in stores],
            "full_outputs": [],
            "row_outputs": [],
        }

    def render(self, load: LoadMode) -> str:
        p, geometry, s = self.pipeline, self.geometry, self.geometry.strategy
        phases = []
        for k, (r, ph) in enumerate(zip(p.reductions, self.phases)):
            acc = r.reducer.accumulate(p.values[r.root].dtype)
            accumulator = accumulator_context(acc)
            result = p.values[r.leaf].dtype
            phases.append(
                {
                    **self.phase_context(ph, load, self.stores[k]),
                    "k": k,
                    "reducer": r.reducer.name,
                    "root": r.root,
                    "acc": accumulator["cctype"],
                    "kdU": accumulator["kdU"],
                    "shfl": accumulator["shfl"],
                    "combine": r.reducer.expression(acc),
                    "nan_extreme": _NAN_EXTREMES.get(r.reducer.name) if acc == _FLOAT32 else None,
                    "identity": r.reducer.identity_text(acc),
                    "pre": r.reducer.pre,
                    "pre_param": r.reducer.pre_param,
                    "post": r.reducer.post,
                    "cctype": compute_ctype(result),
                }
            )
        last = self.phase_context(self.last, load, [])
        locals_ = dict(zip(self.last_full_ids(), self.last.element_roots))
        for k, (o, (dtype, full)) in enumerate(zip(p.outputs, geometry.outputs)):
            entry = {"k": k, "value": o, "storage": storage_ctype(dtype), "cctype": compute_ctype(dtype)}
            if full:
                a = self.arrays[f"o{k}"]
                last["full_outputs"].append({**entry, **a, "local": locals_[o]})
            else:
                last["row_outputs"].append(entry)
        dims = [f"kdd{j}" for j in range(geometry.ndim)]
        arrays = list(self.arrays.values())
        return rendered(
            "fused_rows.cu.j2",
            dict(
                name=p.name,
                strategy=s.strategy,
                cluster=s.cluster,
                lanes=s.lanes,
                threads=s.threads,
                width=s.width,
                items=s.items,
                passes=s.passes,
                load=load,
                lead=next((a["id"] for a in arrays if a["rowmajor"]), None),
                dims=dims,
                kept=list(p.kept),
                reduced=list(geometry.axes),
                count_expr=" * ".join(f"(index_t){dims[a]}" for a in geometry.axes) or "1",
                rows_expr=" * ".join(f"(index_t){dims[j]}" for j in p.kept) or "1",
                arrays=arrays,
                general_arrays=[a for a in arrays if a["general"]],
                held=self.held if s.items else [],
                widened=self.widened,
                carried=[{"value": v, "cctype": compute_ctype(p.values[v].dtype)} for v in sorted(self.carried)],
                phases=phases,
                last=last,
            ),
        )

    def last_full_ids(self) -> list[int]:
        """The outputs written per element (the others are one value per row)."""
        return [o for o, (_, full) in zip(self.pipeline.outputs, self.geometry.outputs) if full]


def _build(pipeline: Pipeline, geometry: RowsGeometry) -> Kernel:
    context = _Context(pipeline, geometry)
    s = geometry.strategy
    full_arrays = [f"kdp{v}" for v, _, varies in geometry.leaves if any(varies[a] for a in geometry.axes)]
    full_arrays += [f"kdout{k}" for k, (_, full) in enumerate(geometry.outputs) if full]
    plain = not any(a["general"] for a in context.arrays.values() if a["full"])
    vectorable = s.width > 1 and geometry.divisible and plain
    # rows not a multiple of the vector: units over aligned vectors from the row's shift, the
    # edges per element; needs an array that varies along every axis to take the shift from
    shiftable = s.width > 1 and not geometry.divisible and plain and any(a["rowmajor"] for a in context.arrays.values())

    def body(proxies: dict[str, Any]) -> GeneratedBody:
        aligned = all_aligned(proxies, full_arrays)
        load: LoadMode = "scalar"
        if aligned and shiftable:
            load = "shifted"
        elif aligned and vectorable:
            load = "vector"
        first = pipeline.reductions[0]
        decisions = FusedRowsDecisions(
            layout="rows" if geometry.rows_innermost else "permuted",
            vector_width=1 if load == "scalar" else s.width,
            accumulation=first.reducer.accumulate(pipeline.values[first.root].dtype),
            group=s.lanes,
            split=s.cluster > 1,
            strategy=s.strategy,
            passes=s.passes,
            items=s.items,
            shifted=load == "shifted",
            carried=bool(context.carried),
            host_plan=HOST_PLAN if s.strategy == "row-per-thread" else None,
        )
        return GeneratedBody(context.render(load), decisions)

    # at most REGISTERS per thread: 1024 threads of an SM stay resident (and a block fits one SM);
    # --minimal, as every generated kernel (kernels.OPTIONS)
    options = ("--use_fast_math", f"--maxrregcount={REGISTERS}", "--minimal")
    name = f"{pipeline.name}_fused_rows"
    cluster = (s.cluster, 1, 1) if s.cluster > 1 else None
    return make_kernel(name, _params(pipeline, geometry), body, block=s.threads, options=options, cluster=cluster)
