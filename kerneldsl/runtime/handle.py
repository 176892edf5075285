"""Ownership bookkeeping shared by every driver object a session owns.

A handle records who owns it (session, fork generation, pid, device) so each entry point can
say precisely why it cannot run. Its finalizer never calls the driver: it queues the raw
handle on the session, which frees it at the next call, sync or close. The finalizer is a plain
weak reference with a callback, registered in the session's ``OwnedHandles`` (one dict entry,
cheap enough for an allocation per array operation); whoever pops the entry first (the callback,
the handle's own close, or the session's close) frees the raw handle, exactly once. The queue of
what finalizers dropped drains at the next activation, sync or close (``OwnedHandles.drain``).

The session is known here by ``SessionCore``, what a handle and this bookkeeping read of it, so
that the handles beneath the session never import it; each kind of handle widens it to what that
kind reads (``StreamSession``, ``BufferSession``, ...), and the array layer's ``DeviceArray``
names the full ``Session`` (``session.session_of`` does for any handle).
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .. import logs
from ..errors import ClosedError, CudaError, StickyCudaError, WrongSessionError
from .context import DriverSession, SessionGuard
from .driver import check

if TYPE_CHECKING:
    from .selection import DeviceSpec

__all__ = ["RELEASE_ORDER", "Handle", "OwnedHandles", "SessionCore", "check_same_session"]

log = logs.get("runtime.session")

# Close releases live handles kind by kind in this order (after draining the deferred queue).
RELEASE_ORDER = ("event", "graph", "mem", "host", "module", "stream")


class MemoryReturn(Protocol):
    """Where a session's device memory goes back (its pool)."""

    def free(self, ptr: Any) -> None: ...


class SessionCore(SessionGuard, DriverSession, Protocol):
    """A session as its handles and their bookkeeping see it: an activation's and a driver
    caller's (lock, usable, why not, where a sticky error goes; bindings, activation), and who it
    is, its state, what it owns, the graphs it is capturing now and its pool."""

    @property
    def device(self) -> DeviceSpec: ...

    @property
    def pid(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def session_id(self) -> int: ...

    @property
    def state(self) -> str: ...

    @property
    def owned(self) -> OwnedHandles: ...

    @property
    def captures(self) -> Sized: ...

    @property
    def pool(self) -> MemoryReturn: ...


class Handle:
    """Base of DeviceArray, PinnedArray, Stream, Event, Module and Graph.

    ``kind`` names the release call the session uses ('mem', 'host', 'event', 'stream',
    'module', 'graph'); it also fixes the order in which ``Session.close`` releases them.
    """

    kind: ClassVar[str]
    __slots__ = ("session", "device", "pid", "generation", "_raw", "_ref", "_closed", "__weakref__")

    def __init__(self, session: SessionCore) -> None:
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


def check_same_session(*handles: Handle) -> SessionCore:
    """The one session that owns all ``handles``; WrongSessionError if they are mixed."""
    session = handles[0].session
    for h in handles[1:]:
        if h.session is not session:
            raise WrongSessionError(
                f"{type(handles[0]).__name__} belongs to session {session.session_id} (device {session.device}) "
                f"but {type(h).__name__} belongs to session {h.session.session_id} (device {h.session.device})"
            )
    return session


def _release_graph(d: Any, raw: tuple[Any, Any]) -> tuple[Any, ...]:
    result: tuple[Any, ...] = d.cuGraphExecDestroy(raw[0])
    return result if result[0] else d.cuGraphDestroy(raw[1])


_RELEASERS: dict[str, tuple[str, Any]] = {
    "host": ("cuMemFreeHost", lambda d, raw: d.cuMemFreeHost(raw)),
    "event": ("cuEventDestroy", lambda d, raw: d.cuEventDestroy(raw)),
    "stream": ("cuStreamDestroy", lambda d, raw: d.cuStreamDestroy(raw)),
    "module": ("cuModuleUnload", lambda d, raw: d.cuModuleUnload(raw)),
    "graph": ("cuGraphExecDestroy", _release_graph),
}  # device memory ("mem") goes back to the session's pool


class OwnedHandles:
    """``session``'s handle registry and deferred-release queue."""

    __slots__ = ("handles", "deferred", "_session")

    def __init__(self, session: SessionCore) -> None:
        # what handles own, by id of their weak reference: (reference, kind, raw)
        self.handles: dict[int, tuple[weakref.ref[Handle], str, Any]] = {}
        self.deferred: collections.deque[tuple[str, Any]] = collections.deque()  # (kind, raw) to free
        self._session = session

    def own(self, handle: Handle, raw: Any) -> weakref.ref[Handle]:
        """Register ``raw`` as what ``handle`` owns; the weak reference whose callback queues it."""
        ref = weakref.ref(handle, self.dropped)
        self.handles[id(ref)] = (ref, handle.kind, raw)
        return ref

    def disown(self, ref: weakref.ref[Handle]) -> bool:
        """Take ``ref``'s entry out; False when someone else took it first (nothing to free)."""
        return self.handles.pop(id(ref), None) is not None

    def dropped(self, ref: weakref.ref[Handle]) -> None:
        """A handle's finalizer (a weak reference callback, any thread): queue what it still owns."""
        owned = self.handles.pop(id(ref), None)
        if owned is not None:
            self.deferred.append((owned[1], owned[2]))

    def defer(self, kind: str, raw: Any) -> None:
        """Free ``raw`` at the next drain (from the session's own work: events, frees during a capture)."""
        self.deferred.append((kind, raw))

    def take_all(self) -> list[tuple[str, Any]]:
        """Close every handle and hand back what they owned, ``(kind, raw)`` (dead ones too)."""
        taken = []
        for key, (ref, kind, raw) in list(self.handles.items()):
            handle = ref()
            if handle is not None:
                raw = handle._take()
            elif self.handles.pop(key, None) is None:
                raw = None
            if raw is not None:
                taken.append((kind, raw))
        return taken

    def release(self, kind: str, raw: Any) -> None:
        """Free one raw handle now (session activated); device memory goes back to the pool."""
        session = self._session
        if kind == "mem":
            session.pool.free(raw)
            return
        api, release = _RELEASERS[kind]
        check(api, release(session.api, raw))

    def drain(self, errors: list[BaseException] | None = None) -> None:
        """Free what finalizers queued (session activated; not during a capture). A sticky error
        poisons the session; other failures are logged, or collected into ``errors`` (close)."""
        session = self._session
        if session.captures:
            return
        queue = self.deferred
        while queue:
            try:
                kind, raw = queue.popleft()
            except IndexError:
                break
            try:
                self.release(kind, raw)
            except StickyCudaError as exc:
                session.poison(exc)
                raise
            except CudaError as exc:
                if errors is None:
                    log.warning("freeing a dropped %s handle failed: %s", kind, exc)
                else:
                    errors.append(exc)
