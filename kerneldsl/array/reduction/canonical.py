"""A reduction's layout in canonical form: the value's axes as a sequence of kept and reduced
*groups* over element strides, whatever the axis set and the memory layout (C order, ``x.T``,
``x[::2]``, ``x[..., 1:-1]``). Axes of extent 1 are neither kept nor reduced and vanish; adjacent
axes of one class whose strides make them one run (``stride[j] == stride[j+1] * extent[j+1]``)
merge. The groups keep the logical order, so the output index (C order over the kept groups) and
an indexed reducer's index (C order over the reduced ones) are NumPy's. Which group has the
smallest stride decides the strategy: reduced (``segments``, threads along that group's run) or
kept (``lines``, consecutive threads on consecutive outputs)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """Axes that one index walks: ``extent`` values ``stride`` elements apart."""

    extent: int
    stride: int
    reduced: bool


@dataclass(frozen=True)
class Canonical:
    """The groups of one (shape, strides, axes), in logical order."""

    groups: tuple[Group, ...]

    @property
    def kept(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if not g.reduced)

    @property
    def reduced(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.reduced)

    @property
    def outputs(self) -> int:
        return math.prod(g.extent for g in self.kept)

    @property
    def count(self) -> int:
        return math.prod(g.extent for g in self.reduced)

    @property
    def fastest(self) -> int:
        """The position of the group with the smallest stride (the last such, logically)."""
        smallest = min(g.stride for g in self.groups)
        return max(j for j, g in enumerate(self.groups) if g.stride == smallest)

    @property
    def span(self) -> int:
        """One past the largest element offset the groups reach."""
        return 1 + sum((g.extent - 1) * g.stride for g in self.groups)

    @property
    def plain(self) -> bool:
        """Whether this is the C-contiguous outer x count x inner problem (at most one reduced
        run, unit stride innermost, no gaps), which the rows/columns/full stages take as is."""
        expected = 1
        for g in reversed(self.groups):
            if g.stride != expected:
                return False
            expected *= g.extent
        return len(self.reduced) <= 1


def canonicalize(shape: tuple[int, ...], strides: tuple[int, ...], axes: tuple[int, ...]) -> Canonical | None:
    """The canonical groups of reducing ``axes`` of a value of ``shape`` whose elements are
    ``strides`` elements apart; None when some stride is negative (a reversed view, which the
    caller copies). ``shape`` has no zero extent."""
    groups: list[Group] = []
    for j, (extent, stride) in enumerate(zip(shape, strides)):
        if extent == 1:
            continue
        if stride < 0:
            return None
        reduced = j in axes
        if groups and groups[-1].reduced == reduced and groups[-1].stride == stride * extent:
            groups[-1] = Group(groups[-1].extent * extent, stride, reduced)
        else:
            groups.append(Group(extent, stride, reduced))
    if not groups:
        groups.append(Group(1, 1, True))
    return Canonical(tuple(groups))


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))
