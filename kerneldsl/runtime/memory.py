"""Device arrays and pinned host arrays owned by a session.

Copies from pageable numpy memory run on the session stream and wait for it before returning:
that orders them after queued kernels (the session stream does not synchronize with the legacy
default stream, so a plain ``cuMemcpyHtoD`` would race with them) and means the host buffer is
never read after the call returns. Async copies take kerneldsl pinned buffers, kept alive by
the session until a synchronization proves the copy finished.
"""

from __future__ import annotations

import math
import operator
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..dtypes import INT32_MAX
from ..errors import StridedArrayError, WrongSessionError
from . import interop, views
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

_LayoutSlots = tuple[Shape, np.dtype, int, int, int, tuple[int, ...]]
_layouts: dict[Any, _LayoutSlots] = {}  # by (type of shape, shape, dtype) as the caller gave them
MAX_LAYOUTS = 4096


def _layout(shape: Any, dtype: Any) -> _LayoutSlots:
    """Shape, dtype, ndim, size, nbytes and strides of a new C-contiguous array, validated once
    per spelling: allocating a result costs a dict lookup, not the checks."""
    key: tuple[Any, ...] | None = (type(shape), shape, dtype)
    try:
        return _layouts[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable spelling (a list): validated every time
        key = None
    dims, dt = _shape(shape), _dtype(dtype)
    size = math.prod(dims)
    layout = (dims, dt, len(dims), size, size * dt.itemsize, c_strides(dims, dt.itemsize))
    if key is not None:
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        _layouts[key] = layout
    return layout


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
        self.shape, self.dtype, self.ndim, self.size, nbytes, self.strides = _layout(shape, dtype)
        self.nbytes = nbytes
        return nbytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]


_dispatch_tags: dict[tuple[Any, ...], int] = {}


def _dispatch_tag(a: DeviceArray, borrowed: bool = False) -> int:
    """What selecting a kernel specialization needs of an array, computed once (the layout never
    changes): session, dtype, 16-byte alignment, whether 32-bit indexing can address it, and
    whether it is an owning array, borrowed foreign memory, a contiguous view or a strided view
    (views and borrowed arrays may partially overlap other arrays: two adoptions of one buffer are
    two arrays; strided ones need strided indexing). An int stands for that tuple, so the
    dispatch key hashes cheaply on every launch."""
    kind = ("borrowed" if borrowed else "array") if a.base is None else ("view" if a.is_contiguous else "strided")
    layout = (a.session.session_id, a.dtype, a.ptr % 16 == 0, a.size > INT32_MAX, kind)
    return _dispatch_tags.setdefault(layout, len(_dispatch_tags))


