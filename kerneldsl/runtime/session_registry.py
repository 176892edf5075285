"""The process's sessions: which are open, which devices a sticky error broke, and what fork
and interpreter exit do to them.

An open session lives here (strongly) until ``close()`` or exit; at exit they are closed
best-effort, bounded and silent. A forked child marks every inherited session forked, so it
never touches the driver through its parent's sessions. The sessions are known here by
``RegisteredSession``, what the registry reads of them.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
from typing import Protocol

from .. import logs
from ..errors import CudaError, DeviceInUseError, SessionCloseError
from .context import reset_primary_context
from .selection import DeviceSpec

__all__ = ["RegisteredSession", "open_sessions", "reset_device"]

log = logs.get("runtime.session")

_EXIT_CLOSE_TIMEOUT_S = 5.0

ids = itertools.count(1)
generation = 0  # bumped in a forked child: handles from before the fork are from generation - 1
_open: dict[int, RegisteredSession] = {}  # strong: an open session lives until close() or exit
_registry_lock = threading.Lock()
_poisoned_devices: set[DeviceSpec] = set()  # devices whose primary context a sticky error corrupted


class RegisteredSession(Protocol):
    """A session as the registry sees it: who it is, on which device, whether it is poisoned or
    forked, how it closes, and what a forked child does to it."""

    @property
    def session_id(self) -> int: ...

    @property
    def device(self) -> DeviceSpec: ...

    @property
    def poisoned(self) -> bool: ...

    @property
    def forked(self) -> bool: ...

    def close(self, timeout: float | None = None) -> None: ...

    def _after_fork(self) -> None: ...


def add(session: RegisteredSession) -> None:
    """``session`` opened."""
    with _registry_lock:
        _open[session.session_id] = session


def mark_poisoned(device: DeviceSpec) -> None:
    """A sticky error corrupted ``device``'s primary context: reset it once its last session closes."""
    with _registry_lock:
        _poisoned_devices.add(device)


def remove(session: RegisteredSession, errors: list[BaseException]) -> None:
    """``session`` closed; the last one on a poisoned device resets its primary context (failures
    into ``errors``), except in a forked child."""
    with _registry_lock:
        _open.pop(session.session_id, None)
        last_after_poison = session.device in _poisoned_devices and not _sessions_on(session.device)
    if last_after_poison and not session.forked:
        _reset(session.device, errors)


def _sessions_on(device: DeviceSpec) -> list[RegisteredSession]:
    """Open sessions of ``device`` (registry lock held)."""
    return [s for s in _open.values() if s.device == device]


def _reset(device: DeviceSpec, errors: list[BaseException]) -> None:
    """Destroy ``device``'s primary context so the next Session retains a fresh one: the way back
    after a sticky error, taken only once no session of this process uses the device."""
    with _registry_lock:
        _poisoned_devices.discard(device)
    if type(device) is not int:  # the CPU device has no context to reset
        return
    try:
        reset_primary_context(device)
        log.info("reset the primary context of device %d after a sticky error", device)
    except CudaError as exc:
        errors.append(exc)


def reset_device(device: int = 0) -> None:
    """Reset ``device``'s primary context after a sticky error so that a new Session works in this
    process. Closes the poisoned sessions on it first; refuses (DeviceInUseError) while a session
    that has seen no error is open there: a healthy session is never reset behind its owner's
    back. Other libraries sharing the primary context (CuPy, PyTorch) lose their state on the
    device too, which the sticky error had already corrupted."""
    with _registry_lock:
        sessions = _sessions_on(device)
    healthy = [s.session_id for s in sessions if not s.poisoned]
    if healthy:
        raise DeviceInUseError(
            f"cannot reset device {device}: session(s) {healthy} are open and healthy; close them first"
        )
    errors: list[BaseException] = []
    for s in sessions:
        try:
            s.close()
        except SessionCloseError as exc:
            errors.extend(exc.errors)
    _reset(device, errors)
    if errors:
        raise SessionCloseError(errors) from errors[0]


def open_sessions() -> list[RegisteredSession]:
    """Sessions of this process that are not closed yet."""
    with _registry_lock:
        return list(_open.values())


def _after_fork_in_child() -> None:
    """Mark every inherited session forked; fresh locks (a parent thread may have held one)."""
    global generation, _registry_lock
    generation += 1
    _registry_lock = threading.Lock()
    for s in _open.values():
        s._after_fork()
    _open.clear()


def _close_all_at_exit() -> None:
    """Best effort at interpreter exit: bounded, silent, never raises."""
    for s in open_sessions():
        try:
            s.close(timeout=_EXIT_CLOSE_TIMEOUT_S)
        except BaseException:
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
