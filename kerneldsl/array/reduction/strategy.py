"""Reduction strategy: which kernel variant a shape takes and how it is launched (grid, splits,
partials, tickets), from the extents and the device's SM count alone. Pure decisions: no
templates, no sessions, so a launch table (the C path) or a fused pipeline can take them as
they are.

- all axes: "direct" (one block) for small inputs, else "partial" (blocks fold grid-stride
  slices, the last block to finish folds their partials in the same launch);
- reduced axes innermost ("rows", outer x count): a few lanes of a warp per output for short
  rows, a block per output for long ones, and when rows are few and long, each row split over
  several blocks so that the GPU fills;
- kept axes after the reduced ones ("columns", outer x count x inner): threads across the kept
  axis read whole rows coalesced, the block's other threads and, when tiles are few, other
  blocks split the reduced axis;
- short slabs (kept axes before and after a reduced run of few values, ``count * inner`` small):
  "slabs": a block stages whole slabs in shared memory with coalesced loads, a thread per output
  folds its column there (columns would leave most threads idle down a short reduced extent);
- reduced axes that kept ones interleave, or a strided view: ``canonical`` groups on the
  ``segments`` or ``lines`` stages (``strided``); with broadcast leaves, "gather": a warp per
  output.

On the CPU device (``host_step``) the plain contiguous layouts take the host's own stages, where
a GPU's trees of threads would run as fibers paying a switch per barrier and shuffle: "host-rows"
(reduced values innermost, the full reduction included) and "host-columns" (kept values after
them). A thread alone folds a run of values into ``HOST_ACCUMULATORS`` accumulators (interleaved
along a row, or side by side across columns) with no barrier or collective, so the runtime runs
it as a plain loop that the compiler vectorizes; long runs split over several threads, the last
to finish folding the partials in index order, as the GPU's split stages do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...launch.dispatch import Kernel
from ...runtime import driver
from ..kernels import BLOCK

DIRECT_MAX = 16384  # full reductions up to this size run as one single-block launch
PARTIAL_BLOCKS_PER_SM = 8  # blocks that fill one SM: what a split reduction aims for
COLUMN_BLOCKS_PER_SM = 2  # split columns with many partials per thread aim lower (8 loads in flight each)
COLUMN_LANES_WIDE = 64  # from this many threads across the kept axis, ...
COLUMN_DOWN_WIDE = 8  # ... this many rows of threads share the reduced axis,
ROWS_PER_COLUMN_THREAD = 4  # unless that leaves a thread fewer rows than this
FINAL_FOLDS = 64  # partials per thread the last block of a split column tile folds at most, by choice
FINAL_FOLD_REGISTERS = 32  # accumulators that last block's threads load before folding any (final_fold_depth)
GRID_BLOCKS_PER_SM = 16  # grid cap per SM for the grid-stride axis stages
ROWS_BLOCK_MIN = 2048  # reduced extent from which a whole block (not a warp) takes one output
SHORT_ROW_LOADS = 4  # loads per lane of a short row: its lanes' loads are in flight together
LOADS_PER_THREAD = 16  # fewest loads per thread worth splitting a row over one more block
WARP = 32  # threads of a warp: kept extents of fewer units take exactly that many lanes (columns)
ROWS_PER_THREAD = 8  # fewest rows per thread worth splitting columns over one more block
COLUMN_BYTES_PER_THREAD = 64  # accumulator bytes per thread up to which columns use 16-byte loads
SLAB_TILE_BYTES = 16384  # shared memory a slabs block stages its slabs' values in (accumulator type),
# twice that where only a double tile holds the slabs that make whole vectors: 16-byte loads are
# worth the occupancy (``kerneldsl bench reduce``'s float16 rows and its sweep check it)
SLABS_PER_TILE = 4  # fewest slabs a tile holds: longer slabs take the columns or lines stages
INSPECT_MULTIPROCESSORS = 132  # inspect() (and strategy() without a GPU) plans for an H100/H200
HOST_VECTOR_BYTES = 64  # the host stages' accumulators of one thread: a 64-byte vector register's worth, ...
HOST_ACCUMULATORS = (8, 64)  # ... at least and at most this many (independent folds in flight; the template's tree)
HOST_COLUMN_BYTES = 1024  # accumulators a host-columns thread keeps (in L1): each reduced index a run this long
HOST_PIECE = 16384  # fewest values a thread of a split host stage folds (its fixed costs stay small)
HOST_ITEMS_PER_CORE = 8  # runs a host stage aims for per core, so that uneven ones still balance
HOST_BLOCKS_PER_CORE = 16  # grid cap per core: blocks of one thread take runs by a grid-stride loop


def device_multiprocessors(session: Any) -> int:
    """The SM count of the device ``session`` launches on: the one place reductions and scans
    ask for it (its Device asks the driver once)."""
    n: int = session.gpu.multiprocessors
    return n


def planning_multiprocessors(multiprocessors: int | None) -> int:
    """The SM count ``strategy()`` plans for: ``multiprocessors`` if given, else that of the
    device a call would run on, else (no GPU here) ``INSPECT_MULTIPROCESSORS``."""
    if multiprocessors is not None:
        return multiprocessors
    if driver.driver_available() and driver.device_count() > 0:
        from ...runtime.session import default_session  # a session only where a device exists

        return device_multiprocessors(default_session())
    return INSPECT_MULTIPROCESSORS


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
class Variant:
    """The compile-time choices of one reduction kernel.

    ``stage``: "direct" (one block folds everything), "partial" (blocks fold slices, the last to
    finish folds their partials), "rows" (the reduced axes are innermost: ``lanes`` threads per
    output, a whole block when ``lanes == BLOCK``), "columns" (kept axes follow the reduced ones:
    ``lanes`` threads across the kept extent, the rest of the block down the reduced one),
    "slabs" (whole short slabs staged in shared memory, a thread per output), "gather"
    (broadcast leaves with reduced axes interleaved with kept ones; ``reduced`` names them),
    "segments" or "lines" (canonical groups, see ``strided``: ``groups`` counts the kept
    and reduced groups the kernel indexes, ``wide`` says offsets need 64 bits, ``team`` is
    "block" or "warp": who folds one output; ``flat``: lines whose fastest kept group is shorter
    than a warp number the outputs of all kept groups together).
    ``vector``: 16-byte loads (columns whose kept extent is no multiple of a vector: each vector
    lies across ``period`` rows, at a fixed place in every period of that many rows); ``split``:
    several blocks share an output and the last of them to finish folds their partials in index
    order (deterministic, no float atomics); ``copy``: why the operands were read from a
    contiguous copy ("" when read in place)."""

    stage: str
    lanes: int = BLOCK
    vector: bool = False
    split: bool = False
    reduced: tuple[int, ...] = ()
    groups: tuple[int, int] = (0, 0)
    wide: bool = False
    team: str = "block"
    copy: str = ""
    flat: bool = False  # lines: a tile is consecutive outputs of every kept group, not of the fastest one
    view: bool = False  # segments, lines, host stages: a strided view read in place (its leaves declared strided)
    period: int = 1  # columns: rows a 16-byte vector lies across when the kept extent is no multiple of it
    double_tile: bool = False  # slabs: a tile of twice SLAB_TILE_BYTES (see there)


@dataclass(frozen=True)
class Step:
    """The one launch a reduction call makes: its kernel, grid, and for split stages how many
    blocks share an output and how many partials and tickets they need; ``args``: the integer
    arguments after the output of the segments and lines stages (counts, group extents and
    strides, in ``strided.group_names`` order), and after the extents of a host stage reading a
    view (its strides, ``kernel.HOST_VIEW_STRIDES``)."""

    variant: Variant
    kernel: Kernel
    blocks: int
    splits: int = 1
    partials: int = 0
    tickets: int = 0
    args: tuple[int, ...] = ()


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _pow2_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def host_accumulators(acc_bytes: int) -> int:
    """Accumulators a host stage's thread keeps: a vector register's worth within
    ``HOST_ACCUMULATORS`` (a power of two: they combine as a tree)."""
    low, high = HOST_ACCUMULATORS
    return max(low, min(high, _pow2_at_most(max(1, HOST_VECTOR_BYTES // acc_bytes))))


def host_step(
    e: Extents,
    acc_bytes: int,
    cores: int,
    kernel: Callable[[Variant], Kernel],
    value_bytes: int = 0,
    view: tuple[int, int, int] | None = None,
) -> Step:
    """The CPU device's launch for plain contiguous extents ``e`` (no gather) on ``cores``: a
    thread per output row ("host-rows", ``inner == 1``) or per ``HOST_COLUMN_BYTES`` of
    accumulators for adjacent columns ("host-columns": each reduced index a run of adjacent outputs, at most
    a block's width, as a variant's lanes are), each run split over threads until there are
    ``HOST_ITEMS_PER_CORE`` runs a core, no run shorter than ``HOST_PIECE`` values; one-thread
    blocks take consecutive runs. ``value_bytes``: a row lane's accumulator when it keeps no index
    (an indexed reduction's rows find the best value first, then its index). ``view``: the element
    strides of a strided view's outer, reduced and inner indices, which the stages then read in
    place (``Step.args``)."""
    # a tile of adjacent columns: no wider than the kept extent, so most tiles are whole (a whole
    # tile's loop has a fixed trip count, which the compiler vectorizes)
    columns = min(BLOCK, _pow2_at_most(max(1, HOST_COLUMN_BYTES // acc_bytes)), _pow2_at_most(max(1, e.inner)))
    lanes = host_accumulators(value_bytes or acc_bytes) if e.inner == 1 else columns
    stage = "host-rows" if e.inner == 1 else "host-columns"
    tiles = max(1, e.outer * (1 if e.inner == 1 else _ceil(e.inner, lanes)))
    width = 1 if e.inner == 1 else min(lanes, e.inner)  # values a thread takes from one reduced index
    wanted = _ceil(cores * HOST_ITEMS_PER_CORE, tiles)
    splits = max(1, min(wanted, e.count * width // HOST_PIECE))
    variant = Variant(stage, lanes, split=splits > 1, view=view is not None)
    partials, tickets = (e.outer * e.inner * splits, tiles) if splits > 1 else (0, 0)
    blocks = min(tiles * splits, cores * HOST_BLOCKS_PER_CORE)
    return Step(variant, kernel(variant), blocks, splits, partials, tickets, view or ())


def full_variant(size: int) -> Variant:
    return Variant("direct" if size <= DIRECT_MAX else "partial")


def full_blocks(size: int, vec: int, sms: int) -> int:
    return 1 if size <= DIRECT_MAX else min(sms * PARTIAL_BLOCKS_PER_SM, _ceil(size, BLOCK * vec))


def rows_step(e: Extents, vec: int, sms: int) -> tuple[Variant, int, int]:
    """Rows (inner == 1): a block per row, split over several blocks when rows are few and long;
    a power-of-two group of a warp's lanes per row when rows are short, each lane taking up to
    ``SHORT_ROW_LOADS`` of the row's loads (one load per lane leaves too little in flight)."""
    vector = vec > 1 and e.count % vec == 0
    units = _ceil(e.count, vec if vector else 1)  # loads per row
    cap = sms * GRID_BLOCKS_PER_SM
    if e.count >= ROWS_BLOCK_MIN:
        splits = max(1, min(_ceil(units, BLOCK * LOADS_PER_THREAD), sms * PARTIAL_BLOCKS_PER_SM // e.outer))
        return Variant("rows", BLOCK, vector, splits > 1), min(e.outer * splits, cap), splits
    lanes = min(32, _pow2_at_least(_ceil(units, SHORT_ROW_LOADS)))
    return Variant("rows", lanes, vector), min(_ceil(e.outer, BLOCK // lanes), cap), 1


def columns_step(
    e: Extents, vec: int, acc_bytes: int, sms: int, exact: bool = False, phased: bool = False
) -> tuple[Variant, int, int, int]:
    """Columns (inner > 1): threads across the kept extent read coalesced rows, the block's other
    threads and, when tiles are few, other blocks split the reduced extent. ``exact``: a kept
    extent of fewer units than a warp takes exactly that many threads across (``column_down``
    rows of them), so a warp's threads read whole consecutive rows, one contiguous run.
    ``phased``: a kept extent that is no multiple of a vector may still load vectors, each across
    the rows of a period (no leaf read per reduced index, no index carried). Returns the variant,
    blocks, splits and tiles (those a launch needs tickets for)."""
    wide = vec > 1 and vec * acc_bytes <= COLUMN_BYTES_PER_THREAD
    if wide and phased and e.inner % vec and phase_fits(e, vec):
        return _phased_columns_step(e, vec, sms)
    vector = wide and e.inner % vec == 0
    width = vec if vector else 1
    units = _ceil(e.inner, width)
    needed = _pow2_at_least(units)  # threads that cover the kept extent
    if exact and 0 < units < WARP and units != needed:
        across, down = units, column_down(units)
    else:
        down = BLOCK // min(needed, BLOCK) if needed < COLUMN_LANES_WIDE else COLUMN_DOWN_WIDE
        down = min(down, _pow2_at_most(max(1, e.count // ROWS_PER_COLUMN_THREAD)))
        across = BLOCK // down
    tiles = max(1, e.outer * _ceil(e.inner, across * width))  # an empty output still plans a launch
    splits = column_splits(tiles, down, e.count, sms)
    return Variant("columns", across, vector, splits > 1), min(tiles * splits, sms * GRID_BLOCKS_PER_SM), splits, tiles


def column_splits(tiles: int, down: int, rows: int, sms: int) -> int:
    """Blocks that share each of ``tiles`` column tiles of ``rows`` rows (periods when phased),
    ``down`` rows of threads each: enough to fill the GPU in one wave, unless the last block of a
    tile would then fold more than ``FINAL_FOLDS`` partials per thread (then as few as fill it at
    ``COLUMN_BLOCKS_PER_SM``), and never fewer than ``ROWS_PER_THREAD`` rows per thread."""
    one_wave = max(1, sms * PARTIAL_BLOCKS_PER_SM // tiles)
    wanted = min(one_wave, max(_ceil(sms * COLUMN_BLOCKS_PER_SM, tiles), down * FINAL_FOLDS))
    return max(1, min(wanted, _ceil(rows, down * ROWS_PER_THREAD)))


def period(inner: int, vec: int) -> tuple[int, int]:
    """A phased column's period: the rows of ``inner`` values that make whole vectors of ``vec``,
    and the threads across that take its vectors."""
    shared = math.gcd(inner, vec)
    return vec // shared, inner // shared


def phase_fits(e: Extents, vec: int) -> bool:
    """Whether columns of ``e`` can load ``vec``-value vectors across periods of rows: a period's
    vectors fit a warp (wider, too few rows of threads would share a block's reduced extent),
    the reduced extent holds whole periods for every thread, and every outer index's slab starts
    on a vector."""
    rows, lanes = period(e.inner, vec)
    slabs_aligned = e.outer == 1 or (e.count * e.inner) % vec == 0
    return lanes <= WARP and e.count >= rows * ROWS_PER_THREAD and slabs_aligned


def _phased_columns_step(e: Extents, vec: int, sms: int) -> tuple[Variant, int, int, int]:
    """Phased columns: ``inner / gcd(inner, vec)`` threads across take a period's vectors, one tile
    per outer index; the tickets cover the value-by-value tiles too (unaligned operands)."""
    rows, across = period(e.inner, vec)
    down = column_down(across)
    tiles = max(1, e.outer)
    splits = column_splits(tiles, down, e.count // rows, sms)
    variant = Variant("columns", across, True, splits > 1, period=rows)
    value_tiles = tiles * _ceil(e.inner, across)
    return variant, min(tiles * splits, sms * GRID_BLOCKS_PER_SM), splits, value_tiles


def final_fold_depth(width: int) -> int:
    """Partials (of ``width`` columns each) that a thread of the last block of a split column
    tile loads before it folds any, 4 to 16: its up to ``FINAL_FOLDS`` partials then wait on one
    L2 round trip per that many, as many as 32 registers hold."""
    return max(4, min(16, FINAL_FOLD_REGISTERS // width))


def column_down(lanes: int) -> int:
    """Rows of threads down the reduced extent in a columns block of ``lanes`` threads across: a
    power of two (the block's fold is a tree), the threads past ``lanes * down`` idle."""
    return _pow2_at_most(BLOCK // lanes)


def decide(
    e: Extents,
    vec: int,
    broadcast: bool,
    acc_bytes: int,
    sms: int,
    kernel: Callable[[Variant], Kernel],
    phased: bool = False,
) -> Step:
    """The launch for extents ``e`` on ``sms`` SMs: ``vec`` is the program's vector width (rows and
    columns load vectors only when no leaf broadcasts), ``acc_bytes`` an accumulator's bytes
    (value and index), ``kernel`` makes the chosen variant's kernel, ``phased`` whether columns
    may load vectors across rows (``columns_step``)."""
    if e.gather:
        variant = Variant("gather", 32, reduced=e.gather)
        return Step(variant, kernel(variant), min(_ceil(e.outer, BLOCK // 32), sms * GRID_BLOCKS_PER_SM))
    if e.outer * e.inner == 1:
        variant = full_variant(e.count)
        blocks = full_blocks(e.count, vec, sms)
        partials = blocks if variant.stage == "partial" else 0
        return Step(variant, kernel(variant), blocks, 1, partials, 1 if partials else 0)
    axis_vec = 1 if broadcast else vec
    if e.inner == 1:
        variant, blocks, splits = rows_step(e, axis_vec, sms)
        partials, tickets = (e.outer * splits, e.outer) if variant.split else (0, 0)
        return Step(variant, kernel(variant), blocks, splits, partials, tickets)
    variant, blocks, splits, tiles = columns_step(e, axis_vec, acc_bytes, sms, exact=True, phased=phased)
    partials, tickets = (e.outer * e.inner * splits, tiles) if variant.split else (0, 0)
    return Step(variant, kernel(variant), blocks, splits, partials, tickets)


def slab_values(acc_itemsize: int, double_tile: bool = False) -> int:
    """Values of the accumulator's type one slabs tile stages (its shared array's length)."""
    return SLAB_TILE_BYTES * (2 if double_tile else 1) // acc_itemsize


def slabs_fit(e: Extents, acc_itemsize: int) -> bool:
    """Whether (outer, count, inner) takes the slabs stage: kept axes on both sides of a reduced
    run (``outer`` and ``inner`` both past 1) whose slabs of ``count * inner`` values are short
    enough that ``SLABS_PER_TILE`` of them fit one tile."""
    return e.outer > 1 and e.inner > 1 and e.count * e.inner * SLABS_PER_TILE <= slab_values(acc_itemsize)


def slabs_step(e: Extents, vec: int, acc_itemsize: int, sms: int, kernel: Callable[[Variant], Kernel]) -> Step:
    """Slabs: a tile is as many whole slabs as fit ``slab_values``; a multiple of the slabs that
    make it whole vectors when there are few enough, in a double tile where only that holds them
    (then every tile starts on a vector and reads 16-byte loads), else read value by value.
    ``args``: count, outer, inner, slabs per tile."""
    slab = e.count * e.inner
    whole = vec // math.gcd(slab, vec)  # slabs that make whole vectors
    double = vec > 1 and slab_values(acc_itemsize) // slab < whole <= slab_values(acc_itemsize, True) // slab
    per_tile = slab_values(acc_itemsize, double) // slab
    vector = vec > 1 and per_tile >= whole
    if vector:
        per_tile -= per_tile % whole
    variant = Variant("slabs", BLOCK, vector, double_tile=double)
    blocks = min(_ceil(e.outer, per_tile), sms * GRID_BLOCKS_PER_SM)
    return Step(variant, kernel(variant), blocks, args=(e.count, e.outer, e.inner, per_tile))
