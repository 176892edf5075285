"""Device buffers owned by a session.

A ``DeviceBuffer`` is the runtime's array: memory, layout, views and transfers. The user-facing
``DeviceArray`` (operators, ``astype``, ``fill``; ``kerneldsl.array.ndarray``) subclasses it and
registers itself with ``use_array_type`` when the array layer is imported: every array the
runtime makes from then on (``Session.empty``, ``to_device``, views, foreign memory, the C
path's allocations) is of that class. The runtime never imports the array layer.

Its transfers (host, device and pinned copies, zero fills) are ``transfers.Transfers``; its shape
and dtype are ``shapes.ShapeDtype``'s, which ``pinned.PinnedArray`` shares.
"""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from ..dtypes import INT32_MAX
from ..errors import WrongSessionError
from . import host_copies, interop, views
from .checks import empty_fill
from .handle import Handle
from .shapes import ShapeDtype
from .transfers import Transfers, TransferSession


class BufferSession(TransferSession, Protocol):
    """A Session as its buffers and stagings see it: what their transfers read, with its pool's
    allocation and the factories that make (and copy) ``DeviceBuffer``s (``Session`` says what
    each does)."""

    def allocate(self, nbytes: int) -> int: ...

    def template(self, shape: Any, dtype: Any) -> DeviceBuffer: ...

    def empty(self, shape: Any, dtype: Any = ...) -> DeviceBuffer: ...

    def to_device(self, host: Any) -> DeviceBuffer: ...

    def copy(self, a: DeviceBuffer) -> DeviceBuffer: ...


_B = TypeVar("_B", bound="DeviceBuffer")

_dispatch_tags: dict[tuple[Any, ...], int] = {}


def _dispatch_tag(a: DeviceBuffer, borrowed: bool = False) -> int:
    """What selecting a kernel specialization needs of an array, computed once (the layout never
    changes): session, dtype, 16-byte alignment, whether 32-bit indexing can address it, and
    whether it is an owning array, borrowed foreign memory, a contiguous view, a strided view or
    one read across its rows (views and borrowed arrays may partially overlap other arrays: two
    adoptions of one buffer are two arrays; strided ones need strided indexing, and the CPU
    device's elementwise plans read a transposed one a tile at a time). An int stands for that
    tuple, so the dispatch key hashes cheaply on every launch."""
    if a.base is None:
        kind = "borrowed" if borrowed else "array"
    elif a.is_contiguous:
        kind = "view"
    else:
        kind = "transposed" if views.reads_across_rows(a.shape, a.strides, a.dtype.itemsize) else "strided"
    layout = (a.session.session_id, a.dtype, a.ptr % 16 == 0, a.size > INT32_MAX, kind)
    return _dispatch_tags.setdefault(layout, len(_dispatch_tags))