class DeviceArray(_Layout, Handle):
    """Device memory: ``ptr`` (of the first element), ``shape``, ``dtype``, ``strides`` (bytes,
    possibly negative), ``nbytes``.

    An array made by ``session.empty`` and friends owns C-contiguous memory (``base`` None);
    indexing, ``reshape``, ``transpose`` and the like return views that share it: ``base`` is
    the owning array, kept alive by the view. Closing a view closes only that handle; closing
    the owner frees the memory and closes every view of it. Zero-size owners have ``ptr == 0``
    and never allocate.
    """

    kind = "mem"
    __slots__ = (
        "ptr",
        "shape",
        "dtype",
        "ndim",
        "size",
        "nbytes",
        "strides",
        "_owner",
        "dispatch_tag",
        "base",
        "is_contiguous",
        "_views",
    )

    def __init__(self, session: Session, shape: Any, dtype: Any) -> None:
        """Allocate uninitialized memory; prefer ``session.empty`` and friends."""
        nbytes = self._init_unallocated(session, shape, dtype)
        if nbytes:
            with session.activated():
                raw = session.allocate(nbytes)
                self._own(raw)
            self.ptr = raw
        self.dispatch_tag = _dispatch_tag(self)

    def _init_unallocated(self, session: Session, shape: Any, dtype: Any) -> int:
        """Every slot of a new owning array but its memory (``ptr`` 0); its size in bytes."""
        Handle.__init__(self, session)
        nbytes = self._init_layout(shape, dtype)
        self.ptr = 0
        self._owner: Any = None
        self.base: DeviceArray | None = None
        self.is_contiguous = True
        self._views: weakref.WeakValueDictionary[int, DeviceArray] | None = None  # by id: == is elementwise
        return nbytes

    @classmethod
    def template(cls, session: Session, shape: Any, dtype: Any) -> DeviceArray:
        """What the C launch path copies into the results it allocates itself (see
        ``Session.fast_allocation``): an array of ``shape`` and ``dtype`` that owns no memory,
        with the dispatch tag of a pool allocation (aligned). It is closed, so it is refused
        wherever it might turn up; the C path opens its copies."""
        arr = cls.__new__(cls)
        arr._init_unallocated(session, shape, dtype)
        arr.dispatch_tag = _dispatch_tag(arr)
        arr._closed = True
        return arr

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
        arr.base = None
        arr.is_contiguous = True
        arr._views = None
        arr.dispatch_tag = _dispatch_tag(arr, borrowed=True)
        if view.stream is not None and view.stream != session.stream.handle:
            session._order_streams(session._stream_cu, view.stream)
        return arr

    # -- views: the same memory, another layout (NumPy's rules) -------------------------------

    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> DeviceArray:
        """A view of this array's memory with ``shape`` and byte ``strides``, its first element
        ``offset`` bytes after this array's."""
        root = self if self.base is None else self.base
        view = DeviceArray.__new__(DeviceArray)
        Handle.__init__(view, self.session)
        view.shape, view.strides, view.dtype = shape, strides, self.dtype
        view.ndim = len(shape)
        view.size = math.prod(shape)
        view.nbytes = view.size * self.dtype.itemsize
        view.ptr = self.ptr + offset
        view._owner = root  # the memory lives as long as any view of it
        view.base = root
        view.is_contiguous = views.is_c_contiguous(shape, strides, self.dtype.itemsize)
        view._views = None
        view.dispatch_tag = _dispatch_tag(view)
        with self.session._lock:  # what _take holds: a view is registered before its owner closes, or refused
            self._check()
            if root._views is None:
                root._views = weakref.WeakValueDictionary()
            root._views[id(view)] = view
        return view

    def _take(self) -> Any:
        """Close this handle; closing the owner also closes every view of its memory. Called with
        the session lock held, which ``_view`` registers under."""
        raw = Handle._take(self)
        for view in list(self._views.values()) if self._views is not None else ():
            view._closed = True
        return raw

    def __getitem__(self, key: Any) -> DeviceArray:
        """Basic indexing (ints, slices, ``...``, ``None``) as a view; advanced indexing raises IndexError."""
        return self._view(*views.index(self.shape, self.strides, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        """``a[key] = value``: ``value`` (a scalar, a host or device array) broadcast into the view
        ``a[key]`` and cast to its dtype as NumPy does; enqueued on the session stream."""
        target = self[key]
        if isinstance(value, (bool, int, float, np.generic)):
            target.fill(value)
            return
        if type(value) is DeviceArray:
            if value.same_elements(target):  # ``a[k] += 1`` stores the view into itself
                return
            if value.dtype != target.dtype:
                value = value.astype(target.dtype)
        elif isinstance(value, np.ndarray) or not hasattr(value, "shape"):
            value = np.asarray(value, dtype=target.dtype)  # host data: cast here, uploaded by the op
        _ops().where(True, value, target, out=target)

    def reshape(self, *shape: Any) -> DeviceArray:
        """A view with another shape (one extent may be -1); ``ViewError`` where NumPy would copy."""
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        return self._view(*views.reshape(self.shape, self.strides, self.itemsize, _shape_spec(dims)))

    def ravel(self) -> DeviceArray:
        """The elements as a 1-D array: a view when the layout allows one, else a copy (as NumPy)."""
        if self.is_contiguous:
            return self.reshape(-1)
        return self.copy().reshape(-1)

    def transpose(self, *axes: Any) -> DeviceArray:
        """A view with the axes permuted (reversed when none are given)."""
        order = axes[0] if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))) else axes
        return self._view(*views.transpose(self.shape, self.strides, order or None))

    @property
    def T(self) -> DeviceArray:
        return self.transpose()

    def squeeze(self, axis: Any = None) -> DeviceArray:
        """A view without extent-1 axes (those of ``axis`` only, when given)."""
        return self._view(*views.squeeze(self.shape, self.strides, axis))

    def expand_dims(self, axis: Any) -> DeviceArray:
        """A view with new extent-1 axes at ``axis`` (an int or a tuple), as ``np.expand_dims``."""
        return self._view(*views.expand_dims(self.shape, self.strides, self.itemsize, axis))

    # -- copies and fills through kernels (kd.ops: imported on first use) -------------------------

    def copy(self) -> DeviceArray:
        """A new C-contiguous array with the same contents (enqueued on the session stream)."""
        self._check()
        return copy(self.session, self)

    def astype(self, dtype: Any) -> DeviceArray:
        """A new array converted to ``dtype`` with NumPy's ``astype`` semantics."""
        result: DeviceArray = _ops().astype(self, dtype)
        return result

    def fill(self, value: Any) -> None:
        """Enqueue setting every element to ``value``, converted to this dtype as NumPy's ``fill`` does."""
        self._check()
        scalar = np.asarray(value, dtype=self.dtype)[()]
        _ops().where(True, scalar, self, out=self)

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
        if not self.is_contiguous:
            staged = to_device(self.session, src)
            try:
                staged.copy_to(self)
            finally:
                staged.close()  # a stream-ordered free: after the copy kernel
            return
        if self.nbytes:
            d, ptr, n = self.session._d, self.ptr, self.nbytes
            self._blocking_copy("cuMemcpyHtoDAsync", lambda s: d.cuMemcpyHtoDAsync(ptr, src.ctypes.data, n, s), src)

    def copy_to_host(self, out: np.ndarray) -> np.ndarray:
        """Copy into ``out`` (same shape and dtype, C-contiguous) after queued work; returns ``out``."""
        self._check()
        dst = _host_buffer(out, self.shape, self.dtype, writable=True)
        if not self.is_contiguous:
            contiguous = self.copy()
            try:
                contiguous.copy_to_host(dst)
            finally:
                contiguous.close()
            return out
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
        if not (self.is_contiguous and other.is_contiguous):
            _on_session_stream(session, stream, "DeviceArray.copy_to")
            _ops().astype(self, self.dtype, out=other)
            return
        if self.nbytes:
            with session.activated():
                check("cuMemcpyDtoDAsync", session._d.cuMemcpyDtoDAsync(other.ptr, self.ptr, self.nbytes, stream._cu))

    def overlaps(self, other: DeviceArray) -> bool:
        """Whether the byte ranges the two arrays' elements span intersect (an empty range
        intersects nothing; strided views that interleave count as overlapping)."""
        if not (self.nbytes and other.nbytes):
            return False
        if self.is_contiguous and other.is_contiguous:  # the warm case: [ptr, ptr + nbytes)
            return self.ptr < other.ptr + other.nbytes and other.ptr < self.ptr + self.nbytes
        a, b = self.byte_span(), other.byte_span()
        return a[0] < b[1] and b[0] < a[1]

    def byte_span(self) -> tuple[int, int]:
        """The device addresses ``[low, high)`` of the bytes this array's elements occupy."""
        low, high = views.byte_span(self.shape, self.strides, self.itemsize)
        return (self.ptr + low, self.ptr + high)

    def same_elements(self, other: DeviceArray) -> bool:
        """Whether element ``i`` of both arrays is the same memory for every index ``i``."""
        return (self.ptr, self.shape, self.strides, self.dtype) == (other.ptr, other.shape, other.strides, other.dtype)

    def fill_zero(self, stream: Stream | None = None) -> None:
        """Enqueue setting every byte to zero on ``stream`` (default: the session stream)."""
        self._check()
        session = self.session
        stream = _stream(session, stream)
        if not self.is_contiguous:
            _on_session_stream(session, stream, "DeviceArray.fill_zero")
            self.fill(0)
            return
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
            "strides": None if self.is_contiguous else self.strides,
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
        if copy is False and not self.is_contiguous:
            raise BufferError(f"a strided view (strides {self.strides}) exports as a contiguous copy: pass copy=None")
        source = self.session.copy(self) if copy or not self.is_contiguous else self
        if stream != -1:
            source.session._order_streams(1 if stream is None else stream, source.session._stream_cu)
        return interop.to_dlpack(source.ptr, source.shape, source.dtype, source.device, owner=source)

    def device_view(self) -> interop.DeviceView:
        """This array as an interop DeviceView (no driver call)."""
        self._check()
        return interop.DeviceView(self.ptr, self.shape, self.strides, self.dtype, self.device, False, self)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr=0x{self.ptr:x}"
        layout = "" if self.base is None else f" view strides={self.strides}"
        return (
            f"<DeviceArray shape={self.shape} dtype={self.dtype}{layout} {state} "
            f"session={self.session.session_id} device={self.device}>"
        )

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

        return blas.gemm(_contiguous(self), _contiguous(other))

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
    """``kerneldsl.ops``, which DeviceArray's operators are (imported on the first operator: the
    array layer sits above the runtime; then kept, as an operator's import costs a lookup)."""
    ops = _imported.get("ops")
    if ops is None:
        from .. import ops

        _imported["ops"] = ops
    return ops


