"""The launch of a reduction in canonical form (``canonical.Canonical``) that the plain rows /
columns / full stages do not take: kept and reduced axes interleaved, or a strided view. Pure
decisions, like ``strategy``: the stage, its variant, its grid and the integer arguments (group
extents and strides) the kernel reads, in the order ``group_names`` gives.

- ``segments``: the group with the smallest stride is reduced. Each output's values are
  segments (one per index of the other reduced groups) of that group's run; threads read along
  the run, a block (or, for short outputs, ``lanes`` threads of a warp) folds an output, and
  when outputs are few the segments and the run are split over blocks (the last block to
  finish folds the partials in index order: the (3, 5, 1000003) over (0, 2) class).
- ``lines``: the group with the smallest stride is kept. Consecutive threads take consecutive
  outputs along it and walk the reduced groups, as ``columns`` does, split over blocks down the
  reduced extent when tiles are few; when that group is shorter than a warp (``flat``), along
  all the kept groups together (the (181, 13, 31, 3) over (1, 2) class, plain layouts included
  whose slabs are too long for the slabs stage and whose reduced extent is too short for the
  columns stage's rows of threads).
"""

from __future__ import annotations

from collections.abc import Callable

from ...launch.dispatch import Kernel
from ..kernels import BLOCK
from .canonical import Canonical, Group
from .strategy import (
    GRID_BLOCKS_PER_SM,
    LOADS_PER_THREAD,
    PARTIAL_BLOCKS_PER_SM,
    ROWS_BLOCK_MIN,
    Extents,
    Step,
    Variant,
    columns_step,
)

INT32_MAX = 2**31 - 1
FLAT_BELOW = 32  # a fastest kept group shorter than a warp: lines number all the kept outputs together
_LANES = (256, 128, 64, 32, 16, 8, 4, 2)  # threads along a segment's run in a block, widest first


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _logical_strides(groups: tuple[Group, ...]) -> tuple[int, ...]:
    """C-order strides of an index over ``groups`` (an output's or a reduced value's index)."""
    out, step = [], 1
    for g in reversed(groups):
        out.append(step)
        step *= g.extent
    return tuple(reversed(out))


def group_names(variant: Variant) -> list[str]:
    """The kernel's integer parameters after ``kdsplits`` for a segments or lines variant."""
    kept, reduced = variant.groups
    if variant.stage == "segments":
        names = ["kdrsplits", "kdfs", "kdfl"]
        names += [f"kdq{x}{j}" for j in range(reduced) for x in "esl"]
        return names + [f"kdk{x}{j}" for j in range(kept) for x in "es"]
    names = ["kdfs", "kdfo"]
    names += [f"kdk{x}{j}" for j in range(kept) for x in "eso"]
    return names + [f"kdr{x}{j}" for j in range(reduced) for x in "es"]


def _efficiency(length: int, lanes: int) -> float:
    return length / (_ceil(length, lanes) * lanes)


