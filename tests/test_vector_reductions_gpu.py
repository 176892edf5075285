"""Products with a 1-D operand as ``dot`` reductions on a real GPU, against NumPy in float64.

``A @ v``, ``v @ A``, ``v @ w`` (float16, bfloat16, float32, float64), views of ``A``, extents 0
and 1, and the allocating ``kd.blas.gemv`` / ``dot`` / ``nrm2``. Fresh random data each run (the
seed is in every failure message). Tolerance: the error of each result element is bounded by
``TOL[dtype]`` times the sum of the absolute terms (``|A| @ |v|``), so cancellation cannot hide a
mismatch: the half types round each product and the result once in their storage type (2^-11,
2^-8) over a float32 sum; float32 sums up to ~10^5 terms per thread group; float64 likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.dtypes import ELEMENT_TYPES, add_bfloat16
from kerneldsl.runtime import Session

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not blas.available(), reason="kerneldsl[blas] is not installed")]

BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None
DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)] + ([BF16] if BF16 is not None else [])
TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-12}
if BF16 is not None:
    TOL[BF16] = 3e-2
VECTOR_DTYPES = [np.dtype(np.float32), np.dtype(np.float64)]

# (rows, cols) of A: extents 0 and 1, odd sizes, few long rows (split), many short ones
MATRICES = [(0, 5), (5, 0), (1, 7), (7, 1), (37, 513), (3, 100003), (3, 1 << 17), (1024, 300)]
VECTORS = [0, 1, 7, 4097, 1000003]


def uniform(rng: np.random.Generator, shape: Any, dtype: Any) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


def assert_product(got: Any, a: np.ndarray, b: np.ndarray, dtype: Any, rng: np.random.Generator) -> None:
    """``got`` is np.matmul(a, b) in shape, dtype and value (within the dtype's bound)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    assert isinstance(got, kd.DeviceArray)
    host = got.to_host()
    assert host.shape == ref.shape and host.dtype == np.dtype(dtype)
    err = np.abs(host.astype(np.float64) - ref)
    seed = rng.bit_generator.seed_seq.entropy  # type: ignore[attr-defined]
    assert np.all(err <= TOL[np.dtype(dtype)] * bound + 1e-30), f"max error {err.max():.3g} (seed {seed})"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", MATRICES, ids=str)
def test_a_matrix_at_a_vector_matches_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, shape: Any
) -> None:
    a, v = uniform(fresh_rng, shape, dtype), uniform(fresh_rng, shape[1], dtype)
    assert_product(default_device_session.to_device(a) @ default_device_session.to_device(v), a, v, dtype, fresh_rng)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", MATRICES, ids=str)
def test_a_vector_at_a_matrix_matches_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, shape: Any
) -> None:
    v, a = uniform(fresh_rng, shape[0], dtype), uniform(fresh_rng, shape, dtype)
    assert_product(default_device_session.to_device(v) @ default_device_session.to_device(a), v, a, dtype, fresh_rng)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", VECTORS)
def test_a_vector_at_a_vector_is_a_0d_device_array_matching_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, n: int
) -> None:
    v, w = uniform(fresh_rng, n, dtype), uniform(fresh_rng, n, dtype)
    assert_product(default_device_session.to_device(v) @ default_device_session.to_device(w), v, w, dtype, fresh_rng)


# name -> (A's shape, v's length, the view of A, which side v is on): the same on numpy and device
VIEWS: dict[str, tuple[tuple[int, int], int, Callable[[Any], Any], bool]] = {
    "A.T @ v": ((301, 173), 301, lambda x: x.T, False),
    "v @ A.T": ((301, 173), 173, lambda x: x.T, True),
    "A[:, ::2] @ v": ((64, 301), 151, lambda x: x[:, ::2], False),
    "v @ A[:, ::2]": ((64, 301), 64, lambda x: x[:, ::2], True),
    "A[::2] @ v": ((129, 77), 77, lambda x: x[::2], False),
    "A[1:-1, 3:] @ v": ((40, 50), 47, lambda x: x[1:-1, 3:], False),
    "v @ A[::-1]": ((40, 50), 40, lambda x: x[::-1], True),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(VIEWS))
def test_views_of_the_matrix_match_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, case: str
) -> None:
    shape, n, view, left = VIEWS[case]
    a, v = uniform(fresh_rng, shape, dtype), uniform(fresh_rng, n, dtype)
    da, dv = view(default_device_session.to_device(a)), default_device_session.to_device(v)
    if left:
        assert_product(dv @ da, v, view(a), dtype, fresh_rng)
    else:
        assert_product(da @ dv, view(a), v, dtype, fresh_rng)


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("trans_a", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (301, 173), (3, 100003)], ids=str)
def test_an_allocating_gemv_matches_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, trans_a: bool, shape: tuple[int, int]
) -> None:
    a, x = uniform(fresh_rng, shape, dtype), uniform(fresh_rng, shape[0] if trans_a else shape[1], dtype)
    got = blas.gemv(default_device_session.to_device(a), default_device_session.to_device(x), trans_a=trans_a)
    assert_product(got, a.T if trans_a else a, x, dtype, fresh_rng)


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("n", VECTORS)
def test_an_allocating_dot_and_nrm2_match_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, n: int
) -> None:
    x, y = uniform(fresh_rng, n, dtype), uniform(fresh_rng, n, dtype)
    dx, dy = default_device_session.to_device(x), default_device_session.to_device(y)
    assert_product(blas.dot(dx, dy), x, y, dtype, fresh_rng)
    norm = blas.nrm2(dx)
    ref = np.linalg.norm(x.astype(np.float64))
    assert norm.shape == () and norm.dtype == dtype
    assert abs(float(norm.to_host()) - ref) <= TOL[dtype] * ref + 1e-30


