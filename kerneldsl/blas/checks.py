"""What kd.blas checks before cuBLAS sees anything: sessions, dtypes, shapes, outputs, aliasing.

Each failure is the typed error naming the operation and the argument; a refused call has
enqueued nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array.ndarray import DeviceArray, as_array
from ..dtypes import ELEMENT_TYPES, INT32_MAX, add_bfloat16
from ..errors import AliasingError, BindingError, ShapeMismatchError, StridedArrayError
from ..launch.routing import RemoteArguments, is_remote
from ..runtime import memory
from ..runtime.handle import check_same_session
from ..runtime.session import Session
from ..runtime.stream import Stream, check_stream
from .binding import C_32F, C_64F, COMPUTE_32F, COMPUTE_64F, R_16BF, R_16F, R_32F, R_64F

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None

# dtype -> (cudaDataType, cublasComputeType); the compute type fixes alpha/beta's C type (for
# complex types: cuComplex / cuDoubleComplex, see ``BlasHandle.complex_scalars``).
GEMM_TYPES: dict[np.dtype, tuple[int, int]] = {
    F16: (R_16F, COMPUTE_32F),
    F32: (R_32F, COMPUTE_32F),
    F64: (R_64F, COMPUTE_64F),
    np.dtype(np.complex64): (C_32F, COMPUTE_32F),
    np.dtype(np.complex128): (C_64F, COMPUTE_64F),
}
COMPLEX_GEMM_TYPES = frozenset((C_32F, C_64F))
if BF16 is not None:
    GEMM_TYPES[BF16] = (R_16BF, COMPUTE_32F)

# dtype -> binding-name prefix of the classic level-1/2 routines (sgemv, daxpy, ...).
VECTOR_PREFIX: dict[np.dtype, str] = {F32: "s", F64: "d"}


def session_of(op: str, names: tuple[str, ...], arrays: tuple[Any, ...], stream: Stream | None) -> Session:
    """The one session owning every array and ``stream``; specific errors for foreign, closed or mixed ones.
    ``stream`` is checked first, before anything is read from the arrays (``check_stream``)."""
    if stream is not None:
        check_stream(stream, None)
    for name, a in zip(names, arrays):
        if a is not None and type(a) is not memory.array_type:
            if is_remote(a):
                raise RemoteArguments(a)
            raise BindingError(
                op, name, f"expected a kerneldsl DeviceArray, got {type(a).__name__} (use session.to_device)"
            )
    for name, a in zip(names, arrays):
        if a is not None and not a.is_contiguous:
            raise StridedArrayError(
                op, name, f"a strided view (strides {a.strides}) where cuBLAS needs C-contiguous memory: pass x.copy()"
            )
    present = [a for a in arrays if a is not None]
    if stream is not None:
        present.append(stream)
    for a in present:
        a._check()
    check_same_session(*present)
    session: Session = present[0].session
    return session


def common_dtype(op: str, table: dict[np.dtype, Any], names: tuple[str, ...], arrays: tuple[Any, ...]) -> np.dtype:
    """The common dtype of ``arrays``, which ``table`` must support."""
    dt: np.dtype[Any] = arrays[0].dtype
    if dt not in table:
        supported = ", ".join(str(d) for d in table)
        raise BindingError(op, names[0], f"dtype {dt} is not supported (supported: {supported})")
    for name, a in zip(names[1:], arrays[1:]):
        if a is not None and a.dtype != dt:
            raise BindingError(op, name, f"dtype {a.dtype} does not match {names[0]}'s {dt}")
    return dt


def check_ndim(op: str, name: str, a: DeviceArray, ndim: int) -> None:
    if a.ndim != ndim:
        raise ShapeMismatchError(op, name, f"expected a {ndim}-D array, got shape {a.shape}")


def output(
    op: str, session: Session, out: DeviceArray | None, shape: tuple[int, ...], dtype: np.dtype, beta: Any
) -> DeviceArray:
    """``out`` checked against the result's shape, or a new array (which needs ``beta == 0``)."""
    if out is None:
        if beta != 0:
            raise BindingError(op, "beta", f"beta={beta!r} scales the previous output: pass out=")
        return as_array(session.empty(shape, dtype))
    if out.shape != shape:
        raise ShapeMismatchError(op, "out", f"expected shape {shape}, got {out.shape}")
    return out


def scalar_output(op: str, session: Session, out: DeviceArray | None, dtype: np.dtype) -> DeviceArray:
    """``out`` checked to hold one element, or a new 0-d array."""
    if out is None:
        return as_array(session.empty((), dtype))
    if out.size != 1:
        raise ShapeMismatchError(op, "out", f"expected one element (shape ()), got shape {out.shape}")
    return out


def no_alias(op: str, out: DeviceArray, **inputs: DeviceArray) -> None:
    for name, a in inputs.items():
        if out.overlaps(a):
            raise AliasingError(op, "out", f"overlaps input {name!r}: cuBLAS cannot write its result in place")


def fill_zero(out: DeviceArray, stream: Stream | None) -> DeviceArray:
    """Enqueue ``out[...] = 0``: an empty sum, which cuBLAS's quick returns would leave unwritten."""
    out.fill_zero(stream)
    return out


def needs_64(*extents: int) -> bool:
    """True when the 64-bit (``_64``) entry points are needed."""
    return max(extents) > INT32_MAX