def _segment_lanes(run: int, segments: int) -> int:
    """Threads along the run in a block folding ``segments`` segments of ``run`` values (the
    block's others take further segments): the fewest idle threads, the widest on a tie."""
    return max(_LANES, key=lambda lanes: _efficiency(run, lanes) * _efficiency(segments, BLOCK // lanes))


def _vectors(c: Canonical, vec: int, indexed: bool) -> bool:
    """Whether segments can load ``vec`` values at a time: a unit-stride run of whole vectors whose
    every segment starts on a vector (an indexed reducer only with one reduced group, whose value
    index is then the run's)."""
    f = c.groups[c.fastest]
    starts = all(g.stride % vec == 0 for j, g in enumerate(c.groups) if j != c.fastest)
    return vec > 1 and f.stride == 1 and f.extent % vec == 0 and starts and (not indexed or len(c.reduced) == 1)


def segments_step(
    c: Canonical, vec: int, indexed: bool, sms: int, kernel: Callable[[Variant], Kernel], view: bool = False
) -> Step:
    f = c.groups[c.fastest]
    positions = [j for j, g in enumerate(c.groups) if g.reduced]
    logical = dict(zip(positions, _logical_strides(c.reduced)))
    others = [(c.groups[j], logical[j]) for j in positions if j != c.fastest]
    kept = c.kept
    vector = _vectors(c, vec, indexed)
    run, count, outputs = f.extent, c.count, c.outputs
    segments = count // run
    units = run // vec if vector else run  # loads per segment
    wide = c.span > INT32_MAX
    groups = (len(kept), len(others))
    cap = sms * GRID_BLOCKS_PER_SM
    if count < ROWS_BLOCK_MIN:
        lanes = min(32, _pow2_at_least(units))
        variant = Variant("segments", lanes, vector, groups=groups, wide=wide, team="warp", view=view)
        blocks, splits, rsplits = min(_ceil(outputs, BLOCK // lanes), cap), 1, 1
    else:
        wanted = max(1, min(_ceil(count, BLOCK * LOADS_PER_THREAD), sms * PARTIAL_BLOCKS_PER_SM // outputs))
        qsplits = min(segments, wanted)
        qsplits = _ceil(segments, _ceil(segments, qsplits))
        rsplits = max(1, min(_ceil(units, BLOCK), wanted // qsplits))
        rsplits = _ceil(units, _ceil(units, rsplits))
        splits = qsplits * rsplits
        lanes = _segment_lanes(_ceil(units, rsplits), _ceil(segments, qsplits))
        variant = Variant("segments", lanes, vector, splits > 1, groups=groups, wide=wide, view=view)
        blocks = min(outputs * splits, cap)
    args: list[int] = [rsplits, f.stride, logical[c.fastest]]
    for g, step in others:
        args += [g.extent, g.stride, step]
    for g in kept:
        args += [g.extent, g.stride]
    partials, tickets = (outputs * splits, outputs) if variant.split else (0, 0)
    head = (count, outputs, run, splits)
    return Step(variant, kernel(variant), blocks, splits, partials, tickets, (*head, *args))


def lines_step(c: Canonical, acc_bytes: int, sms: int, kernel: Callable[[Variant], Kernel], view: bool = False) -> Step:
    f = c.groups[c.fastest]
    positions = [j for j, g in enumerate(c.groups) if not g.reduced]
    out_strides = dict(zip(positions, _logical_strides(c.kept)))
    others = [(c.groups[j], out_strides[j]) for j in positions if j != c.fastest]
    reduced = c.reduced
    outer = c.outputs // f.extent
    flat = f.extent < FLAT_BELOW and outer > 1  # threads across the fastest group alone would idle
    e = Extents(1, c.count, c.outputs) if flat else Extents(outer, c.count, f.extent)
    columns, blocks, splits, tiles = columns_step(e, 1, acc_bytes, sms)
    variant = Variant(
        "lines",
        columns.lanes,
        split=columns.split,
        groups=(len(others), len(reduced)),
        wide=c.span > INT32_MAX,
        flat=flat,
        view=view,
    )
    args: list[int] = [f.stride, out_strides[c.fastest]]
    for g, step in others:
        args += [g.extent, g.stride, step]
    for g in reduced:
        args += [g.extent, g.stride]
    partials, tickets = (c.outputs * splits, tiles) if variant.split else (0, 0)
    head = (c.count, outer, f.extent, splits)
    return Step(variant, kernel(variant), blocks, splits, partials, tickets, (*head, *args))


def strided_step(
    c: Canonical,
    vec: int,
    acc_bytes: int,
    indexed: bool,
    sms: int,
    kernel: Callable[[Variant], Kernel],
    view: bool = False,
) -> Step:
    """The launch for canonical groups ``c`` (not ``plain``) on ``sms`` SMs: ``vec`` is the
    program's vector width, ``acc_bytes`` an accumulator's bytes, ``indexed`` whether values carry
    their index (argmax, argmin), ``view`` whether the operands are a strided view read in place
    (``Variant.view``)."""
    if c.groups[c.fastest].reduced:
        return segments_step(c, vec, indexed, sms, kernel, view)
    return lines_step(c, acc_bytes, sms, kernel, view)
