"""Levels 1 and 2 of kd.blas: ``gemv``, ``axpy``, ``dot``, ``nrm2`` (float32 and float64).

``dot`` and ``nrm2`` write their result on the GPU into a 0-d array, so no call waits on the host.

Which kernel: an allocating call (``out=None``; for gemv also ``alpha=1``, ``beta=0``; no
``stream=``) is a reduction of the array layer (``reduced.py``): its warm call is one dict lookup
and a launch from C with the result from the pool, where a cuBLAS call is Python into the handle
on every call. A call whose arrays pass ``_lean_*`` (attribute tests only: a subset of what the
full checks accept) skips the full checks. ``out=``, ``alpha``/``beta`` and
``stream=`` run cuBLAS (device pointer mode for ``dot``/``nrm2``). Both read the same memory and
accept and refuse the same calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..array.ndarray import DeviceArray
from ..array import ops
from ..errors import ShapeMismatchError
from ..launch.routing import routed
from ..runtime import memory
from ..runtime.session import Session
from ..runtime.stream import Stream
from .binding import COMPUTE_32F, COMPUTE_64F, OP_N, OP_T, POINTER_MODE_DEVICE
from .checks import (
    F64,
    VECTOR_PREFIX,
    check_ndim,
    common_dtype,
    fill_zero,
    needs_64,
    no_alias,
    output,
    scalar_output,
    session_of,
)
from .handles import handle
from .reduced import dot_reduction, matrix_vector, vector_matrix


@routed
def gemv(
    a: DeviceArray,
    x: DeviceArray,
    out: DeviceArray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    stream: Stream | None = None,
) -> DeviceArray:
    """``out = alpha * op(a) @ x + beta * out`` for a 2-D ``a`` and 1-D ``x`` (float32, float64).

    A new ``op(a) @ x`` (``out=None``, ``alpha=1``, ``beta=0``, no ``stream``) is the ``dot``
    reduction over a's rows (its columns for ``trans_a``), launched from C once warm; the rest
    is cuBLAS's gemv (see the module docstring)."""
    allocated = out is None and stream is None and alpha == 1 and beta == 0
    if allocated and _lean_gemv(a, x, trans_a):
        return vector_matrix(x, a) if trans_a else matrix_vector(a, x)
    op = "kd.blas.gemv"
    session = session_of(op, ("a", "x", "out"), (a, x, out), stream)
    check_ndim(op, "a", a, 2)
    check_ndim(op, "x", x, 1)
    if out is not None:
        check_ndim(op, "out", out, 1)
    dt = common_dtype(op, VECTOR_PREFIX, ("a", "x", "out"), (a, x, out))
    rows, cols = a.shape
    n_in, n_out = (rows, cols) if trans_a else (cols, rows)
    if x.shape[0] != n_in:
        raise ShapeMismatchError(op, "x", f"op(a) is {n_out}x{n_in} but x has {x.shape[0]} elements")
    if allocated:
        return vector_matrix(x, a) if trans_a else matrix_vector(a, x)
    out = output(op, session, out, (n_out,), dt, beta)
    no_alias(op, out, a=a, x=x)
    if not n_out:
        return out
    if not n_in and beta == 0:
        return fill_zero(out, stream)
    prefix, suffix = VECTOR_PREFIX[dt], "_64" if needs_64(rows, cols) else ""
    h = handle(session)
    with session.activated():
        pa, pb = h.scalars(COMPUTE_64F if dt == F64 else COMPUTE_32F, alpha, beta)
        if n_in:  # row-major a is the column-major (cols x rows) a^T: op(a) = a is cuBLAS's "T"
            trans = OP_N if trans_a else OP_T
            args: tuple[Any, ...] = (trans, cols, rows, pa, a.ptr, cols, x.ptr, 1, pb, out.ptr, 1)
            h.call(f"{prefix}gemv{suffix}", *args, stream=stream, keep=(a, x, out))
        else:  # empty sum: gemv would return early and leave beta * out unscaled
            h.call(f"{prefix}scal{suffix}", n_out, pb, out.ptr, 1, stream=stream, keep=(a, x, out))
    return out


@routed
def axpy(alpha: float, x: DeviceArray, y: DeviceArray, *, stream: Stream | None = None) -> DeviceArray:
    """``y += alpha * x`` in place over all elements (same shape, float32 or float64); returns ``y``.
    ``stream``: a stream of the arrays' session (default: the session stream)."""
    op = "kd.blas.axpy"
    session = session_of(op, ("x", "y"), (x, y), stream)
    dt = common_dtype(op, VECTOR_PREFIX, ("x", "y"), (x, y))
    if x.shape != y.shape:
        raise ShapeMismatchError(op, "y", f"shape {y.shape} differs from x's {x.shape}")
    n = x.size
    if not n:
        return y
    name = VECTOR_PREFIX[dt] + "axpy" + ("_64" if needs_64(n) else "")
    h = handle(session)
    with session.activated():
        pa, _ = h.scalars(COMPUTE_64F if dt == F64 else COMPUTE_32F, alpha, 0.0)
        h.call(name, n, pa, x.ptr, 1, y.ptr, 1, stream=stream, keep=(x, y))
    return y


