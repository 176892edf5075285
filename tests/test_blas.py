"""kd.blas on CPU: validation, the row-major/column-major mapping, handle lifecycle, missing library.

No GPU and no libcublas: sessions run on the recording driver double, and the cuBLAS double
(``blas_double.FakeCublas``) stands in for ``nvmath.bindings.cublas``: it implements the
column-major cuBLAS contract, so the row-major mapping in kd.blas is checked against numpy,
not against a copy of itself.
"""

from __future__ import annotations

import builtins
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from blas_double import BF16, FakeCublas
from conftest import in_threads
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.blas import binding, lt_config
from kerneldsl.errors import (
    AliasingError,
    BindingError,
    BlasError,
    BlasNotAvailableError,
    ClosedError,
    KernelDSLError,
    SessionCloseError,
    ShapeMismatchError,
    StickyCudaError,
    StridedArrayError,
    WrongSessionError,
)
from kerneldsl.launch import fastpath
from kerneldsl.runtime import Session

GEMM_DTYPES = [np.float16, np.float32, np.float64] + ([BF16] if BF16 is not None else [])


# -- fixtures ----------------------------------------------------------------------------------------------


def blas_lt_view(base: DeviceArray, offset_bytes: int, shape: tuple[int, ...]) -> Any:
    """A float32 device view ``offset_bytes`` into ``base``, for alignment tests."""
    from kerneldsl.runtime.interop import DeviceView

    return DeviceView(
        ptr=base.ptr + offset_bytes,
        shape=shape,
        strides=(4 * shape[1], 4),
        dtype=np.dtype(np.float32),
        device=0,
        readonly=False,
        owner=base,
    )


def rand(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def tolerance(dtype: Any) -> float:
    return {np.dtype(np.float16): 2e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}.get(
        np.dtype(dtype), 5e-2
    )


def reference(a: np.ndarray, b: np.ndarray, trans_a: bool, trans_b: bool) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64.swapaxes(-1, -2) if trans_a else a64) @ (b64.swapaxes(-1, -2) if trans_b else b64)


# -- constants and import hygiene ---------------------------------------------------------------------------


def test_abi_constants_match_nvmath() -> None:
    cublas = pytest.importorskip("nvmath.bindings.cublas")
    import nvmath

    assert (blas.OP_N, blas.OP_T) == (cublas.Operation.N, cublas.Operation.T)
    assert (blas.POINTER_MODE_HOST, blas.POINTER_MODE_DEVICE) == (cublas.PointerMode.HOST, cublas.PointerMode.DEVICE)
    assert blas.GEMM_DEFAULT == cublas.GemmAlgo.DEFAULT
    assert blas.COMPUTE_32F == cublas.ComputeType.COMPUTE_32F
    assert blas.COMPUTE_32F_FAST_TF32 == cublas.ComputeType.COMPUTE_32F_FAST_TF32
    assert blas.COMPUTE_64F == cublas.ComputeType.COMPUTE_64F
    t = nvmath.CudaDataType
    assert (blas.R_16F, blas.R_32F, blas.R_64F, blas.R_16BF) == (
        t.CUDA_R_16F,
        t.CUDA_R_32F,
        t.CUDA_R_64F,
        t.CUDA_R_16BF,
    )
    for status in cublas.Status:
        if status:
            assert blas.status_name(status) == f"CUBLAS_STATUS_{status.name}"


def test_cublaslt_attribute_ids_match_nvmath() -> None:
    lt = pytest.importorskip("nvmath.bindings.cublasLt")
    desc, pref = lt.MatmulDescAttribute, lt.MatmulPreferenceAttribute
    assert (lt_config.DESC_TRANSA, lt_config.DESC_TRANSB) == (desc.TRANSA, desc.TRANSB)
    assert lt_config.PREF_MAX_WORKSPACE_BYTES == pref.MAX_WORKSPACE_BYTES
    assert lt_config.PREF_MIN_ALIGNMENT == (
        pref.MIN_ALIGNMENT_A_BYTES,
        pref.MIN_ALIGNMENT_B_BYTES,
        pref.MIN_ALIGNMENT_C_BYTES,
        pref.MIN_ALIGNMENT_D_BYTES,
    )


