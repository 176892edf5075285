"""The warm path of a fused pipeline through reductions: one dict lookup, then a prebuilt launch.

A device call of a ``@kd.fuse`` function whose rows plan ran once leaves a ``FusedWarm`` under
the key of what it was called with: every argument's dispatch tag (session, dtype, alignment,
index width, kind), shape and strides, ``out=``'s, and the thread. The next such call allocates
its outputs from the pool and launches the bound kernel at the grid decided once, from C after
its first call: no plan-cache key, placement, strategy lookup or dispatch. What the entry cannot
vouch for (an unusable session, a graph capture, a launch needing a 64-bit index) goes back to
the full path, which raises what it raises for the call: both paths accept and refuse the same
calls.
"""

from __future__ import annotations

from threading import get_ident
from typing import Any

import numpy as np

from ..launch.bound import BoundLaunch, WideIndexNeeded
from ..runtime import memory
from .kernels import BoundedCache
from .warm_front import GridFront

Key = tuple[Any, ...]


def fused_key(args: tuple[Any, ...], out: Any) -> Key | None:
    """The warm key of a call whose arguments are all device arrays (None: only the full path
    takes it: numpy or remote arguments, scalars, a foreign ``out``)."""
    key: list[Any] = []
    for a in args:
        if type(a) is not memory.array_type:
            return None
        key.append((a.dispatch_tag, a.shape, a.strides))
    if out is None:
        key.append(None)
    elif type(out) is memory.array_type:
        key.append((out.dispatch_tag, out.shape, out.strides))
    else:
        return None
    key.append(get_ident())
    return tuple(key)


class FusedWarm:
    """One call shape's launch, bound once: the kernel's adapter at its grid, the pipeline's
    constants (its leaves after the arguments), the extents passed after the outputs, and each
    output's shape and dtype (for calls that allocate them)."""

    __slots__ = ("session", "front", "constants", "after", "outputs", "allocator", "single")

    def __init__(
        self,
        bound: BoundLaunch,
        grid: tuple[int, int, int],
        constants: tuple[Any, ...],
        after: tuple[int, ...],
        outputs: tuple[tuple[tuple[int, ...], np.dtype], ...],
        single: bool,
    ) -> None:
        self.session = bound.session
        self.front = GridFront(bound, grid)
        self.constants = constants
        self.after = after
        self.outputs = tuple((shape, dtype, self.session.template(shape, dtype)) for shape, dtype in outputs)
        self.allocator = self.session.native_allocator()  # allocates in C from the pool
        self.single = single

    def __call__(self, args: tuple[Any, ...], out: Any) -> Any:
        """The call's result, or None: the full path takes this call."""
        session = self.session
        if not session.usable or session.capturing:
            return None
        outs = (out,) if out is not None else tuple([self._allocate(*output) for output in self.outputs])
        try:
            self.front(*args, *self.constants, *outs, *self.after)
        except WideIndexNeeded:
            return None
        return outs[0] if self.single else outs

    def _allocate(self, shape: tuple[int, ...], dtype: np.dtype, template: Any) -> Any:
        allocator = self.allocator
        made = None if allocator is None else allocator.make(template)
        return memory.array_type(self.session, shape, dtype) if made is None else made


class FusedWarmLaunches(BoundedCache):
    """A fused function's warm entries by ``fused_key``."""


class FusedSlot:
    """Where a rows plan's ``remember`` leaves the entry for the call that made it."""

    __slots__ = ("launches", "key")

    def __init__(self, launches: FusedWarmLaunches, key: Key) -> None:
        self.launches = launches
        self.key = key

    def store(self, launch: FusedWarm) -> None:
        self.launches.put(self.key, launch)