def test_nrm2_of_a_matrix_is_the_norm_of_all_its_elements(
    default_device_session: Session, fresh_rng: np.random.Generator
) -> None:
    x = uniform(fresh_rng, (37, 129), np.float32)
    ref = np.linalg.norm(x.astype(np.float64))
    assert abs(float(blas.nrm2(default_device_session.to_device(x)).to_host()) - ref) <= 1e-5 * ref


PRODUCTS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {  # name -> (device call, numpy reference)
    "A @ v": (lambda a, v, w: a @ v, lambda a, v, w: a @ v),
    "w @ A": (lambda a, v, w: w @ a, lambda a, v, w: w @ a),
    "v @ v": (lambda a, v, w: v @ v, lambda a, v, w: v @ v),
    "gemv": (lambda a, v, w: blas.gemv(a, v), lambda a, v, w: a @ v),
    "gemv trans_a": (lambda a, v, w: blas.gemv(a, w, trans_a=True), lambda a, v, w: w @ a),
    "dot": (lambda a, v, w: blas.dot(v, v), lambda a, v, w: v @ v),
    "nrm2": (lambda a, v, w: blas.nrm2(w), lambda a, v, w: np.linalg.norm(w)),
}


@pytest.mark.parametrize("name", list(PRODUCTS))
@pytest.mark.parametrize("shape", [(1001, 513), (1024, 512)], ids=str)
def test_a_warm_repeated_product_returns_a_fresh_correct_result_each_call(
    default_device_session: Session, fresh_rng: np.random.Generator, name: str, shape: tuple[int, int]
) -> None:
    product, reference = PRODUCTS[name]
    da, dv, dw = (
        default_device_session.empty(shape, np.float32),
        default_device_session.empty(shape[1], np.float32),
        default_device_session.empty(shape[0], np.float32),
    )
    kept = []
    for _ in range(4):  # cold, the warm entry's first call, then from C twice
        a = uniform(fresh_rng, shape, np.float32).astype(np.float64)
        v, w = (
            uniform(fresh_rng, shape[1], np.float32).astype(np.float64),
            uniform(fresh_rng, shape[0], np.float32).astype(np.float64),
        )
        da.copy_from_host(a.astype(np.float32))
        dv.copy_from_host(v.astype(np.float32))
        dw.copy_from_host(w.astype(np.float32))
        got = product(da, dv, dw)
        kept.append((got, reference(a, v, w), got.to_host()))
    assert len({id(got) for got, _, _ in kept}) == 4
    for got, want, first in kept:  # earlier results were not overwritten by later calls
        np.testing.assert_array_equal(got.to_host(), first)
        np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(37, 513), (1024, 512)], ids=str)
def test_a_row_of_shape_1_by_n_is_read_along_the_rows(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, shape: Any
) -> None:
    a, v = uniform(fresh_rng, shape, dtype), uniform(fresh_rng, (1, shape[1]), dtype)
    got = kd.ops._dot(default_device_session.to_device(a), default_device_session.to_device(v), axis=1)
    assert_product(got, a, v[0], dtype, fresh_rng)


def test_the_cg_iteration_matches_numpy(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    """The CG update of examples/cg_solver.py, spelled as in NumPy, on device arrays."""
    n = 513
    m = uniform(fresh_rng, (n, n), np.float64)
    a = m @ m.T + n * np.eye(n)
    b = uniform(fresh_rng, n, np.float64)
    x, r, p = np.zeros(n), b.copy(), b.copy()
    da, dx, dr, dp = (
        default_device_session.to_device(a),
        default_device_session.to_device(x),
        default_device_session.to_device(r),
        default_device_session.to_device(p),
    )
    rr, drr = r @ r, dr @ dr
    for _ in range(5):
        ap, dap = a @ p, da @ dp
        alpha, dalpha = rr / (p @ ap), drr / (dp @ dap)
        x, dx = x + alpha * p, dx + dalpha * dp
        r, dr = r - alpha * ap, dr - dalpha * dap
        rr_new, drr_new = r @ r, dr @ dr
        p, dp = r + (rr_new / rr) * p, dr + (drr_new / drr) * dp
        rr, drr = rr_new, drr_new
    np.testing.assert_allclose(dx.to_host(), x, rtol=1e-9, atol=1e-12)