def test_import_kerneldsl_does_not_import_nvmath() -> None:
    code = (
        "import sys, kerneldsl as kd\n"
        "assert 'nvmath' not in sys.modules and 'kerneldsl.blas' not in sys.modules\n"
        "kd.blas.gemm\n"
        "assert 'kerneldsl.blas' in sys.modules and 'nvmath' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- missing extra or library ---------------------------------------------------------------------------------


@pytest.fixture
def no_nvmath(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def refusing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "nvmath" or name.startswith("nvmath."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refusing)
    monkeypatch.setattr(binding, "_lib", None)


@pytest.mark.usefixtures("no_nvmath")
def test_missing_extra_says_what_to_install(fake_session: Session, drv: FakeDriver) -> None:
    with pytest.raises(BlasNotAvailableError, match=r"pip install 'kerneldsl\[blas\]'") as info:
        blas.library()
    assert isinstance(info.value, ImportError) and isinstance(info.value, KernelDSLError)
    assert not blas.available()
    a = fake_session.to_device(rand((2, 2), np.float32))
    with pytest.raises(BlasNotAvailableError):
        blas.gemm(a, a)
    # the rest of kerneldsl is unaffected
    assert np.array_equal(fake_session.copy(a).to_host(), a.to_host())


def test_library_that_cannot_load_is_not_available(
    fake_session: Session, lib: FakeCublas, monkeypatch: pytest.MonkeyPatch
) -> None:
    class DynamicLibNotFoundError(RuntimeError):
        pass

    def create() -> int:
        raise DynamicLibNotFoundError("libcublas.so.13: cannot open shared object file")

    monkeypatch.setattr(lib, "create", create)
    a = fake_session.to_device(rand((2, 2), np.float32))
    with pytest.raises(BlasNotAvailableError, match=r"libcublas\.so\.13.*pip install 'kerneldsl\[blas\]'"):
        blas.gemm(a, a)
    lib.create = FakeCublas.create.__get__(lib)  # the library appears: the next call creates the handle
    assert np.allclose(blas.gemm(a, a).to_host(), a.to_host() @ a.to_host(), rtol=1e-5)


# -- validation: nothing reaches cuBLAS -------------------------------------------------------------------------


@pytest.fixture
def untouched(lib: FakeCublas) -> Iterator[FakeCublas]:
    yield lib
    assert lib.calls == [], "cuBLAS was called although validation should have refused"


@pytest.mark.usefixtures("untouched")
class TestValidation:
    def test_host_arrays_are_refused(self, fake_session: Session) -> None:
        a = fake_session.empty((2, 2), np.float32)
        with pytest.raises(BindingError, match="DeviceArray, got ndarray"):
            blas.gemm(np.ones((2, 2), np.float32), a)
        with pytest.raises(BindingError, match="argument 'out'"):
            blas.gemm(a, a, out=np.ones((2, 2), np.float32))

    def test_strided_views_are_refused_not_misread(self, fake_session: Session) -> None:
        a = fake_session.empty((4, 6), np.float32)
        with pytest.raises(StridedArrayError, match=r"argument 'a'.*x\.copy\(\)"):
            blas.gemm(a.T, fake_session.empty((4, 3), np.float32))
        with pytest.raises(StridedArrayError, match="argument 'out'"):
            blas.gemm(fake_session.empty((2, 4), np.float32), a, out=fake_session.empty((6, 4), np.float32).T)

    def test_inner_extents(self, fake_session: Session) -> None:
        with pytest.raises(ShapeMismatchError, match=r"op\(a\) is 2x3 but op\(b\) is 4x5") as info:
            blas.gemm(fake_session.empty((2, 3)), fake_session.empty((4, 5)))
        assert isinstance(info.value, ValueError)

    @pytest.mark.parametrize(
        ("fn", "shapes", "bad"),
        [
            (blas.gemm, ((2, 2), (2,)), "b"),
            (blas.gemm, ((2, 2, 2), (2, 2)), "a"),
            (blas.gemm_batched, ((2, 2), (1, 2, 2)), "a"),
            (blas.gemm_batched, ((1, 2, 2), (2, 2, 2, 2)), "b"),
            (blas.gemv, ((2,), (2,)), "a"),
            (blas.gemv, ((2, 2), (2, 1)), "x"),
            (blas.dot, ((2, 1), (2, 1)), "x"),
        ],
    )
    def test_wrong_ndim(self, fake_session: Session, fn: Any, shapes: tuple[tuple[int, ...], ...], bad: str) -> None:
        with pytest.raises(ShapeMismatchError, match=rf"argument '{bad}'.*expected a \d-D array"):
            fn(*(fake_session.empty(shape) for shape in shapes))

    def test_dtype_mismatch(self, fake_session: Session) -> None:
        with pytest.raises(BindingError, match="argument 'b'.*float64 does not match a's float32") as info:
            blas.gemm(fake_session.empty((2, 2), np.float32), fake_session.empty((2, 2), np.float64))
        assert isinstance(info.value, TypeError)
        with pytest.raises(BindingError, match="argument 'y'"):
            blas.axpy(1.0, fake_session.empty(3, np.float32), fake_session.empty(3, np.float64))

    @pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint16])
    def test_unsupported_gemm_dtype(self, fake_session: Session, dtype: Any) -> None:
        a = fake_session.empty((2, 2), dtype)
        with pytest.raises(BindingError, match=f"dtype {np.dtype(dtype)} is not supported"):
            blas.gemm(a, a)

    def test_unsupported_vector_dtypes(self, fake_session: Session) -> None:
        h = fake_session.empty(4, np.float16)
        with pytest.raises(BindingError, match="float16 is not supported"):
            blas.dot(h, h)
        with pytest.raises(BindingError, match="float16 is not supported"):
            blas.nrm2(h)
        with pytest.raises(BindingError, match="float16 is not supported"):
            blas.axpy(1.0, h, h)
        with pytest.raises(BindingError, match="float16 is not supported"):
            blas.gemv(fake_session.empty((4, 4), np.float16), h)

    def test_out_shape_and_dtype(self, fake_session: Session) -> None:
        a, b = fake_session.empty((2, 3)), fake_session.empty((3, 4))
        with pytest.raises(ShapeMismatchError, match=r"argument 'out'.*expected shape \(2, 4\), got \(4, 2\)"):
            blas.gemm(a, b, out=fake_session.empty((4, 2)))
        with pytest.raises(BindingError, match="argument 'out'.*float64 does not match"):
            blas.gemm(a, b, out=fake_session.empty((2, 4), np.float64))
        with pytest.raises(ShapeMismatchError, match="argument 'out'"):
            blas.gemm_batched(
                fake_session.empty((2, 2, 3)), fake_session.empty((2, 3, 4)), out=fake_session.empty((1, 2, 4))
            )
        with pytest.raises(ShapeMismatchError, match="argument 'out'"):
            blas.gemv(a, fake_session.empty(3), out=fake_session.empty(3))
        with pytest.raises(ShapeMismatchError, match="one element"):
            blas.dot(fake_session.empty(3), fake_session.empty(3), out=fake_session.empty(2))

    def test_beta_needs_out(self, fake_session: Session) -> None:
        a = fake_session.empty((2, 2))
        with pytest.raises(BindingError, match="beta=0.5 scales the previous output: pass out="):
            blas.gemm(a, a, beta=0.5)
        with pytest.raises(BindingError, match="argument 'beta'"):
            blas.gemv(a, fake_session.empty(2), beta=1.0)

    def test_arrays_from_two_sessions(self, fake_session: Session) -> None:
        with Session(0) as other:
            a, b = fake_session.empty((2, 2)), other.empty((2, 2))
            with pytest.raises(WrongSessionError):
                blas.gemm(a, b)
            with pytest.raises(WrongSessionError):
                blas.gemm(a, a, out=other.empty((2, 2)))
            with pytest.raises(WrongSessionError):
                blas.dot(fake_session.empty(2), other.empty(2))
            with pytest.raises(WrongSessionError):
                blas.gemm(a, a, stream=other.create_stream())

    def test_closed_array(self, fake_session: Session) -> None:
        a, b = fake_session.empty((2, 2)), fake_session.empty((2, 2))
        b.close()
        with pytest.raises(ClosedError):
            blas.gemm(a, b)

    def test_output_aliasing_an_input(self, fake_session: Session) -> None:
        a, b = fake_session.empty((3, 3)), fake_session.empty((3, 3))
        with pytest.raises(AliasingError, match="overlaps input 'a'"):
            blas.gemm(a, b, out=a)
        with pytest.raises(AliasingError, match="overlaps input 'b'"):
            blas.gemm(a, b, out=DeviceArray.borrow(fake_session, b.device_view()))  # same memory, another object
        x = fake_session.empty(3)
        with pytest.raises(AliasingError, match="overlaps input 'x'"):
            blas.gemv(a, x, out=x)

    def test_batch_and_vector_extents(self, fake_session: Session) -> None:
        with pytest.raises(ShapeMismatchError, match="batch extent 3 differs from a's 2"):
            blas.gemm_batched(fake_session.empty((2, 2, 2)), fake_session.empty((3, 2, 2)))
        with pytest.raises(ShapeMismatchError, match=r"op\(a\) is 2x3 but x has 2 elements"):
            blas.gemv(fake_session.empty((2, 3)), fake_session.empty(2))
        with pytest.raises(ShapeMismatchError, match=r"op\(a\) is 3x2 but x has 3 elements"):
            blas.gemv(fake_session.empty((2, 3)), fake_session.empty(3), trans_a=True)
        with pytest.raises(ShapeMismatchError):
            blas.dot(fake_session.empty(3), fake_session.empty(4))
        with pytest.raises(ShapeMismatchError):
            blas.axpy(1.0, fake_session.empty((2, 3)), fake_session.empty((3, 2)))


