"""Axis reductions and scans on the GPU, every strategy, against NumPy (float64 reference).

Shapes are chosen to force each strategy (``Reduction.strategy`` is asserted first, so a change
of heuristics cannot silently stop covering one); hypothesis adds random shapes and axes.
Tolerance for float sums: ``(log2(n) + 2) * eps(acc) * sum(|x|)`` per output, plus one rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.bench import error_bounds

pytestmark = pytest.mark.gpu


def _sum_tolerance(x: np.ndarray, axis: object, n: int) -> np.ndarray:
    mag = np.sum(np.abs(x.astype(np.float64)), axis=axis)  # type: ignore[call-overload]
    return (math.log2(max(n, 2)) + 2) * np.finfo(np.float32).eps * mag + np.finfo(np.float32).eps * mag + 1e-30


def _check_sum(session, x: np.ndarray, axis: object, keepdims: bool = False) -> None:
    got = ops.sum(session.to_device(x), axis=axis, keepdims=keepdims).to_host()
    exact = np.sum(x.astype(np.float64), axis=axis, keepdims=keepdims)  # type: ignore[call-overload]
    axes = range(x.ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    n = int(np.prod([x.shape[a] for a in axes]))
    assert got.shape == exact.shape and got.dtype == np.float32
    assert np.all(np.abs(got - exact) <= _sum_tolerance(x, axis, n).reshape(exact.shape))


STRATEGY_CASES = [
    ((16, 1 << 20), 1, ("rows", True)),  # few long rows: split over blocks
    ((300, 5000), 1, ("rows", False)),  # a block per row
    ((1 << 16, 16), 1, ("rows", False)),  # short rows: a few lanes (here one) each
    ((1000, 7), 1, ("rows", False)),  # unaligned rows: scalar loads
    ((4096, 4096), 0, ("columns", True)),  # a leading axis: coalesced columns split over blocks
    ((16, 1 << 20), 0, ("columns", False)),  # a short leading axis over many columns
    ((1 << 18, 16), 0, ("columns", True)),  # narrow columns, the block down the reduced axis
    ((5000, 3), 0, ("columns", True)),  # odd widths: scalar loads, exactly 3 lanes across
    ((200003, 13), 0, ("columns", True)),  # 13 lanes across, 16 rows of them, the rest of the block idle
    ((50000, 12), 0, ("columns", True)),  # three 4-wide vectors across
    ((64, 513, 96), 1, ("columns", True)),  # the middle axis of 3-D
    ((60, 7, 80, 9), (0, 2), ("lines", True)),  # interleaved axes, the fastest kept
    ((40, 7, 513), (0, 2), ("segments", True)),  # interleaved axes, the fastest reduced
]


@pytest.mark.parametrize(("shape", "axis", "expected"), STRATEGY_CASES)
def test_every_strategy_sums_like_numpy(device_session, shape, axis, expected) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    step = ops.sum.strategy(x, axis=axis, multiprocessors=device_session.gpu.multiprocessors)
    assert (step.variant.stage, step.variant.split) == expected
    _check_sum(device_session, x, axis)


@pytest.mark.parametrize(("shape", "axis", "expected"), [c for c in STRATEGY_CASES if not isinstance(c[1], tuple)])
@pytest.mark.parametrize("name", ["argmax", "argmin", "max", "min"])
def test_every_strategy_finds_extremes_like_numpy(device_session, shape, axis, expected, name) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-50, 50, shape).astype(np.float32)  # many ties: the first index must win
    got = getattr(ops, name)(device_session.to_device(x), axis=axis).to_host()
    want = getattr(np, name)(x, axis=axis)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("shape", "axis"), [((16, 1 << 20), 1), ((4096, 4096), 0), ((1 << 18, 16), 0)])
def test_split_reductions_give_the_same_bits_every_run(device_session, shape, axis) -> None:
    x = device_session.to_device(np.random.default_rng(5).standard_normal(shape).astype(np.float32))
    first = ops.sum(x, axis=axis).to_host()
    for _ in range(3):
        assert ops.sum(x, axis=axis).to_host().tobytes() == first.tobytes()


def test_split_stages_leave_their_tickets_ready_for_the_next_call(device_session) -> None:
    rng = np.random.default_rng(6)
    for shape, axis in [((16, 1 << 20), 1), ((4096, 4096), 0), ((32, 1 << 19), 1), ((2048, 8192), 0)]:
        _check_sum(device_session, rng.standard_normal(shape).astype(np.float32), axis)


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32, np.int64, np.float16, np.float64, np.bool_])
@pytest.mark.parametrize(("shape", "axis"), [((300, 5000), 1), ((4096, 640), 0), ((1 << 16, 16), 1), ((640, 9), 0)])
def test_integer_and_other_float_sums_follow_numpy_dtypes(device_session, dt, shape, axis) -> None:
    rng = np.random.default_rng(7)
    x = (rng.integers(0, 2, shape) if dt == np.bool_ else rng.integers(-3, 4, shape)).astype(dt)
    got = ops.sum(device_session.to_device(x), axis=axis).to_host()
    want = np.sum(x, axis=axis)
    assert got.dtype == want.dtype
    if np.dtype(dt).kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 1), (1, 2), (0, 2), (0, 1, 2)])
def test_tuples_of_axes_and_keepdims(device_session, axis, keepdims) -> None:
    _check_sum(
        device_session, np.random.default_rng(8).standard_normal((33, 40, 17)).astype(np.float32), axis, keepdims
    )


def test_mean_and_norm_over_a_tuple_of_axes(device_session) -> None:
    x = np.random.default_rng(9).standard_normal((8, 100, 12)).astype(np.float32)
    dx = device_session.to_device(x)
    np.testing.assert_allclose(ops.mean(dx, axis=(0, 2)).to_host(), np.mean(x, axis=(0, 2)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        ops.norm(dx, axis=(0, 2)).to_host(), np.linalg.norm(x.transpose(1, 0, 2).reshape(100, -1), axis=1), rtol=1e-4
    )


def test_user_reduction_over_a_leading_axis(device_session) -> None:
    absmax = kd.reduction(map="fabs(x)", reduce="a > b ? a : b", identity="0", name="absmax")
    x = np.random.default_rng(10).standard_normal((4096, 520)).astype(np.float32)
    np.testing.assert_array_equal(absmax(device_session.to_device(x), axis=0).to_host(), np.max(np.abs(x), axis=0))


def test_fused_softmax_denominator_is_one_kernel_over_rows(device_session) -> None:
    @kd.fuse
    def denominator(x, m):
        return kd.ops.sum(kd.ops.exp(x - m), axis=1)

    x = np.random.default_rng(11).standard_normal((512, 3000)).astype(np.float32)
    m = x.max(axis=1, keepdims=True)
    got = denominator(device_session.to_device(x), device_session.to_device(m)).to_host()
    np.testing.assert_allclose(got, np.sum(np.exp(x.astype(np.float64) - m), axis=1), rtol=1e-5)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(1, 70), min_size=1, max_size=4),
    data=st.data(),
    keepdims=st.booleans(),
)
def test_random_shapes_and_axes_match_numpy(device_session, shape, data, keepdims) -> None:
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    axis = None if not axes else tuple(sorted(axes)) if len(axes) > 1 else axes[0]
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    _check_sum(device_session, x, axis, keepdims)
    if not isinstance(axis, tuple):
        got = ops.argmax(device_session.to_device(x), axis=axis).to_host()
        np.testing.assert_array_equal(got, np.argmax(x, axis=axis))


# --- scans ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axis", "stage"),
    [
        ((1 << 22) + 37, None, "lookback"),  # over a thousand tiles: the look-back window is full
        ((16, 100_000), 1, "lookback"),
        ((3, 1001), -1, "lookback"),  # unaligned rows
        ((1 << 16, 16), 1, "lines"),
        ((700, 300), 0, "lines"),
        ((20, 30, 40), 1, "lines"),
    ],
)
@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum_matches_numpy(device_session, shape, axis, stage, exclusive) -> None:
    rng = np.random.default_rng(12)
    fractions = rng.random(shape, dtype=np.float32)
    integers = rng.integers(0, 4, shape).astype(np.float32)  # prefixes below 2^24: exact, so a dropped element shows
    assert ops.cumsum.strategy(fractions, axis=axis).variant.stage == stage
    for x in (fractions, integers):
        got = ops.cumsum(device_session.to_device(x), axis=axis, exclusive=exclusive).to_host()
        x64 = x.astype(np.float64)
        exact = np.cumsum(x64, axis=axis)
        if exclusive:
            exact = exact - (x64.ravel() if axis is None else x64)
        bound = error_bounds.cumsum_bound(x, axis, acc=np.float32, out=np.float32, exclusive=exclusive)
        assert got.shape == exact.shape
        error_bounds.assert_rejects_wrong_answers(exact, bound, "cumsum")
        error_bounds.assert_within(got, exact, bound, f"cumsum of {x.shape} over axis {axis}")
    assert not error_bounds.cumsum_bound(integers, axis, acc=np.float32, out=np.float32).any()


def test_cumsum_gives_the_same_bits_every_run(device_session) -> None:
    x = device_session.to_device(np.random.default_rng(13).standard_normal(1 << 23).astype(np.float32))
    first = ops.cumsum(x).to_host()
    for _ in range(3):
        assert ops.cumsum(x).to_host().tobytes() == first.tobytes()


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint16, np.int64, np.bool_])
def test_integer_cumsum_is_exact_with_numpy_dtypes(device_session, dt) -> None:
    x = np.random.default_rng(14).integers(0, 3, 50_001).astype(dt)
    got = ops.cumsum(device_session.to_device(x)).to_host()
    want = np.cumsum(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_cumprod_and_float16(device_session) -> None:
    x = np.random.default_rng(15).uniform(0.999, 1.001, 20_000).astype(np.float32)
    np.testing.assert_allclose(
        ops.cumprod(device_session.to_device(x)).to_host(), np.cumprod(x.astype(np.float64)), rtol=1e-4
    )
    h = np.random.default_rng(16).random(5000).astype(np.float16)
    got = ops.cumsum(device_session.to_device(h)).to_host()
    assert got.dtype == np.float16
    want, bound = np.cumsum(h.astype(np.float64)), error_bounds.cumsum_bound(h, acc=np.float32, out=np.float16)
    error_bounds.assert_rejects_wrong_answers(want, bound, "float16 cumsum")
    error_bounds.assert_within(got, want, bound, "float16 cumsum")


def test_user_scan_running_max(device_session) -> None:
    runmax = kd.scan(op="a > b ? a : b", identity="min", name="runmax")
    x = np.random.default_rng(17).standard_normal(300_000).astype(np.float32)
    np.testing.assert_array_equal(runmax(device_session.to_device(x)).to_host(), np.maximum.accumulate(x))


def test_scans_of_numpy_arrays_return_numpy(device_session) -> None:
    x = np.arange(10, dtype=np.int32)
    assert isinstance(ops.cumsum(x), np.ndarray)
    np.testing.assert_array_equal(ops.cumsum(x, exclusive=True), np.concatenate([[0], np.cumsum(x)[:-1]]))
