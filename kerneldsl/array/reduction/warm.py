"""The warm path of a reduction: one dict lookup, then a prebuilt launch.

A device call ``r(x, ..., axis=..., keepdims=..., out=...)`` whose plan ran once leaves a
``WarmLaunch`` under the key of what it was called with: each operand's dispatch tag (session,
dtype, alignment, index width, kind), shape and strides, the axis and keepdims exactly as given
(ints and tuples of ints, a bool), ``out=``'s tag, shape and strides, and the thread (whose
scratch it holds). The next such call allocates its result from the pool and calls the bound
kernel's adapter with the scratch, counts and grid decided once: no plan-cache key, placement,
strategy or scratch lookup, no dispatch. Anything the entry cannot vouch for (a closed scratch
buffer, a graph capture, a launch needing a 64-bit index, an ``out=`` that overlaps an operand,
which the full path reads from a copy) goes back to the full path, which raises what it raises
for the call: both paths accept and refuse the same calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from threading import get_ident
from typing import Any

import numpy as np

from ...launch.bound import BoundLaunch, WideIndexNeeded
from ...runtime import memory
from ..kernels import BoundedCache
from ..scratch import SCRATCH
from ..warm_front import GridFront

Key = tuple[Any, ...]
_UINT64 = np.dtype(np.uint64)


def _exact_axis(axis: Any) -> bool:
    """Axes spelled so that equal keys mean equal calls (``True == 1`` and ``1.0 == 1`` do not)."""
    if axis is None or type(axis) is int:
        return True
    return type(axis) is tuple and all(type(a) is int for a in axis)


def warm_key(operands: tuple[Any, ...], axis: Any, out: Any, keepdims: Any) -> Key | None:
    """The warm-path key of a call on device ``operands``, or None when only the full path takes
    it (``keepdims``: a scan's ``exclusive``). One and two operands (a sum, a dot product) are
    spelled out: no loop, no list on their warm path."""
    if type(keepdims) is not bool or not _exact_axis(axis):
        return None
    if out is None:
        target: Any = None
    elif type(out) is memory.array_type:
        target = (out.dispatch_tag, out.shape, out.strides)
    else:
        return None
    array = memory.array_type
    if len(operands) == 1:
        (a,) = operands
        if type(a) is not array:
            return None
        return (a.dispatch_tag, a.shape, a.strides, axis, keepdims, target, get_ident())
    if len(operands) == 2:
        a, b = operands
        if type(a) is not array or type(b) is not array:
            return None
        ident = get_ident()
        return (a.dispatch_tag, a.shape, a.strides, b.dispatch_tag, b.shape, b.strides, axis, keepdims, target, ident)
    layouts: list[Any] = []
    for o in operands:
        if type(o) is not array:
            return None
        layouts += (o.dispatch_tag, o.shape, o.strides)
    return (*layouts, axis, keepdims, target, get_ident())


def overlaps_out(operands: Sequence[Any], out: Any, in_place: bool) -> bool:
    """Whether a device operand shares bytes with ``out``, so that a kernel writing ``out``
    would overwrite what it still reads; ``in_place``: an operand that is exactly ``out`` (the
    same elements) is safe, because the kernel reads each element before it writes it, in the
    thread that writes it (scans, as elementwise ops). The test is the byte extents, whatever
    made the arrays: views, or one foreign buffer adopted twice."""
    for operand in operands:
        if type(operand) is memory.array_type and operand.overlaps(out):
            if not (in_place and operand.same_elements(out)):
                return True
    return False


class WarmLaunch:
    """One call shape's launch, bound once: the kernel's adapter at its grid (``front``, from C
    after its first call), the arguments ``before`` and ``after`` the output, the ``scratch``
    buffers among them, and the result's shape and dtype (when the call allocates it).
    ``epochs``: the scratch roles of a look-back scan, whose last argument is then the launch's
    epoch, taken per call (when the epochs start over, those roles' buffers are dropped and the
    full path makes zeroed ones). ``in_place``: an operand that is exactly ``out=`` is read in
    place (``overlaps_out``); any other overlap sends the call to the full path."""

    __slots__ = (
        "session",
        "before",
        "after",
        "scratch",
        "shape",
        "dtype",
        "allocator",
        "template",
        "epochs",
        "in_place",
        "front",
    )

    def __init__(
        self,
        bound: BoundLaunch,
        before: tuple[Any, ...],
        after: tuple[Any, ...],
        scratch: tuple[Any, ...],
        grid: tuple[int, int, int],
        shape: tuple[int, ...],
        dtype: np.dtype,
        epochs: tuple[str, ...] = (),
        in_place: bool = False,
    ) -> None:
        self.session = bound.session
        self.before = before
        self.after = after
        self.scratch = scratch
        self.shape = shape
        self.dtype = dtype
        self.allocator = self.session.native_allocator()  # allocates in C from the pool, like the template
        self.template = self.session.template(shape, dtype)
        self.epochs = epochs
        self.in_place = in_place
        self.front = GridFront(bound, grid)

    def __call__(self, operands: tuple[Any, ...], out: Any) -> Any:
        """The call's result, or None: the full path takes this call. ``operands`` are the
        kernel's leading arguments as they are (the plan remembers only calls whose leaves are
        the call's operands in order)."""
        session = self.session
        if not session.usable or session.capturing:
            return None
        if out is not None and overlaps_out(operands, out, self.in_place):
            return None
        for buffer in self.scratch:  # a loop, not any(...): no generator on the warm path
            if buffer.closed:
                return None
        after = self.after
        if self.epochs:
            epoch, wrapped = SCRATCH.next_epoch(session)
            if wrapped:
                for role in self.epochs:
                    SCRATCH.discard(session, role, _UINT64)
                return None
            after = (*after[:-1], epoch)
        if out is None:
            allocator = self.allocator
            out = None if allocator is None else allocator.make(self.template)
            if out is None:
                out = memory.array_type(session, self.shape, self.dtype)
        try:
            self.front(*operands, *self.before, out, *after)
        except WideIndexNeeded:
            return None
        return out


class WarmLaunches(BoundedCache):
    """A reduction's warm entries by ``warm_key``."""


class WarmSlot:
    """Where a plan's ``remember`` leaves the entry for the call that made it."""

    __slots__ = ("launches", "key")

    def __init__(self, launches: WarmLaunches, key: Key) -> None:
        self.launches = launches
        self.key = key

    def store(self, launch: WarmLaunch) -> None:
        self.launches.put(self.key, launch)