@pytest.mark.parametrize(
    ("a", "b", "trans_a", "trans_b", "out"),
    [
        ((2, 3), (3, 4), False, False, (2, 4)),
        ((3, 2), (3, 4), True, False, (2, 4)),
        ((2, 3), (4, 3), False, True, (2, 4)),
        ((3, 2), (4, 3), True, True, (2, 4)),
    ],
)
def test_transposes_fix_the_output_shape(
    fake_session: Session,
    lib: FakeCublas,
    a: tuple[int, int],
    b: tuple[int, int],
    trans_a: bool,
    trans_b: bool,
    out: tuple[int, int],
) -> None:
    result = blas.gemm(fake_session.zeros(a), fake_session.zeros(b), trans_a=trans_a, trans_b=trans_b)
    assert result.shape == out
    batched = blas.gemm_batched(
        fake_session.zeros((5, *a)), fake_session.zeros((5, *b)), trans_a=trans_a, trans_b=trans_b
    )
    assert batched.shape == (5, *out)
    with pytest.raises(ShapeMismatchError):
        blas.gemm(fake_session.zeros(a), fake_session.zeros(b), trans_a=not trans_a, trans_b=trans_b)


# -- the column-major mapping, checked against numpy through the emulating double -----------------------------


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.0), (-0.5, 0.0), (2.0, 0.75)])
def test_gemm_matches_numpy(
    fake_session: Session, lib: FakeCublas, dtype: Any, trans_a: bool, trans_b: bool, alpha: float, beta: float
) -> None:
    m, n, k = 5, 3, 7
    a = rand((k, m) if trans_a else (m, k), dtype, 1)
    b = rand((n, k) if trans_b else (k, n), dtype, 2)
    c = rand((m, n), dtype, 3)
    out = fake_session.to_device(c)
    result = blas.gemm(
        fake_session.to_device(a),
        fake_session.to_device(b),
        out=out,
        alpha=alpha,
        beta=beta,
        trans_a=trans_a,
        trans_b=trans_b,
    )
    assert result is out
    expected = alpha * reference(a, b, trans_a, trans_b) + beta * c.astype(np.float64)
    np.testing.assert_allclose(out.to_host().astype(np.float64), expected, rtol=tolerance(dtype), atol=tolerance(dtype))


