"""The host BLAS: the cuBLAS calls kd.blas makes, computed by NumPy (OpenBLAS) in the CPU device's memory.

A session on the CPU device gives its ``BlasHandle`` this library in place of nvmath's cuBLAS
bindings (``handles``), so ``kd.blas`` and ``kd.matmul`` run unchanged there and need no
``kerneldsl[blas]`` extra. It keeps cuBLAS's contract, not kd.blas's: column-major matrices with
leading dimensions and batch strides in elements, transpose flags, alpha and beta read from their
addresses in the compute type's C type, results of ``dot``/``nrm2`` written to an address, and
the quick returns of the reference BLAS. So kd.blas's row-major mapping is exercised exactly as
on a GPU; a violated argument rule is the status cuBLAS reports (a ``BlasError`` after
``binding.blas_error``).

Precision follows the compute type: float16 and bfloat16 are widened to float32, multiplied and
accumulated in float32 (NumPy's sgemm), scaled by float32 alpha and beta and rounded once to
their storage type; float32, float64, complex64 and complex128 run sgemm, dgemm, cgemm and zgemm
(``COMPUTE_32F_FAST_TF32`` runs full float32: a CPU has no TF32).

Ordering: the CPU device runs work when it is enqueued, so a call computes before it returns;
on a stream being captured into a graph the host driver records the computation instead
(``HostDriver.enqueue``) and runs it at each replay, with alpha and beta as they were at the
call, as cuBLAS reads host-mode scalars at capture.

There is no cuBLASLt here (``BlasHandle.lt`` is None): every ``kd.blas.gemm`` is one
``gemm_ex`` on the Python path, the C launch path never takes it.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .binding import C_32F, C_64F, COMPUTE_64F, R_16BF, R_16F, R_32F, R_64F, status_name
from .checks import BF16, F16, F32, F64

NOT_INITIALIZED, INVALID_VALUE = 1, 7  # CUBLAS_STATUS_*

# cudaDataType -> the NumPy dtype of its storage
STORAGE: dict[int, np.dtype] = {
    R_16F: F16,
    R_32F: F32,
    R_64F: F64,
    C_32F: np.dtype(np.complex64),
    C_64F: np.dtype(np.complex128),
}
if BF16 is not None:
    STORAGE[R_16BF] = BF16
HALF = frozenset(dt for dt in (F16, BF16) if dt is not None)  # computed in float32


class HostBlasError(Exception):
    """A call the host BLAS refused, with the ``CUBLAS_STATUS_*`` code cuBLAS would return."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(f"{status_name(status)}: {why}")
        self.status = status


def _check(ok: bool, why: str) -> None:
    if not ok:
        raise HostBlasError(INVALID_VALUE, why)


def _memory(ptr: int, dt: np.dtype, count: int) -> np.ndarray:
    """The ``count`` elements of ``dt`` at host address ``ptr``, as a writable array."""
    return np.frombuffer(memoryview((ctypes.c_char * (count * dt.itemsize)).from_address(ptr)), dt)