_imported: dict[str, Any] = {}


def _contiguous(a: Any) -> Any:
    """``a`` itself, or a contiguous copy of a strided view (for callees that read memory linearly)."""
    return a.copy() if type(a) is DeviceArray and not a.is_contiguous else a


def _shape_spec(dims: Any) -> tuple[int, ...]:
    """A reshape argument (an int or a sequence of ints, -1 allowed) as a tuple of ints."""
    items = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    return tuple(operator.index(n) for n in items)


def _on_session_stream(session: Session, stream: Stream, what: str) -> None:
    """Strided copies and fills run as kernels on the session stream: refuse another stream."""
    if stream is not session.stream:
        raise StridedArrayError(
            what, None, "strided views are copied and filled by kernels on the session stream; omit stream="
        )


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


native_allocator_type: Any = None  # the C path's Allocator class, once kerneldsl.fastpath registers it


def use_native_allocator(allocator_type: Any) -> None:
    """Let ``empty`` make arrays in C with ``allocator_type(session)`` (see ``Session.fast_allocation``):
    registered by the C launch path's home, which the runtime does not import."""
    global native_allocator_type
    native_allocator_type = allocator_type


def empty(session: Session, shape: Any, dtype: Any = np.float32) -> DeviceArray:
    """Uninitialized device memory: made in C when the session's native allocator can (see
    ``Session.fast_allocation``), else by the constructor, which decides everything unusual."""
    allocator = session.native_allocator() if session.usable else None
    if allocator is not None:
        try:
            template = session.template(shape, dtype)
        except TypeError:  # an unhashable spelling of the shape (a list): the constructor takes it
            template = None
        if template is not None and template.nbytes:
            made: DeviceArray | None = allocator.make(template)
            if made is not None:
                return made
    return DeviceArray(session, shape, dtype)


def zeros(session: Session, shape: Any, dtype: Any = np.float32) -> DeviceArray:
    """Device memory set to zero bytes (enqueued on the session stream)."""
    arr = empty(session, shape, dtype)
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
    """A new C-contiguous device array with the contents of ``src`` (enqueued on the session
    stream): a memcpy, or a copy kernel for a strided view."""
    out = DeviceArray(session, src.shape, src.dtype)
    src.copy_to(out)
    return out


def pinned_empty(session: Session, shape: Any, dtype: Any = np.float32) -> PinnedArray:
    """Uninitialized page-locked host memory."""
    return PinnedArray(session, shape, dtype)
