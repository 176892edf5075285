"""Complex arrays in kd.ops, reductions and ``@`` on the GPU, against NumPy in complex128 on fresh
random data of odd shapes.

Inputs are drawn in the unit square (divisors and log/sqrt operands kept at ``|z| >= 0.1``), so
every result is O(1). Tolerances: elementwise results within ``ELEMENT_TOL`` (absolute and
relative: a few dozen ulp of the parts' precision, for the prelude's textbook formulas);
equality and predicates exact; sums and means within ``2 (log2(n) + 2) * eps * sum(|x|)``, products
within ``4 * n * eps * |result|``; matmul within ``4 * k * eps`` times the largest product term.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.errors import ComplexUnsupportedError

pytestmark = pytest.mark.gpu

C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
COMPLEX = [C64, C128]
IDS = ["complex64", "complex128"]
ELEMENT_TOL = {C64: 2e-5, C128: 1e-13}
EPS = {C64: float(np.finfo(np.float32).eps), C128: float(np.finfo(np.float64).eps)}

UNARY = ["negative", "positive", "conj", "square", "reciprocal", "exp", "log", "sqrt"]
UNARY += ["sin", "cos", "tan", "sinh", "cosh", "tanh", "abs", "real", "imag"]
BINARY = ["add", "subtract", "multiply", "divide"]


def crand(rng: np.random.Generator, shape: Any, dt: np.dtype, floor: float = 0.0) -> np.ndarray:
    """Uniform in the unit square, redrawn where ``|z| < floor``."""
    z = rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)
    while floor and (small := np.abs(z) < floor).any():
        z[small] = rng.uniform(-1, 1, small.sum()) + 1j * rng.uniform(-1, 1, small.sum())
    return z.astype(dt)


def close(got: Any, want: np.ndarray, tol: float) -> None:
    got = got.to_host() if hasattr(got, "to_host") else got
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=tol, atol=tol)


# -- elementwise ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_match_numpy(device_session, rng, name: str, dt: np.dtype) -> None:
    x = crand(rng, (37, 29), dt, floor=0.1)
    want = getattr(np, name)(x.astype(np.complex128)).astype(getattr(np, name)(x).dtype)
    close(getattr(ops, name)(device_session.to_device(x)), want, ELEMENT_TOL[dt])


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_match_numpy(device_session, rng, name: str, dt: np.dtype) -> None:
    a, b = crand(rng, (41, 23), dt), crand(rng, (41, 23), dt, floor=0.1)
    want = getattr(np, name)(a.astype(np.complex128), b.astype(np.complex128)).astype(dt)
    close(getattr(ops, name)(device_session.to_device(a), device_session.to_device(b)), want, ELEMENT_TOL[dt])


def test_operators_and_a_strided_view(device_session, rng) -> None:
    a, b = crand(rng, (19, 34), C128), crand(rng, (19, 17), C128, floor=0.1)
    da, db = device_session.to_device(a), device_session.to_device(b)
    close(da[:, ::2] * db - abs(db) / db + (-da[:, 1::2]), a[:, ::2] * b - abs(b) / b - a[:, 1::2], 1e-13)


def test_broadcasting_and_promotion_follow_numpy(device_session, rng) -> None:
    z = crand(rng, (7, 31), C64)
    r = rng.uniform(-1, 1, 31)  # float64: complex64 with float64 is complex128
    got = device_session.to_device(z) + device_session.to_device(r)
    close(got, z.astype(C128) + r, 1e-7)
    f = rng.uniform(-1, 1, 31).astype(np.float32)
    close(device_session.to_device(f) * (2 - 1j), (f * (2 - 1j)).astype(C64), 1e-6)  # a Python complex is weak


def test_a_warm_call_with_a_complex_scalar_repeats_its_result(device_session, rng) -> None:
    z = device_session.to_device(crand(rng, 1001, C64))
    first, second = (ops.multiply(z, 0.5 + 2j).to_host() for _ in range(2))
    np.testing.assert_array_equal(first, second)
    close(first, (z.to_host().astype(C128) * (0.5 + 2j)).astype(C64), 1e-6)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_equality_is_exact(device_session, rng, dt: np.dtype) -> None:
    a = crand(rng, 513, dt)
    b = a.copy()
    b[::3] += np.asarray(1j, dt)
    b[1::5] = np.conj(b[1::5])
    da, db = device_session.to_device(a), device_session.to_device(b)
    np.testing.assert_array_equal(ops.equal(da, db).to_host(), a == b)
    np.testing.assert_array_equal((da != db).to_host(), a != b)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_special_value_predicates_match_numpy(device_session, dt: np.dtype) -> None:
    nan, inf = np.nan, np.inf
    parts = [0, 1, -2.5, nan, inf, -inf]
    z = np.empty(len(parts) ** 2, dt)  # every (real, imaginary) pair of the special values
    z.real[:], z.imag[:] = np.repeat(parts, len(parts)), np.tile(parts, len(parts))
    d = device_session.to_device(z)
    for name in ("isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(getattr(ops, name)(d).to_host(), getattr(np, name)(z), err_msg=name)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_casts_to_and_from_complex(device_session, rng, dt: np.dtype) -> None:
    z = crand(rng, 257, dt)
    d = device_session.to_device(z)
    np.testing.assert_array_equal(d.astype(np.float64).to_host(), z.real.astype(np.float64))
    np.testing.assert_array_equal(ops.astype(d, np.bool_).to_host(), z.astype(np.bool_))
    x = rng.uniform(-1, 1, 257).astype(np.float32)
    np.testing.assert_array_equal(ops.astype(device_session.to_device(x), dt).to_host(), x.astype(dt))


def test_assignment_and_scalar_conversion(device_session, rng) -> None:
    z, column = crand(rng, (5, 7), C128), crand(rng, 5, C64)
    d = device_session.to_device(z)
    d[1] = 2 - 1j
    d[:, 3] = device_session.to_device(column)  # cast to complex128 on the way
    z[1] = 2 - 1j
    z[:, 3] = column
    np.testing.assert_array_equal(d.to_host(), z)
    assert complex(d[2, 4]) == complex(z[2, 4])


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_real_and_imag_views_read_and_write_the_parts(device_session, rng, dt: np.dtype) -> None:
    z = crand(rng, (9, 14), dt)
    d = device_session.to_device(z)
    np.testing.assert_array_equal(d.real.to_host(), z.real)
    np.testing.assert_array_equal(d[:, 1::3].imag.to_host(), z[:, 1::3].imag)
    d.imag[2:5] = 0.0
    d.real = d.real * 2
    z.imag[2:5] = 0.0
    z.real = z.real * 2
    np.testing.assert_array_equal(d.to_host(), z)
    np.testing.assert_array_equal(d.conj().to_host(), np.conj(z))


def test_a_fused_complex_chain_matches_numpy(device_session, rng) -> None:
    @kd.fuse
    def shifted_magnitude(a, b):
        return ops.abs(a * b + 1j)

    a, b = crand(rng, 333, C64), crand(rng, 333, C64)
    want = np.abs(a.astype(C128) * b + 1j).astype(np.float32)
    close(shifted_magnitude(device_session.to_device(a), device_session.to_device(b)), want, ELEMENT_TOL[C64])


def test_an_ordering_op_is_refused_before_anything_runs(device_session) -> None:
    z = device_session.zeros(8, np.complex64)
    with pytest.raises(ComplexUnsupportedError, match="kd.ops.maximum is not defined for complex64"):
        ops.maximum(z, z)


# -- reductions -----------------------------------------------------------------------------------------


def _reduced_count(shape: tuple[int, ...], axis: Any) -> int:
    axes = range(len(shape)) if axis is None else (axis,) if isinstance(axis, int) else axis
    return math.prod(shape[a] for a in axes)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((100003,), None), ((37, 53), 0), ((37, 53), 1), ((3, 9, 4001), (0, 2))],
)
@pytest.mark.parametrize("name", ["sum", "mean"])
def test_sum_and_mean_match_numpy(
    device_session, rng, name: str, dt: np.dtype, shape: tuple[int, ...], axis: Any
) -> None:
    x = crand(rng, shape, dt)
    got = getattr(ops, name)(device_session.to_device(x), axis=axis).to_host()
    want = getattr(np, name)(x.astype(C128), axis=axis)
    n = _reduced_count(shape, axis)
    bound = 2 * (math.log2(n) + 2) * EPS[dt] * np.sum(np.abs(x.astype(C128)), axis=axis)  # 2: both parts
    if name == "mean":
        bound = bound / n
    assert got.dtype == dt and got.shape == np.shape(want)
    assert np.all(np.abs(got.astype(C128) - want) <= bound + EPS[dt] * np.abs(want))


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize(("shape", "axis"), [((301,), None), ((13, 17), 1), ((5, 6, 7), (0, 2))])
def test_prod_matches_numpy(device_session, rng, dt: np.dtype, shape: tuple[int, ...], axis: Any) -> None:
    theta, radius = rng.uniform(-np.pi, np.pi, shape), rng.uniform(0.99, 1.01, shape)
    x = (radius * np.exp(1j * theta)).astype(dt)  # near the unit circle: products stay O(1)
    got = ops.prod(device_session.to_device(x), axis=axis).to_host()
    want = np.prod(x.astype(C128), axis=axis)
    n = _reduced_count(shape, axis)
    assert got.dtype == dt
    assert np.all(np.abs(got.astype(C128) - want) <= 4 * n * EPS[dt] * np.abs(want))


def test_array_methods_reduce_complex_arrays(device_session, rng) -> None:
    x = crand(rng, (9, 11), C128)
    d = device_session.to_device(x)
    close(d.sum(axis=1, keepdims=True), x.sum(axis=1, keepdims=True), 1e-13)
    close(d.mean(), np.asarray(x.mean()), 1e-13)


# -- matmul ---------------------------------------------------------------------------------------------


def _matmul_close(got: Any, a: np.ndarray, b: np.ndarray) -> None:
    dt = np.result_type(a, b)
    want = np.matmul(a.astype(C128), b.astype(C128))
    k = a.shape[-1]
    tol = 4 * k * EPS[dt] * float(np.max(np.abs(a))) * float(np.max(np.abs(b)))
    got = got.to_host()
    assert got.dtype == dt and got.shape == want.shape
    assert np.all(np.abs(got.astype(C128) - want) <= tol)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize(
    ("sa", "sb"),
    [((33, 17), (17, 29)), ((3, 33, 17), (17, 5)), ((2, 1, 7, 9), (3, 9, 4)), ((17,), (17, 6)), ((6, 17), (17,))],
)
def test_matmul_matches_numpy(device_session, rng, dt: np.dtype, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = crand(rng, sa, dt), crand(rng, sb, dt)
    _matmul_close(device_session.to_device(a) @ device_session.to_device(b), a, b)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_a_complex_dot_is_a_0d_array(device_session, rng, dt: np.dtype) -> None:
    a, b = crand(rng, 101, dt), crand(rng, 101, dt)
    got = kd.matmul(device_session.to_device(a), device_session.to_device(b))
    assert got.shape == ()
    _matmul_close(got, a, b)


def test_matmul_of_transposed_views_and_mixed_dtypes(device_session, rng) -> None:
    a, b = crand(rng, (19, 23), C64), rng.uniform(-1, 1, (19, 7))
    _matmul_close(
        device_session.to_device(a).T @ device_session.to_device(b), a.T, b
    )  # complex64 @ float64: complex128


def test_gemm_with_complex_alpha_and_beta(device_session, rng) -> None:
    a, b, c = crand(rng, (21, 13), C64), crand(rng, (13, 9), C64), crand(rng, (21, 9), C64)
    out = device_session.to_device(c)
    kd.blas.gemm(device_session.to_device(a), device_session.to_device(b), out, alpha=1 - 2j, beta=0.5j)
    want = (1 - 2j) * (a.astype(C128) @ b.astype(C128)) + 0.5j * c.astype(C128)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-5)


def test_the_namespaces_vecdot_conjugates_its_first_operand(device_session, rng) -> None:
    from kerneldsl import array_api as xp

    a, b = crand(rng, (7, 19), C128), crand(rng, 19, C128)
    close(xp.vecdot(device_session.to_device(a), device_session.to_device(b)), np.vecdot(a, b), 1e-13)
