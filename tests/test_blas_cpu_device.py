"""kd.blas and ``@`` on the CPU device against NumPy: every entry point, dtype, transpose and batch.

The CPU device runs them on the host BLAS (``kerneldsl.blas.host``) in the session's own memory,
through the same kd.blas code as on a GPU. References are float64 (complex128) NumPy; an error is
measured against the sum of absolute terms, so cancellation can neither hide nor fake a mismatch.
Outputs that a call must not read hold NaN first, so a call that writes nothing cannot pass.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.blas import binding
from kerneldsl.dtypes import ELEMENT_TYPES, add_bfloat16
from kerneldsl.errors import BlasError, BlasNotAvailableError

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="the CPU device is not available here")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None
GEMM_DTYPES = [F16, F32, F64, C64, C128] + ([BF16] if BF16 is not None else [])
VECTOR_DTYPES = [F32, F64]
# Error allowed per unit of |alpha| |op(A)| @ |op(B)| + |beta| |C|: output rounding of the
# storage type plus accumulation (float32 for the half types) over k terms.
TOL = {F16: 4e-3, F32: 2e-5, F64: 1e-12, C64: 2e-5, C128: 1e-12}
if BF16 is not None:
    TOL[BF16] = 3e-2

MATMUL_SHAPES = [
    ((3, 5), (5, 7)),
    ((5,), (5, 7)),
    ((3, 5), (5,)),
    ((37,), (37,)),
    ((4, 3, 5), (4, 5, 6)),
    ((2, 1, 4, 3), (5, 3, 6)),
    ((4, 3), (5, 3, 6)),
    ((2, 4, 3), (3,)),
    ((6,), (2, 6, 3)),
]


def random(rng: np.random.Generator, shape: Any, dtype: np.dtype) -> np.ndarray:
    x = rng.uniform(-1, 1, shape)
    if dtype.kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def nan(shape: Any, dtype: np.dtype) -> np.ndarray:
    return np.full(shape, np.nan, np.float32).astype(dtype)


def wide(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def op(x: np.ndarray, trans: bool) -> np.ndarray:
    return wide(x).swapaxes(-1, -2) if trans else wide(x)


def assert_close(got: Any, ref: np.ndarray, bound: np.ndarray, tol: float) -> None:
    """|got - ref| <= tol * bound elementwise (bound: the sum of absolute terms)."""
    err = np.abs(wide(got) - ref)
    limit = tol * bound + 1e-30
    assert np.all(err <= limit), f"error {float(np.nanmax(err / limit)):.3g}x the allowed bound"


# -- gemm and gemm_batched ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=str)
@pytest.mark.parametrize("trans_a", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["N", "T"])
@pytest.mark.parametrize(
    ("alpha", "beta", "with_out"), [(1.0, 0.0, True), (2.0, -0.5, True), (-1.5, 0.0, False)], ids=str
)
def test_gemm_matches_numpy(
    cpu: kd.Session,
    rng: np.random.Generator,
    dtype: np.dtype,
    trans_a: bool,
    trans_b: bool,
    alpha: float,
    beta: float,
    with_out: bool,
) -> None:
    m, n, k = 67, 45, 129
    a = random(rng, (k, m) if trans_a else (m, k), dtype)
    b = random(rng, (n, k) if trans_b else (k, n), dtype)
    c = random(rng, (m, n), dtype) if beta else nan((m, n), dtype)  # beta == 0: C is never read
    out = cpu.to_device(c) if with_out else None
    got = blas.gemm(cpu.to_device(a), cpu.to_device(b), out, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
    assert got.shape == (m, n) and got.dtype == dtype
    opa, opb = op(a, trans_a), op(b, trans_b)
    ref = alpha * (opa @ opb) + (beta * wide(c) if beta else 0)
    bound = abs(alpha) * (np.abs(opa) @ np.abs(opb)) + (abs(beta) * np.abs(wide(c)) if beta else 0)
    assert_close(got.to_host(), ref, bound, TOL[dtype])


def test_gemm_writes_the_output_buffer_in_place(cpu: kd.Session, rng: np.random.Generator) -> None:
    a, b = random(rng, (8, 5), F32), random(rng, (5, 6), F32)
    out = cpu.to_device(nan((8, 6), F32))
    ptr = out.ptr
    assert blas.gemm(cpu.to_device(a), cpu.to_device(b), out) is out
    assert out.ptr == ptr
    assert_close(out.to_host(), wide(a) @ wide(b), np.abs(wide(a)) @ np.abs(wide(b)), TOL[F32])


@pytest.mark.parametrize("dtype", [C64, C128], ids=str)
def test_gemm_takes_complex_alpha_and_beta(cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype) -> None:
    a, b, c = random(rng, (9, 4), dtype), random(rng, (4, 7), dtype), random(rng, (9, 7), dtype)
    alpha, beta = 0.5 - 2j, 1j
    out = cpu.to_device(c)
    blas.gemm(cpu.to_device(a), cpu.to_device(b), out, alpha=alpha, beta=beta)
    ref = alpha * (wide(a) @ wide(b)) + beta * wide(c)
    bound = abs(alpha) * (np.abs(wide(a)) @ np.abs(wide(b))) + np.abs(wide(c))
    assert_close(out.to_host(), ref, bound, TOL[dtype])


def test_gemm_with_alpha_zero_does_not_read_its_operands(cpu: kd.Session, rng: np.random.Generator) -> None:
    a, b = cpu.to_device(nan((6, 3), F32)), cpu.to_device(nan((3, 4), F32))
    c = random(rng, (6, 4), F32)
    out = cpu.to_device(c)
    blas.gemm(a, b, out, alpha=0.0, beta=1.0)
    np.testing.assert_array_equal(out.to_host(), c)
    blas.gemm(a, b, out, alpha=0.0, beta=0.5)
    np.testing.assert_array_equal(out.to_host(), c * np.float32(0.5))


def test_gemm_with_an_empty_inner_dimension_scales_the_output(cpu: kd.Session) -> None:
    out = cpu.to_device(nan((3, 4), F32))
    blas.gemm(cpu.empty((3, 0)), cpu.empty((0, 4)), out=out)
    np.testing.assert_array_equal(out.to_host(), np.zeros((3, 4), np.float32))
    c = np.full((3, 4), 2.0, np.float32)
    out = cpu.to_device(c)
    blas.gemm(cpu.empty((3, 0)), cpu.empty((0, 4)), out=out, beta=0.5)
    np.testing.assert_array_equal(out.to_host(), c * 0.5)


def test_gemm_runs_on_another_stream(cpu: kd.Session, rng: np.random.Generator) -> None:
    a, b = random(rng, (16, 8), F64), random(rng, (8, 4), F64)
    other = cpu.create_stream()
    out = blas.gemm(cpu.to_device(a), cpu.to_device(b), stream=other)
    other.synchronize()
    assert_close(out.to_host(), a @ b, np.abs(a) @ np.abs(b), TOL[F64])


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=str)
@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_batched_matches_numpy(
    cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype, trans_a: bool, trans_b: bool
) -> None:
    batch, m, n, k = 7, 33, 20, 47
    a = random(rng, (batch, k, m) if trans_a else (batch, m, k), dtype)
    b = random(rng, (batch, n, k) if trans_b else (batch, k, n), dtype)
    c = random(rng, (batch, m, n), dtype)
    out = cpu.to_device(c)
    blas.gemm_batched(cpu.to_device(a), cpu.to_device(b), out, alpha=0.5, beta=-1.0, trans_a=trans_a, trans_b=trans_b)
    ref = 0.5 * (op(a, trans_a) @ op(b, trans_b)) - wide(c)
    bound = 0.5 * (np.abs(op(a, trans_a)) @ np.abs(op(b, trans_b))) + np.abs(wide(c))
    assert_close(out.to_host(), ref, bound, TOL[dtype])


# -- gemv and level 1 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("trans_a", [False, True], ids=["N", "T"])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.0), (-2.0, 0.5)])
def test_gemv_into_out_matches_numpy(
    cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype, trans_a: bool, alpha: float, beta: float
) -> None:
    a = random(rng, (301, 173), dtype)
    x = random(rng, 301 if trans_a else 173, dtype)
    y = random(rng, 173 if trans_a else 301, dtype) if beta else nan(173 if trans_a else 301, dtype)
    out = cpu.to_device(y)
    assert blas.gemv(cpu.to_device(a), cpu.to_device(x), out, alpha=alpha, beta=beta, trans_a=trans_a) is out
    opa = op(a, trans_a)
    ref = alpha * (opa @ wide(x)) + (beta * wide(y) if beta else 0)
    bound = abs(alpha) * (np.abs(opa) @ np.abs(wide(x))) + (abs(beta) * np.abs(wide(y)) if beta else 0)
    assert_close(out.to_host(), ref, bound, TOL[dtype])


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("trans_a", [False, True], ids=["N", "T"])
def test_gemv_of_a_new_result_matches_numpy(
    cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype, trans_a: bool
) -> None:
    a, x = random(rng, (50, 70), dtype), random(rng, 50 if trans_a else 70, dtype)
    got = blas.gemv(cpu.to_device(a), cpu.to_device(x), trans_a=trans_a)
    opa = op(a, trans_a)
    assert_close(got.to_host(), opa @ wide(x), np.abs(opa) @ np.abs(wide(x)), TOL[dtype])


def test_gemv_with_an_empty_inner_dimension_scales_the_output(cpu: kd.Session) -> None:
    out = cpu.to_device(np.full(5, 4.0))
    blas.gemv(cpu.empty((5, 0), np.float64), cpu.empty(0, np.float64), out, beta=0.25)
    np.testing.assert_array_equal(out.to_host(), np.full(5, 1.0))


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_axpy_dot_nrm2_into_out_match_numpy(cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype, n: int) -> None:
    x, y = random(rng, n, dtype), random(rng, n, dtype)
    dx, dy = cpu.to_device(x), cpu.to_device(y)
    out = cpu.to_device(nan((), dtype))
    tol = TOL[dtype] * 10
    assert blas.dot(dx, dy, out) is out
    assert_close(out.to_host(), np.dot(wide(x), wide(y)), np.dot(np.abs(wide(x)), np.abs(wide(y))), tol)
    assert blas.nrm2(dx, out) is out
    norm = np.linalg.norm(wide(x))
    assert_close(out.to_host(), norm, norm, tol)
    assert blas.axpy(-0.25, dx, dy) is dy
    assert_close(dy.to_host(), wide(y) - 0.25 * wide(x), np.abs(wide(y)) + 0.25 * np.abs(wide(x)), TOL[dtype])


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
def test_dot_and_nrm2_of_a_new_result_match_numpy(cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype) -> None:
    x, y = random(rng, 4099, dtype), random(rng, 4099, dtype)
    dx, dy = cpu.to_device(x), cpu.to_device(y)
    got = blas.dot(dx, dy)
    assert got.shape == () and got.dtype == dtype
    assert_close(got.to_host(), np.dot(wide(x), wide(y)), np.dot(np.abs(wide(x)), np.abs(wide(y))), TOL[dtype] * 10)
    norm = np.linalg.norm(wide(x))
    assert_close(blas.nrm2(dx).to_host(), norm, norm, TOL[dtype] * 10)


def test_nrm2_into_out_does_not_overflow_on_large_elements(cpu: kd.Session) -> None:
    x = np.full(10_000, 1e30, np.float32)  # each square overflows float32
    out = blas.nrm2(cpu.to_device(x), cpu.empty((), np.float32))
    np.testing.assert_allclose(out.to_host(), 1e32, rtol=1e-5)


def test_empty_dot_and_nrm2_are_zero(cpu: kd.Session) -> None:
    out = cpu.to_device(nan((), F32))
    assert blas.dot(cpu.empty(0), cpu.empty(0), out).to_host() == 0
    out.copy_from_host(nan((), F32))
    assert blas.nrm2(cpu.empty(0), out).to_host() == 0


# -- kd.matmul and @ --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=str)
@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES, ids=str)
def test_matmul_matches_numpy(
    cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    a, b = random(rng, sa, dtype), random(rng, sb, dtype)
    got = cpu.to_device(a) @ cpu.to_device(b)
    ref = np.matmul(wide(a), wide(b))
    host = got.to_host()
    assert host.shape == ref.shape and host.dtype == dtype
    assert_close(host, ref, np.matmul(np.abs(wide(a)), np.abs(wide(b))), TOL[dtype])


VIEW_PRODUCTS = {  # read in place through a transpose flag and a leading dimension, or copied first
    "a.T @ b": lambda a, b: a.T @ b,
    "a @ b.T": lambda a, b: a @ b.T,
    "column slice": lambda a, b: a[:, 1:4] @ b[1:4],
    "every other column": lambda a, b: a[:, ::2] @ b[::2],
    "batched transpose": lambda a, b: a.reshape(3, 4, 3).mT @ b.reshape(3, 4, 3),
}


@pytest.mark.parametrize("dtype", [F32, C128], ids=str)
@pytest.mark.parametrize("case", VIEW_PRODUCTS)
def test_matmul_of_views_matches_numpy(cpu: kd.Session, rng: np.random.Generator, dtype: np.dtype, case: str) -> None:
    a, b = random(rng, (6, 6), dtype), random(rng, (6, 6), dtype)
    product = VIEW_PRODUCTS[case]
    got = product(cpu.to_device(a), cpu.to_device(b))
    bound = product(np.abs(wide(a)), np.abs(wide(b)))
    assert_close(got.to_host(), product(wide(a), wide(b)), bound, TOL[dtype])


def test_matmul_writes_out(cpu: kd.Session, rng: np.random.Generator) -> None:
    a, b = random(rng, (2, 4, 3), F64), random(rng, (3, 5), F64)
    out = cpu.to_device(nan((2, 4, 5), F64))
    assert kd.matmul(cpu.to_device(a), cpu.to_device(b), out) is out
    assert_close(out.to_host(), a @ b, np.abs(a) @ np.abs(b), TOL[F64])


# -- graphs, failures, installation -----------------------------------------------------------------------------


def test_blas_in_a_captured_graph_runs_at_each_replay(cpu: kd.Session, rng: np.random.Generator) -> None:
    m, k, n = 12, 9, 7
    da, db = cpu.to_device(random(rng, (m, k), F32)), cpu.to_device(random(rng, (k, n), F32))
    out, y = cpu.to_device(nan((m, n), F32)), cpu.to_device(nan((m, n), F32))
    blas.gemm(da, db, out)  # the handle exists before the capture, as cuBLAS needs
    out.copy_from_host(nan((m, n), F32))
    with cpu.capture() as g:
        blas.gemm(da, db, out, alpha=0.5)
        blas.axpy(2.0, out, y)
    assert np.isnan(out.to_host()).all()  # capture records, it does not run
    for _ in range(2):  # each replay reads the buffers' current contents
        a, b = random(rng, (m, k), F32), random(rng, (k, n), F32)
        da.copy_from_host(a)
        db.copy_from_host(b)
        y.copy_from_host(np.ones((m, n), np.float32))
        g.replay()
        ref = 0.5 * (wide(a) @ wide(b))
        bound = 0.5 * (np.abs(wide(a)) @ np.abs(wide(b)))
        assert_close(out.to_host(), ref, bound, TOL[F32])
        assert_close(y.to_host(), 1 + 2 * ref, 1 + 2 * bound, TOL[F32])


class _BadLeadingDimension:
    """The host BLAS, but gemm_strided_batched_ex gets lda = 0 (cuBLAS's INVALID_VALUE)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)

    def gemm_strided_batched_ex(self, *args: Any) -> None:
        self._lib.gemm_strided_batched_ex(*args[:9], 0, *args[10:])


def test_an_argument_cublas_refuses_is_a_blas_error(cpu: kd.Session, monkeypatch: pytest.MonkeyPatch) -> None:
    a = cpu.to_device(np.ones((1, 8, 8), np.float32))
    h = blas.handle(cpu)
    monkeypatch.setattr(h, "lib", _BadLeadingDimension(h.lib))
    with pytest.raises(BlasError) as info:
        blas.gemm_batched(a, a)
    assert info.value.name == "CUBLAS_STATUS_INVALID_VALUE" and info.value.api == "cublasGemmStridedBatchedEx"
    monkeypatch.undo()
    assert (blas.gemm_batched(a, a).to_host() == 8).all()  # the session and handle stay usable


def test_the_cpu_device_needs_no_blas_extra(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    monkeypatch.setitem(sys.modules, "nvmath", None)  # as if nvmath-python were not installed
    monkeypatch.setitem(sys.modules, "nvmath.bindings", None)
    monkeypatch.setattr(binding, "_lib", None)
    assert not blas.available()
    with pytest.raises(BlasNotAvailableError):
        blas.library()
    a, b = random(rng, (5, 3), F32), random(rng, (3, 4), F32)
    with kd.Session(device="cpu") as s:
        got = blas.gemm(s.to_device(a), s.to_device(b)).to_host()
    assert_close(got, wide(a) @ wide(b), np.abs(wide(a)) @ np.abs(wide(b)), TOL[F32])