class DeviceBuffer(ShapeDtype, Transfers):
    """Device memory: ``ptr`` (of the first element), ``shape``, ``dtype``, ``strides`` (bytes,
    possibly negative), ``nbytes``.

    An array made by ``session.empty`` and friends owns C-contiguous memory (``base`` None);
    indexing, ``reshape``, ``transpose`` and the like return views that share it: ``base`` is
    the owning array, kept alive by the view. Closing a view closes only that handle; closing
    the owner frees the memory and closes every view of it. Zero-size owners have ``ptr == 0``
    and never allocate. The runtime makes arrays as ``array_type``; copies and fills of strided
    views run as kernels, which the array layer's subclass provides (``_copy_by_kernel``).
    """

    kind = "mem"
    session: BufferSession  # its transfers read a TransferSession; the buffer reads more
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

    def __init__(self, session: BufferSession, shape: Any, dtype: Any) -> None:
        """Allocate uninitialized memory; prefer ``session.empty`` and friends."""
        nbytes = self._init_unallocated(session, shape, dtype)
        if nbytes:
            with session.activated():
                raw = session.allocate(nbytes)
                self._own(raw)
            self.ptr = raw
        self.dispatch_tag = _dispatch_tag(self)

    def _init_unallocated(self, session: BufferSession, shape: Any, dtype: Any) -> int:
        """Every slot of a new owning array but its memory (``ptr`` 0); its size in bytes."""
        Handle.__init__(self, session)
        nbytes = self._init_layout(shape, dtype)
        self.ptr = 0
        self._owner: Any = None
        self.base: DeviceBuffer | None = None
        self.is_contiguous = True
        self._views: weakref.WeakValueDictionary[int, DeviceBuffer] | None = None  # by id: == is elementwise
        return nbytes

    @classmethod
    def template(cls: type[_B], session: BufferSession, shape: Any, dtype: Any) -> _B:
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
    def borrow(cls: type[_B], session: BufferSession, view: interop.DeviceView) -> _B:
        """A non-owning array over foreign C-contiguous memory; never freed by kerneldsl.

        ``view.owner`` lives as long as the result. If the view names a producer stream, work
        later queued on the session stream waits for what the producer queued so far.
        """
        if view.device is not None and view.device != session.device:
            raise WrongSessionError(
                f"memory on device {view.device} cannot be used by a session on device {session.device}"
            )
        if not view.c_contiguous:
            raise ValueError(f"strides {view.strides} of shape {view.shape} are not C-contiguous")
        arr = cls.over(session, view.ptr, view.shape, view.dtype, view.owner)
        if view.stream is not None and view.stream != session.stream.handle:
            session.order.order(session.raw_stream, view.stream)
        return arr

    @classmethod
    def over(
        cls: type[_B], session: BufferSession, ptr: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any
    ) -> _B:
        """A non-owning array over C-contiguous memory at ``ptr`` that ``owner`` keeps alive (as
        ``borrow`` checked it, or the CPU device's numpy array: ``borrow_host``)."""
        arr = cls.__new__(cls)
        Handle.__init__(arr, session)
        arr._init_layout(shape, dtype)
        arr.ptr = ptr
        arr._owner = owner
        arr.base = None
        arr.is_contiguous = True
        arr._views = None
        arr.dispatch_tag = _dispatch_tag(arr, borrowed=True)
        return arr

    # -- views: the same memory, another layout (NumPy's rules) -------------------------------

    def _view(
        self: _B, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0, dtype: np.dtype | None = None
    ) -> _B:
        """A view of this array's memory with ``shape`` and byte ``strides``, its first element
        ``offset`` bytes after this array's (of this array's class); ``dtype``: its elements read
        as another type (a complex array's real or imaginary parts), by default this array's."""
        root = self if self.base is None else self.base
        view = type(self).__new__(type(self))
        Handle.__init__(view, self.session)
        dt = self.dtype if dtype is None else dtype
        view.shape, view.strides, view.dtype = shape, strides, dt
        view.ndim = len(shape)
        view.size = math.prod(shape)
        view.nbytes = view.size * dt.itemsize
        view.ptr = self.ptr + offset
        view._owner = root  # the memory lives as long as any view of it
        view.base = root
        view.is_contiguous = views.is_c_contiguous(shape, strides, dt.itemsize)
        view._views = None
        view.dispatch_tag = _dispatch_tag(view)
        with self.session.lock:  # what _take holds: a view is registered before its owner closes, or refused
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

    def __getitem__(self: _B, key: Any) -> _B:
        """Basic indexing (ints, slices, ``...``, ``None``) as a view; advanced indexing raises IndexError."""
        return self._view(*views.index(self.shape, self.strides, key))

    def reshape(self: _B, *shape: Any) -> _B:
        """A view with another shape (one extent may be -1); ``ViewError`` where NumPy would copy."""
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        return self._view(*views.reshape(self.shape, self.strides, self.itemsize, _shape_spec(dims)))

    def transpose(self: _B, *axes: Any) -> _B:
        """A view with the axes permuted (reversed when none are given)."""
        order = axes[0] if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))) else axes
        return self._view(*views.transpose(self.shape, self.strides, order or None))

    @property
    def T(self: _B) -> _B:
        return self.transpose()

    def squeeze(self: _B, axis: Any = None) -> _B:
        """A view without extent-1 axes (those of ``axis`` only, when given)."""
        return self._view(*views.squeeze(self.shape, self.strides, axis))

    def expand_dims(self: _B, axis: Any) -> _B:
        """A view with new extent-1 axes at ``axis`` (an int or a tuple), as ``np.expand_dims``."""
        return self._view(*views.expand_dims(self.shape, self.strides, self.itemsize, axis))

    def overlaps(self, other: DeviceBuffer) -> bool:
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

    def same_elements(self, other: DeviceBuffer) -> bool:
        """Whether element ``i`` of both arrays is the same memory for every index ``i``."""
        return (self.ptr, self.shape, self.strides, self.dtype) == (other.ptr, other.shape, other.strides, other.dtype)

    # -- interchange ---------------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3; ``stream`` is the session stream the data is ordered on. An
        array of the CPU device has none (AttributeError): it is host memory, spoken as DLPack."""
        if self.session.gpu.host:
            raise AttributeError("an array of the CPU device is host memory: it has no __cuda_array_interface__")
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
        return (interop.DL_CPU, 0) if self.session.gpu.host else (interop.DL_CUDA, self.session.gpu.ordinal)

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
        ``dl_device=(1, 0)`` (kDLCPU, which the standard asks every library to offer) exports a
        host copy, made after the queued work (it synchronizes; ``copy=False`` refuses it).
        """
        self._check()
        wanted = None if dl_device is None else tuple(int(v) for v in dl_device)
        if wanted is not None and wanted != self.__dlpack_device__():
            if wanted != (interop.DL_CPU, 0):
                raise BufferError(f"cannot export device {self.__dlpack_device__()} memory to {dl_device}")
            if copy is False:
                raise BufferError("exporting device memory to the CPU (dl_device=(1, 0)) copies it: pass copy=None")
            host = self.to_host()
            return interop.to_dlpack(host.ctypes.data, host.shape, host.dtype, 0, host, interop.DL_CPU)
        if copy is False and not self.is_contiguous:
            raise BufferError(f"a strided view (strides {self.strides}) exports as a contiguous copy: pass copy=None")
        source = self.session.copy(self) if copy or not self.is_contiguous else self
        if source.session.gpu.host:  # the CPU device's work is done when it is enqueued
            return interop.to_dlpack(source.ptr, source.shape, source.dtype, 0, source, interop.DL_CPU)
        if stream != -1:
            source.session.order.order(1 if stream is None else stream, source.session.raw_stream)
        return interop.to_dlpack(source.ptr, source.shape, source.dtype, source.session.gpu.ordinal, owner=source)

    def device_view(self) -> interop.DeviceView:
        """This array as an interop DeviceView (no driver call)."""
        self._check()
        device = None if self.session.gpu.host else self.session.gpu.ordinal
        return interop.DeviceView(self.ptr, self.shape, self.strides, self.dtype, device, False, self)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr=0x{self.ptr:x}"
        layout = "" if self.base is None else f" view strides={self.strides}"
        return (
            f"<{type(self).__name__} shape={self.shape} dtype={self.dtype}{layout} {state} "
            f"session={self.session.session_id} device={self.device}>"
        )

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """Host conversion is explicit, as in CuPy: a silent device-to-host copy would hide a sync."""
        raise TypeError("a DeviceArray is device memory: call .to_host() for a numpy array")