def test_gemm_cublaslt_operands_are_the_swapped_product(fake_session: Session, lib: FakeCublas) -> None:
    blas.gemm(fake_session.zeros((2, 3)), fake_session.zeros((3, 4)))
    (call,) = lib.lt.matmuls  # type: ignore[attr-defined]
    # C^T (4x2, ld 4) = B^T (4x3, ld 4) @ A^T (3x2, ld 3): layouts are (rows, cols, ld)
    assert (call["ta"], call["tb"], call["a"], call["b"], call["c"]) == (0, 0, (4, 3, 4), (3, 2, 3), (4, 2, 4))
    assert call["compute"] == blas.COMPUTE_32F
    blas.gemm(fake_session.zeros((3, 2)), fake_session.zeros((4, 3)), trans_a=True, trans_b=True, tf32=True)
    call = lib.lt.matmuls[-1]  # type: ignore[attr-defined]
    assert (call["ta"], call["tb"], call["a"], call["b"], call["c"]) == (1, 1, (3, 4, 3), (2, 3, 2), (4, 2, 4))
    assert call["compute"] == blas.COMPUTE_32F_FAST_TF32


def test_gemm_without_a_cublaslt_algorithm_uses_gemm_ex(fake_session: Session, lib: FakeCublas) -> None:
    lib.lt.no_algorithm = True  # type: ignore[attr-defined]
    a, b = rand((2, 3), np.float32), rand((3, 4), np.float32)
    out = blas.gemm(fake_session.to_device(a), fake_session.to_device(b))
    ((name, args),) = [c for c in lib.calls if c[0] == "gemm_ex"]
    ta, tb, m, n, k, _, lda, _, ldb, _, ldc, compute = args
    assert (ta, tb, m, n, k, lda, ldb, ldc, compute) == (blas.OP_N, blas.OP_N, 4, 2, 3, 4, 3, 4, blas.COMPUTE_32F)
    np.testing.assert_allclose(out.to_host(), a @ b, rtol=1e-5)


def test_a_gemm_plan_is_made_once_per_problem(fake_session: Session, lib: FakeCublas) -> None:
    a, b = fake_session.zeros((8, 8)), fake_session.zeros((8, 8))
    for _ in range(3):
        blas.gemm(a, b)
    blas.gemm(fake_session.zeros((8, 4)), fake_session.zeros((4, 8)))
    assert len(lib.lt.heuristics) == 2  # type: ignore[attr-defined]


def test_a_gemm_plan_assumes_only_the_alignment_the_operands_have(fake_session: Session, lib: FakeCublas) -> None:
    whole = fake_session.zeros(64 + 4, np.float32)
    offset = DeviceArray.borrow(fake_session, blas_lt_view(whole, 4, (8, 8)))
    blas.gemm(offset, fake_session.zeros((8, 8)), fake_session.zeros((8, 8)))
    (prefs,) = lib.lt.heuristics  # type: ignore[attr-defined]
    assert [prefs[a] for a in lt_config.PREF_MIN_ALIGNMENT] == [256, 4, 256, 256]  # A is b, B is a


