"""What a session's handles own, and the queue of what their finalizers dropped.

A handle registers its raw driver object here (``own``); whoever takes the entry first (the
handle's finalizer, its own close, or the session's close) frees the raw object, exactly once.
A finalizer never calls the driver: it queues the raw object (``dropped``), and the queue drains
at the next activation, sync or close (``drain``).
"""

from __future__ import annotations

import collections
import weakref
from typing import TYPE_CHECKING, Any

from .. import logs
from ..errors import CudaError, StickyCudaError
from .driver import check

if TYPE_CHECKING:
    from .handle import Handle
    from .session import Session

__all__ = ["RELEASE_ORDER", "OwnedHandles"]

log = logs.get("runtime.session")

# Close releases live handles kind by kind in this order (after draining the deferred queue).
RELEASE_ORDER = ("event", "graph", "mem", "host", "module", "stream")


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

    def __init__(self, session: Session) -> None:
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
