"""CUDA IPC between processes of one host: a device copy that another process opens.

Stream-ordered pool allocations cannot be exported with ``cuIpcGetMemHandle``, so an export
copies the array into a legacy ``cuMemAlloc`` allocation (one device copy on the exporting side,
ordered after the work queued on its session stream) and waits for that copy before handing out
the 64-byte handle: once a handle exists its bytes are complete, and the importer needs no
cross-process event. The importer maps the handle (``CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS``: a GPU
other than its own is reached as a peer), copies into its own array on its session stream, waits
for the copy, and unmaps. The exporter frees its allocation only when told the importer is done.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING

from .driver import check

if TYPE_CHECKING:
    from .memory import DeviceBuffer
    from .session import Session

HANDLE_BYTES = 64  # sizeof(CUipcMemHandle)
_LAZY_ENABLE_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS


class IpcExport:
    """A C-contiguous device copy of ``source`` that other processes of this host can open by
    ``handle`` (``None`` for an empty array). ``close()`` frees it; call it only once every
    importer has unmapped it."""

    def __init__(self, session: Session, source: DeviceBuffer) -> None:
        if not source.is_contiguous:
            raise ValueError("an IPC export copies a C-contiguous array (copy a view first)")
        self.session = session
        self.nbytes = int(source.nbytes)
        self.handle: bytes | None = None
        self._ptr = 0
        self._lock = threading.Lock()
        if not self.nbytes:
            return
        d = session.api
        with session.activated():
            self._ptr = int(check("cuMemAlloc", d.cuMemAlloc(self.nbytes), requested=self.nbytes))
        try:
            with session.activated():
                check("cuMemcpyDtoDAsync", d.cuMemcpyDtoDAsync(self._ptr, source.ptr, self.nbytes, session.raw_stream))
                raw = check("cuIpcGetMemHandle", d.cuIpcGetMemHandle(self._ptr))
            session.stream.synchronize()
        except BaseException:
            self.close()
            raise
        self.handle = ctypes.string_at(raw.getPtr(), HANDLE_BYTES)

    def close(self) -> None:
        """Free the exported copy (idempotent)."""
        with self._lock:
            ptr, self._ptr = self._ptr, 0
        if ptr and self.session.usable:
            with self.session.activated():
                check("cuMemFree", self.session.api.cuMemFree(ptr))


def copy_from_export(session: Session, target: DeviceBuffer, handle: bytes, nbytes: int) -> None:
    """Copy an export of another process (``handle``, ``nbytes``) into ``target`` (C-contiguous,
    of this session), after the work queued on the session stream; returns when the copy is done
    and the mapping is gone."""
    if not target.is_contiguous or target.nbytes != nbytes:
        raise ValueError(f"an IPC import needs a C-contiguous target of {nbytes} bytes")
    if not nbytes:
        return
    d = session.api
    raw = d.CUipcMemHandle()
    ctypes.memmove(raw.getPtr(), handle, HANDLE_BYTES)
    with session.activated():
        ptr = check("cuIpcOpenMemHandle", d.cuIpcOpenMemHandle(raw, _LAZY_ENABLE_PEER_ACCESS))
    try:
        with session.activated():
            check("cuMemcpyDtoDAsync", d.cuMemcpyDtoDAsync(target.ptr, ptr, nbytes, session.raw_stream))
        session.stream.synchronize()
    finally:
        with session.activated():
            check("cuIpcCloseMemHandle", d.cuIpcCloseMemHandle(ptr))
