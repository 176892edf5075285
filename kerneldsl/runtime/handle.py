"""Ownership bookkeeping shared by every driver object a session owns.

A handle records who owns it (session, fork generation, pid, device) so each entry point can
say precisely why it cannot run. Its finalizer never calls the driver: it queues the raw
handle on the session, which frees it at the next call, sync or close. The finalizer is a plain
weak reference with a callback, registered in the session's ``owned`` handles (one dict entry, cheap
enough for an allocation per array operation); whoever pops the entry first (the callback, the
handle's own close, or the session's close) frees the raw handle, exactly once.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ClosedError, WrongSessionError

if TYPE_CHECKING:
    from .session import Session


class Handle:
    """Base of DeviceArray, PinnedArray, Stream, Event, Module and Graph.

    ``kind`` names the release call the session uses ('mem', 'host', 'event', 'stream',
    'module', 'graph'); it also fixes the order in which ``Session.close`` releases them.
    """

    kind: ClassVar[str]
    __slots__ = ("session", "device", "pid", "generation", "_raw", "_ref", "_closed", "__weakref__")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.device = session.device
        self.pid = session.pid
        self.generation = session.generation
        self._raw: Any = None
        self._ref: weakref.ref[Handle] | None = None
        self._closed = False

    def _own(self, raw: Any) -> None:
        """Take ownership of ``raw``: from now on it is freed by close() or via the deferred queue."""
        self._raw = raw
        session = self.session
        self._ref = session.owned.own(self, raw)

    def _take(self) -> Any:
        """Mark closed and hand back the raw handle to free (``None`` when nothing is owned)."""
        self._closed = True
        ref, self._ref = self._ref, None
        if ref is None or not self.session.owned.disown(ref):
            return None
        return self._raw

    def _check(self) -> None:
        """Raise the specific reason this handle cannot be used now (closed, forked, poisoned)."""
        session = self.session
        if not session.usable:
            session.raise_unusable()
        if self._closed:
            raise ClosedError(f"{type(self).__name__} was closed (session {session.session_id}, device {self.device})")

    @property
    def closed(self) -> bool:
        """True once this handle or its session was closed."""
        return self._closed or self.session.state == "closed"

    def close(self) -> None:
        """Release the driver object now; a no-op when it or its session is already closed."""
        session = self.session
        if self._closed or session.state == "closed":
            return
        with session.activated():
            raw = self._take()
            if raw is not None:
                session.owned.release(self.kind, raw)


def check_same_session(*handles: Handle) -> Session:
    """The one session that owns all ``handles``; WrongSessionError if they are mixed."""
    session = handles[0].session
    for h in handles[1:]:
        if h.session is not session:
            raise WrongSessionError(
                f"{type(handles[0]).__name__} belongs to session {session.session_id} (device {session.device}) "
                f"but {type(h).__name__} belongs to session {h.session.session_id} (device {h.session.device})"
            )
    return session
