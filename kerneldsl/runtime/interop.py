"""Zero-copy views of foreign GPU arrays (CUDA Array Interface, DLPack) and DLPack export.

A DeviceView is what a launch needs of any device array: pointer, shape, byte strides, dtype,
device, read-only flag, and an ``owner`` to keep alive while the memory is in use. CAI is
preferred when an object offers both (it needs no capsule round trip); DLPack capsules are
parsed with ctypes, so no third-party array library is imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import driver
from .driver import check
from .handle import Handle

if TYPE_CHECKING:
    from .context import DriverSession

DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_CUDA_MANAGED = 13

_DL_INT, _DL_UINT, _DL_FLOAT, _DL_COMPLEX, _DL_BOOL = 0, 1, 2, 5, 6
_KIND_TO_DL = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT, "c": _DL_COMPLEX, "b": _DL_BOOL}
_DL_TO_KIND = {v: k for k, v in _KIND_TO_DL.items()}


@dataclass(frozen=True, slots=True)
class DeviceView:
    """Device memory seen through an interchange protocol; ``strides`` are in bytes.

    ``device`` is None only for an empty array with a null pointer. ``stream``: a CUstream
    handle whose queued work must finish before the memory is used (the CAI v3 stream; 1, the
    legacy stream, for DLPack imported without a consumer stream); None: nothing to wait for.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    device: int | None
    readonly: bool
    owner: Any
    stream: int | None = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def c_contiguous(self) -> bool:
        return self.size == 0 or self.strides == c_strides(self.shape, self.dtype.itemsize)


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# -- DLPack C structs (dlpack.h, unversioned ABI) ---------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DLDeleter)]

_CAPSULE_NAME = b"dltensor"
_USED_CAPSULE_NAME = b"used_dltensor"
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)

# Exported tensors by address: the struct, its shape array and the owner stay alive until
# the consumer calls the deleter (or the capsule dies unconsumed).
_exports: dict[int, tuple[Any, ...]] = {}


def _delete_export(managed: Any) -> None:
    _exports.pop(ctypes.cast(managed, ctypes.c_void_p).value or 0, None)  # a NULL pointer owns nothing


def _destroy_capsule(capsule: int) -> None:
    if _capsule_is_valid(capsule, _CAPSULE_NAME):  # never consumed: we still own the tensor
        _exports.pop(_capsule_pointer_raw(capsule, _CAPSULE_NAME), None)


# Wrapped by call, not as decorators: mypy cannot type a ctypes function type used as a decorator.
_export_deleter = DLDeleter(_delete_export)
_capsule_destructor = _CapsuleDestructor(_destroy_capsule)


def to_dlpack(
    ptr: int, shape: tuple[int, ...], dtype: np.dtype, device: int, owner: Any, device_type: int = DL_CUDA
) -> Any:
    """A ``dltensor`` PyCapsule over C-contiguous memory (CUDA, or ``device_type=DL_CPU`` for a
    host copy); ``owner`` lives until the deleter runs."""
    code = _KIND_TO_DL.get(dtype.kind)
    if code is None or dtype.byteorder == ">":
        raise BufferError(f"dtype {dtype} has no DLPack equivalent")
    managed = DLManagedTensor()
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    t = managed.dl_tensor
    t.data = ptr or None
    t.device = DLDevice(device_type, device)
    t.ndim = len(shape)
    t.dtype = DLDataType(code, dtype.itemsize * 8, 1)
    t.shape = shape_arr
    t.strides = None  # NULL: compact row-major
    t.byte_offset = 0
    managed.deleter = _export_deleter
    address = ctypes.addressof(managed)
    _exports[address] = (managed, shape_arr, owner)
    return _capsule_new(address, _CAPSULE_NAME, _capsule_destructor)


def _dlpack_dtype(dt: DLDataType) -> np.dtype:
    kind = _DL_TO_KIND.get(dt.code)
    if kind is None or dt.lanes != 1 or dt.bits % 8:
        raise TypeError(f"unsupported DLPack dtype (code={dt.code}, bits={dt.bits}, lanes={dt.lanes})")
    return np.dtype("?") if kind == "b" else np.dtype(f"{kind}{dt.bits // 8}")


def _call_deleter(address: int) -> None:
    managed = DLManagedTensor.from_address(address)
    if managed.deleter:
        managed.deleter(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))


class _DLPackImport:
    """Keeps a consumed DLPack tensor alive; its finalizer calls the producer's deleter."""

    __slots__ = ("source", "__weakref__")

    def __init__(self, source: Any, address: int) -> None:
        self.source = source
        weakref.finalize(self, _call_deleter, address)


def from_dlpack(obj: Any, stream: int | None = None) -> DeviceView | None:
    """View ``obj`` through DLPack; None when it is not in CUDA memory (e.g. a numpy array).

    ``stream`` is the consumer stream handle passed to ``__dlpack__`` for ordering.
    """
    device_type, device_id = obj.__dlpack_device__()
    if device_type not in (DL_CUDA, DL_CUDA_MANAGED):
        return None
    capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
    address = _capsule_pointer(capsule, _CAPSULE_NAME)
    _capsule_set_name(capsule, _USED_CAPSULE_NAME)  # ownership moves to us: we call the deleter
    owner = _DLPackImport(obj, address)
    t = DLManagedTensor.from_address(address).dl_tensor
    dtype = _dlpack_dtype(t.dtype)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim))
    else:
        strides = c_strides(shape, dtype.itemsize)
    ptr = (t.data or 0) + t.byte_offset
    # with a consumer stream the producer already ordered its work before it; without one it
    # ordered it before the legacy default stream, which our non-blocking streams must wait for
    return DeviceView(ptr, shape, strides, dtype, t.device.device_id, False, owner, None if stream is not None else 1)


def pointer_device(ptr: int, session: DriverSession | None = None) -> int:
    """The ordinal of the device that owns ``ptr`` (cuPointerGetAttribute DEVICE_ORDINAL).

    With ``session`` the query runs with its context current, for drivers that want one.
    """
    d = driver.ensure_init()
    attr = d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    with session.activated() if session is not None else contextlib.nullcontext():
        return int(check("cuPointerGetAttribute", d.cuPointerGetAttribute(attr, ptr)))


def from_cuda_array_interface(obj: Any, cai: dict[str, Any], session: DriverSession | None = None) -> DeviceView:
    """View ``obj`` through its ``__cuda_array_interface__`` dict (v2 or v3)."""
    if cai.get("mask") is not None:
        raise TypeError("masked CUDA arrays (CAI 'mask') are not supported")
    shape = tuple(int(n) for n in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    ptr, readonly = cai["data"]
    ptr = int(ptr or 0)
    strides = cai.get("strides")
    strides = c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
    device = pointer_device(ptr, session) if ptr else None
    return DeviceView(ptr, shape, strides, dtype, device, bool(readonly), obj, cai.get("stream"))


def as_device_view(obj: Any, stream: int | None = None, session: DriverSession | None = None) -> DeviceView | None:
    """A zero-copy view of a GPU array (kerneldsl, CuPy, PyTorch, ...); None if ``obj`` is not one.

    ``stream``: the consumer's CUstream handle, handed to ``__dlpack__`` so the producer orders
    its pending work before it. ``session``: the consumer's session, made current for the
    pointer query.
    """
    if isinstance(obj, Handle) and hasattr(obj, "device_view"):
        view: DeviceView = obj.device_view()
        return view
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return from_cuda_array_interface(obj, cai, session)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return from_dlpack(obj, stream)
    return None