def test_compute_types(fake_session: Session, lib: FakeCublas) -> None:
    cases = [
        (np.float16, False, blas.COMPUTE_32F),
        (np.float32, False, blas.COMPUTE_32F),
        (np.float64, False, blas.COMPUTE_64F),
        (np.float16, True, blas.COMPUTE_32F),
        (np.float32, True, blas.COMPUTE_32F_FAST_TF32),
        (np.float64, True, blas.COMPUTE_64F),
    ]
    for dtype, tf32, compute in cases:  # tf32 only changes float32
        blas.gemm(fake_session.zeros((2, 2), dtype), fake_session.zeros((2, 2), dtype), tf32=tf32)
        assert lib.lt.matmuls[-1]["compute"] == compute  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_batched_matches_numpy(
    fake_session: Session, lib: FakeCublas, dtype: Any, trans_a: bool, trans_b: bool
) -> None:
    batch, m, n, k = 3, 4, 6, 5
    a = rand((batch, k, m) if trans_a else (batch, m, k), dtype, 4)
    b = rand((batch, n, k) if trans_b else (batch, k, n), dtype, 5)
    c = rand((batch, m, n), dtype, 6)
    out = fake_session.to_device(c)
    blas.gemm_batched(
        fake_session.to_device(a),
        fake_session.to_device(b),
        out=out,
        alpha=1.5,
        beta=-1.0,
        trans_a=trans_a,
        trans_b=trans_b,
    )
    expected = 1.5 * reference(a, b, trans_a, trans_b) - c.astype(np.float64)
    np.testing.assert_allclose(out.to_host().astype(np.float64), expected, rtol=tolerance(dtype), atol=tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
def test_gemv_matches_numpy(fake_session: Session, lib: FakeCublas, dtype: Any, trans_a: bool) -> None:
    a = rand((5, 3), dtype, 7)
    x = rand(5 if trans_a else 3, dtype, 8)
    y = rand(3 if trans_a else 5, dtype, 9)
    out = fake_session.to_device(y)
    blas.gemv(fake_session.to_device(a), fake_session.to_device(x), out=out, alpha=2.0, beta=0.5, trans_a=trans_a)
    expected = 2.0 * ((a.T if trans_a else a).astype(np.float64) @ x) + 0.5 * y
    np.testing.assert_allclose(out.to_host(), expected, rtol=tolerance(dtype))
    fresh = blas.gemv(
        fake_session.to_device(a), fake_session.to_device(x), out=fake_session.empty(y.shape, dtype), trans_a=trans_a
    )
    np.testing.assert_allclose(fresh.to_host(), (a.T if trans_a else a) @ x, rtol=tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_level1_matches_numpy(fake_session: Session, lib: FakeCublas, dtype: Any) -> None:
    x, y = rand(17, dtype, 10), rand(17, dtype, 11)
    dx, dy = fake_session.to_device(x), fake_session.to_device(y)
    d = blas.dot(dx, dy, out=fake_session.empty((), dtype))  # out=: cuBLAS's (a new result is a reduction)
    assert d.shape == () and d.dtype == dtype
    np.testing.assert_allclose(d.to_host(), np.dot(x.astype(np.float64), y), rtol=tolerance(dtype))
    norm = blas.nrm2(dx, out=fake_session.empty((), dtype))
    np.testing.assert_allclose(norm.to_host(), np.linalg.norm(x.astype(np.float64)), rtol=tolerance(dtype))
    assert blas.axpy(-3.0, dx, dy) is dy
    np.testing.assert_allclose(dy.to_host(), y - 3.0 * x, rtol=tolerance(dtype))
    out = fake_session.empty((), dtype)
    assert blas.dot(dx, dx, out=out) is out
    matrix = rand((3, 4), dtype, 12)
    norm = blas.nrm2(fake_session.to_device(matrix), out=fake_session.empty((), dtype))
    np.testing.assert_allclose(norm.to_host(), np.linalg.norm(matrix), rtol=tolerance(dtype))


def test_empty_inner_dimension_is_an_empty_sum(fake_session: Session, lib: FakeCublas) -> None:
    a, b = fake_session.empty((3, 0)), fake_session.empty((0, 2))
    out = fake_session.to_device(np.full((3, 2), np.nan, np.float32))
    blas.gemm(a, b, out=out)
    assert np.array_equal(out.to_host(), np.zeros((3, 2), np.float32))
    y = fake_session.to_device(np.full(3, 4.0, np.float32))
    blas.gemv(a, fake_session.empty(0), out=y, beta=0.5)
    assert np.array_equal(y.to_host(), np.full(3, 2.0, np.float32))
    assert blas.dot(fake_session.empty(0), fake_session.empty(0)).to_host() == 0
    assert blas.nrm2(fake_session.empty(0)).to_host() == 0
    assert blas.gemm(fake_session.empty((0, 3)), fake_session.empty((3, 2))).shape == (0, 2)
    assert [c[0] for c in lib.calls if c[0] in ("gemm_ex", "dot", "nrm2")] == []


# -- the handle: lazy, cached configuration, close order -----------------------------------------------------


def test_one_lazy_handle_per_session(fake_session: Session, lib: FakeCublas) -> None:
    assert lib.calls == []
    a = fake_session.zeros((2, 2))
    blas.gemm(a, a)
    blas.gemm(a, a)
    assert lib.names().count("create") == 1
    h = blas.handle(fake_session)
    assert h is blas.handle(fake_session) and not h.closed and h.raw in lib.live
    with Session(0) as other:
        assert blas.handle(other) is not h
    assert lib.names().count("create") == 2


def test_stream_and_workspace_set_only_when_the_stream_changes(
    fake_session: Session, lib: FakeCublas, drv: FakeDriver
) -> None:
    a = fake_session.zeros((1, 2, 2))
    for _ in range(3):
        blas.gemm_batched(a, a)
    assert lib.names() == [
        "create",
        "set_stream",
        "set_workspace",
        "gemm_strided_batched_ex",
        "gemm_strided_batched_ex",
        "gemm_strided_batched_ex",
    ]
    assert lib.calls[1][1] == (fake_session.stream.handle,)
    ws_default = lib.calls[2][1]
    assert ws_default[1] == blas.WORKSPACE_BYTES
    other = fake_session.create_stream()
    lib.calls.clear()
    blas.gemm_batched(a, a, stream=other)
    blas.gemm_batched(a, a, stream=other)
    blas.gemm_batched(a, a)
    assert lib.names() == [
        "set_stream",
        "set_workspace",
        "gemm_strided_batched_ex",
        "gemm_strided_batched_ex",
        "set_stream",
        "set_workspace",
        "gemm_strided_batched_ex",
    ]
    assert lib.calls[0][1] == (other.handle,)
    assert lib.calls[1][1][0] != ws_default[0]  # one workspace per stream
    assert lib.calls[5][1] == ws_default  # and the default stream's is reused, not reallocated
    other.close()
    with pytest.raises(ClosedError):
        blas.gemm_batched(a, a, stream=other)


def test_gemm_runs_on_the_stream_it_is_given_with_that_streams_workspace(
    fake_session: Session, lib: FakeCublas
) -> None:
    a, other = fake_session.zeros((2, 2)), fake_session.create_stream()
    blas.gemm(a, a)
    blas.gemm(a, a, stream=other)
    first, second = lib.lt.matmuls  # type: ignore[attr-defined]
    assert (first["stream"], second["stream"]) == (fake_session.stream.handle, other.handle)
    assert first["workspace"][0] != second["workspace"][0] and first["workspace"][1] == blas.WORKSPACE_BYTES


def test_pointer_mode_switches_only_when_needed(fake_session: Session, lib: FakeCublas) -> None:
    x = fake_session.zeros(4)
    blas.axpy(1.0, x, x)
    blas.dot(x, x, out=fake_session.empty(()))  # out=: cuBLAS's dot (a new result is a reduction)
    blas.nrm2(x, out=fake_session.empty(()))
    blas.axpy(1.0, x, x)
    modes = [c[1][0] for c in lib.calls if c[0] == "set_pointer_mode"]
    assert modes == [blas.POINTER_MODE_DEVICE, blas.POINTER_MODE_HOST]


def test_close_destroys_the_handle_first(drv: FakeDriver, lib: FakeCublas) -> None:
    s = Session(0)
    a = s.zeros((2, 2))
    c = blas.gemm(a, a)  # kept alive: a dropped buffer would be freed first, from the deferred queue
    h = blas.handle(s)
    raw = h.raw
    order: list[str] = []
    destroy, free = lib.destroy, drv.cuMemFreeAsync

    def record_destroy(handle: int) -> None:
        order.append("cublasDestroy")
        destroy(handle)

    def record_free(ptr: int, stream: object) -> tuple:
        order.append("cuMemFreeAsync")
        return free(ptr, stream)

    lib.destroy = record_destroy
    drv.cuMemFreeAsync = record_free
    mark = len(drv.calls)
    s.close()
    assert order[0] == "cublasDestroy" and "cuMemFreeAsync" in order
    assert raw not in lib.live and h.closed
    assert drv.calls[mark:].index("cuDevicePrimaryCtxRelease") == len(drv.calls[mark:]) - 1
    assert not drv.mem and c.closed  # the workspace was freed too
    with pytest.raises(ClosedError):
        blas.gemm(a, a)
    with pytest.raises(ClosedError):
        blas.handle(s)


def test_close_collects_a_cublas_destroy_failure(drv: FakeDriver, lib: FakeCublas) -> None:
    s = Session(0)
    blas.handle(s)
    lib.fail["destroy"] = 14
    with pytest.raises(SessionCloseError) as info:
        s.close()
    (err,) = info.value.errors
    assert isinstance(err, BlasError) and err.name == "CUBLAS_STATUS_INTERNAL_ERROR" and err.api == "cublasDestroy"
    assert s.closed and not drv.mem and drv.primary_refs[0] == 0


def test_poisoned_session_abandons_the_handle(drv: FakeDriver, lib: FakeCublas) -> None:
    s = Session(0)
    h = blas.handle(s)
    s.poison(StickyCudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "cuLaunchKernel"))
    s.close()
    assert h.closed and "destroy" not in lib.names()


def test_cublas_failure_becomes_blas_error(fake_session: Session, lib: FakeCublas) -> None:
    a = fake_session.zeros((2, 2))
    lib.fail["lt.matmul"] = 7
    with pytest.raises(BlasError, match=r"cublasLtMatmul failed with CUBLAS_STATUS_INVALID_VALUE \(7\)") as info:
        blas.gemm(a, a)
    assert (info.value.status, info.value.name, info.value.api) == (7, "CUBLAS_STATUS_INVALID_VALUE", "cublasLtMatmul")
    lib.fail["dot"] = 13
    with pytest.raises(BlasError, match="cublasSdot failed with CUBLAS_STATUS_EXECUTION_FAILED"):
        blas.dot(fake_session.zeros(2), fake_session.zeros(2), out=fake_session.empty(()))
    lib.fail["create"] = 3
    with Session(0) as other, pytest.raises(BlasError, match="cublasCreate failed with CUBLAS_STATUS_ALLOC_FAILED"):
        blas.handle(other)
    blas.gemm(a, a)  # the session stays usable


def test_graph_capture_needs_a_warm_handle(fake_session: Session, lib: FakeCublas) -> None:
    a = fake_session.zeros((2, 2))
    with pytest.raises(RuntimeError, match="make one BLAS call on the same stream before"):
        with fake_session.capture():
            blas.gemm(a, a)
    assert "create" not in lib.names()
    blas.gemm(a, a)
    out = fake_session.zeros((2, 2))
    with fake_session.capture() as g:
        blas.gemm(a, a, out=out)
    assert any(any(k is a for k in kept) for kept in g._keep if isinstance(kept, tuple))
    g.replay()


def test_kd_blas_is_the_module(lib: FakeCublas) -> None:
    assert kd.blas is blas


# -- the generic vendor-handle hook of Session ----------------------------------------------------------------


class Recorder:
    def __init__(self, session: Session, log: list[str], fail: bool = False) -> None:
        self.log, self.fail = log, fail
        self.session = session

    def release(self) -> None:
        self.log.append(f"release {self.session.api.depth()}")
        if self.fail:
            raise RuntimeError("library refused")

    def abandon(self) -> None:
        self.log.append("abandon")


def test_vendor_handles_are_created_once_and_released_before_everything(drv: FakeDriver) -> None:
    log: list[str] = []
    s = Session(0)
    first = s.vendor_handle("lib", lambda session: Recorder(session, log))
    assert s.vendor_handle("lib", lambda session: pytest.fail("created twice")) is first
    buffer = s.zeros(4)
    mark = len(drv.calls)
    free = drv.cuMemFreeAsync
    drv.cuMemFreeAsync = lambda ptr, stream: (log.append("cuMemFreeAsync"), free(ptr, stream))[1]
    s.close()
    assert log == ["release 1", "cuMemFreeAsync"]  # released with the context current, before buffers
    assert buffer.closed
    assert drv.calls[-1] == "cuDevicePrimaryCtxRelease" and mark < len(drv.calls)


def test_vendor_handle_failures_are_collected_and_poison_abandons(drv: FakeDriver) -> None:
    log: list[str] = []
    s = Session(0)
    s.vendor_handle("bad", lambda session: Recorder(session, log, fail=True))
    with pytest.raises(SessionCloseError, match="library refused"):
        s.close()
    assert s.closed and drv.primary_refs[0] == 0
    p = Session(0)
    p.vendor_handle("lib", lambda session: Recorder(session, log))
    p.poison(StickyCudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "cuLaunchKernel"))
    p.close()
    assert log[-1] == "abandon"


