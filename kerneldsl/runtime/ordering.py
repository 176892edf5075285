"""A session's streams: the order between them, and what must live until their work is done.

Objects a call still needs on the device (host buffers of async copies, arrays a launch reads)
are kept alive until a sync proves the work queued so far finished; interrupted work keeps them
alive until a later sync does.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

from .driver import check
from .stream import record_sync_event, wait_event

if TYPE_CHECKING:
    from .session import Session
    from .stream import Stream

__all__ = ["StreamOrder"]


class StreamOrder:
    """``session``'s streams and keep-alives."""

    __slots__ = ("streams", "inflight", "_seq", "_session")

    def __init__(self, session: Session) -> None:
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
        self, streams: list[Stream], timeout: float | None, *, session_wide: bool = True, checked: bool = True
    ) -> bool:
        """Wait for the work queued so far on ``streams``; then drop the keep-alives it covered
        (all of them if ``session_wide``, else those tagged with the one stream). ``checked=False``
        lets close wait on a closing session."""
        session = self._session
        with session.activated() if checked else session.activated_unchecked():
            seq = next(self._seq)
            events = [record_sync_event(session, stream._cu) for stream in streams]
        try:
            done = all(wait_event(session, ev, timeout, checked=checked) for ev in events)
        finally:
            session.owned.deferred.extend(("event", ev) for ev in events)
        if done:
            self._release_inflight(seq, None if session_wide else streams[0])
        return done

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
        ev = record_sync_event(session, producer)
        try:
            check("cuStreamWaitEvent", session.api.cuStreamWaitEvent(waiter, ev, 0))
        finally:
            session.owned.defer("event", ev)
