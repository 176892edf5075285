"""The complex functions of kd.ops on the GPU: every special case of the Array API standard's tables
bit for bit (tests/complex_cases.py, as the CPU build of the header is checked in
tests/test_complex_math.py), and fresh random values of odd shapes against NumPy.

Tolerances against NumPy's complex128 result (on the unit square, |z| >= 0.1, where NumPy's own
log1p is accurate): 16 eps of the dtype normwise, |w - want| / |want| (the host build is within 8,
CUDA's libm adds its few ulp); power, exp(b log a) whose error grows with |b log a|, 32 eps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from complex_cases import FUNCTIONS, OPS_NAME, failures

from kerneldsl import ops

pytestmark = pytest.mark.gpu

C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
COMPLEX, IDS = [C64, C128], ["complex64", "complex128"]
EPS = {C64: 2.0**-23, C128: 2.0**-52}
NUMPY_NAME = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan"}
NUMPY_NAME["atanh"] = "arctanh"
FINITE = sorted({*FUNCTIONS, "log2", "log10", "asin", "atan"} - {"abs"})


def op_for(function: str) -> Any:
    return getattr(ops, OPS_NAME.get(function, NUMPY_NAME.get(function, function)))


def unit_square(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    z = rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)
    while (small := np.abs(z) < 0.1).any():
        z[small] = rng.uniform(-1, 1, small.sum()) + 1j * rng.uniform(-1, 1, small.sum())
    return z.astype(dt)


def normwise(got: np.ndarray, want: np.ndarray, dt: np.dtype) -> float:
    got, want = got.astype(np.complex128), want.astype(np.complex128)
    return float((np.abs(got - want) / (np.abs(want) * EPS[dt])).max())


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_special_case_of_the_standard_holds_bit_for_bit(device_session, function: str, dt: np.dtype) -> None:
    def run(z: np.ndarray) -> np.ndarray:
        w = op_for(function)(device_session.to_device(z)).to_host()
        return w.astype(dt) if function == "abs" else w  # abs: the real result, imaginary part +0

    wrong = failures(function, dt, run)
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("function", FINITE)
def test_finite_values_match_numpy(device_session, rng, function: str, dt: np.dtype) -> None:
    z = unit_square(rng, (37, 29), dt)
    got = op_for(function)(device_session.to_device(z)).to_host()
    assert got.dtype == dt and got.shape == z.shape
    want = getattr(np, NUMPY_NAME.get(function, function))(z.astype(np.complex128))
    assert normwise(got, want, dt) <= 16


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_power_matches_numpy_for_integer_and_complex_exponents(device_session, rng, dt: np.dtype) -> None:
    a = unit_square(rng, (3, 341), dt) * dt.type(2)
    b = (rng.uniform(-3, 3, (3, 341)) + 1j * rng.uniform(-3, 3, (3, 341))).astype(dt)
    b[0] = rng.integers(-9, 10, 341)  # repeated squaring, then the reciprocal for b < 0
    got = ops.power(device_session.to_device(a), device_session.to_device(b)).to_host()
    assert normwise(got, np.power(a.astype(np.complex128), b.astype(np.complex128)), dt) <= 32
    assert ops.power(device_session.to_device(a), 0).to_host().tolist() == np.ones_like(a).tolist()


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_round_rounds_each_part_half_to_even(device_session, rng, dt: np.dtype) -> None:
    z = ((rng.integers(-8, 8, 999) + 0.5 * rng.integers(0, 2, 999)) * (1 + 0j)).astype(dt)
    z.imag = rng.uniform(-5, 5, 999).round(1)
    np.testing.assert_array_equal(ops.round(device_session.to_device(z)).to_host(), np.round(z))


@pytest.mark.parametrize("function", [f for f in FINITE if f not in ("expm1", "log1p")])
def test_signed_zeros_choose_the_side_of_a_branch_cut_as_numpy(device_session, function: str) -> None:
    values = [v * s for v in (1e-10, 0.5, 1.0, 2.0, 3.0, 1e10, 1e300) for s in (1, -1)]
    z = np.array([p for v in values for zero in (0.0, -0.0) for p in (complex(v, zero), complex(zero, v))])
    got = op_for(function)(device_session.to_device(z)).to_host()
    with np.errstate(all="ignore"):
        want = getattr(np, NUMPY_NAME.get(function, function))(z)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        with np.errstate(invalid="ignore"):
            near = (np.abs(g - w) <= 16 * np.spacing(np.abs(w))) | (g == w)
        same_zero = (w != 0) | (np.signbit(g) == np.signbit(w))
        ok = near & same_zero | np.isnan(g) & np.isnan(w)
        assert ok.all(), z[~ok]
