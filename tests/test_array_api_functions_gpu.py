"""kerneldsl.array_api's fixes for the Array API suite on the GPU against NumPy and the
standard's tables: cumulative dtypes, ``repeat``'s one-count array, floor division's infinities
(the function, ``//`` and ``//=``), ``conj`` of real arrays, ``inv``, negative matrix powers and
``__dlpack__``'s CPU export (small, odd shapes)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kerneldsl import array_api as xp

pytestmark = pytest.mark.gpu

inf, nan = math.inf, math.nan


def host(a: Any) -> np.ndarray:
    return a.to_host()  # type: ignore[no-any-return]


def with_initial(want: np.ndarray, axis: int, value: int) -> np.ndarray:
    shape = list(want.shape)
    shape[axis] = 1
    return np.concatenate([np.full(shape, value, want.dtype), want], axis=axis)


@pytest.mark.parametrize(
    ("given", "dtype"),
    [(np.uint8, np.uint8), (np.int8, np.int16), (np.int32, None), (np.uint16, None), (np.float32, np.float64)],
    ids=lambda d: "none" if d is None else np.dtype(d).name,
)
@pytest.mark.parametrize("axis", [0, 1])
def test_cumulative_sum_and_prod_match_numpy_in_the_dtype_asked_for(
    rng: np.random.Generator, given: Any, dtype: Any, axis: int
) -> None:
    a = rng.choice(np.array([-1, 1, 2, 3], np.int64) if np.dtype(given).kind != "u" else [1, 2, 3], (5, 9))
    a = a.astype(given)
    d = xp.asarray(a)
    for function, reference, initial in ((xp.cumulative_sum, np.cumsum, 0), (xp.cumulative_prod, np.cumprod, 1)):
        got = host(function(d, axis=axis, dtype=dtype, include_initial=True))
        want = with_initial(reference(a, axis=axis, dtype=dtype), axis, initial)
        assert got.dtype == want.dtype
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-12)
        else:
            np.testing.assert_array_equal(got, want)


def test_cumulative_sum_of_floats_stays_in_their_dtype(rng: np.random.Generator) -> None:
    a = rng.standard_normal(1000).astype(np.float32)
    got = host(xp.cumulative_sum(xp.asarray(a)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.cumsum(a.astype(np.float64)), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_repeat_with_one_count_matches_numpy(rng: np.random.Generator, axis: Any) -> None:
    a = rng.integers(-9, 9, (3, 5)).astype(np.int16)
    got = host(xp.repeat(xp.asarray(a), xp.asarray(np.array([3], np.int8)), axis=axis))
    np.testing.assert_array_equal(got, np.repeat(a, 3, axis=axis))


# The standard's floor_divide special cases (2024.12) and a few finite ones (Python's //).
FLOOR_DIVIDE = [
    (inf, 1.0, inf),
    (inf, -1.0, -inf),
    (-inf, 2.5, -inf),
    (-inf, -1.0, inf),
    (1.0, -inf, -0.0),
    (-1.0, inf, -0.0),
    (1.0, inf, 0.0),
    (-1.0, -inf, 0.0),
    (inf, inf, nan),
    (-inf, inf, nan),
    (nan, 1.0, nan),
    (1.0, nan, nan),
    (0.0, 0.0, nan),
    (1.0, 0.0, inf),
    (-1.0, 0.0, -inf),
    (1.0, -0.0, -inf),
    (inf, 0.0, inf),
    (0.0, 1.0, 0.0),
    (-0.0, 1.0, -0.0),
    (0.0, -1.0, -0.0),
    (0.0, inf, 0.0),
    (-0.0, inf, -0.0),
    (7.0, 2.0, 3.0),
    (-7.0, 2.0, -4.0),
    (7.5, -2.0, -4.0),
    (-1.0, 3.0, -1.0),
]


def assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, signed zeros included; NaN where NaN is wanted."""
    assert got.dtype == want.dtype
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"got {got[~same]} want {want[~same]}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_floor_divide_follows_the_standards_special_cases(dtype: Any) -> None:
    x1, x2, want = (np.array(column, dtype) for column in zip(*FLOOR_DIVIDE))
    d1, d2 = xp.asarray(x1), xp.asarray(x2)
    assert_same_floats(host(xp.floor_divide(d1, d2)), want)
    assert_same_floats(host(d1 // d2), want)
    d1 //= d2
    assert_same_floats(host(d1), want)


def test_floor_divide_of_finite_floats_still_matches_numpy(rng: np.random.Generator) -> None:
    a, b = rng.standard_normal(2053) * 50, rng.standard_normal(2053)
    assert_same_floats(host(xp.floor_divide(xp.asarray(a), xp.asarray(b))), np.floor_divide(a, b))


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_conj_of_a_real_array_is_the_array(rng: np.random.Generator, dtype: Any) -> None:
    a = (rng.random((3, 7)) * 100).astype(dtype)  # in every dtype's range
    np.testing.assert_array_equal(host(xp.conj(xp.asarray(a))), a)


def well_conditioned(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Diagonally dominant matrices with their rows shuffled, so the elimination must pivot."""
    n = shape[-1]
    m = rng.standard_normal(shape) + 2 * math.sqrt(n) * np.eye(n)
    return m[..., rng.permutation(n), :]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 17, 17), (2, 2, 33, 33)], ids=str)
def test_inv_matches_numpy(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> None:
    a = well_conditioned(rng, shape).astype(dtype)
    d = xp.asarray(a)
    got = host(xp.linalg.inv(d))
    want = np.linalg.inv(a.astype(np.float64))
    tol = 1e-4 if dtype == np.float32 else 1e-11
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_array_equal(host(d), a)  # the elimination ran on a copy


def test_inv_of_float16_is_computed_in_float32(rng: np.random.Generator) -> None:
    a = well_conditioned(rng, (4, 6, 6)).astype(np.float16)
    got = host(xp.linalg.inv(xp.asarray(a)))
    assert got.dtype == np.float16
    want = np.linalg.inv(a.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def test_inv_of_a_singular_matrix_is_not_finite() -> None:
    """The kernel cannot raise: a zero pivot shows as NaN or infinity, as documented."""
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])
    assert not np.isfinite(host(xp.linalg.inv(xp.asarray(singular)))).all()


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 6])
def test_matrix_power_matches_numpy_for_negative_powers_too(rng: np.random.Generator, n: int) -> None:
    m = well_conditioned(rng, (3, 4, 4)) / 4
    got = host(xp.linalg.matrix_power(xp.asarray(m), n))
    want = np.linalg.matrix_power(m, n)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("copy", [None, True])
def test_dlpack_to_the_cpu_gives_numpy_the_values(rng: np.random.Generator, copy: Any) -> None:
    class Capsule:
        def __init__(self, capsule: Any) -> None:
            self.capsule = capsule

        def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
            return self.capsule

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    a = rng.standard_normal((4, 6)).astype(np.float32)
    d = xp.asarray(a)
    for view, want in ((d, a), (d.T, a.T), (d[1:, ::2], a[1:, ::2])):
        got = np.from_dlpack(Capsule(view.__dlpack__(dl_device=(1, 0), copy=copy)))
        np.testing.assert_array_equal(got, want)


def test_vecdot_of_small_integers_wraps_like_numpy(rng: np.random.Generator) -> None:
    a, b = rng.integers(0, 255, (3, 1, 7), dtype=np.uint8), rng.integers(0, 255, (4, 7), dtype=np.uint8)
    got = host(xp.vecdot(xp.asarray(a), xp.asarray(b)))
    np.testing.assert_array_equal(got, np.sum(a * b, axis=-1, dtype=np.uint8))
    np.testing.assert_array_equal(host(xp.linalg.vecdot(xp.asarray(a), xp.asarray(b))), got)
