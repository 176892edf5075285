"""The front of a warm entry whose kernel launches at a grid decided once (a reduction's, a fused
pipeline's): through the adapter the first time, then from C, where the grid is a constant of
the C entry, as a kernel's calls are."""

from __future__ import annotations

from typing import Any

from ..launch import fastpath
from ..launch.bound import BoundLaunch
from ..runtime import nvtx


class GridFront(fastpath.FastPathCallable):
    """Calls ``bound`` at ``grid``; after its first call the C path takes the calls like it."""

    __slots__ = ("bound", "grid", "slot")

    def __init__(self, bound: BoundLaunch, grid: tuple[int, int, int]) -> None:
        super().__init__()
        self.bound = bound
        self.grid = grid
        self.slot = fastpath.CLaunchSlot()

    def _call(self, *args: Any) -> None:
        bound, grid = self.bound, self.grid
        bound.call(*args, grid, None, None, None)
        if not nvtx.ON:
            fastpath.remember(self, self.slot, lambda: fastpath.kernel_launch(bound, args, grid=grid))
