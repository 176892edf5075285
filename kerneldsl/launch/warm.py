"""The warm path: one mechanism for every callable of the package.

A call the full path (dispatch, a plan) has run once leaves an entry that takes the next call
like it without repeating what was decided: a call of that specialization costs a lookup and a
launch. Kernels, elementwise ops, reductions, scans, fused functions and gemm share this module:

- ``call_key``: the key of a call on device arrays (each operand's dispatch tag, shape and
  strides, the call's exact axis and flag, ``out=``'s, the thread), or None when only the full
  path takes it;
- ``Entry``: what a plan returns for the call it ran (``Plan.warm_entry``), kept by the
  callable's ``WarmPath``: a ``GridLaunch`` (a prebuilt launch tried after one lookup by key)
  or a ``CEntry`` (a C launch, which the callable's front tries before any Python runs);
- ``WarmPath``: one callable's bounded table of entries by key (``BoundedCache``), and its front;
- ``remember``: a ``CEntry`` kept by a front that runs no plan (a ``Kernel``, a tuned kernel,
  ``kd.blas.gemm``), made from the call that just launched.

Words: a *front* is a callable whose calls try the C launches remembered on it first, then its
Python ``_call`` (``fastpath.FastPathCallable``: ``Kernel``, an elementwise op, ``kd.blas.gemm``,
``fastpath.GridFront``); a ``CEntry`` is where one C launch is made once and kept. (A *slot* is
one 8-byte kernel parameter, ``LaunchContract.slots``, as the C module's ``SLOT_KINDS`` number them.)

Every entry takes only calls the full path would accept, and declines (returns None, or raises
``Declined`` from its launch) what it cannot vouch for: both paths raise the same errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from threading import get_ident
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import logs
from ..runtime import memory
from ..runtime.stream import Stream

if TYPE_CHECKING:
    from ..runtime.session import Session

log = logs.get("launch.warm")

Key = tuple[Any, ...]
MAX_ENTRIES = 4096  # every bounded table (warm entries, kernels, plans) starts over past this many entries
STREAM_ENTRIES = 8  # streams per CEntry with a C launch of their own (as many as a front remembers)


class BoundedCache:
    """A dict that starts over when it grows past ``MAX_ENTRIES`` (keys built from user shapes
    and dtypes must not grow without bound); ``get_or_make`` makes each value once."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        return self._entries.get(key)

    def put(self, key: Hashable, value: Any) -> Any:
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = value
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        found = self._entries.get(key)
        if found is None:
            with self._lock:
                found = self._entries.get(key)
                if found is None:
                    found = self.put(key, make())
        return found

    def values(self) -> list[Any]:
        return list(self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# --- the key --------------------------------------------------------------------------------------


def exact_axis(axis: Any) -> bool:
    """Axes spelled so that equal keys mean equal calls (``True == 1`` and ``1.0 == 1`` do not)."""
    if axis is None or type(axis) is int:
        return True
    return type(axis) is tuple and all(type(a) is int for a in axis)


def call_key(operands: tuple[Any, ...], out: Any, axis: Any = None, flag: Any = None) -> Key | None:
    """The warm key of a call whose operands are all device arrays: each one's dispatch tag
    (session, dtype, alignment, index width, kind), shape and strides, then the call's ``axis``
    and ``flag`` (keepdims, a scan's exclusive; each of one exact type: the caller checks them,
    ``exact_axis``), ``out=``'s tag, shape and strides, and the thread (whose scratch and
    parameter buffers an entry holds). None when only the full path takes the call: numpy,
    remote or foreign operands, scalars, a foreign ``out=``. One and two operands (a sum, a dot
    product) are spelled out: no loop, no list on their warm path."""
    array = memory.array_type
    if out is None:
        target: Any = None
    elif type(out) is array:
        target = (out.dispatch_tag, out.shape, out.strides)
    else:
        return None
    if len(operands) == 1:
        (a,) = operands
        if type(a) is not array:
            return None
        return (a.dispatch_tag, a.shape, a.strides, axis, flag, target, get_ident())
    if len(operands) == 2:
        a, b = operands
        if type(a) is not array or type(b) is not array:
            return None
        ident = get_ident()
        return (a.dispatch_tag, a.shape, a.strides, b.dispatch_tag, b.shape, b.strides, axis, flag, target, ident)
    layouts: list[Any] = []
    for o in operands:
        if type(o) is not array:
            return None
        layouts += (o.dispatch_tag, o.shape, o.strides)
    return (*layouts, axis, flag, target, get_ident())


# --- entries ----------------------------------------------------------------------------------------


class Front(Protocol):
    """A callable whose calls try the C launches remembered on it first (``fastpath.FastPathCallable``)."""

    def _remember_launch(self, launch: Any) -> None: ...


class Entry(Protocol):
    """What a plan returns for the call it ran: ``keep_in`` files it where the callable's later
    calls like that one find it (under ``key`` in the table, or on the front)."""

    def keep_in(self, warm: WarmPath, key: Key | None) -> None: ...


class WarmPath(BoundedCache):
    """One callable's warm path: its Python entries by ``call_key`` (bounded), and its ``front``,
    where C launches are remembered (None: a callable the C path does not call)."""

    def __init__(self, front: Front | None = None) -> None:
        super().__init__()
        self.front = front

    def run(self, key: Key, operands: tuple[Any, ...], out: Any) -> Any:
        """The result of the call ``key`` names through its entry, or None: the full path takes it."""
        entry = self._entries.get(key)
        return None if entry is None else entry(operands, out)


class Declined(Exception):
    """Raised by a launch an entry made, before anything is launched, for a call it cannot take
    (a 32-bit-index build asked for a wider launch): the full path takes the call."""


class CEntry:
    """Where one C launch (a ``_fastlaunch`` Launch or GemmLaunch) is made once and kept:
    ``launch`` is None until a call made it, False once it turned out the C path cannot take it.
    Calls with ``stream=`` get a CEntry per stream, in ``on_stream``. As an ``Entry``, it
    remembers its launch on the callable's front."""

    __slots__ = ("launch", "_streams")

    def __init__(self) -> None:
        self.launch: Any = None
        self._streams: dict[Stream, CEntry] = {}

    def on_stream(self, stream: Stream | None) -> CEntry:
        """The CEntry for calls with ``stream=stream`` (``None``: this one). At most
        ``STREAM_ENTRIES`` streams are kept, closed ones dropped first, then the oldest."""
        if stream is None:
            return self
        entry = self._streams.get(stream)
        if entry is None:
            if len(self._streams) >= STREAM_ENTRIES:
                closed = [s for s in self._streams if s.closed]
                for s in closed or list(self._streams)[:1]:
                    del self._streams[s]
            entry = self._streams[stream] = CEntry()
        return entry

    def fill(self, make: Callable[[], Any]) -> CEntry:
        """Make the launch with ``make()`` unless made (a falsy result is kept as False: the C
        path cannot take it).

        The call has already launched by now, so a failure to make the launch must not fail it
        (a retry would launch twice): it is logged and the calls stay on the Python path.
        """
        if self.launch is None:
            try:
                self.launch = make() or False
            except Exception:
                log.debug("no C launch entry; calls stay on the Python path", exc_info=True)
                self.launch = False
        return self

    def keep_in(self, warm: WarmPath, key: Key | None) -> None:
        if self.launch and warm.front is not None:
            warm.front._remember_launch(self.launch)

    def clear(self) -> None:
        """Forget every launch (what they were made for is gone)."""
        self.launch = None
        self._streams.clear()


def remember(front: Front, entry: CEntry, make: Callable[[], Any]) -> None:
    """Have ``front`` try ``entry``'s C launch first from now on, made by ``make()`` on the first call."""
    launch = entry.fill(make).launch
    if launch:
        front._remember_launch(launch)


def stream_entry_ok(stream: Any, session: Any) -> bool:
    """Whether a call's ``stream=`` can have a C entry: None, or an open Stream of ``session``
    (the C path reads its ``_closed`` where it reads a DeviceArray's: the member is Handle's)."""
    return stream is None or (type(stream) is Stream and stream.session is session and not stream.closed)


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


class GridLaunch:
    """One call shape's launch, bound once (a reduction's, a scan's, a fused pipeline's): the
    kernel's ``front`` at the grid its plan decided (``fastpath.GridFront``, from C after its first
    call), the arguments ``before`` and ``after`` the outputs, the ``scratch`` buffers among them,
    and each output's shape and dtype (for calls that allocate them; ``single``: one output,
    returned as it is). ``epoch``: for a look-back scan, the launch's epoch taken per call (its
    last argument; None: the epochs start over and the full path makes zeroed scratch).
    ``in_place``: how an ``out=`` overlapping an operand is met (``overlaps_out``): False sends
    every such call to the full path (which reads copies), True reads an operand that is exactly
    ``out=`` in place and sends other overlaps there, None checks nothing (the plan's full path
    does not either)."""

    __slots__ = (
        "session",
        "front",
        "before",
        "after",
        "scratch",
        "outputs",
        "single",
        "allocator",
        "epoch",
        "in_place",
    )

    def __init__(
        self,
        front: Callable[..., Any],
        session: Session,
        before: tuple[Any, ...],
        after: tuple[Any, ...],
        outputs: tuple[tuple[tuple[int, ...], np.dtype], ...],
        *,
        single: bool = True,
        scratch: tuple[Any, ...] = (),
        epoch: Callable[[Any], int | None] | None = None,
        in_place: bool | None = False,
    ) -> None:
        self.session = session
        self.front = front
        self.before = before
        self.after = after
        self.scratch = scratch
        self.outputs = tuple((shape, dtype, session.template(shape, dtype)) for shape, dtype in outputs)
        self.single = single
        self.allocator = session.native_allocator()  # allocates in C from the pool, like the templates
        self.epoch = epoch
        self.in_place = in_place

    def __call__(self, operands: tuple[Any, ...], out: Any) -> Any:
        """The call's result, or None: the full path takes this call. ``operands`` are the
        kernel's leading arguments as they are (a plan returns an entry only for calls whose
        leaves are the call's operands in order)."""
        session = self.session
        if not session.usable or session.capturing:
            return None
        in_place = self.in_place
        if out is not None and in_place is not None and overlaps_out(operands, out, in_place):
            return None
        for buffer in self.scratch:  # a loop, not any(...): no generator on the warm path
            if buffer.closed:
                return None
        after = self.after
        if self.epoch is not None:
            epoch = self.epoch(session)
            if epoch is None:
                return None
            after = (*after[:-1], epoch)
        if self.single:
            if out is None:
                shape, dtype, template = self.outputs[0]
                allocator = self.allocator
                out = None if allocator is None else allocator.make(template)
                if out is None:
                    out = memory.array_type(session, shape, dtype)
            try:
                self.front(*operands, *self.before, out, *after)
            except Declined:
                return None
            return out
        outs = (out,) if out is not None else tuple([self._allocate(*output) for output in self.outputs])
        try:
            self.front(*operands, *self.before, *outs, *after)
        except Declined:
            return None
        return outs

    def _allocate(self, shape: tuple[int, ...], dtype: np.dtype, template: Any) -> Any:
        allocator = self.allocator
        made = None if allocator is None else allocator.make(template)
        return memory.array_type(self.session, shape, dtype) if made is None else made

    def keep_in(self, warm: WarmPath, key: Key | None) -> None:
        if key is not None:
            warm.put(key, self)