# -- the C path of gemm (kerneldsl._fastlaunch) -------------------------------------------------------------

needs_c_path = pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")


def _warm_gemm(s: Session) -> tuple[np.ndarray, np.ndarray, DeviceArray, DeviceArray, DeviceArray]:
    a, b = rand((5, 3), np.float32, 1), rand((3, 4), np.float32, 2)
    da, db, out = s.to_device(a), s.to_device(b), s.zeros((5, 4))
    blas.gemm(da, db, out)  # the Python path, which remembers the call for the C path
    return a, b, da, db, out


@needs_c_path
def test_a_warm_gemm_with_out_runs_from_c(fake_session: Session, lib: FakeCublas) -> None:
    a, b, da, db, out = _warm_gemm(fake_session)
    c = rand((5, 4), np.float32, 3)
    out.copy_from_host(c)
    with fake_session.activated():  # frees the copy's queued event, which would send the next call to the Python path
        pass
    assert blas.gemm(da, db, out, alpha=2.0, beta=-0.5) is out
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]
    np.testing.assert_allclose(out.to_host(), 2 * a.astype(np.float64) @ b - 0.5 * c, rtol=1e-5, atol=1e-6)


@needs_c_path
def test_a_float64_gemm_from_c_scales_in_double(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((4, 4), np.float64, 1), rand((4, 4), np.float64, 2)
    da, db, out = fake_session.to_device(a), fake_session.to_device(b), fake_session.zeros((4, 4), np.float64)
    blas.gemm(da, db, out)
    blas.gemm(da, db, out, alpha=1 / 3)
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]
    np.testing.assert_allclose(out.to_host(), (a @ b) / 3, rtol=1e-12)