def _matrices(ptr: int, dt: np.dtype, batch: int, stride: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """``batch`` column-major ``rows x cols`` matrices of leading dimension ``ld``, ``stride``
    elements apart, as a ``(batch, rows, cols)`` view of the memory at ``ptr``."""
    if not (rows and cols):
        return np.zeros((batch, rows, cols), dt)
    flat = _memory(ptr, dt, (batch - 1) * stride + (cols - 1) * ld + rows)
    e = dt.itemsize
    return np.lib.stride_tricks.as_strided(flat, (batch, rows, cols), (stride * e, e, ld * e))


def _vector(ptr: int, dt: np.dtype, n: int, inc: int) -> np.ndarray:
    """``n`` elements ``inc`` apart from ``ptr``, as a view."""
    if not n:
        return np.zeros(0, dt)
    flat = _memory(ptr, dt, (n - 1) * inc + 1)
    return np.lib.stride_tricks.as_strided(flat, (n,), (inc * dt.itemsize,))


def _scalar(ptr: int, double: bool, complex_: bool) -> Any:
    """The host scalar at ``ptr``: float or double, or a complex of two of them."""
    part = ctypes.c_double if double else ctypes.c_float
    if not complex_:
        return part.from_address(ptr).value
    return complex(part.from_address(ptr).value, part.from_address(ptr + ctypes.sizeof(part)).value)


def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: Any, beta: Any, wide: np.dtype) -> None:
    """``c = alpha * a @ b + beta * c`` computed in ``wide``; with ``alpha == 0`` a and b are not
    read, with ``beta == 0`` c is not (either may hold NaN)."""
    if alpha == 1 and beta == 0 and c.dtype == wide:
        np.matmul(a, b, out=c)
        return
    if alpha == 0:
        c[...] = beta * c.astype(wide) if beta != 0 else 0
        return
    result = np.matmul(a.astype(wide, copy=False), b.astype(wide, copy=False))
    if alpha != 1:
        result *= alpha
    if beta != 0:
        result += beta * c.astype(wide)
    c[...] = result


def _gemv(a: np.ndarray, x: np.ndarray, y: np.ndarray, alpha: Any, beta: Any) -> None:
    """``y = alpha * a @ x + beta * y`` (a and x not read when ``alpha == 0``, y not when ``beta == 0``)."""
    if alpha == 0:
        y[...] = beta * y if beta != 0 else 0
        return
    result = a @ x
    if alpha != 1:
        result *= alpha
    if beta != 0:
        result += beta * y
    y[...] = result


def _scale(x: np.ndarray, alpha: Any) -> None:
    x *= alpha


def _axpy(alpha: Any, x: np.ndarray, y: np.ndarray) -> None:
    y += alpha * x


def _dot(x: np.ndarray, y: np.ndarray, result: np.ndarray) -> None:
    result[0] = np.dot(x, y)


def _nrm2(x: np.ndarray, result: np.ndarray) -> None:
    """The norm scaled by the largest magnitude, as BLAS computes it: no overflow of the squares."""
    scale = np.max(np.abs(x)) if x.size else x.dtype.type(0)
    if scale == 0 or not np.isfinite(scale):
        result[0] = scale
        return
    scaled = x / scale
    result[0] = scale * np.sqrt(np.dot(scaled, scaled))


