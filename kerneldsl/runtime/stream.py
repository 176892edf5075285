"""Streams, events, the order between a session's streams, and the interruptible wait every
synchronization goes through.

Waits poll ``cuEventQuery`` with backoff instead of blocking in the driver, so Ctrl-C raises
KeyboardInterrupt promptly even while a long kernel runs. Objects a call still needs on the
device (host buffers of async copies, arrays a launch reads) are kept alive until a sync proves
the work queued so far finished; interrupted work keeps them alive until a later sync does.

The session is known here by ``StreamSession``, what streams, events and their order read of it.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, final

from ..errors import InvalidStreamError, WrongSessionError
from . import driver
from .driver import check
from .handle import Handle, SessionCore, check_same_session

if TYPE_CHECKING:
    from .context import Activation

__all__ = [
    "Event",
    "Stream",
    "StreamOrder",
    "StreamSession",
    "check_stream",
    "record_sync_event",
    "wait_event",
]

CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2

_SPIN_S = 2e-3  # poll without sleeping this long: short waits stay short
_MIN_SLEEP_S = 10e-6
_MAX_SLEEP_S = 100e-6  # bounds the latency of noticing completion (a transfer's 5 ms must not lose 1 ms)


class KeepsAlive(Protocol):
    """A graph being captured: it holds what the captured work needs for as long as it lives."""

    def keep_alive(self, obj: Any) -> None: ...


class StreamSession(SessionCore, Protocol):
    """A session as its streams, events and their order see it: a handle's, and its streams'
    order, its own stream, the graphs it is capturing and the activation close uses."""

    @property
    def order(self) -> StreamOrder: ...

    @property
    def stream(self) -> Stream: ...

    @property
    def captures(self) -> Sequence[KeepsAlive]: ...

    def activated_unchecked(self) -> Activation: ...


def event_done(session: StreamSession, raw_event: Any) -> bool:
    """Whether ``raw_event`` completed (one query; a failure other than "not ready" raises).

    Call with the session activated.
    """
    err = session.api.cuEventQuery(raw_event)[0]
    if err and err != driver.ERROR_NOT_READY:
        raise driver.error("cuEventQuery", err)
    return not err


def wait_event(session: StreamSession, raw_event: Any, timeout: float | None = None, *, checked: bool = True) -> bool:
    """Poll ``raw_event`` until it completes; False if ``timeout`` seconds pass first.

    Each query holds the session lock only for the query itself, so other threads keep
    launching while one waits. ``checked=False`` lets ``close()`` wait on a closing session.
    """
    activation = session.activated() if checked else session.activated_unchecked()
    start = time.perf_counter()
    delay = _MIN_SLEEP_S
    while True:
        with activation:
            done = event_done(session, raw_event)
        if done:
            return True
        elapsed = time.perf_counter() - start
        if timeout is not None and elapsed >= timeout:
            return False
        if elapsed >= _SPIN_S:
            time.sleep(delay)
            delay = min(delay * 2, _MAX_SLEEP_S)


def always_complete(session: StreamSession) -> bool:
    """Whether the session's device runs work as it is enqueued (the CPU device): then nothing is
    ever in flight, and waiting for a stream or ordering two needs no event."""
    return bool(getattr(session.api, "streams_always_complete", False))


def record_sync_event(session: StreamSession, stream_cu: Any) -> Any:
    """Create and record a timing-free event on ``stream_cu``; the caller owns it.

    Call with the session activated.
    """
    d = session.api
    raw = check("cuEventCreate", d.cuEventCreate(CU_EVENT_DISABLE_TIMING))
    try:
        check("cuEventRecord", d.cuEventRecord(raw, stream_cu))
    except BaseException:
        d.cuEventDestroy(raw)
        raise
    return raw


@final
class Stream(Handle):
    """A non-blocking CUDA stream owned by a session; work on it is ordered, async to the host.

    Not subclassable: the session reads its streams' members while it frees memory and launches,
    where no code of a caller's may run."""

    kind = "stream"
    __slots__ = ("_cu", "handle")
    session: StreamSession

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise InvalidStreamError(
            f"kd.Stream cannot be subclassed ({cls.__name__}): the session reads its streams' members "
            "while it launches and frees memory, where a subclass's code must not run"
        )

    def __init__(self, session: StreamSession) -> None:
        super().__init__(session)
        with session.activated():
            raw = check("cuStreamCreate", session.api.cuStreamCreate(CU_STREAM_NON_BLOCKING))
            self._own(raw)
        session.order.add(self)
        self._cu = raw
        self.handle = int(raw)

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (cuda.core): version 0 and the CUstream address."""
        self._check()
        return (0, self.handle)

    def synchronize(self, timeout: float | None = None) -> bool:
        """Wait (interruptibly) for all work queued so far; False if ``timeout`` ran out."""
        self._check()
        return self.session.order.wait([self], timeout, session_wide=False)

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` completes (no host block)."""
        self._check()
        event._check()
        session = check_same_session(self, event)
        with session.activated():
            check("cuStreamWaitEvent", session.api.cuStreamWaitEvent(self._cu, event._cu, 0))

    def close(self) -> None:
        """Destroy the stream (queued work still completes); the default stream closes with its session."""
        if self is self.session.stream and not self.closed:
            raise ValueError("the session's default stream is closed by Session.close()")
        super().close()

    def __repr__(self) -> str:
        return f"<Stream 0x{self.handle:x} session={self.session.session_id} device={self.device}>"