def _shape_spec(dims: Any) -> tuple[int, ...]:
    """A reshape argument (an int or a sequence of ints, -1 allowed) as a tuple of ints."""
    items = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    return tuple(operator.index(n) for n in items)


array_type: type[DeviceBuffer] = DeviceBuffer  # the class arrays are made as (see use_array_type)
ARRAY_TYPES = {DeviceBuffer}  # every class arrays were made as, for the layers below the array layer
_array_type_hooks: list[Callable[[type[DeviceBuffer]], object]] = []


def use_array_type(cls: type[DeviceBuffer]) -> None:
    """Make every array from now on as ``cls``: the array layer's user-facing subclass, which
    declares no slots of its own (the C path reads arrays by slot offsets). Registered when
    ``kerneldsl.array`` is imported, which ``kerneldsl``'s public names do before they make arrays;
    arrays made earlier through ``kerneldsl.runtime`` alone stay DeviceBuffers."""
    global array_type
    if cls.__dictoffset__ or cls.__basicsize__ != DeviceBuffer.__basicsize__:
        raise TypeError(f"{cls.__name__} must add no instance fields to DeviceBuffer (declare __slots__ = ())")
    array_type = cls
    ARRAY_TYPES.add(cls)
    for hook in _array_type_hooks:
        hook(cls)


