"""A source worker's exports of worker-to-worker moves (see ``kerneldsl.distributed.moves``), by
move id: made on its GPU thread, read and released by the destination through the actor's
``exported`` and ``release``, all on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from ..runtime.ipc import IpcExport


class _Export:
    """One move's export as the source sees it. It is forgotten once the export was made (or
    refused) and no one can still need it: the destination freed it, or the move failed and the
    destination already has its answer."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()  # the destination's answer is set
        self.reply: tuple[Any, ...] | None = None
        self.held: IpcExport | None = None
        self.made = False  # the export ran (or was refused because the move had failed)
        self.failed = False  # the client said the move failed
        self.read = False  # the destination was given the answer


_exports: dict[str, _Export] = {}
_freeing: set[asyncio.Future[None]] = set()


def _entry(tid: str) -> _Export:
    found = _exports.get(tid)
    if found is None:
        found = _exports[tid] = _Export()
    return found


def _free(entry: _Export) -> None:
    """Free the exported copy off the event loop (a destination waits for a reply, not for this)."""
    if entry.held is not None:
        held, entry.held = entry.held, None
        freeing = asyncio.get_running_loop().run_in_executor(None, held.close)
        _freeing.add(freeing)
        freeing.add_done_callback(_freeing.discard)


async def publish(tid: str, reply: tuple[Any, ...], held: IpcExport | None) -> bool:
    """The export of move ``tid`` was made: hand it out, unless the move already failed (False:
    the caller frees ``held``)."""
    entry = _entry(tid)
    entry.made = True
    if entry.failed:
        if entry.read:
            _exports.pop(tid, None)
        return False
    entry.reply, entry.held = reply, held
    entry.ready.set()
    return True


async def exported(tid: str, timeout: float) -> tuple[Any, ...]:
    """The actor's ``exported``: the export of move ``tid``, once it ran (``("ipc", handle, nbytes,
    shape, dtype)``, ``("host", array)`` or ``("error", why)``)."""
    entry = _entry(tid)
    await asyncio.wait_for(entry.ready.wait(), timeout)
    entry.read = True
    if entry.failed and entry.made:
        _exports.pop(tid, None)
    assert entry.reply is not None
    return entry.reply


async def release(tid: str, why: str | None) -> None:
    """The actor's ``release``: free move ``tid``'s export. ``why=None``: the destination is done
    with it; else the client saw the move fail, and a destination still waiting gets ``why`` as
    its error (an export that has not run yet will not be made)."""
    entry = _entry(tid)
    if why is None:
        _exports.pop(tid, None)
        _free(entry)
        return
    entry.failed = True
    if not entry.ready.is_set():
        entry.reply = ("error", why)
        entry.ready.set()
    _free(entry)
    if entry.made and entry.read:
        _exports.pop(tid, None)


def host_identity() -> str:
    """Which processes can open each other's CUDA IPC handles: one kernel (boot id) and one PID
    namespace; the host name makes the answer readable."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # not Linux: no CUDA IPC between processes here
        return f"{socket.gethostname()}/{os.getpid()}"
    return f"{socket.gethostname()}/{boot}/{namespace}"
