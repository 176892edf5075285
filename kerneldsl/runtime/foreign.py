"""Foreign GPU arrays (CuPy, PyTorch, ... through the CUDA Array Interface or DLPack) adopted
as zero-copy DeviceArrays: the one place kernels, ops and fused pipelines take them in."""

from __future__ import annotations

from typing import Any

from ..errors import BindingError, ReadOnlyArrayError, StridedArrayError, WrongSessionError
from . import memory
from .interop import as_device_view
from .memory import BufferSession, DeviceBuffer
from .session import default_session


def is_foreign(value: Any) -> bool:
    """Whether ``value`` offers a GPU array protocol (it may still turn out to be host memory)."""
    return hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack__")


def adopt(
    value: Any, session: BufferSession | None, what: str, param: str | None, *, writes: bool = False
) -> DeviceBuffer:
    """``value`` as a DeviceArray on ``session`` (None: the default session of its device).

    ``what`` and ``param`` name the callee and the argument in the errors: not device memory
    (``BindingError``), on another device (``WrongSessionError``), strided
    (``StridedArrayError``), read-only where ``writes`` (``ReadOnlyArrayError``).
    """
    view = as_device_view(value, session=session)
    if view is None:
        raise BindingError(what, param, f"{type(value).__name__} is not CUDA device memory")
    if session is None:
        session = default_session(view.device or 0)
    if view.device is not None and view.device != session.device:
        where = f"argument {param!r} of {what}" if param else f"an argument of {what}"
        raise WrongSessionError(f"{where} is on device {view.device}, the call runs on device {session.device}")
    if not view.c_contiguous:
        raise StridedArrayError(
            what,
            param,
            f"a strided (non C-contiguous) {type(value).__name__} of shape {view.shape} cannot be used: "
            "make it contiguous first",
        )
    if writes and view.readonly:
        raise ReadOnlyArrayError(what, param, "is a read-only foreign array but the kernel writes it")
    return memory.array_type.borrow(session, view)