@needs_c_path
def test_gemm_with_out_as_a_keyword_runs_from_c(fake_session: Session, lib: FakeCublas) -> None:
    a, b, da, db, out = _warm_gemm(fake_session)
    assert blas.gemm(da, db, out=out, alpha=1.0, beta=0.0, stream=None) is out
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]
    np.testing.assert_allclose(out.to_host(), a @ b, rtol=1e-5)


@needs_c_path
def test_gemm_on_a_stream_runs_from_c_with_that_streams_workspace(fake_session: Session, lib: FakeCublas) -> None:
    a, b, da, db, out = _warm_gemm(fake_session)
    stream = fake_session.create_stream()
    blas.gemm(da, db, out, stream=stream)  # the Python path: the first call on this stream
    blas.gemm(da, db, out=out, stream=stream)
    first, second = lib.lt.matmuls[-2:]  # type: ignore[attr-defined]
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]
    assert first["stream"] == second["stream"] == stream.handle and first["workspace"] == second["workspace"]


@needs_c_path
def test_gemm_on_a_closed_stream_is_refused_by_the_python_path(fake_session: Session, lib: FakeCublas) -> None:
    _, _, da, db, out = _warm_gemm(fake_session)
    stream = fake_session.create_stream()
    blas.gemm(da, db, out, stream=stream)
    stream.close()
    with pytest.raises(ClosedError):
        blas.gemm(da, db, out, stream=stream)
    assert lib.lt.c_matmuls == 0  # type: ignore[attr-defined]