def on_array_type(hook: Callable[[type[DeviceBuffer]], object]) -> None:
    """Call ``hook`` with the array class now and whenever ``use_array_type`` changes it (the C
    path's ``configure``)."""
    _array_type_hooks.append(hook)
    hook(array_type)


native_allocator_type: Any = None  # the C path's Allocator class, once kerneldsl.launch.fastpath registers it


def use_native_allocator(allocator_type: Any) -> None:
    """Let ``empty`` make arrays in C with ``allocator_type(session)`` (see ``Session.fast_allocation``):
    registered by the C launch path's home, which the runtime does not import."""
    global native_allocator_type
    native_allocator_type = allocator_type


def empty(session: BufferSession, shape: Any, dtype: Any = np.float32) -> DeviceBuffer:
    """Uninitialized device memory: made in C when the session's native allocator can (see
    ``Session.fast_allocation``), else by the constructor, which decides everything unusual. A
    session with the init check marks it unwritten, or fills it (``checks.Checks.empty_buffers``)."""
    made = _empty(session, shape, dtype)
    if session.gpu.empty_buffers and made.nbytes:
        _checked_empty(session, made)
    return made


def _empty(session: BufferSession, shape: Any, dtype: Any) -> DeviceBuffer:
    allocator = session.native_allocator() if session.usable else None
    if allocator is not None:
        try:
            template = session.template(shape, dtype)
        except TypeError:  # an unhashable spelling of the shape (a list): the constructor takes it
            template = None
        if template is not None and template.nbytes:
            made: DeviceBuffer | None = allocator.make(template)
            if made is not None:
                return made
    return array_type(session, shape, dtype)


def _checked_empty(session: BufferSession, arr: DeviceBuffer) -> None:
    """The init check's part in ``empty``: the runtime tracks which bytes of ``arr`` get written,
    or (``init=nan``) ``arr`` is filled with its dtype's signalling NaN."""
    if session.gpu.empty_buffers == "track":
        session.api.track_unwritten(arr.ptr, arr.nbytes)
        return
    element = empty_fill(arr.dtype)
    filled = np.resize(element, arr.nbytes).view(arr.dtype).reshape(arr.shape)
    arr.copy_from_host(filled)


def note_written(arr: DeviceBuffer, start: int, nbytes: int) -> None:
    """The init check: ``nbytes`` bytes of ``arr``'s memory from address ``start`` count as written
    (code about to overwrite them loads them first), in a session that tracks what ``empty()``
    buffers had written."""
    arr.session.api.note_written(start, nbytes)


def zeros(session: BufferSession, shape: Any, dtype: Any = np.float32) -> DeviceBuffer:
    """Device memory set to zero bytes (enqueued on the session stream)."""
    arr = empty(session, shape, dtype)
    arr.fill_zero()
    return arr


def to_device(session: BufferSession, host: Any) -> DeviceBuffer:
    """Copy a host array (any layout; materialized C-contiguous, in the machine's byte order, which
    kernels read) to new device memory: in one C call when the session can (``host_copies.upload``),
    else by the constructor and ``copy_from_host``."""
    src = np.asarray(host)
    if not src.dtype.isnative:
        src = src.astype(src.dtype.newbyteorder("="), order="C")
    elif not src.flags.c_contiguous:
        src = src.copy(order="C")
    if src.nbytes and session.usable:
        made = host_copies.upload(session, src, empty)
        if made is not None:
            return made
    arr = array_type(session, src.shape, src.dtype)
    arr.copy_from_host(src)
    return arr


def borrow_host(session: BufferSession, host: np.ndarray) -> DeviceBuffer:
    """A C-contiguous numpy array's own memory as an array of ``session``, which keeps ``host``
    alive: for the CPU device, whose memory is the host's (a GPU cannot read it)."""
    return array_type.over(session, host.ctypes.data, host.shape, host.dtype, host)


def copy(session: BufferSession, src: DeviceBuffer) -> DeviceBuffer:
    """A new C-contiguous device array with the contents of ``src`` (enqueued on the session
    stream): a memcpy, or a copy kernel for a strided view."""
    out = array_type(session, src.shape, src.dtype)
    src.copy_to(out)
    return out