def check_stream(stream: object, session: SessionCore | None) -> None:
    """Accept a call's ``stream=`` (not None) that is an open ``kd.Stream`` of ``session`` (of any
    session while the call does not know its own yet); else raise why not: InvalidStreamError,
    ClosedError or WrongSessionError.

    Every call that takes ``stream=`` checks it here on entry, before it converts or packs an
    argument. Only a Stream itself is accepted and nothing else is read: an attribute of a
    subclass or a look-alike could run code (close an array, re-enter the kernel) after the
    parameters were packed. The accepted case is a type identity test and two member reads.
    """
    if type(stream) is Stream and not stream._closed and (session is None or stream.session is session):
        return
    if type(stream) is not Stream:
        raise InvalidStreamError(f"stream= must be a kd.Stream (or None), got {type(stream).__name__}")
    stream._check()  # ClosedError, or why its session runs nothing
    if session is not None:  # an open Stream refused: another session's
        owner = stream.session
        raise WrongSessionError(
            f"stream= belongs to session {owner.session_id} (device {owner.device}), "
            f"the call runs in session {session.session_id} (device {session.device})"
        )


class Event(Handle):
    """A CUDA event: a point in a stream to wait on, query, or time against another event."""

    kind = "event"
    __slots__ = ("_cu", "timing")
    session: StreamSession

    def __init__(self, session: StreamSession, timing: bool = True) -> None:
        super().__init__(session)
        self.timing = timing
        flags = 0 if timing else CU_EVENT_DISABLE_TIMING
        with session.activated():
            raw = check("cuEventCreate", session.api.cuEventCreate(flags))
            self._own(raw)
        self._cu = raw

    def record(self, stream: Stream | None = None) -> Event:
        """Record at the current end of ``stream`` (default: the session stream); returns self."""
        self._check()
        session = self.session
        if stream is None:
            stream = session.stream
        else:
            check_stream(stream, session)
        with session.activated():
            check("cuEventRecord", session.api.cuEventRecord(self._cu, stream._cu))
        return self

    def query(self) -> bool:
        """True when all work before the last record has completed."""
        self._check()
        session = self.session
        with session.activated():
            err = session.api.cuEventQuery(self._cu)[0]
            if err and err != driver.ERROR_NOT_READY:
                raise driver.error("cuEventQuery", err)
        return not err

    def synchronize(self, timeout: float | None = None) -> bool:
        """Wait (interruptibly) for the event; False if ``timeout`` seconds ran out."""
        self._check()
        return wait_event(self.session, self._cu, timeout)

    def elapsed_since(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event; both must be recorded timing events."""
        return Event.elapsed_ms(start, self)

    @staticmethod
    def elapsed_ms(start: Event, end: Event) -> float:
        """Milliseconds between two recorded timing events (resolution about 0.5 us)."""
        start._check()
        end._check()
        session = check_same_session(start, end)
        if not (start.timing and end.timing):
            raise ValueError("elapsed time needs events created with timing=True")
        with session.activated():
            return float(check("cuEventElapsedTime", session.api.cuEventElapsedTime(start._cu, end._cu)))

    def __repr__(self) -> str:
        return f"<Event session={self.session.session_id} device={self.device} timing={self.timing}>"


class StreamOrder:
    """``session``'s streams and keep-alives."""

    __slots__ = ("streams", "inflight", "_seq", "_session")

    def __init__(self, session: StreamSession) -> None:
        self.streams: weakref.WeakSet[Stream] = weakref.WeakSet()
        # (sequence number, the stream whose sync also releases it or None, the object)
        self.inflight: list[tuple[int, Stream | None, Any]] = []
        self._seq = itertools.count()
        self._session = session

    def add(self, stream: Stream) -> None:
        """A new stream of the session: frees from now on wait for it too."""
        self.streams.add(stream)

    def live(self) -> list[Stream]:
        """The session's streams not closed yet."""
        return [h for h in list(self.streams) if not h._closed]

    def keep_alive(self, obj: Any, stream: Stream | None = None) -> None:
        """See ``Session.keep_alive``."""
        session = self._session
        with session.lock:
            self.inflight.append((next(self._seq), stream, obj))
            for g in session.captures:
                g.keep_alive(obj)

    def wait(
        self, streams: list[Stream] | None, timeout: float | None, *, session_wide: bool = True, checked: bool = True
    ) -> bool:
        """Wait for the work queued so far on ``streams`` (None: every live one, then); then drop
        the keep-alives it covered (all of them if ``session_wide``, else those tagged with the one
        stream). ``checked=False`` lets close wait on a closing session."""
        session = self._session
        activation = session.activated() if checked else session.activated_unchecked()
        if always_complete(session):
            with activation:
                seq = next(self._seq)
            self._release_inflight(seq, None if session_wide or not streams else streams[0])
            return True
        with activation:
            if streams is None:
                streams = self.live()
            seq = next(self._seq)
            events = [record_sync_event(session, stream._cu) for stream in streams]
            try:
                # Work done already (often on a GPU): the events are destroyed here, so the next
                # launch finds no deferred destroys to drain and stays on the C path.
                if all(event_done(session, ev) for ev in events):
                    for ev in events:
                        session.api.cuEventDestroy(ev)
                    events.clear()
            except BaseException:
                session.owned.deferred.extend(("event", ev) for ev in events)
                raise
        if events:
            try:
                if not all(wait_event(session, ev, timeout, checked=checked) for ev in events):
                    return False
            finally:
                session.owned.deferred.extend(("event", ev) for ev in events)
        self._release_inflight(seq, None if session_wide else streams[0])
        return True

    def _release_inflight(self, seq: int, only: Stream | None) -> None:
        with self._session.lock:
            self.inflight = [e for e in self.inflight if e[0] >= seq or (only is not None and e[1] is not only)]

    def order(self, waiter: Any, producer: Any) -> None:
        """Make stream ``waiter`` wait for the work queued so far on ``producer`` (raw handles;
        either may be foreign: 1 is the legacy default stream, 2 the per-thread one)."""
        with self._session.activated():
            self.wait_for(waiter, producer)

    def wait_for(self, waiter: Any, producer: Any) -> None:
        """``order`` with the session already activated."""
        session = self._session
        if always_complete(session):
            return
        ev = record_sync_event(session, producer)
        try:
            check("cuStreamWaitEvent", session.api.cuStreamWaitEvent(waiter, ev, 0))
        finally:
            session.owned.defer("event", ev)
