"""Device arrays and pinned host arrays owned by a session.

Copies from pageable numpy memory run on the session stream and wait for it before returning:
that orders them after queued kernels (the session stream does not synchronize with the legacy
default stream, so a plain ``cuMemcpyHtoD`` would race with them) and means the host buffer is
never read after the call returns. Async copies take kerneldsl pinned buffers, kept alive by
the session until a synchronization proves the copy finished.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..dtypes import INT32_MAX
from ..errors import WrongSessionError
from . import interop
from .driver import check
from .handle import Handle, check_same_session
from .interop import c_strides

if TYPE_CHECKING:
    from .session import Session
    from .stream import Stream

Shape = tuple[int, ...]


def _shape(shape: int | tuple[int, ...] | list[int]) -> Shape:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    out = tuple(int(n) for n in dims)
    if any(n < 0 for n in out):
        raise ValueError(f"negative dimension in shape {out}")
    return out


def _dtype(dtype: Any) -> np.dtype[Any]:
    dt: np.dtype[Any] = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype {dt} holds Python objects and cannot live in device memory")
    return dt


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


_L = TypeVar("_L", bound="_Layout")


class _Layout:
    """Shape, dtype and derived sizes shared by device and pinned arrays."""

    __slots__ = ()  # the subclasses declare the slots; these annotations only type them
    shape: Shape
    dtype: np.dtype[Any]
    ndim: int
    size: int
    nbytes: int
    strides: tuple[int, ...]

    def _init_layout(self: _L, shape: Any, dtype: Any) -> int:
        """Fill the layout slots; ``self`` is typed as the subclass, which is what declares them."""
        self.shape = _shape(shape)
        self.dtype = _dtype(dtype)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = c_strides(self.shape, self.dtype.itemsize)
        return self.nbytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]


_dispatch_tags: dict[tuple[Any, ...], int] = {}


def _dispatch_tag(a: DeviceArray) -> int:
    """What selecting a kernel specialization needs of an array, computed once (the layout never
    changes): session, dtype, 16-byte alignment, whether 32-bit indexing can address it. An int
    stands for that tuple, so the dispatch key hashes cheaply on every launch."""
    layout = (a.session.session_id, a.dtype, a.ptr % 16 == 0, a.size > INT32_MAX)
    return _dispatch_tags.setdefault(layout, len(_dispatch_tags))


class DeviceArray(_Layout, Handle):
    """C-contiguous device memory: ``ptr``, ``shape``, ``dtype``, ``strides`` (bytes), ``nbytes``.

    Zero-size arrays have ``ptr == 0`` and never allocate.
    """

    kind = "mem"
    __slots__ = ("ptr", "shape", "dtype", "ndim", "size", "nbytes", "strides", "_owner", "dispatch_tag")

    def __init__(self, session: Session, shape: Any, dtype: Any) -> None:
        """Allocate uninitialized memory; prefer ``session.empty`` and friends."""
        Handle.__init__(self, session)
        nbytes = self._init_layout(shape, dtype)
        self.ptr = 0
        self._owner: Any = None
        if nbytes:
            with session.activated():
                raw = session.allocate(nbytes)
                self._own(raw)
            self.ptr = raw
        self.dispatch_tag = _dispatch_tag(self)

    @classmethod
    def borrow(cls, session: Session, view: interop.DeviceView) -> DeviceArray:
        """A non-owning DeviceArray over foreign C-contiguous memory; never freed by kerneldsl.

        ``view.owner`` lives as long as the result. If the view names a producer stream, work
        later queued on the session stream waits for what the producer queued so far.
        """
        if view.device is not None and view.device != session.device:
            raise WrongSessionError(
                f"memory on device {view.device} cannot be used by a session on device {session.device}"
            )
        if not view.c_contiguous:
            raise ValueError(f"strides {view.strides} of shape {view.shape} are not C-contiguous")
        arr = cls.__new__(cls)
        Handle.__init__(arr, session)
        arr._init_layout(view.shape, view.dtype)
        arr.ptr = view.ptr
        arr._owner = view.owner
        arr.dispatch_tag = _dispatch_tag(arr)
        if view.stream is not None and view.stream != session.stream.handle:
            session._order_streams(session._stream_cu, view.stream)
        return arr

    # -- host transfers (blocking) ---------------------------------------------------------

    def _blocking_copy(self, api: str, call: Any, host: np.ndarray) -> None:
        """Enqueue ``call`` on the session stream, then wait; ``host`` survives an interrupted wait."""
        session = self.session
        with session.activated():
            check(api, call(session.stream._cu))
            session.keep_alive(host, session.stream)
        session.stream.synchronize()

    def copy_from_host(self, arr: np.ndarray) -> None:
        """Overwrite with ``arr`` (same shape and dtype); returns when the copy is done."""
        self._check()
        src = _host_buffer(np.asarray(arr), self.shape, self.dtype, writable=False)
        if self.nbytes:
            d, ptr, n = self.session._d, self.ptr, self.nbytes
            self._blocking_copy("cuMemcpyHtoDAsync", lambda s: d.cuMemcpyHtoDAsync(ptr, src.ctypes.data, n, s), src)

    def copy_to_host(self, out: np.ndarray) -> np.ndarray:
        """Copy into ``out`` (same shape and dtype, C-contiguous) after queued work; returns ``out``."""
        self._check()
        dst = _host_buffer(out, self.shape, self.dtype, writable=True)
        if self.nbytes:
            d, ptr, n = self.session._d, self.ptr, self.nbytes
            self._blocking_copy("cuMemcpyDtoHAsync", lambda s: d.cuMemcpyDtoHAsync(dst.ctypes.data, ptr, n, s), dst)
        return out

    def to_host(self) -> np.ndarray:
        """A new numpy array with the contents, after the work queued on the session stream."""
        return self.copy_to_host(np.empty(self.shape, self.dtype))

    # -- device and pinned transfers (async on a stream) -------------------------------------

    def copy_to(self, other: DeviceArray, stream: Stream | None = None) -> None:
        """Enqueue a device-to-device copy into ``other`` (same shape and dtype)."""
        self._check()
        other._check()
        session = check_same_session(self, other)
        if (other.shape, other.dtype) != (self.shape, self.dtype):
            raise ValueError(f"cannot copy {self.shape} {self.dtype} into {other.shape} {other.dtype}")
        stream = _stream(session, stream)
        if self.nbytes:
            with session.activated():
                check("cuMemcpyDtoDAsync", session._d.cuMemcpyDtoDAsync(other.ptr, self.ptr, self.nbytes, stream._cu))

    def overlaps(self, other: DeviceArray) -> bool:
        """Whether the two byte ranges intersect (an empty range intersects nothing)."""
        if not (self.nbytes and other.nbytes):
            return False
        return self.ptr < other.ptr + other.nbytes and other.ptr < self.ptr + self.nbytes

    def fill_zero(self, stream: Stream | None = None) -> None:
        """Enqueue setting every byte to zero on ``stream`` (default: the session stream)."""
        self._check()
        session = self.session
        stream = _stream(session, stream)
        if self.nbytes:
            with session.activated():
                check("cuMemsetD8Async", session._d.cuMemsetD8Async(self.ptr, 0, self.nbytes, stream._cu))
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
        session = check_same_session(self, pinned)
        if (pinned.shape, pinned.dtype) != (self.shape, self.dtype):
            raise ValueError(f"pinned {pinned.shape} {pinned.dtype} does not match device {self.shape} {self.dtype}")
        stream = _stream(session, stream)
        if not self.nbytes:
            return
        d = session._d
        with session.activated():
            if to_device:
                check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(self.ptr, pinned.ptr, self.nbytes, stream._cu))
            else:
                check("cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync(pinned.ptr, self.ptr, self.nbytes, stream._cu))
            session.keep_alive((pinned, self), stream)

    # -- interchange ---------------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3; ``stream`` is the session stream the data is ordered on."""
        self._check()
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": self.session.stream.handle,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (interop.DL_CUDA, self.device)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A legacy ``dltensor`` capsule; the consumer's ``stream`` is made to wait for ours.

        ``max_version`` is accepted and ignored: an unversioned capsule is always valid.
        """
        self._check()
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export device {self.__dlpack_device__()} memory to {dl_device}")
        source = self.session.copy(self) if copy else self
        if stream != -1:
            source.session._order_streams(1 if stream is None else stream, source.session._stream_cu)
        return interop.to_dlpack(source.ptr, source.shape, source.dtype, source.device, owner=source)

    def device_view(self) -> interop.DeviceView:
        """This array as an interop DeviceView (no driver call)."""
        self._check()
        return interop.DeviceView(self.ptr, self.shape, self.strides, self.dtype, self.device, False, self)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr=0x{self.ptr:x}"
        return f"<DeviceArray {self.shape} {self.dtype} {state} session={self.session.session_id} device={self.device}>"

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """Host conversion is explicit, as in CuPy: a silent device-to-host copy would hide a sync."""
        raise TypeError("a DeviceArray is device memory: call .to_host() for a numpy array")

    # -- operators: kd.ops (the array layer sits above the runtime, so it is imported on first use)

    def __add__(self, other: Any) -> Any:
        return _ops().add(self, other)

    def __radd__(self, other: Any) -> Any:
        return _ops().add(other, self)

    def __iadd__(self, other: Any) -> Any:
        return _ops().add(self, other, out=self)

    def __sub__(self, other: Any) -> Any:
        return _ops().subtract(self, other)

    def __rsub__(self, other: Any) -> Any:
        return _ops().subtract(other, self)

    def __isub__(self, other: Any) -> Any:
        return _ops().subtract(self, other, out=self)

    def __mul__(self, other: Any) -> Any:
        return _ops().multiply(self, other)

    def __rmul__(self, other: Any) -> Any:
        return _ops().multiply(other, self)

    def __imul__(self, other: Any) -> Any:
        return _ops().multiply(self, other, out=self)

    def __truediv__(self, other: Any) -> Any:
        return _ops().divide(self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return _ops().divide(other, self)

    def __itruediv__(self, other: Any) -> Any:
        return _ops().divide(self, other, out=self)

    def __floordiv__(self, other: Any) -> Any:
        return _ops().floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Any:
        return _ops().floor_divide(other, self)

    def __ifloordiv__(self, other: Any) -> Any:
        return _ops().floor_divide(self, other, out=self)

    def __mod__(self, other: Any) -> Any:
        return _ops().remainder(self, other)

    def __rmod__(self, other: Any) -> Any:
        return _ops().remainder(other, self)

    def __imod__(self, other: Any) -> Any:
        return _ops().remainder(self, other, out=self)

    def __pow__(self, other: Any) -> Any:
        return _ops().power(self, other)

    def __rpow__(self, other: Any) -> Any:
        return _ops().power(other, self)

    def __ipow__(self, other: Any) -> Any:
        return _ops().power(self, other, out=self)

    def __matmul__(self, other: Any) -> Any:
        from .. import blas  # the kerneldsl[blas] extra

        return blas.gemm(self, other)

    def __neg__(self) -> Any:
        return _ops().negative(self)

    def __abs__(self) -> Any:
        return _ops().abs(self)

    def __lt__(self, other: Any) -> Any:
        return _ops().less(self, other)

    def __le__(self, other: Any) -> Any:
        return _ops().less_equal(self, other)

    def __gt__(self, other: Any) -> Any:
        return _ops().greater(self, other)

    def __ge__(self, other: Any) -> Any:
        return _ops().greater_equal(self, other)

    def __eq__(self, other: Any) -> Any:  # elementwise, like numpy's
        return _ops().equal(self, other)

    def __ne__(self, other: Any) -> Any:
        return _ops().not_equal(self, other)

    __hash__ = Handle.__hash__  # by identity: sessions keep their arrays in weak sets


def _ops() -> Any:
    """``kerneldsl.ops``, which DeviceArray's operators are."""
    from .. import ops

    return ops


