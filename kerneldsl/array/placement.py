"""Where an array call runs, and what its arguments become there.

Any device array (ours, or foreign and adopted zero-copy) sends the call to the device of its
session; numpy operands are then uploaded (kept alive until the stream passes them). With no
device array at all, the call runs on the host's numpy arrays (copied in and back within the
call); on the CPU device, whose memory is the host's, C-contiguous numpy arrays are its operands
and results as they are (``device_operand``, ``host_result``: borrowed, no copy). ``out=``
follows NumPy: the exact result shape, a ``same_kind`` cast, and it lives where the operands do.
Without ``out=`` an elementwise result is laid out as its operands are when they share a memory
order (``memory_order``), as NumPy's ``order="K"`` lays it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..launch.routing import is_remote
from ..runtime import memory, views
from ..runtime.foreign import adopt, is_foreign
from ..runtime.memory import DeviceBuffer
from ..runtime.selection import CPU
from . import promotion
from .program import SCALAR_TYPES


def is_array(value: Any) -> bool:
    return isinstance(value, (memory.DeviceBuffer, np.ndarray)) or is_foreign(value)


def place(values: Sequence[Any], what: str) -> tuple[list[Any], Any]:
    """``(values, session)``: the operands as the call uses them; session None for the numpy path."""
    session = next((v.session for v in values if type(v) is memory.array_type), None)
    if session is None:
        foreign = next((v for v in values if not isinstance(v, (np.ndarray, *SCALAR_TYPES)) and is_array(v)), None)
        if foreign is None:
            return list(values), None
        session = adopt(foreign, None, what, None).session
    out: list[Any] = []
    for v in values:
        if isinstance(v, np.ndarray):
            d = session.to_device(v)
            session.keep_alive(d, session.stream)
            out.append(d)
        elif type(v) is memory.array_type or isinstance(v, SCALAR_TYPES):
            out.append(v)
        else:
            out.append(adopt(v, session, what, None))
    return out, session


def device_operand(session: Any, value: Any) -> Any:
    """An operand of a host call (numpy arrays only) as ``session``'s kernels read it: the array
    itself on the CPU device (borrowed), else a copy on the device; scalars as they are."""
    if not isinstance(value, np.ndarray):
        return value
    if session.device == CPU and value.flags.c_contiguous:
        return memory.borrow_host(session, value)
    return session.to_device(value)


def staged_or_borrowed(session: Any, values: Sequence[Any]) -> list[Any]:
    """A host call's kernel arguments for a kernel that stages numpy arrays itself: on the CPU
    device each as ``device_operand`` makes it (no copy where the array is C-contiguous); elsewhere
    as they are (staged through the session's pinned buffers)."""
    return [device_operand(session, v) for v in values] if session.device == CPU else list(values)


def host_result(session: Any, shape: tuple[int, ...], dtype: np.dtype) -> tuple[DeviceBuffer, np.ndarray | None]:
    """Where a host call's kernel writes its result of ``shape`` and ``dtype``, and the numpy array
    that is that memory: on the CPU device a new numpy array, borrowed (the call returns it as it
    is); elsewhere device memory, and None (the call copies it to the host)."""
    if session.device == CPU:
        host = np.empty(shape, dtype)
        return memory.borrow_host(session, host), host
    return session.empty(shape, dtype), None


def release(made: Sequence[Any]) -> None:
    """Frees at once the device memory a host call made (a GPU's copies of its operands and its
    results); the CPU device's borrowed numpy arrays hold none and are left to the collector
    (closing one costs a context activation for nothing). Scalars pass through."""
    for a in made:
        if isinstance(a, DeviceBuffer) and not shares_memory(a):
            a.close()


def fast_place(values: Sequence[Any], what: str) -> tuple[Sequence[Any], Any]:
    """``place`` for the warm path: DeviceArrays and scalars only need their session found."""
    session = None
    for v in values:
        t = type(v)
        if t is memory.array_type:
            session = v.session
        elif t is not float and t is not int and t is not bool and not isinstance(v, np.generic):
            return place(values, what)
    return values, session


def check_out(out: Any, shape: tuple[int, ...], result: np.dtype, what: str) -> None:
    """NumPy's rules for ``out=``: the exact result shape, a ``same_kind`` cast from the result dtype."""
    if tuple(out.shape) != shape:
        raise ValueError(f"{what}: out= has shape {tuple(out.shape)}, the result has shape {shape}")
    if not np.can_cast(result, out.dtype, "same_kind"):
        raise TypeError(f"{what}: cannot cast the {result} result to out= dtype {out.dtype} (casting rule 'same_kind')")
    promotion.copyable(out.dtype)  # the result dtype was decided (and refused) by the op


def check_placement(out: Any, session: Any, what: str) -> None:
    """Host operands write host results, device operands device results."""
    if session is None and not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: the operands are on the host, so out= must be a numpy array")
    if session is not None and type(out) is not memory.array_type:
        raise TypeError(f"{what}: the operands are on the device, so out= must be a kerneldsl DeviceArray")


def unalias(value: Any, out: DeviceBuffer, session: Any) -> Any:
    """An input that overlaps the output at other elements (a broadcast input, a shifted or
    reversed view, foreign memory adopted twice) would be overwritten while still read: copy it.
    The test is the byte extents, whatever made the arrays. The output itself is safe: each
    element is read and written by the same thread."""
    if type(value) is memory.array_type and value.overlaps(out) and not value.same_elements(out):
        return session.copy(value)
    return value


def shares_memory(a: DeviceBuffer) -> bool:
    """Whether ``a`` may share bytes with another array: a view, or borrowed foreign memory
    (which kerneldsl cannot tell from another adoption of the same buffer). An array that owns
    its allocation overlaps only itself. Both keep what holds their memory in ``_owner`` (the
    root array, the foreign object); an allocation has none."""
    return a.base is not None or a._owner is not None


def is_strided(value: Any) -> bool:
    """Whether ``value`` is a DeviceArray view that is not C-contiguous."""
    return type(value) is memory.array_type and not value.is_contiguous


def contiguous(values: Sequence[Any]) -> list[Any]:
    """``values`` with every strided DeviceArray view replaced by a contiguous copy, for kernels
    that index their operands as C-contiguous (reductions and scans, for now)."""
    return [v.copy() if is_strided(v) else v for v in values]


def arg_key(value: Any) -> Any:
    """The part of a plan-cache key one call argument contributes.

    A DeviceArray contributes its ``dispatch_tag`` (session, dtype, alignment, index width), so a
    plan's key decides everything the kernel's own dispatch would.
    """
    t = type(value)
    if t is memory.array_type:
        return (value.dispatch_tag, value.shape)
    if t is np.ndarray:
        return (t, value.dtype, value.shape)
    if isinstance(value, np.generic):
        return value.dtype
    if is_remote(value):  # never waits for its shape: the call is sent to its worker as it is
        return t
    shape = getattr(value, "shape", None)  # foreign arrays (CuPy, PyTorch): adopted per call
    if shape is not None:
        return (t, getattr(value, "dtype", None), tuple(shape))
    return t


def into_strided(launch: Callable[[list[Any], Any, Any], None], values: list[Any], out: Any, session: Any) -> None:
    """Run ``launch`` into a contiguous temporary, then copy that into the strided view ``out``."""
    result = session.empty(out.shape, out.dtype)
    launch(values, result, session)
    result.copy_to(out)
    result.close()  # a stream-ordered free: after the copy


def memory_order(operands: Sequence[Any]) -> tuple[int, ...] | None:
    """The axis order, outermost first, in which every array operand (a DeviceArray or a NumPy
    array; 0-d ones aside) fills its memory without gaps, when all have one shape and share
    such an order that is not C's (transposes of contiguous arrays), else None. Elementwise work
    commutes with permuting axes, so the call runs on the operands transposed to that order, as
    contiguous arrays, and its result is transposed back: laid out as its operands, as NumPy's
    and CuPy's ``order="K"`` lay it out. Returns at the first array in C order (the usual call)."""
    order: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None
    for o in operands:
        if type(o) is memory.array_type:
            contiguous = o.is_contiguous
        elif isinstance(o, np.ndarray):
            contiguous = o.flags.c_contiguous
        elif isinstance(o, (int, float, complex, np.generic)):
            continue
        else:
            return None
        if o.ndim == 0:
            continue
        if contiguous or (shape is not None and o.shape != shape):
            return None
        dense = views.dense_order(o.shape, o.strides, o.dtype.itemsize)
        if dense is None or (order is not None and dense != order):
            return None
        order, shape = dense, o.shape
    return order
