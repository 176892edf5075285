"""A cuBLAS and cuBLASLt double: ``nvmath.bindings.cublas`` / ``cublasLt`` over the driver double.

``FakeCublas`` implements the *column-major cuBLAS contract* (leading dimensions, transposes,
pointer modes) over ``FakeDriver``'s emulated device memory in float64, so kd.blas's row-major
mapping is checked against numpy, not against a copy of itself; it records every call with the
handle state it ran under, and ``fail[name] = status`` makes the next ``name`` call fail.
``FakeCublasLt.matmul_address`` hands out a C function pointer to the same matmul, so the C
launch path runs on CPU too. ``install`` puts both in place of the bindings.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
from driver_double import FakeDriver

from kerneldsl import blas
from kerneldsl.blas import binding, lt_config
from kerneldsl.dtypes import ELEMENT_TYPES, add_bfloat16

BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None
_CUDA_TYPES = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float64),
    2: np.dtype(np.float16),
    4: np.dtype(np.complex64),
    5: np.dtype(np.complex128),
}
if BF16 is not None:
    _CUDA_TYPES[14] = BF16


class FakeCuBLASError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


class FakeCublas:
    """Column-major cuBLAS semantics over FakeDriver memory; records every call with its handle state."""

    cuBLASError = FakeCuBLASError

    def __init__(self, drv: FakeDriver) -> None:
        self.drv = drv
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.live: dict[int, dict[str, Any]] = {}
        self.fail: dict[str, int] = {}
        self._next = 0xB1A5000
        self.lt: Any = None  # the FakeCublasLt that install() pairs with it

    # -- plumbing -----------------------------------------------------------------------------

    def _enter(self, name: str, h: int | None, *args: Any) -> dict[str, Any] | None:
        assert self.drv.depth() > 0, f"{name} called without a current CUDA context"
        self.calls.append((name, args))
        if name in self.fail:
            raise FakeCuBLASError(self.fail.pop(name))
        if h is None:
            return None
        if h not in self.live:
            raise FakeCuBLASError(1)  # NOT_INITIALIZED
        return self.live[h]

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def _ready(self, state: dict[str, Any], pointer_mode: int) -> None:
        assert state["stream"], "cuBLAS used before cublasSetStream"
        assert state["workspace"], "cuBLAS used without a workspace set after cublasSetStream"
        assert state["pointer_mode"] == pointer_mode, f"pointer mode {state['pointer_mode']}, expected {pointer_mode}"

    def _view(self, ptr: int, count: int, dt: np.dtype) -> np.ndarray:
        buf, off = self.drv._locate(ptr)
        return np.frombuffer(buf, dtype=dt, count=count, offset=off)

    def _matrix(self, ptr: int, rows: int, cols: int, ld: int, dt: np.dtype) -> np.ndarray:
        """A column-major rows x cols matrix with leading dimension ld, as a writable strided view."""
        if ld < max(1, rows):
            raise FakeCuBLASError(7)  # INVALID_VALUE, as cuBLAS reports a too-small leading dimension
        if rows == 0 or cols == 0:
            return np.zeros((rows, cols), dt)
        flat = self._view(ptr, ld * (cols - 1) + rows, dt)
        return np.lib.stride_tricks.as_strided(flat, (rows, cols), (dt.itemsize, ld * dt.itemsize))

    @staticmethod
    def _scalar(ptr: int, double: bool, complex_type: int = 0) -> Any:
        """The host scalar at ``ptr``: float or double, or (for cudaDataType 4/5) a complex of two."""
        part = ctypes.c_double if double else ctypes.c_float
        if complex_type not in (4, 5):
            return part.from_address(ptr).value
        return complex(part.from_address(ptr).value, part.from_address(ptr + ctypes.sizeof(part)).value)

    def _gemm(
        self,
        ta: int,
        tb: int,
        m: int,
        n: int,
        k: int,
        alpha: float,
        a: int,
        dta: np.dtype,
        lda: int,
        b: int,
        dtb: np.dtype,
        ldb: int,
        beta: float,
        c: int,
        dtc: np.dtype,
        ldc: int,
    ) -> None:
        wide = np.complex128 if dtc.kind == "c" else np.float64
        A = self._matrix(a, k if ta else m, m if ta else k, lda, dta).astype(wide)
        B = self._matrix(b, n if tb else k, k if tb else n, ldb, dtb).astype(wide)
        C = self._matrix(c, m, n, ldc, dtc)
        result = alpha * ((A.T if ta else A) @ (B.T if tb else B))
        if beta != 0:  # BLAS: with beta == 0, C is not read (it may hold NaN)
            result += beta * C.astype(wide)
        C[...] = result.astype(dtc)

    # -- handle and configuration ----------------------------------------------------------------

    def create(self) -> int:
        self._enter("create", None)
        self._next += 0x10
        self.live[self._next] = {"stream": 0, "workspace": 0, "pointer_mode": 0}
        return self._next

    def destroy(self, h: int) -> None:
        self._enter("destroy", h)
        del self.live[h]

    def set_stream(self, h: int, stream: int) -> None:
        state = self._enter("set_stream", h, stream)
        state["stream"], state["workspace"] = stream, 0  # cublasSetStream resets the workspace

    def set_workspace(self, h: int, ptr: int, size: int) -> None:
        state = self._enter("set_workspace", h, ptr, size)
        self._view(ptr, size, np.dtype(np.uint8))  # must be device memory of at least that size
        state["workspace"] = ptr

    def set_pointer_mode(self, h: int, mode: int) -> None:
        self._enter("set_pointer_mode", h, mode)["pointer_mode"] = mode

    # -- level 3 ----------------------------------------------------------------------------------

    def gemm_ex(
        self,
        h: int,
        ta: int,
        tb: int,
        m: int,
        n: int,
        k: int,
        alpha: int,
        a: int,
        at: int,
        lda: int,
        b: int,
        bt: int,
        ldb: int,
        beta: int,
        c: int,
        ct: int,
        ldc: int,
        compute: int,
        algo: int,
    ) -> None:
        self._ready(self._enter("gemm_ex", h, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, compute), 0)
        double = compute == blas.COMPUTE_64F
        self._gemm(
            ta,
            tb,
            m,
            n,
            k,
            self._scalar(alpha, double, ct),
            a,
            _CUDA_TYPES[at],
            lda,
            b,
            _CUDA_TYPES[bt],
            ldb,
            self._scalar(beta, double, ct),
            c,
            _CUDA_TYPES[ct],
            ldc,
        )

    def gemm_strided_batched_ex(
        self,
        h: int,
        ta: int,
        tb: int,
        m: int,
        n: int,
        k: int,
        alpha: int,
        a: int,
        at: int,
        lda: int,
        sa: int,
        b: int,
        bt: int,
        ldb: int,
        sb: int,
        beta: int,
        c: int,
        ct: int,
        ldc: int,
        sc: int,
        batch: int,
        compute: int,
        algo: int,
    ) -> None:
        self._ready(self._enter("gemm_strided_batched_ex", h, ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch), 0)
        double = compute == blas.COMPUTE_64F
        dta, dtb, dtc = _CUDA_TYPES[at], _CUDA_TYPES[bt], _CUDA_TYPES[ct]
        for i in range(batch):
            self._gemm(
                ta,
                tb,
                m,
                n,
                k,
                self._scalar(alpha, double, ct),
                a + i * sa * dta.itemsize,
                dta,
                lda,
                b + i * sb * dtb.itemsize,
                dtb,
                ldb,
                self._scalar(beta, double, ct),
                c + i * sc * dtc.itemsize,
                dtc,
                ldc,
            )

    # -- levels 1 and 2 -----------------------------------------------------------------------------

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
        self._ready(self._enter("gemv", h, trans, m, n, lda, incx, incy), 0)
        double = dt == np.float64
        A = self._matrix(a, m, n, lda, dt).astype(np.float64)
        op = A.T if trans else A
        X = self._view(x, op.shape[1], dt).astype(np.float64)
        Y = self._view(y, op.shape[0], dt)
        result = self._scalar(alpha, double) * (op @ X)
        b = self._scalar(beta, double)
        if b != 0:
            result += b * Y
        Y[...] = result

    def sgemv(self, *args: Any) -> None:
        self._gemv(np.dtype(np.float32), *args)

    def dgemv(self, *args: Any) -> None:
        self._gemv(np.dtype(np.float64), *args)

    def _scal(self, dt: np.dtype, h: int, n: int, alpha: int, x: int, incx: int) -> None:
        self._ready(self._enter("scal", h, n, incx), 0)
        X = self._view(x, n, dt)
        X[...] = X * self._scalar(alpha, dt == np.float64)

    def sscal(self, *args: Any) -> None:
        self._scal(np.dtype(np.float32), *args)

    def dscal(self, *args: Any) -> None:
        self._scal(np.dtype(np.float64), *args)

    def _axpy(self, dt: np.dtype, h: int, n: int, alpha: int, x: int, incx: int, y: int, incy: int) -> None:
        self._ready(self._enter("axpy", h, n, incx, incy), 0)
        Y = self._view(y, n, dt)
        Y[...] = Y + self._scalar(alpha, dt == np.float64) * self._view(x, n, dt)

    def saxpy(self, *args: Any) -> None:
        self._axpy(np.dtype(np.float32), *args)

    def daxpy(self, *args: Any) -> None:
        self._axpy(np.dtype(np.float64), *args)

    def _dot(self, dt: np.dtype, h: int, n: int, x: int, incx: int, y: int, incy: int, result: int) -> None:
        self._ready(self._enter("dot", h, n, incx, incy), 1)
        value = np.dot(self._view(x, n, dt).astype(np.float64), self._view(y, n, dt).astype(np.float64))
        self._view(result, 1, dt)[0] = value

    def sdot(self, *args: Any) -> None:
        self._dot(np.dtype(np.float32), *args)

    def ddot(self, *args: Any) -> None:
        self._dot(np.dtype(np.float64), *args)

    def _nrm2(self, dt: np.dtype, h: int, n: int, x: int, incx: int, result: int) -> None:
        self._ready(self._enter("nrm2", h, n, incx), 1)
        self._view(result, 1, dt)[0] = np.linalg.norm(self._view(x, n, dt).astype(np.float64))

    def snrm2(self, *args: Any) -> None:
        self._nrm2(np.dtype(np.float32), *args)

    def dnrm2(self, *args: Any) -> None:
        self._nrm2(np.dtype(np.float64), *args)


class FakeCuBLASLtError(FakeCuBLASError):
    pass


_LT_MATMUL = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 14, ctypes.c_size_t, ctypes.c_void_p)


class FakeCublasLt:
    """Column-major cuBLASLt matmul over FakeDriver memory, computed by FakeCublas's reference gemm.

    ``matmul_address`` hands out a C function pointer to the same matmul, so the C launch path
    can run kd.blas.gemm on CPU exactly as it would call cublasLtMatmul.
    """

    cuBLASLtError = FakeCuBLASLtError
    matmul_heuristic_result_dtype = np.dtype(
        [
            ("algo", "<u8", (8,)),
            ("workspace_size", "<u8"),
            ("state", "<i4"),
            ("waves_count", "<f4"),
            ("reserved", "<i4", (4,)),
        ]
    )

    def __init__(self, blas_double: FakeCublas) -> None:
        self.blas = blas_double
        self.descs: dict[int, dict[str, int]] = {}
        self.layouts: dict[int, tuple[int, int, int, int]] = {}
        self.prefs: dict[int, dict[int, int]] = {}
        self.handles: set[int] = set()
        self.heuristics: list[dict[int, int]] = []
        self.matmuls: list[dict[str, Any]] = []
        self.c_matmuls = 0
        self.no_algorithm = False
        self.broken = 0  # a status every matmul fails with, like a persistent cuBLASLt refusal
        self._c_matmul = _LT_MATMUL(self._matmul_from_c)
        self._next = 0x17000

    def _new(self) -> int:
        self._next += 0x10
        return self._next

    def _enter(self, name: str, *args: Any) -> None:
        try:
            self.blas._enter("lt." + name, None, *args)
        except FakeCuBLASError as exc:
            raise FakeCuBLASLtError(exc.status) from None

    def create(self) -> int:
        self._enter("create")
        h = self._new()
        self.handles.add(h)
        return h

    def destroy(self, h: int) -> None:
        self._enter("destroy", h)
        self.handles.remove(h)

    def matmul_desc_create(self, compute: int, scale: int) -> int:
        h = self._new()
        self.descs[h] = {"compute": compute, "scale": scale, 3: 0, 4: 0}
        return h

    def matmul_desc_set_attribute(self, desc: int, attr: int, buf: int, size: int) -> None:
        self.descs[desc][attr] = ctypes.c_int32.from_address(buf).value

    def matmul_desc_destroy(self, desc: int) -> None:
        del self.descs[desc]

    def matrix_layout_create(self, ctype: int, rows: int, cols: int, ld: int) -> int:
        h = self._new()
        self.layouts[h] = (ctype, rows, cols, ld)
        return h

    def matrix_layout_destroy(self, layout: int) -> None:
        del self.layouts[layout]

    def matmul_preference_create(self) -> int:
        h = self._new()
        self.prefs[h] = {}
        return h

    def matmul_preference_set_attribute(self, pref: int, attr: int, buf: int, size: int) -> None:
        self.prefs[pref][attr] = (ctypes.c_uint64 if size == 8 else ctypes.c_uint32).from_address(buf).value

    def matmul_preference_destroy(self, pref: int) -> None:
        del self.prefs[pref]

    def matmul_algo_get_heuristic(
        self, h: int, desc: int, a: int, b: int, c: int, d: int, pref: int, requested: int, results: int, count: int
    ) -> None:
        self._enter("matmul_algo_get_heuristic", h)
        self.heuristics.append(dict(self.prefs[pref]))
        ctypes.c_int32.from_address(count).value = 0 if self.no_algorithm else 1

    def matmul(
        self,
        h: int,
        desc: int,
        alpha: int,
        a: int,
        a_layout: int,
        b: int,
        b_layout: int,
        beta: int,
        c: int,
        c_layout: int,
        d: int,
        d_layout: int,
        algo: int,
        workspace: int,
        workspace_bytes: int,
        stream: int,
    ) -> None:
        self._enter("matmul", h, stream, workspace)
        if self.broken:
            raise FakeCuBLASLtError(self.broken)
        assert h in self.handles and c == d and c_layout == d_layout
        self.blas._view(workspace, workspace_bytes, np.dtype(np.uint8))  # must be device memory of that size
        spec = self.descs[desc]
        ta, tb = spec[3], spec[4]
        at, a_rows, a_cols, lda = self.layouts[a_layout]
        bt, b_rows, b_cols, ldb = self.layouts[b_layout]
        ct, m, n, ldc = self.layouts[c_layout]
        k = a_rows if ta else a_cols
        self.matmuls.append(
            {
                "ta": ta,
                "tb": tb,
                "a": self.layouts[a_layout][1:],
                "b": self.layouts[b_layout][1:],
                "c": self.layouts[c_layout][1:],
                "compute": spec["compute"],
                "stream": stream,
                "workspace": (workspace, workspace_bytes),
            }
        )
        double = spec["scale"] == 1
        self.blas._gemm(
            ta,
            tb,
            m,
            n,
            k,
            FakeCublas._scalar(alpha, double),
            a,
            _CUDA_TYPES[at],
            lda,
            b,
            _CUDA_TYPES[bt],
            ldb,
            FakeCublas._scalar(beta, double),
            c,
            _CUDA_TYPES[ct],
            ldc,
        )

    def _matmul_from_c(
        self,
        h: int,
        desc: int,
        alpha: int,
        a: int,
        a_layout: int,
        b: int,
        b_layout: int,
        beta: int,
        c: int,
        c_layout: int,
        d: int,
        d_layout: int,
        algo: int,
        workspace: int,
        workspace_bytes: int,
        stream: int,
    ) -> int:
        self.c_matmuls += 1
        try:
            self.matmul(
                h,
                desc,
                alpha,
                a,
                a_layout,
                b,
                b_layout,
                beta,
                c,
                c_layout,
                d,
                d_layout,
                algo,
                workspace,
                workspace_bytes,
                stream or 0,
            )
        except FakeCuBLASError as exc:
            return exc.status
        return 0

    def matmul_address(self) -> int:
        return int(ctypes.cast(self._c_matmul, ctypes.c_void_p).value or 0)


def install(drv: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> FakeCublas:
    """Make kd.blas load the doubles (``fake.lt`` is the cuBLASLt one); undo with ``blas.gemm._forget_launches()``."""
    fake = FakeCublas(drv)
    fake.lt = FakeCublasLt(fake)
    monkeypatch.setattr(binding, "_lib", fake)
    monkeypatch.setattr(lt_config, "_lib", fake.lt)
    monkeypatch.setattr(lt_config, "matmul_address", fake.lt.matmul_address)
    return fake
