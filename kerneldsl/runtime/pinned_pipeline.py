"""Large numpy <-> device copies through two pinned chunk buffers, the host's memcpy of one chunk
overlapping the DMA of the other.

A copy of pageable memory makes the driver stage it through small pinned buffers of its own, one
after the other, several times slower than a copy from and into pinned memory (``kerneldsl bench
runtime`` measures both). A transfer of at least
``UPLOAD_MIN_BYTES`` / ``DOWNLOAD_MIN_BYTES`` moves instead in ``CHUNK_BYTES`` pieces through two
page-locked buffers the session keeps (made on first use, freed at close): while the copy engine
moves chunk k from (or into) one buffer, the host copies chunk k+1 into (or chunk k-1 out of) the
other. Smaller transfers copy pageable memory directly (``host_copies``), which is faster there.

One transfer at a time uses the buffers; a second thread meanwhile, a capture, NVTX ranges or an
unusable session take the other paths. A wait the caller interrupts leaves the buffers to the DMA
still reading or writing them: they are handed to the session to free after a synchronization,
and the next transfer makes new ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from . import nvtx
from .driver import check
from .graph import CapturingSession
from .stream import Event, wait_event

if TYPE_CHECKING:
    from .pinned import PinnedArray
    from .vendor import VendorHandles

# From these sizes up transfers are chunked (see the module docstring): the smallest sizes at which
# the pipeline beats a direct pageable copy, each way; ``kerneldsl bench arrays --only transfers``
# measures both at each size, the figures to move them by.
DOWNLOAD_MIN_BYTES = 64 << 20
UPLOAD_MIN_BYTES = 256 << 20
CHUNK_BYTES = 4 << 20  # each buffer's size: a chunk's DMA is long beside the driver's per-copy cost
KEY = "kerneldsl.pinned_pipeline"  # its Session.vendor_handle key

_Vendor = TypeVar("_Vendor")  # a library handle type (see PipelineSession.vendor_handle)


class PipelineSession(CapturingSession, Protocol):
    """A Session as the pipeline sees it: a capturing one's, with the session stream's CUstream,
    its pinned memory and its library handles, where the pipeline keeps its buffers (``Session``
    says what each does)."""

    @property
    def raw_stream(self) -> Any: ...

    @property
    def vendors(self) -> VendorHandles[Any]: ...

    def pinned_empty(self, shape: Any, dtype: Any = ...) -> PinnedArray: ...

    def vendor_handle(self, key: str, create: Callable[[PipelineSession], _Vendor]) -> _Vendor: ...


class PipelinedBuffer(Protocol):
    """A contiguous device array as a pipelined copy reads it: its session, address and state."""

    @property
    def session(self) -> PipelineSession: ...

    @property
    def ptr(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


_Session = TypeVar("_Session", bound=PipelineSession)
_Buffer = TypeVar("_Buffer", bound=PipelinedBuffer)


class PinnedPipeline:
    """Two pinned chunk buffers of a session, their numpy views, and an event each that says
    when the copy engine is done with it."""

    __slots__ = ("session", "buffers", "views", "events", "lock")

    def __init__(self, session: PipelineSession) -> None:
        self.session = session
        self.lock = threading.Lock()
        self.buffers: list[PinnedArray] = []
        self.events: list[Event] = []
        try:
            for _ in range(2):
                self.buffers.append(session.pinned_empty(CHUNK_BYTES, np.uint8))
                self.events.append(Event(session, timing=False))
        except BaseException:
            for handle in (*self.buffers, *self.events):
                handle.close()
            raise
        self.views = [b.array for b in self.buffers]

    def release(self) -> None:
        """At close (see ``Session.vendor_handle``): forget the buffers and events, which are the
        session's handles, freed by its close with the others."""
        self.buffers, self.events, self.views = [], [], []

    abandon = release  # forked child, poisoned context: the session's registry has them too

    def upload(self, ptr: int, host: np.ndarray) -> None:
        """Copy the bytes of ``host`` (flat uint8) to device address ``ptr``; returns when done."""
        session, n = self.session, host.nbytes
        d, stream = session.api, session.raw_stream
        last = 0
        for k, start in enumerate(range(0, n, CHUNK_BYTES)):
            i, size = k % 2, min(CHUNK_BYTES, n - start)
            if k >= 2:
                wait_event(session, self.events[i]._cu)  # the DMA of chunk k - 2 has read buffer i
            np.copyto(self.views[i][:size], host[start : start + size])
            with session.activated():
                check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(ptr + start, self.buffers[i].ptr, size, stream))
                check("cuEventRecord", d.cuEventRecord(self.events[i]._cu, stream))
            last = i
        wait_event(session, self.events[last]._cu)

    def download(self, ptr: int, host: np.ndarray) -> None:
        """Copy ``host.nbytes`` bytes from device address ``ptr`` into ``host`` (flat uint8, writable),
        after the work queued on the session stream; returns when done."""
        session, n = self.session, host.nbytes
        starts = range(0, n, CHUNK_BYTES)
        for k in range(min(2, len(starts))):
            self._enqueue_download(ptr, starts[k], min(CHUNK_BYTES, n - starts[k]), k % 2)
        for k, start in enumerate(starts):
            i, size = k % 2, min(CHUNK_BYTES, n - start)
            wait_event(session, self.events[i]._cu)
            np.copyto(host[start : start + size], self.views[i][:size])
            if k + 2 < len(starts):
                after = starts[k + 2]
                self._enqueue_download(ptr, after, min(CHUNK_BYTES, n - after), i)

    def _enqueue_download(self, ptr: int, start: int, size: int, i: int) -> None:
        session = self.session
        d, stream = session.api, session.raw_stream
        with session.activated():
            check("cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync(self.buffers[i].ptr, ptr + start, size, stream))
            check("cuEventRecord", d.cuEventRecord(self.events[i]._cu, stream))


def _acquire(session: PipelineSession) -> PinnedPipeline | None:
    """The session's pipeline, locked for one transfer; None when another path should copy."""
    if nvtx.ON or session.captures or not session.usable:
        return None
    pipeline = session.vendor_handle(KEY, PinnedPipeline)
    return pipeline if pipeline.lock.acquire(blocking=False) else None


def _run(session: PipelineSession, pipeline: PinnedPipeline, copy: str, ptr: int, host: np.ndarray) -> None:
    """``pipeline.<copy>(ptr, host)``, then unlock it; a failure or an interrupt may leave DMA in
    flight through its buffers: they are kept alive until the session synchronizes, not reused."""
    try:
        getattr(pipeline, copy)(ptr, host)
    except BaseException:
        session.keep_alive(pipeline)
        session.vendors.forget(KEY)
        raise
    finally:
        pipeline.lock.release()


def upload(session: _Session, src: np.ndarray, empty: Callable[[_Session, Any, Any], _Buffer]) -> _Buffer | None:
    """A new array of ``session`` holding C-contiguous ``src``, made by ``empty(session, shape,
    dtype)`` (the runtime's allocation) and copied chunk by chunk; None when another path should
    copy it (nothing was done)."""
    pipeline = _acquire(session)
    if pipeline is None:
        return None
    try:
        arr = empty(session, src.shape, src.dtype)
    except BaseException:
        pipeline.lock.release()
        raise
    try:
        _run(session, pipeline, "upload", arr.ptr, src.reshape(-1).view(np.uint8))
    except BaseException:
        arr.close()  # a stream-ordered free, after the chunks already enqueued
        raise
    return arr


def download(arr: PipelinedBuffer, out: np.ndarray) -> bool:
    """Copy contiguous ``arr`` into ``out`` (writable, C-contiguous, of its size) chunk by chunk;
    False when another path should (nothing was done)."""
    return _copy_existing(arr, out, "download")


def upload_into(arr: PipelinedBuffer, src: np.ndarray) -> bool:
    """Copy C-contiguous ``src`` (of its size) into contiguous ``arr`` chunk by chunk; False when
    another path should (nothing was done)."""
    return _copy_existing(arr, src, "upload")


def _copy_existing(arr: PipelinedBuffer, host: np.ndarray, copy: str) -> bool:
    session = arr.session
    pipeline = _acquire(session)
    if pipeline is None:
        return False
    if arr.closed:
        pipeline.lock.release()
        return False
    _run(session, pipeline, copy, arr.ptr, host.reshape(-1).view(np.uint8))
    return True
