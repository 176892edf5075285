"""Reusable pinned host buffers through which the numpy borrowing path stages its transfers.

A copy from pageable numpy memory makes the driver stage it through pinned memory of its own
and wait for it; a small ``saxpy(y, x, a)`` with numpy arrays then costs several waits, and its
device temporaries an allocation and a free each. Instead the session lends the call one
page-locked buffer and a device buffer of the same size: the inputs are copied into the pinned
one on the host, every upload, the launch and every download are enqueued on the session stream,
and one event wait ends the call; what the call costs the driver is its copies, its launch, an
event record and a query. Buffers are bounded in size (``STAGE_LIMIT``; larger transfers take the
direct copies) and in number (``MAX_BUFFERS``; a call finding all of them lent takes the direct
copies too), kept for reuse, and freed with the session's other pinned memory at ``close()``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .driver import check
from .interop import DeviceView, c_strides
from .memory import DeviceArray, PinnedArray
from .stream import Event, wait_event

if TYPE_CHECKING:
    from .session import Session

STAGE_LIMIT = 4 << 20  # bytes a call may stage: above this the pageable copies are as fast
MAX_BUFFERS = 4  # buffers a session keeps (one per thread staging at once)
MIN_BUFFER = 64 << 10
ALIGN = 256  # each array's region starts on a DMA-friendly boundary


def staged_bytes(arrays: Sequence[np.ndarray]) -> int:
    """The buffer size staging ``arrays`` needs (each region aligned)."""
    return sum(_aligned(a.nbytes) for a in arrays)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class StagingBuffer:
    """A pinned buffer, a device buffer of the same size, and the event that says when the
    transfers through them are done."""

    __slots__ = ("pinned", "device", "event", "_offsets")

    def __init__(self, session: Session, capacity: int) -> None:
        made: list[Any] = []
        try:
            self.pinned = PinnedArray(session, capacity, np.uint8)
            made.append(self.pinned)
            self.device = DeviceArray(session, capacity, np.uint8)
            made.append(self.device)
            self.event = Event(session, timing=False)
        except BaseException:
            for handle in made:
                handle.close()
            raise
        self._offsets: list[int] = []

    @property
    def capacity(self) -> int:
        return self.pinned.nbytes

    def close(self) -> None:
        for handle in (self.pinned, self.device, self.event):
            handle.close()

    def arrays(self, hosts: Sequence[np.ndarray]) -> list[DeviceArray]:
        """A device array per host array (same shape and dtype, C order) over this buffer's
        device memory, in the regions ``upload`` lays out; they need no freeing."""
        session, base = self.device.session, self.device.ptr
        arrays, offset = [], 0
        for h in hosts:
            shape = h.shape
            view = DeviceView(base + offset, shape, c_strides(shape, h.dtype.itemsize), h.dtype, None, False, self)
            arrays.append(DeviceArray.borrow(session, view))
            offset += _aligned(h.nbytes)
        return arrays

    def upload(self, pairs: Sequence[tuple[DeviceArray, np.ndarray | None]]) -> None:
        """One region per pair (the arrays from ``arrays``, in order): copy each host array given
        into its region and enqueue its upload on the session stream. A pair without a host array
        (an output) is not uploaded."""
        session = self.pinned.session
        d, stream, base = session._d, session._stream_cu, self.pinned.ptr
        offsets = self._offsets
        offsets.clear()
        offset = 0
        with session.activated():
            for device, host in pairs:
                offsets.append(offset)
                n = device.nbytes
                if host is not None and n:
                    _host_to_pinned(base + offset, host, n)
                    check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(device.ptr, base + offset, n, stream))
                offset += _aligned(n)

    def download(self, pairs: Sequence[tuple[DeviceArray, np.ndarray | None]]) -> None:
        """Enqueue the download of every pair with a host array, wait (interruptibly) for the
        session stream, then copy the results out of the buffer into the host arrays."""
        session = self.pinned.session
        d, stream, base = session._d, session._stream_cu, self.pinned.ptr
        with session.activated():
            for (device, host), offset in zip(pairs, self._offsets):
                if host is not None and device.nbytes:
                    check("cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync(base + offset, device.ptr, device.nbytes, stream))
            check("cuEventRecord", d.cuEventRecord(self.event._cu, stream))
        wait_event(session, self.event._cu)
        with session._lock:  # a close() in another thread frees the buffer: never read it after that
            if not session.usable:
                session._raise_unusable()
            for (device, host), offset in zip(pairs, self._offsets):
                if host is not None and device.nbytes:
                    ctypes.memmove(host.ctypes.data, base + offset, device.nbytes)


def _host_to_pinned(address: int, host: np.ndarray, nbytes: int) -> None:
    """Copy ``host`` (any layout) into pinned memory at ``address`` in C order."""
    if host.flags.c_contiguous:
        ctypes.memmove(address, host.ctypes.data, nbytes)
        return
    raw = memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")
    np.copyto(np.frombuffer(raw, host.dtype).reshape(host.shape), host)


class StagingPool:
    """The session's staging buffers: lent one call at a time, kept for the next (thread-safe)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._free: list[StagingBuffer] = []
        self._count = 0  # buffers that exist: free or lent

    def acquire(self, nbytes: int) -> StagingBuffer | None:
        """A buffer of at least ``nbytes``, or None: too large, or every buffer already lent."""
        if nbytes > STAGE_LIMIT:
            return None
        stale = None
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.capacity >= nbytes:
                    return self._free.pop(i)
            if self._free:  # every free one is too small: replace the smallest
                stale = self._free.pop(0)
            elif self._count >= MAX_BUFFERS:
                return None
            else:
                self._count += 1
        if stale is not None:
            stale.close()
        try:
            return StagingBuffer(self._session, max(MIN_BUFFER, 1 << (nbytes - 1).bit_length()))
        except BaseException:
            with self._lock:
                self._count -= 1
            raise

    def release(self, buf: StagingBuffer) -> None:
        """Take ``buf`` back once its transfers are done (its event completed)."""
        with self._lock:
            self._free.append(buf)
            self._free.sort(key=lambda b: b.capacity)

    def discard(self, buf: StagingBuffer) -> None:
        """Forget ``buf``, whose transfers may still run (an interrupted wait): it is freed when
        the session has synchronized past them, or at close."""
        with self._lock:
            self._count -= 1
        self._session.keep_alive(buf)