class _HostView:
    """Exposes pinned memory to numpy while keeping its PinnedArray alive (the view's base)."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: PinnedArray) -> None:
        self.owner = owner
        self.__array_interface__ = {
            "shape": owner.shape,
            "typestr": owner.dtype.str,
            "descr": owner.dtype.descr,
            "data": (owner.ptr, False),
            "strides": None,
            "version": 3,
        }


class PinnedArray(_Layout, Handle):
    """Page-locked host memory (cuMemHostAlloc) for async copies; ``.array`` is a numpy view."""

    kind = "host"
    __slots__ = ("ptr", "shape", "dtype", "ndim", "size", "nbytes", "strides")

    def __init__(self, session: Session, shape: Any, dtype: Any) -> None:
        Handle.__init__(self, session)
        nbytes = self._init_layout(shape, dtype)
        self.ptr = 0
        if nbytes:
            with session.activated():
                raw = check("cuMemHostAlloc", session._d.cuMemHostAlloc(nbytes, 0), requested=nbytes)
                self._own(raw)
            self.ptr = int(raw)

    @property
    def array(self) -> np.ndarray:
        """A numpy view of the pinned memory; it keeps this PinnedArray (and the memory) alive."""
        self._check()
        if not self.nbytes:
            return np.empty(self.shape, self.dtype)
        return np.asarray(_HostView(self))

    def __repr__(self) -> str:
        return f"<PinnedArray {self.shape} {self.dtype} session={self.session.session_id}>"


def _stream(session: Session, stream: Stream | None) -> Stream:
    if stream is None:
        return session.stream
    stream._check()
    check_same_session(session.stream, stream)
    return stream


def empty(session: Session, shape: Any, dtype: Any = np.float32) -> DeviceArray:
    """Uninitialized device memory."""
    return DeviceArray(session, shape, dtype)


def zeros(session: Session, shape: Any, dtype: Any = np.float32) -> DeviceArray:
    """Device memory set to zero bytes (enqueued on the session stream)."""
    arr = DeviceArray(session, shape, dtype)
    arr.fill_zero()
    return arr


def to_device(session: Session, host: Any) -> DeviceArray:
    """Copy a host array (any layout; materialized C-contiguous) to new device memory."""
    src = np.asarray(host)
    if not src.flags.c_contiguous:
        src = src.copy(order="C")
    arr = DeviceArray(session, src.shape, src.dtype)
    arr.copy_from_host(src)
    return arr


def copy(session: Session, src: DeviceArray) -> DeviceArray:
    """A new device array with the contents of ``src`` (enqueued on the session stream)."""
    out = DeviceArray(session, src.shape, src.dtype)
    src.copy_to(out)
    return out


def pinned_empty(session: Session, shape: Any, dtype: Any = np.float32) -> PinnedArray:
    """Uninitialized page-locked host memory."""
    return PinnedArray(session, shape, dtype)