@needs_c_path
@pytest.mark.parametrize("extra", [{"trans_a": False}, {"tf32": False}])
def test_other_keywords_take_the_python_path(fake_session: Session, lib: FakeCublas, extra: dict[str, Any]) -> None:
    _, _, da, db, out = _warm_gemm(fake_session)
    blas.gemm(da, db, out, **extra)
    assert lib.lt.c_matmuls == 0 and len(lib.lt.matmuls) == 2  # type: ignore[attr-defined]


@needs_c_path
def test_a_gemm_the_c_path_cannot_take_raises_from_the_python_path(fake_session: Session, lib: FakeCublas) -> None:
    _, _, da, db, out = _warm_gemm(fake_session)
    with pytest.raises(ShapeMismatchError):
        blas.gemm(da, db, fake_session.zeros((5, 5)))
    with pytest.raises(AliasingError):
        blas.gemm(da, db, DeviceArray.borrow(fake_session, blas_lt_view(da, 0, (5, 4))))
    out.close()
    with pytest.raises(ClosedError):
        blas.gemm(da, db, out)
    assert lib.lt.c_matmuls == 0  # type: ignore[attr-defined]


@needs_c_path
def test_a_cublaslt_failure_in_the_c_path_raises_the_typed_error(fake_session: Session, lib: FakeCublas) -> None:
    _, _, da, db, out = _warm_gemm(fake_session)
    lib.lt.broken = 7  # type: ignore[attr-defined]
    with pytest.raises(BlasError, match="cublasLtMatmul failed with CUBLAS_STATUS_INVALID_VALUE"):
        blas.gemm(da, db, out)  # the C path declines on the status, the Python path raises it
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]


@needs_c_path
def test_a_thread_without_the_sessions_context_takes_the_python_path(fake_session: Session, lib: FakeCublas) -> None:
    _, _, da, db, out = _warm_gemm(fake_session)
    in_threads(lambda _: blas.gemm(da, db, out), count=1)
    assert lib.lt.c_matmuls == 0 and len(lib.lt.matmuls) == 2  # type: ignore[attr-defined]


@needs_c_path
def test_closing_the_session_destroys_the_plans_and_the_c_path_declines(drv: FakeDriver, lib: FakeCublas) -> None:
    s = Session(0)
    _, _, da, db, out = _warm_gemm(s)
    s.close()
    assert lib.lt.descs == {} and lib.lt.layouts == {} and lib.lt.handles == set()  # type: ignore[attr-defined]
    with pytest.raises(ClosedError):
        blas.gemm(da, db, out)
    assert lib.lt.c_matmuls == 0  # type: ignore[attr-defined]
