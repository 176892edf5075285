"""Moving bytes in and out of device memory: the transfers of ``DeviceBuffer``.

Copies from pageable numpy memory run on the session stream and wait for it before returning:
that orders them after queued kernels (the session stream does not synchronize with the legacy
default stream, so a plain ``cuMemcpyHtoD`` would race with them) and means the host buffer is
never read after the call returns. Async copies take kerneldsl pinned buffers, kept alive by
the session until a synchronization proves the copy finished. Contiguous memory moves by the
driver's memcpy and memset; strided views by kernels, which the array layer provides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import StridedArrayError
from . import host_copies, nvtx
from .driver import check
from .handle import Handle, check_same_session
from .host_copies import CopySession
from .stream import check_stream

if TYPE_CHECKING:
    from .pinned import PinnedArray
    from .shapes import Shape
    from .stream import Stream


class TransferSession(CopySession, Protocol):
    """A Session as an array's transfers see it: the warm host copies', with whether it is
    capturing and the factories of the contiguous arrays a strided transfer goes through
    (``Session`` says what each does; ``memory.BufferSession`` widens it to what a buffer reads)."""

    @property
    def capturing(self) -> bool: ...

    def empty(self, shape: Any, dtype: Any = ...) -> Transfers: ...

    def to_device(self, host: Any) -> Transfers: ...


class Transfers(Handle):
    """Host, device and pinned copies and zero fills of one array's elements (a base of
    ``DeviceBuffer``, which declares the slots these annotations type)."""

    __slots__ = ()
    session: TransferSession
    ptr: int
    shape: Shape
    dtype: np.dtype[Any]
    nbytes: int
    strides: tuple[int, ...]
    is_contiguous: bool

    # -- host transfers (blocking) ---------------------------------------------------------

    def _blocking_copy(self, api: str, call: Any, host: np.ndarray) -> None:
        """Enqueue ``call`` on the session stream, then wait; ``host`` survives an interrupted wait."""
        session = self.session
        with nvtx.span(api, host.nbytes), session.activated():
            check(api, call(session.stream._cu))
            session.keep_alive(host, session.stream)
        session.stream.synchronize()

    def copy_from_host(self, arr: np.ndarray) -> None:
        """Overwrite with ``arr`` (same shape and dtype); returns when the copy is done."""
        self._check()
        src = _host_buffer(np.asarray(arr), self.shape, self.dtype, writable=False)
        if not self.is_contiguous:
            staged = self.session.to_device(src)
            try:
                staged.copy_to(self)
            finally:
                staged.close()  # a stream-ordered free: after the copy kernel
            return
        if self.nbytes and not host_copies.upload_into(self, src):
            d, ptr, n = self.session.api, self.ptr, self.nbytes
            self._blocking_copy("cuMemcpyHtoDAsync", lambda s: d.cuMemcpyHtoDAsync(ptr, src.ctypes.data, n, s), src)

    def copy_to_host(self, out: np.ndarray) -> np.ndarray:
        """Copy into ``out`` (same shape and dtype, C-contiguous) after queued work; returns ``out``."""
        self._check()
        dst = _host_buffer(out, self.shape, self.dtype, writable=True)
        if not self.is_contiguous:
            contiguous = self.session.empty(self.shape, self.dtype)
            try:
                self.copy_to(contiguous)
                contiguous.copy_to_host(dst)
            finally:
                contiguous.close()
            return out
        if self.nbytes and not host_copies.download(self, dst):
            d, ptr, n = self.session.api, self.ptr, self.nbytes
            self._blocking_copy("cuMemcpyDtoHAsync", lambda s: d.cuMemcpyDtoHAsync(dst.ctypes.data, ptr, n, s), dst)
        return out

    def to_host(self) -> np.ndarray:
        """A new numpy array with the contents, after the work queued on the session stream: in one
        C call when the session can (``host_copies.download``), else by ``copy_to_host``."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes and self.is_contiguous and host_copies.download(self, out):
            return out
        return self.copy_to_host(out)

    # -- device and pinned transfers (async on a stream) -------------------------------------

    def copy_to(self, other: Transfers, stream: Stream | None = None) -> None:
        """Enqueue a device-to-device copy into ``other`` (same shape and dtype)."""
        self._check()
        other._check()
        check_same_session(self, other)
        session = self.session
        if (other.shape, other.dtype) != (self.shape, self.dtype):
            raise ValueError(f"cannot copy {self.shape} {self.dtype} into {other.shape} {other.dtype}")
        stream = _stream(session, stream)
        if not (self.is_contiguous and other.is_contiguous):
            _on_session_stream(session, stream, "DeviceArray.copy_to")
            self._copy_by_kernel(other)
            return
        if self.nbytes:
            with session.activated():
                check("cuMemcpyDtoDAsync", session.api.cuMemcpyDtoDAsync(other.ptr, self.ptr, self.nbytes, stream._cu))

    def _copy_by_kernel(self, other: Transfers) -> None:
        """Copy into ``other`` where either is strided: a kernel, which the array layer provides."""
        raise StridedArrayError("DeviceArray.copy_to", None, _NEEDS_KERNELS)

    def _fill_by_kernel(self, value: Any) -> None:
        """Set every element of a strided view to ``value``: a kernel, as ``_copy_by_kernel``."""
        raise StridedArrayError("DeviceArray.fill_zero", None, _NEEDS_KERNELS)

    def fill_zero(self, stream: Stream | None = None) -> None:
        """Enqueue setting every byte to zero on ``stream`` (default: the session stream)."""
        self._check()
        session = self.session
        stream = _stream(session, stream)
        if not self.is_contiguous:
            _on_session_stream(session, stream, "DeviceArray.fill_zero")
            self._fill_by_kernel(0)
            return
        if self.nbytes:
            with session.activated():
                check("cuMemsetD8Async", session.api.cuMemsetD8Async(self.ptr, 0, self.nbytes, stream._cu))
                if session.capturing:
                    session.keep_alive(self)

    def copy_from_host_async(self, pinned: PinnedArray, stream: Stream | None = None) -> None:
        """Enqueue a copy from ``pinned``; it stays alive until a sync of ``stream`` or the session."""
        self._pinned_copy(pinned, stream, to_device=True)

    def copy_to_host_async(self, pinned: PinnedArray, stream: Stream | None = None) -> None:
        """Enqueue a copy into ``pinned``; read it only after synchronizing ``stream``."""
        self._pinned_copy(pinned, stream, to_device=False)

    def _pinned_copy(self, pinned: PinnedArray, stream: Stream | None, *, to_device: bool) -> None:
        self._check()
        pinned._check()
        check_same_session(self, pinned)
        session = self.session
        if not self.is_contiguous:
            raise StridedArrayError(
                "DeviceArray.copy_to_host_async" if not to_device else "DeviceArray.copy_from_host_async",
                None,
                f"a strided view of shape {self.shape} (strides {self.strides}) cannot take an async pinned copy: "
                "copy it to a contiguous array first (.copy())",
            )
        if (pinned.shape, pinned.dtype) != (self.shape, self.dtype):
            raise ValueError(f"pinned {pinned.shape} {pinned.dtype} does not match device {self.shape} {self.dtype}")
        stream = _stream(session, stream)
        if not self.nbytes:
            return
        d = session.api
        api = "cuMemcpyHtoDAsync" if to_device else "cuMemcpyDtoHAsync"
        with nvtx.span(api, self.nbytes), session.activated():
            if to_device:
                check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(self.ptr, pinned.ptr, self.nbytes, stream._cu))
            else:
                check("cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync(pinned.ptr, self.ptr, self.nbytes, stream._cu))
            session.keep_alive((pinned, self), stream)


def _host_buffer(arr: Any, shape: Shape, dtype: np.dtype, *, writable: bool) -> np.ndarray:
    """Validate a host array that a copy reads (or writes): same shape and dtype, C-contiguous."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected a numpy.ndarray, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise TypeError(f"dtype mismatch: host {arr.dtype}, device {dtype}")
    if arr.shape != shape:
        raise ValueError(f"shape mismatch: host {arr.shape}, device {shape}")
    if writable and not (arr.flags.c_contiguous and arr.flags.writeable):
        raise ValueError("the host output array must be C-contiguous and writeable")
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _on_session_stream(session: TransferSession, stream: Stream, what: str) -> None:
    """Strided copies and fills run as kernels on the session stream: refuse another stream."""
    if stream is not session.stream:
        raise StridedArrayError(
            what, None, "strided views are copied and filled by kernels on the session stream; omit stream="
        )


def _stream(session: TransferSession, stream: Stream | None) -> Stream:
    if stream is None:
        return session.stream
    check_stream(stream, session)
    return stream


_NEEDS_KERNELS = "strided views are copied and filled by kernels of the array layer: import kerneldsl.array"