class HostBlas:
    """The subset of ``nvmath.bindings.cublas`` kd.blas calls, for memory of the CPU device.

    Handles are numbers with the stream and pointer mode last set on them; work is handed to the
    host driver on the handle's stream (it runs now, or is recorded by a capture). One instance
    serves the process (``library``).
    """

    cuBLASError = HostBlasError

    def __init__(self, enqueue: Callable[[Any, Callable[[], None]], None]) -> None:
        self._enqueue = enqueue
        self._handles: dict[int, list[int]] = {}  # handle -> [stream, pointer mode]
        self._ids = itertools.count(0x4B0)

    # -- handle and configuration ------------------------------------------------------------------

    def create(self) -> int:
        h = next(self._ids)
        self._handles[h] = [0, 0]
        return h

    def destroy(self, h: int) -> None:
        self._state(h)
        del self._handles[h]

    def set_stream(self, h: int, stream: int) -> None:
        self._state(h)[0] = int(stream)

    def set_workspace(self, h: int, ptr: int, size: int) -> None:
        """Accepted and unused: the host BLAS allocates nothing of the session's."""
        self._state(h)

    def set_pointer_mode(self, h: int, mode: int) -> None:
        self._state(h)[1] = int(mode)

    def _state(self, h: int) -> list[int]:
        state = self._handles.get(int(h))
        if state is None:
            raise HostBlasError(NOT_INITIALIZED, f"no live handle {h}")
        return state

    # -- level 3 ----------------------------------------------------------------------------------------

    def gemm_ex(
        self,
        h: int,
        trans_a: int,
        trans_b: int,
        m: int,
        n: int,
        k: int,
        alpha: int,
        a: int,
        a_type: int,
        lda: int,
        b: int,
        b_type: int,
        ldb: int,
        beta: int,
        c: int,
        c_type: int,
        ldc: int,
        compute: int,
        algo: int,
    ) -> None:
        """``C = alpha op(A) op(B) + beta C``: a batch of one."""
        self.gemm_strided_batched_ex(
            h,
            trans_a,
            trans_b,
            m,
            n,
            k,
            alpha,
            a,
            a_type,
            lda,
            0,
            b,
            b_type,
            ldb,
            0,
            beta,
            c,
            c_type,
            ldc,
            0,
            1,
            compute,
            algo,
        )

    def gemm_strided_batched_ex(
        self,
        h: int,
        trans_a: int,
        trans_b: int,
        m: int,
        n: int,
        k: int,
        alpha: int,
        a: int,
        a_type: int,
        lda: int,
        stride_a: int,
        b: int,
        b_type: int,
        ldb: int,
        stride_b: int,
        beta: int,
        c: int,
        c_type: int,
        ldc: int,
        stride_c: int,
        batch: int,
        compute: int,
        algo: int,
    ) -> None:
        """``C[i] = alpha op(A[i]) op(B[i]) + beta C[i]`` for ``i < batch``, each matrix its
        stride (elements) after the previous one (a stride of 0 repeats one matrix)."""
        stream = self._state(h)[0]
        _check(a_type == b_type == c_type and c_type in STORAGE, f"data types {a_type}, {b_type}, {c_type}")
        _check(trans_a in (0, 1) and trans_b in (0, 1), f"operations {trans_a}, {trans_b}")
        _check(min(m, n, k, batch, stride_a, stride_b, stride_c) >= 0, "a negative extent or stride")
        rows_a, cols_a = (k, m) if trans_a else (m, k)
        rows_b, cols_b = (n, k) if trans_b else (k, n)
        _check(lda >= max(1, rows_a), f"lda {lda} < {max(1, rows_a)}")
        _check(ldb >= max(1, rows_b), f"ldb {ldb} < {max(1, rows_b)}")
        _check(ldc >= max(1, m), f"ldc {ldc} < {max(1, m)}")
        dt = STORAGE[c_type]
        complex_ = dt.kind == "c"
        double = compute == COMPUTE_64F
        alpha_value, beta_value = _scalar(alpha, double, complex_), _scalar(beta, double, complex_)
        if not (m and n and batch) or ((alpha_value == 0 or not k) and beta_value == 1):
            return
        op_a = _matrices(a, dt, batch, stride_a, rows_a, cols_a, lda)
        op_b = _matrices(b, dt, batch, stride_b, rows_b, cols_b, ldb)
        out = _matrices(c, dt, batch, stride_c, m, n, ldc)
        wide = F32 if dt in HALF else dt
        self._enqueue(
            stream,
            functools.partial(
                _gemm,
                op_a.swapaxes(1, 2) if trans_a else op_a,
                op_b.swapaxes(1, 2) if trans_b else op_b,
                out,
                alpha_value,
                beta_value,
                wide,
            ),
        )

    gemm_ex_64 = gemm_ex
    gemm_strided_batched_ex_64 = gemm_strided_batched_ex

    # -- levels 1 and 2 ----------------------------------------------------------------------------------

    def _gemv(
        self,
        dt: np.dtype,
        h: int,
        trans: int,
        m: int,
        n: int,
        alpha: int,
        a: int,
        lda: int,
        x: int,
        incx: int,
        beta: int,
        y: int,
        incy: int,
    ) -> None:
        """``y = alpha op(A) x + beta y`` for a column-major ``m x n`` A."""
        stream = self._state(h)[0]
        _check(trans in (0, 1), f"operation {trans}")
        _check(m >= 0 and n >= 0 and lda >= max(1, m), f"m {m}, n {n}, lda {lda}")
        _check(incx > 0 and incy > 0, f"increments {incx}, {incy} (the host BLAS takes positive ones)")
        double = dt == F64
        alpha_value, beta_value = _scalar(alpha, double, False), _scalar(beta, double, False)
        if not (m and n) or (alpha_value == 0 and beta_value == 1):
            return
        matrix = _matrices(a, dt, 1, 0, m, n, lda)[0]
        length_x, length_y = (m, n) if trans else (n, m)
        work = functools.partial(
            _gemv,
            matrix.T if trans else matrix,
            _vector(x, dt, length_x, incx),
            _vector(y, dt, length_y, incy),
            alpha_value,
            beta_value,
        )
        self._enqueue(stream, work)

    def _scal(self, dt: np.dtype, h: int, n: int, alpha: int, x: int, incx: int) -> None:
        """``x *= alpha``."""
        stream = self._state(h)[0]
        if n > 0 and incx > 0:
            self._enqueue(stream, functools.partial(_scale, _vector(x, dt, n, incx), _scalar(alpha, dt == F64, False)))

    def _axpy(self, dt: np.dtype, h: int, n: int, alpha: int, x: int, incx: int, y: int, incy: int) -> None:
        """``y += alpha * x``."""
        stream = self._state(h)[0]
        _check(incx > 0 and incy > 0, f"increments {incx}, {incy} (the host BLAS takes positive ones)")
        alpha_value = _scalar(alpha, dt == F64, False)
        if n > 0 and alpha_value != 0:
            work = functools.partial(_axpy, alpha_value, _vector(x, dt, n, incx), _vector(y, dt, n, incy))
            self._enqueue(stream, work)

    def _dot(self, dt: np.dtype, h: int, n: int, x: int, incx: int, y: int, incy: int, result: int) -> None:
        """``*result = sum(x * y)`` (result: an address of either pointer mode; all memory here is the host's)."""
        stream = self._state(h)[0]
        _check(incx > 0 and incy > 0, f"increments {incx}, {incy} (the host BLAS takes positive ones)")
        n = max(n, 0)
        work = functools.partial(_dot, _vector(x, dt, n, incx), _vector(y, dt, n, incy), _memory(result, dt, 1))
        self._enqueue(stream, work)

    def _nrm2(self, dt: np.dtype, h: int, n: int, x: int, incx: int, result: int) -> None:
        """``*result = sqrt(sum(x * x))``, scaled against overflow (zero for ``n <= 0`` or ``incx <= 0``)."""
        stream = self._state(h)[0]
        vector = _vector(x, dt, n, incx) if n > 0 and incx > 0 else np.zeros(0, dt)
        self._enqueue(stream, functools.partial(_nrm2, vector, _memory(result, dt, 1)))

    sgemv = sgemv_64 = functools.partialmethod(_gemv, F32)
    dgemv = dgemv_64 = functools.partialmethod(_gemv, F64)
    sscal = sscal_64 = functools.partialmethod(_scal, F32)
    dscal = dscal_64 = functools.partialmethod(_scal, F64)
    saxpy = saxpy_64 = functools.partialmethod(_axpy, F32)
    daxpy = daxpy_64 = functools.partialmethod(_axpy, F64)
    sdot = sdot_64 = functools.partialmethod(_dot, F32)
    ddot = ddot_64 = functools.partialmethod(_dot, F64)
    snrm2 = snrm2_64 = functools.partialmethod(_nrm2, F32)
    dnrm2 = dnrm2_64 = functools.partialmethod(_nrm2, F64)


_library: HostBlas | None = None
_library_lock = threading.Lock()


def library() -> HostBlas:
    """The process's host BLAS, on the CPU device's driver (made on first use)."""
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                from ..runtime.host_driver import host_api

                _library = HostBlas(host_api().enqueue)
    return _library
