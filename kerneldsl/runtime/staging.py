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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import memory
from .driver import check
from .interop import DeviceView, c_strides
from .memory import DeviceBuffer
from .pinned import PinnedArray
from .stream import Event, wait_event

if TYPE_CHECKING:
    from .memory import BufferSession

STAGE_LIMIT = 4 << 20  # bytes a call may stage: above this the pageable copies are as fast
MAX_BUFFERS = 4  # buffers a session keeps (one per thread staging at once)
MIN_BUFFER = 64 << 10
ALIGN = 256  # each array's region starts on a DMA-friendly boundary


def staged_bytes(arrays: Sequence[np.ndarray]) -> int:
    """The buffer size staging ``arrays`` needs (each region aligned)."""
    return sum(_aligned(a.nbytes) for a in arrays)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# One array's place in a buffer: device memory, and pinned host memory (a view and its address).
Region = tuple[DeviceBuffer, np.ndarray, int]
MAX_LAYOUTS = 8  # argument layouts whose regions a buffer keeps


class StagingBuffer:
    """A pinned buffer, a device buffer of the same size, and the event that says when the
    transfers through them are done. The regions one argument layout needs (a DeviceArray over
    the device buffer and a numpy view of the pinned one per array) are made once and kept."""

    __slots__ = ("pinned", "device", "event", "_regions")

    def __init__(self, session: BufferSession, capacity: int) -> None:
        made: list[Any] = []
        try:
            self.pinned = PinnedArray(session, capacity, np.uint8)
            made.append(self.pinned)
            self.device = DeviceBuffer(session, capacity, np.uint8)
            made.append(self.device)
            self.event = Event(session, timing=False)
        except BaseException:
            for handle in made:
                handle.close()
            raise
        self._regions: dict[tuple[Any, ...], list[Region]] = {}

    @property
    def capacity(self) -> int:
        return self.pinned.nbytes

    def close(self) -> None:
        self._regions.clear()
        for handle in (self.pinned, self.device, self.event):
            handle.close()

    def regions(self, hosts: Sequence[np.ndarray]) -> list[Region]:
        """Per host array, a region of this buffer (same shape and dtype, C order): the device
        array the kernel gets (it needs no freeing) and the pinned view the host data goes through."""
        key = tuple((h.shape, h.dtype) for h in hosts)
        found = self._regions.get(key)
        if found is None:
            if len(self._regions) >= MAX_LAYOUTS:
                self._regions.clear()
            found = self._regions[key] = self._make_regions(hosts)
        return found

    def _make_regions(self, hosts: Sequence[np.ndarray]) -> list[Region]:
        session, base = self.device.session, self.device.ptr
        pinned = np.ctypeslib.as_array((ctypes.c_uint8 * self.capacity).from_address(self.pinned.ptr))
        regions, offset = [], 0
        for h in hosts:
            shape, n = h.shape, h.nbytes
            view = DeviceView(base + offset, shape, c_strides(shape, h.dtype.itemsize), h.dtype, None, False, self)
            host_view = pinned[offset : offset + n].view(h.dtype).reshape(shape)
            regions.append((memory.array_type.borrow(session, view), host_view, self.pinned.ptr + offset))
            offset += _aligned(n)
        return regions

    def run(
        self,
        uploads: Sequence[tuple[Region, np.ndarray]],
        launch: Callable[[], None],
        downloads: Sequence[tuple[Region, np.ndarray]],
    ) -> None:
        """Copy each upload's host array into its pinned region, then enqueue on the session stream,
        under one activation, the uploads, ``launch()`` and the downloads; wait (interruptibly) for
        them, then copy the downloaded regions into their host arrays."""
        session = self.device.session
        d, stream = session.api, session.raw_stream
        with session.activated():
            for (device, pinned, address), host in uploads:
                if device.nbytes:
                    np.copyto(pinned, host)
                    check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(device.ptr, address, device.nbytes, stream))
            launch()
            for (device, _, address), _ in downloads:
                if device.nbytes:
                    check("cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync(address, device.ptr, device.nbytes, stream))
            check("cuEventRecord", d.cuEventRecord(self.event._cu, stream))
        wait_event(session, self.event._cu)
        with session.lock:  # a close() in another thread frees the buffer: never read it after that
            if not session.usable:
                session.raise_unusable()
            for (_, pinned, _), host in downloads:
                np.copyto(host, pinned)


class StagingPool:
    """The session's staging buffers: lent one call at a time, kept for the next (thread-safe)."""

    def __init__(self, session: BufferSession) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._free: list[StagingBuffer] = []
        self._count = 0  # buffers that exist: free or lent
        self._asked = False  # a session's first host call copies directly: a one-off call (a
        # script's only one) should not pay for pinning a buffer it never reuses

    def acquire(self, nbytes: int) -> StagingBuffer | None:
        """Lend a buffer of at least ``nbytes`` to stage one call's host transfers through, or
        None when the call should copy directly: too large, every buffer already lent, a graph
        being captured, or the session's first staged call. Give it back with ``give_back``."""
        if nbytes > STAGE_LIMIT or self._session.captures:
            return None
        stale = None
        with self._lock:
            if not self._asked:
                self._asked = True
                return None
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

    def give_back(self, buf: StagingBuffer, done: bool) -> None:
        """Take back a lent buffer; ``done``: its transfers finished (else it is kept alive, not reused)."""
        if done:
            self.release(buf)
        else:
            self.discard(buf)

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
