"""The ops of tests/test_more_ops.py and the manipulation functions on the GPU, against NumPy on
fresh random data of odd shapes with the edge values mixed in (NaN, +-inf, -0.0, negative and
extreme integers). Rounding, predicates, sign, copysign, fmod, fmax/fmin, reciprocal and every
integer op must match bit for bit; CUDA's transcendental functions within ``MATH_RTOL``."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops

pytestmark = pytest.mark.gpu

SHAPE = (37, 5)
FLOATS = [np.float16, np.float32, np.float64]
INTS = [np.int8, np.int32, np.int64, np.uint8, np.uint32]
EXACT_FLOAT = (
    "floor",
    "ceil",
    "trunc",
    "rint",
    "round",
    "sign",
    "positive",
    "reciprocal",
    "isnan",
    "isinf",
    "isfinite",
    "signbit",
    "logical_not",
)
EXACT_FLOAT_BINARY = ("copysign", "fmod", "fmax", "fmin", "logical_and", "logical_or", "logical_xor")
MATH = (
    "log1p",
    "expm1",
    "sinh",
    "cosh",
    "tanh",
    "arcsinh",
    "arccosh",
    "arctanh",
    "arcsin",
    "arccos",
    "arctan",
    "deg2rad",
    "rad2deg",
)
MATH_BINARY = ("arctan2", "hypot")
MATH_RTOL = {np.float16: 2e-3, np.float32: 4e-6, np.float64: 1e-14}
INT_BINARY = (
    "floor_divide",
    "remainder",
    "fmod",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "logical_and",
    "logical_xor",
)
INT_UNARY = (
    "sign",
    "invert",
    "floor",
    "ceil",
    "trunc",
    "round",
    "positive",
    "isnan",
    "isinf",
    "isfinite",
    "signbit",
    "logical_not",
)


def floats(rng: np.random.Generator, dt: Any) -> np.ndarray:
    x = (rng.standard_normal(SHAPE) * 4).astype(dt)
    x.flat[:9] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, -2.5, 1.5, -np.nan]
    return x


def ints(rng: np.random.Generator, dt: Any) -> np.ndarray:
    info = np.iinfo(dt)
    x = rng.integers(max(info.min, -50), min(info.max, 50), SHAPE, dtype=dt, endpoint=True)
    x.flat[:4] = [info.min, info.max, 0, 1]
    if info.min < 0:
        x.flat[4:6] = [-1, -7]
    return x


def on_gpu(session: Any, op: Any, *xs: np.ndarray) -> np.ndarray:
    return op(*(session.to_device(x) for x in xs)).to_host()


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got) | np.isnan(got), np.signbit(want) | np.isnan(want))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", ["positive", "negative"])
def test_a_16_bit_nan_in_any_lane_of_a_vector_keeps_its_sign(device_session: Any, rng: Any, name: str, dt: Any) -> None:
    x = rng.standard_normal(SHAPE).astype(dt)
    lanes = np.arange(8)  # one NaN in each lane of the 16-byte vectors, an infinity beside it
    x.flat[64 + 9 * lanes] = np.where(lanes % 2, -np.nan, np.nan)
    x.flat[65 + 9 * lanes] = np.inf
    got, want = on_gpu(device_session, ops.TABLE[name], x), getattr(np, name)(x)
    assert got.dtype == want.dtype  # compared as float32: NumPy's predicates do not take bfloat16
    got32, want32 = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.signbit(got32), np.signbit(want32))  # a NaN's sign too
    np.testing.assert_array_equal(got32, want32)


@pytest.mark.parametrize("dt", [*FLOATS, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_negative_flips_the_sign_of_a_nan_as_numpy_does(device_session: Any, dt: Any) -> None:
    x = np.array([np.nan, -np.nan, np.inf, 0.0, -0.0, 1.5] * 11, dtype=dt)
    got = on_gpu(device_session, ops.negative, x).astype(np.float64)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.negative(x).astype(np.float64)))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", EXACT_FLOAT)
def test_exact_float_ops_match_numpy_bit_for_bit(device_session: Any, rng: Any, name: str, dt: Any) -> None:
    x = floats(rng, dt)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
    same(on_gpu(device_session, ops.TABLE[name], x), want)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", EXACT_FLOAT_BINARY)
def test_exact_binary_float_ops_match_numpy_bit_for_bit(device_session: Any, rng: Any, name: str, dt: Any) -> None:
    a, b = floats(rng, dt), floats(rng, dt)[::-1].copy()
    b.flat[20] = 0.0  # fmod by zero: NaN
    if name in ("fmax", "fmin"):  # which zero of two equal ones comes back is unspecified (IEEE maxNum)
        b[(a == 0) & (b == 0)] = 1
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, b)
    same(on_gpu(device_session, ops.TABLE[name], a, b), want)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", MATH + MATH_BINARY)
def test_math_functions_are_within_a_few_ulp_of_numpy(device_session: Any, rng: Any, name: str, dt: Any) -> None:
    xs = [floats(rng, dt)] if name in MATH else [floats(rng, dt), floats(rng, dt)[::-1].copy()]
    with np.errstate(all="ignore"):
        want = getattr(np, name)(*xs)
    got = on_gpu(device_session, ops.TABLE[name], *xs)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=MATH_RTOL[dt], atol=float(np.finfo(dt).tiny), equal_nan=True)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_erf_and_erfc_match_the_float64_reference(device_session: Any, rng: Any, dt: Any) -> None:
    x = floats(rng, dt)
    for op, ref in ((ops.erf, math.erf), (ops.erfc, math.erfc)):
        want = np.array([ref(v) for v in x.astype(np.float64).flat]).reshape(SHAPE).astype(dt)
        np.testing.assert_allclose(on_gpu(device_session, op, x), want, rtol=MATH_RTOL[dt], atol=1e-30, equal_nan=True)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", INT_BINARY)
def test_integer_binary_ops_match_numpy_on_negative_and_extreme_values(
    device_session: Any, rng: Any, name: str, dt: Any
) -> None:
    a, b = ints(rng, dt), ints(rng, dt)[::-1].copy()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, b)
    same(on_gpu(device_session, ops.TABLE[name], a, b), want)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", INT_UNARY)
def test_integer_unary_ops_match_numpy(device_session: Any, rng: Any, name: str, dt: Any) -> None:
    x = ints(rng, dt)
    same(on_gpu(device_session, ops.TABLE[name], x), getattr(np, name)(x))


@pytest.mark.parametrize("dt", INTS, ids=lambda d: np.dtype(d).name)
def test_shifts_match_numpy_for_every_count_including_out_of_range(device_session: Any, rng: Any, dt: Any) -> None:
    a = ints(rng, dt)
    bits = np.dtype(dt).itemsize * 8
    counts = rng.integers(0, bits + 3, SHAPE).astype(dt)
    for op in (ops.left_shift, ops.right_shift):
        with np.errstate(all="ignore"):
            want = getattr(np, op.name)(a, counts)
        same(on_gpu(device_session, op, a, counts), want)


def test_integer_reciprocal_truncates_like_numpy(device_session: Any) -> None:
    x = np.array([1, -1, 2, -2, 3, 127, -128], np.int8)
    same(on_gpu(device_session, ops.reciprocal, x), np.reciprocal(x))


def test_bool_logic_and_bits(device_session: Any, rng: Any) -> None:
    a, b = rng.integers(0, 2, SHAPE).astype(bool), rng.integers(0, 2, SHAPE).astype(bool)
    for name in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"):
        same(on_gpu(device_session, ops.TABLE[name], a, b), getattr(np, name)(a, b))
    same(on_gpu(device_session, ops.invert, a), np.invert(a))


def test_concatenate_and_stack_match_numpy(device_session: Any, rng: Any) -> None:
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.integers(-9, 9, (3, 2)).astype(np.int16)
    c = rng.standard_normal((3, 7)).astype(np.float32)
    da, db, dc = (device_session.to_device(x) for x in (a, b, c))
    same(kd.concatenate([da, db, dc], axis=1).to_host(), np.concatenate([a, b, c], axis=1))
    same(kd.concatenate([da, c[:, :5]], axis=0).to_host(), np.concatenate([a, c[:, :5]], axis=0))
    same(kd.concatenate([da, db], axis=None).to_host(), np.concatenate([a, b], axis=None))
    same(kd.stack([da, dc[:, 1:6]], axis=1).to_host(), np.stack([a, c[:, 1:6]], axis=1))
    out = device_session.empty((3, 12), np.float64)
    kd.concatenate([da, dc], axis=1, out=out[:, ::-1])
    same(out.to_host(), np.concatenate([a, c], axis=1)[:, ::-1].astype(np.float64))


def test_concatenate_reads_an_input_that_overlaps_out_before_writing(device_session: Any) -> None:
    h = np.arange(10, dtype=np.int32)
    d = device_session.to_device(h)
    kd.concatenate([d[5:], d[:5]], out=d)
    same(d.to_host(), np.concatenate([h[5:], h[:5]]))


def test_flip_and_broadcast_to_views_read_like_numpys(device_session: Any, rng: Any) -> None:
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    d = device_session.to_device(x)
    for axis in (None, 0, 2, (0, 1)):
        same(kd.flip(d, axis).to_host(), np.flip(x, axis))
        same(ops.add(kd.flip(d, axis), 1).to_host(), np.flip(x, axis) + 1)
    row = x[0, 0]
    same(kd.broadcast_to(device_session.to_device(row), (6, 5)).to_host(), np.broadcast_to(row, (6, 5)).copy())
    same(ops.multiply(kd.broadcast_to(d[:, :1], (4, 3, 5)), 2).to_host(), np.broadcast_to(x[:, :1], (4, 3, 5)) * 2)
    same(kd.moveaxis(d, 0, -1).to_host(), np.moveaxis(x, 0, -1).copy())
