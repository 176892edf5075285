"""A session's CUDA context (the device's retained primary context) and its activation.

Every public operation runs inside an activation: it takes the session lock, refuses closed,
forked or poisoned sessions, makes the context current and restores the caller's afterwards, so
the thread's CUDA state is never trusted between calls.

The session is known here only by the protocols below (what an activation checks, what a part
that calls the driver needs), so that the parts beneath the session never import it.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import SessionPoisonedError, StickyCudaError
from . import driver
from .driver import check

if TYPE_CHECKING:
    from .device import Device

__all__ = ["Activation", "Context", "DriverSession", "SessionGuard", "reset_primary_context"]


class SessionGuard(Protocol):
    """What an activation checks of its session at each entry and exit: the lock (a forked child
    gets a fresh one), whether the session is usable (and why not), and where a sticky error goes."""

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def usable(self) -> bool: ...

    def raise_unusable(self) -> None: ...

    def poison(self, exc: StickyCudaError) -> None: ...


class DriverSession(Protocol):
    """A session as a part that calls the driver sees it: the bindings and the activation."""

    @property
    def api(self) -> Any: ...

    def activated(self) -> Activation: ...


class Context:
    """``device``'s primary context, retained for one session (``release`` gives it back)."""

    __slots__ = ("api", "device", "handle", "address")

    def __init__(self, api: Any, device: Device) -> None:
        """SessionPoisonedError when a sticky error of this process broke the device for good."""
        self.api = api
        self.device = device
        try:
            self.handle: Any = check("cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain(device.handle))
        except StickyCudaError as exc:
            raise SessionPoisonedError(
                f"device {device.ordinal} cannot be used again in this process after {exc.name}: the driver keeps a "
                "sticky error past the reset of the primary context (seen on the H200 with driver 580): restart the "
                "process"
            ) from exc
        self.address = int(self.handle)

    def make_current(self) -> bool:
        """Make this context current on the calling thread; True when it was pushed over another
        (``pop`` it afterwards). A thread with none is left with ours, as the CUDA runtime, CuPy
        and PyTorch do, so later calls cost one query."""
        d = self.api
        err, current = d.cuCtxGetCurrent()
        if err:
            raise driver.error("cuCtxGetCurrent", err)
        address = int(current) if current is not None else 0
        if address == self.address:
            return False
        if address == 0:
            err = d.cuCtxSetCurrent(self.handle)[0]
            if err:
                raise driver.error("cuCtxSetCurrent", err)
            return False
        err = d.cuCtxPushCurrent(self.handle)[0]
        if err:
            raise driver.error("cuCtxPushCurrent", err)
        return True

    def pop(self) -> None:
        """Restore the context ``make_current`` pushed over."""
        self.api.cuCtxPopCurrent()

    def release(self) -> None:
        """Give the retained primary context back (at close)."""
        check("cuDevicePrimaryCtxRelease", self.api.cuDevicePrimaryCtxRelease(self.device.handle))


def reset_primary_context(ordinal: int) -> None:
    """Destroy device ``ordinal``'s primary context so the next retain makes a fresh one."""
    d = driver.ensure_init()
    check("cuDevicePrimaryCtxReset", d.cuDevicePrimaryCtxReset(driver.device(ordinal)))


class Activation:
    """``with``-able: lock, (check), make the context current; restore and unlock on exit.

    One instance per session and mode is reused by every call; whether this entry pushed is
    kept on a stack only the lock holder touches. ``checked``: refuse a session that cannot work
    and free what finalizers queued first (close and recovery enter unchecked).
    """

    __slots__ = ("_session", "_context", "_deferred", "_drain", "_checked", "_pushed")

    def __init__(
        self,
        session: SessionGuard,
        context: Context,
        deferred: collections.deque[tuple[str, Any]],
        drain: Callable[[], None],
        checked: bool,
    ) -> None:
        """``deferred``, ``drain``: the session's queue of what finalizers dropped, and what frees it."""
        self._session = session
        self._context = context
        self._deferred = deferred
        self._drain = drain
        self._checked = checked
        self._pushed: list[bool] = []

    def __enter__(self) -> None:
        s = self._session
        s.lock.acquire()
        try:
            if self._checked and not s.usable:
                s.raise_unusable()
            self._pushed.append(self._context.make_current())
        except BaseException:
            s.lock.release()
            raise
        if self._checked and self._deferred:
            try:
                self._drain()
            except BaseException:
                self.__exit__(*sys.exc_info())
                raise

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        s = self._session
        try:
            if self._pushed.pop():
                self._context.pop()
        finally:
            s.lock.release()
        if typ is not None and issubclass(typ, StickyCudaError):
            s.poison(exc)
