"""Streams, events, and the interruptible wait every synchronization goes through.

Waits poll ``cuEventQuery`` with backoff instead of blocking in the driver, so Ctrl-C raises
KeyboardInterrupt promptly even while a long kernel runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import driver
from .driver import check
from .handle import Handle, check_same_session

if TYPE_CHECKING:
    from .session import Session

CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2

_SPIN_S = 2e-3  # poll without sleeping this long: short waits stay short
_MIN_SLEEP_S = 10e-6
_MAX_SLEEP_S = 100e-6  # bounds the latency of noticing completion (a transfer's 5 ms must not lose 1 ms)


def wait_event(session: Session, raw_event: Any, timeout: float | None = None, *, checked: bool = True) -> bool:
    """Poll ``raw_event`` until it completes; False if ``timeout`` seconds pass first.

    Each query holds the session lock only for the query itself, so other threads keep
    launching while one waits. ``checked=False`` lets ``close()`` wait on a closing session.
    """
    d = session.api
    activation = session.activated() if checked else session.activated_unchecked()
    start = time.perf_counter()
    delay = _MIN_SLEEP_S
    while True:
        with activation:
            err = d.cuEventQuery(raw_event)[0]
            if err and err != driver.ERROR_NOT_READY:
                raise driver.error("cuEventQuery", err)
        if not err:
            return True
        elapsed = time.perf_counter() - start
        if timeout is not None and elapsed >= timeout:
            return False
        if elapsed >= _SPIN_S:
            time.sleep(delay)
            delay = min(delay * 2, _MAX_SLEEP_S)


def record_sync_event(session: Session, stream_cu: Any) -> Any:
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


class Stream(Handle):
    """A non-blocking CUDA stream owned by a session; work on it is ordered, async to the host."""

    kind = "stream"
    __slots__ = ("_cu", "handle")

    def __init__(self, session: Session) -> None:
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


class Event(Handle):
    """A CUDA event: a point in a stream to wait on, query, or time against another event."""

    kind = "event"
    __slots__ = ("_cu", "timing")

    def __init__(self, session: Session, timing: bool = True) -> None:
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
        stream = self.session.stream if stream is None else stream
        stream._check()
        session = check_same_session(self, stream)
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
