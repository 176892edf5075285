"""Torch tensors as kerneldsl arrays, zero-copy, on the device and stream torch uses.

A CPU tensor runs on kerneldsl's CPU device, whose device memory is host memory: the tensor's
data pointer is adopted as it is. A CUDA tensor of device ``k`` is adopted by the default
session of device ``k`` (the same primary context torch uses) and the kernel launches on
``torch.cuda.current_stream(k)``, wrapped as a ``kd.Stream`` kerneldsl does not own, so the
launch is ordered with torch's work, never synchronizes, and is captured by a CUDA graph
torch records on that stream.

``Device.adopt`` (the operators' general path) takes a tensor with one dict lookup and one store:
the array kept for that parameter (per thread, shape, dtype and 16-byte alignment, which fix its
dispatch tag) is pointed at the tensor's data; an operator's warm call keeps its own arrays
(``Device.borrow``) the same way. A kept array holds no reference to any tensor; it is used only
by the call that pointed it, while the tensor is that call's argument (the C launch path reads
``ptr`` at every launch).
"""

from __future__ import annotations

from threading import get_ident
from typing import Any

import numpy as np
import torch

from .. import dtypes
from ..errors import BindingError, StridedArrayError
from ..runtime import memory
from ..runtime.handle import Handle
from ..runtime.interop import DeviceView, c_strides
from ..runtime.session import Session, default_session
from ..runtime.stream import Stream

MAX_ADOPTED = 4096  # kept arrays per device; the table starts afresh when full


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a kerneldsl element type name (they share their names)."""
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise KeyError(name)
    return found


def _numpy_dtypes() -> dict[torch.dtype, np.dtype[Any]]:
    dtypes.add_bfloat16()  # with ml_dtypes installed, bfloat16 tensors adopt too
    table = {}
    for name, et in dtypes.all_element_types().items():
        try:
            table[torch_dtype(name)] = np.dtype(et.numpy)
        except KeyError:
            continue
    return table


NUMPY_DTYPES = _numpy_dtypes()


def element_name(dtype: torch.dtype) -> str:
    """kerneldsl's name of a torch dtype (``"float32"``); ``str(dtype)`` when it has none."""
    return str(dtype).removeprefix("torch.")


class Device:
    """One device's session, its cache of adopted arrays and (CUDA) wrappers of torch's streams."""

    __slots__ = ("session", "arrays", "streams", "ordinal", "place")

    def __init__(self, session: Session, ordinal: int | None, place: torch.device) -> None:
        self.session = session
        self.arrays: dict[tuple[Any, ...], Any] = {}
        self.streams: dict[int, Stream] = {}
        self.ordinal = ordinal
        self.place = place  # where outputs are allocated

    def adopt(self, t: torch.Tensor, what: str, param: str) -> Any:
        """``t`` (C-contiguous) as a DeviceArray of this device's session, without a copy, for
        the call under way: the array kept for ``param`` (per thread, shape, dtype and alignment
        class) is pointed at ``t``'s data."""
        if not t.is_contiguous():
            raise StridedArrayError(
                what,
                param,
                f"is a strided tensor (shape {tuple(t.shape)}, strides {t.stride()}) and the kernel "
                "writes it as C-contiguous: pass a contiguous tensor",
            )
        ptr = t.data_ptr()
        key = (get_ident(), param, t.shape, t.dtype, ptr % 16 == 0)
        array = self.arrays.get(key)
        if array is None:
            array = self.borrow(t, what, param)
            if len(self.arrays) >= MAX_ADOPTED:
                self.arrays.clear()
            self.arrays[key] = array
        array.ptr = ptr
        return array

    def borrow(self, t: torch.Tensor, what: str, param: str) -> Any:
        """A new DeviceArray of this session over ``t``'s data (C-contiguous), holding no reference to it."""
        dtype = NUMPY_DTYPES.get(t.dtype)
        if dtype is None:
            raise BindingError(what, param, f"dtype {element_name(t.dtype)} has no kerneldsl element type")
        shape = tuple(t.shape)
        # device None: the session adopting it is the tensor's by construction (device_of)
        view = DeviceView(t.data_ptr(), shape, c_strides(shape, dtype.itemsize), dtype, None, False, None)
        return memory.array_type.borrow(self.session, view)

    def current_stream(self) -> Stream | None:
        """``torch.cuda.current_stream()`` of this device as a kd.Stream (None on the CPU device)."""
        if self.ordinal is None:
            return None
        handle = torch._C._cuda_getCurrentRawStream(self.ordinal)
        stream = self.streams.get(handle)
        if stream is None:
            stream = self.streams[handle] = _borrowed_stream(self.session, handle)
        return stream


def _borrowed_stream(session: Session, handle: int) -> Stream:
    """A kd.Stream over a CUstream torch owns: kerneldsl launches and records events on it and
    never destroys it (nothing is owned, so closing it releases nothing). It is not one of the
    session's streams: frees of kerneldsl's own memory do not wait for torch's work."""
    stream: Stream = Stream.__new__(Stream)
    Handle.__init__(stream, session)
    stream._cu = handle
    stream.handle = handle
    return stream


_devices: dict[int, Device] = {}  # by Tensor.get_device(): -1 for the CPU, else the CUDA ordinal


def device_of(t: torch.Tensor) -> Device:
    """The kerneldsl device a tensor's op runs on: the CPU device, or the CUDA device it lives on."""
    found = _devices.get(t.get_device())
    if found is None or found.session.closed:
        found = _devices[t.get_device()] = _open(t.device)
    return found


def _open(place: torch.device) -> Device:
    if place.type == "cpu":
        return Device(default_session("cpu"), None, place)
    if place.type != "cuda":
        raise BindingError("torch operator", None, f"tensors on {place} have no kerneldsl device (cpu or cuda)")
    ordinal = place.index if place.index is not None else torch.cuda.current_device()
    session = default_session(ordinal)
    if session.gpu.host:
        raise BindingError(
            "torch operator", None, f"a tensor on {place} met KERNELDSL_DEVICE=cpu: device {ordinal} is the CPU device"
        )
    return Device(session, ordinal, torch.device("cuda", ordinal))
