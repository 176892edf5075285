"""How a session closes: wait for its work, then free in order, or leak where freeing is unsafe.

Order: library handles first (they may use buffers and streams), what they dropped, then live
handles kind by kind (``handle.RELEASE_ORDER``), the pool last (the driver orders the frees
before its destruction). A poisoned context, or work that did not finish in time, leaks instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..errors import CudaError, StickyCudaError
from .graph import CapturingSession
from .handle import RELEASE_ORDER

if TYPE_CHECKING:
    from .pool import MemoryPool
    from .vendor import VendorHandles

__all__ = ["ClosingSession", "abandon", "finish_work", "free_all"]


class ClosingSession(CapturingSession, Protocol):
    """A session as its close sees it: a capturing one's (close ends the captures), with its
    library handles and its pool."""

    @property
    def vendors(self) -> VendorHandles[Any]: ...

    @property
    def pool(self) -> MemoryPool: ...


def finish_work(session: ClosingSession, timeout: float | None, errors: list[BaseException]) -> bool:
    """Wait for every stream; False when the memory must leak (timeout or sticky error)."""
    order = session.order
    try:
        if order.wait(None, timeout, checked=False):
            return True
        errors.append(TimeoutError(f"work on session {session.session_id} did not finish within {timeout} s"))
    except StickyCudaError as exc:
        session.poison(exc)
        errors.append(exc)
    except CudaError as exc:
        errors.append(exc)
        return True
    return False


def free_all(session: ClosingSession, errors: list[BaseException]) -> None:
    """Free everything the session owns, collecting failures into ``errors``."""
    owned = session.owned
    with session.activated_unchecked():
        session.captures.clear()
        owned.drain(errors)
        session.vendors.release_all(errors)
        owned.drain(errors)  # what the library handles dropped (their workspaces)
        taken = owned.take_all()
        for kind in RELEASE_ORDER:
            for k, raw in taken:
                if k != kind:
                    continue
                try:
                    owned.release(kind, raw)
                except CudaError as exc:
                    errors.append(exc)
        try:
            session.pool.destroy()
        except CudaError as exc:
            errors.append(exc)


def abandon(session: ClosingSession) -> None:
    """Forget every handle without calling the driver (forked child, poisoned context)."""
    session.vendors.abandon_all()
    session.owned.take_all()
    session.owned.deferred.clear()