@routed
def dot(x: DeviceArray, y: DeviceArray, out: DeviceArray | None = None, *, stream: Stream | None = None) -> DeviceArray:
    """``sum(x * y)`` of two 1-D arrays, written on the device into a 0-d array (``out`` or new).

    The result stays on the device (no host synchronization); read it with ``.to_host()``.
    A new result (``out=None``, no ``stream``) is the ``dot`` reduction, launched from C once
    warm; ``out=`` or ``stream=`` is cuBLAS's dot (see the module docstring).
    """
    allocated = out is None and stream is None
    if allocated and _lean_dot(x, y):
        return dot_reduction(x, y)
    op = "kd.blas.dot"
    session = session_of(op, ("x", "y", "out"), (x, y, out), stream)
    check_ndim(op, "x", x, 1)
    check_ndim(op, "y", y, 1)
    dt = common_dtype(op, VECTOR_PREFIX, ("x", "y", "out"), (x, y, out))
    if x.shape != y.shape:
        raise ShapeMismatchError(op, "y", f"{y.shape[0]} elements, x has {x.shape[0]}")
    if allocated:
        return dot_reduction(x, y)
    out = scalar_output(op, session, out, dt)
    if not x.size:
        return fill_zero(out, stream)
    name = VECTOR_PREFIX[dt] + "dot" + ("_64" if needs_64(x.size) else "")
    return _reduce(session, name, (x.size, x.ptr, 1, y.ptr, 1), out, stream, (x, y, out))


@routed
def nrm2(x: DeviceArray, out: DeviceArray | None = None, *, stream: Stream | None = None) -> DeviceArray:
    """Euclidean norm over all elements of ``x`` (float32, float64), on the device into a 0-d array.

    A new result (``out=None``, no ``stream``) is ``kd.ops.norm``'s reduction, launched from C once
    warm: the square root of the sum of squares in ``x``'s dtype, without cuBLAS's scaling (so
    elements beyond the square root of the dtype's largest value overflow to inf); ``out=`` or
    ``stream=`` is cuBLAS's nrm2.
    """
    allocated = out is None and stream is None
    if allocated and _lean_nrm2(x):
        return ops.norm(x)
    op = "kd.blas.nrm2"
    session = session_of(op, ("x", "out"), (x, out), stream)
    dt = common_dtype(op, VECTOR_PREFIX, ("x", "out"), (x, out))
    if allocated:
        return ops.norm(x)
    out = scalar_output(op, session, out, dt)
    if not x.size:
        return fill_zero(out, stream)
    name = VECTOR_PREFIX[dt] + "nrm2" + ("_64" if needs_64(x.size) else "")
    return _reduce(session, name, (x.size, x.ptr, 1), out, stream, (x, out))


def _reduce(
    session: Session, name: str, args: tuple[Any, ...], out: DeviceArray, stream: Stream | None, keep: tuple[Any, ...]
) -> DeviceArray:
    """A level-1 reduction in device pointer mode: the result is written by the GPU, no host wait."""
    h = handle(session)
    with session.activated():
        h.call(name, *args, out.ptr, stream=stream, pointer_mode=POINTER_MODE_DEVICE, keep=keep)
    return out


def _lean_gemv(a: Any, x: Any, trans_a: bool) -> bool:
    """Whether ``gemv(a, x, trans_a=trans_a)`` passes its checks, from attributes alone: device
    arrays of one session, contiguous, one supported dtype, matching extents (a closed array
    is refused by the reduction as by ``session_of``)."""
    array = memory.array_type
    return (
        type(a) is array
        and type(x) is array
        and a.ndim == 2
        and x.ndim == 1
        and a.is_contiguous
        and x.is_contiguous
        and a.dtype is x.dtype
        and a.dtype in VECTOR_PREFIX
        and a.session is x.session
        and x.shape[0] == a.shape[0 if trans_a else 1]
    )


def _lean_dot(x: Any, y: Any) -> bool:
    """Whether ``dot(x, y)`` passes its checks, from attributes alone (see ``_lean_gemv``)."""
    array = memory.array_type
    return (
        type(x) is array
        and type(y) is array
        and x.ndim == 1
        and x.shape == y.shape
        and x.is_contiguous
        and y.is_contiguous
        and x.dtype is y.dtype
        and x.dtype in VECTOR_PREFIX
        and x.session is y.session
    )


def _lean_nrm2(x: Any) -> bool:
    """Whether ``nrm2(x)`` passes its checks, from attributes alone (see ``_lean_gemv``)."""
    return type(x) is memory.array_type and x.is_contiguous and x.dtype in VECTOR_PREFIX
