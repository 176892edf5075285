"""Reductions over any axis set and strided views on the GPU, against NumPy (float64 reference):
the issue's shapes, views read in place (``x.T``, ``x[::2]``, ``x[:, ::2]``, ``x[..., 1:-1]``),
and hypothesis (seeded) over random 1-D..4-D shapes, axis sets, views and dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl import ops

pytestmark = pytest.mark.gpu

VIEWS = {
    "T": lambda a: a.T,
    "rows2": lambda a: a[::2],
    "cols2": lambda a: a[:, ::2],
    "inner": lambda a: a[..., 1:-1],
    "mixed": lambda a: a[1::3, ::-1][:, ::2].T,
}


def _axes(axis: object, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,)))  # type: ignore[attr-defined]


def _check(got: np.ndarray, x: np.ndarray, axis: object) -> None:
    want = np.sum(x, axis=axis)  # type: ignore[call-overload]
    assert got.shape == want.shape and got.dtype == want.dtype
    if x.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    n = max(2, math.prod(x.shape[a] for a in _axes(axis, x.ndim)))
    exact = np.sum(x.astype(np.float64), axis=axis)  # type: ignore[call-overload]
    mag = np.sum(np.abs(x.astype(np.float64)), axis=axis)  # type: ignore[call-overload]
    eps = np.finfo(np.float32 if x.dtype.itemsize <= 4 else np.float64).eps
    bound = (math.log2(n) + 2) * eps * mag + np.finfo(got.dtype).eps * np.abs(exact) + 1e-30
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dt: type) -> np.ndarray:
    if np.dtype(dt).kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(dt)
    return rng.integers(-50, 50, shape).astype(dt)


@pytest.mark.parametrize(
    ("shape", "dt"), [((1001, 7, 513), np.float16), ((129, 77, 1025), np.float32), ((3, 5, 1000003), np.float16)]
)
def test_the_issue_shapes_sum_over_interleaved_axes_like_numpy(device_session, shape, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(1), shape, dt)
    assert ops.sum.strategy(x, axis=(0, 2)).variant.stage == "segments"
    _check(ops.sum(device_session.to_device(x), axis=(0, 2)).to_host(), x, (0, 2))


@pytest.mark.parametrize(
    ("shape", "axis", "dt"),
    [
        ((4099, 13), 0, np.float16),  # a period of 8 rows, 3 rows after the whole periods
        ((1, 100003, 13), -2, np.float32),  # split over blocks
        ((1001, 12), 0, np.float16),  # a period of 2 rows
        ((37, 1000, 29), 1, np.float16),  # 37 outer slabs, each starting on a vector
        ((200001, 3), 0, np.int32),
        ((8, 1600, 7), 1, np.float32),
    ],
)
def test_columns_no_multiple_of_a_vector_sum_across_periods_like_numpy(device_session, shape, axis, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(4), shape, dt)
    assert ops.sum.strategy(x, axis=axis).variant.period > 1
    _check(ops.sum(device_session.to_device(x), axis=axis).to_host(), x, axis)
    got = ops.max(device_session.to_device(x), axis=axis).to_host()
    np.testing.assert_array_equal(got, np.max(x, axis=axis))


def test_phased_columns_of_an_unaligned_array_read_value_by_value_like_numpy(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(5), (4100, 13), np.float16)
    view = device_session.to_device(x)[1:]  # contiguous, 26 bytes past a vector
    _check(ops.sum(view, axis=0).to_host(), x[1:], 0)


@pytest.mark.parametrize(("shape", "axis", "dt"), [((181, 13, 31, 3), (1, 2), np.float32), ((64, 220, 5), 1, np.int32)])
def test_columns_narrower_than_a_warp_sum_in_flat_lines_like_numpy(device_session, shape, axis, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(3), shape, dt)
    assert ops.sum.strategy(x, axis=axis).variant.flat
    _check(ops.sum(device_session.to_device(x), axis=axis).to_host(), x, axis)
    got = ops.argmax(device_session.to_device(x), axis=axis if isinstance(axis, int) else None).to_host()
    np.testing.assert_array_equal(got, np.argmax(x, axis=axis if isinstance(axis, int) else None))


SLABS = [
    ((93011, 11, 5), 1, np.float16),  # the issue's shape: 72 slabs a tile, 16-byte loads
    ((64, 7, 3), 1, np.int32),
    ((1000, 3, 40), 1, np.float32),
    ((1001, 3, 40), -2, np.float64),  # a last tile of fewer slabs
    ((77, 2, 3, 4), (1, 2), np.bool_),
    ((100, 127, 7), 1, np.float16),  # a double tile: 8 slabs of 889 values, 16-byte loads
    ((4001, 17, 33), 1, np.float16),  # a double tile: 8 slabs of 561 values
    ((100, 7, 73), 1, np.bool_),  # too few slabs even a double tile for whole vectors: value by value
    ((3, 2, 5), 1, np.float32),  # one tile, most threads idle
]


@pytest.mark.parametrize(("shape", "axis", "dt"), SLABS)
def test_short_slabs_reduce_in_shared_memory_like_numpy(device_session, shape, axis, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(7), shape, dt)
    assert ops.sum.strategy(x, axis=axis).variant.stage == "slabs"
    dx = device_session.to_device(x)
    _check(ops.sum(dx, axis=axis).to_host(), x, axis)
    np.testing.assert_array_equal(ops.max(dx, axis=axis).to_host(), np.max(x, axis=axis))


@pytest.mark.parametrize(("shape", "axis", "dt"), [s for s in SLABS if isinstance(s[1], int)])
def test_argmax_and_argmin_of_short_slabs_take_the_first_of_ties(device_session, shape, axis, dt) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(8).integers(-3, 3, shape).astype(dt)  # many ties
    dx = device_session.to_device(x)
    np.testing.assert_array_equal(ops.argmax(dx, axis=axis).to_host(), np.argmax(x, axis=axis))
    np.testing.assert_array_equal(ops.argmin(dx, axis=axis).to_host(), np.argmin(x, axis=axis))


def test_short_slabs_of_a_fused_expression_and_mean_match_numpy(device_session) -> None:  # type: ignore[no-untyped-def]
    @kd.fuse
    def weighted(a, b):
        return kd.ops.sum(a * b, axis=1)

    rng = np.random.default_rng(9)
    a, b = _data(rng, (5001, 9, 6), np.float32), _data(rng, (5001, 9, 6), np.float32)
    da, db = device_session.to_device(a), device_session.to_device(b)
    assert ops.sum.strategy(a * b, axis=1).variant.stage == "slabs"
    _check(weighted(da, db).to_host(), a * b, 1)
    np.testing.assert_allclose(ops.mean(da, axis=1).to_host(), a.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_short_slabs_of_an_unaligned_array_read_value_by_value_like_numpy(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(10), (4001, 11, 5), np.float16)
    dx = device_session.to_device(x)[1:]  # contiguous, 110 bytes past an aligned start
    _check(ops.sum(dx, axis=1).to_host(), x[1:], 1)
    np.testing.assert_array_equal(ops.argmax(dx, axis=1).to_host(), np.argmax(x[1:], axis=1))


def test_short_slabs_into_out_and_with_keepdims_match_numpy(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(11), (2003, 11, 5), np.float32)
    dx = device_session.to_device(x)
    target = device_session.zeros((2003, 5), np.float32)
    ops.sum(dx, axis=1, out=target)
    _check(target.to_host(), x, 1)
    kept = ops.sum(dx, axis=1, keepdims=True).to_host()
    assert kept.shape == (2003, 1, 5)
    _check(kept[:, 0], x, 1)


def test_slabs_give_the_same_bits_every_run(device_session) -> None:  # type: ignore[no-untyped-def]
    x = device_session.to_device(_data(np.random.default_rng(12), (93011, 11, 5), np.float32))
    first = ops.sum(x, axis=1).to_host()
    for _ in range(3):
        assert ops.sum(x, axis=1).to_host().tobytes() == first.tobytes()


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("axis", [0, 1, None, -1])
def test_views_are_reduced_like_numpy(device_session, view, axis) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(2), (300, 514), np.float32)
    dv = VIEWS[view](device_session.to_device(x))
    _check(ops.sum(dv, axis=axis).to_host(), VIEWS[view](x), axis)


@pytest.mark.parametrize("view", list(VIEWS))
def test_argmax_and_min_of_views_follow_numpy(device_session, view) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(3).integers(-20, 20, (130, 66)).astype(np.float32)  # ties: the first index wins
    dv, hv = VIEWS[view](device_session.to_device(x)), VIEWS[view](x)
    for axis in (0, 1, None):
        np.testing.assert_array_equal(ops.argmax(dv, axis=axis).to_host(), np.argmax(hv, axis=axis))
        np.testing.assert_array_equal(ops.min(dv, axis=axis).to_host(), np.min(hv, axis=axis))


def test_a_large_transposed_view_sums_in_place_like_numpy(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(4), (2048, 4096), np.float32)
    dv = device_session.to_device(x).T
    assert ops.sum.strategy(dv, axis=0).variant.copy == ""
    _check(ops.sum(dv, axis=0).to_host(), x.T, 0)


def test_interleaved_split_reductions_give_the_same_bits_every_run(device_session) -> None:  # type: ignore[no-untyped-def]
    x = device_session.to_device(_data(np.random.default_rng(5), (3, 5, 200003), np.float32))
    first = ops.sum(x, axis=(0, 2)).to_host()
    for _ in range(3):
        assert ops.sum(x, axis=(0, 2)).to_host().tobytes() == first.tobytes()


def test_a_reduction_into_a_strided_out_writes_only_the_view(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(6), (40, 7, 513), np.float32)
    target = device_session.zeros((7, 2), np.float32)
    ops.sum(device_session.to_device(x), axis=(0, 2), out=target[:, 0])
    got = target.to_host()
    _check(got[:, 0], x, (0, 2))
    assert not got[:, 1].any()


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(1, 37), min_size=1, max_size=4),
    data=st.data(),
    dt=st.sampled_from([np.float32, np.float16, np.int32, np.bool_, np.float64]),
    view=st.sampled_from(["none", "T", "step", "inner"]),
)
def test_random_shapes_axes_views_and_dtypes_match_numpy(device_session, shape, data, dt, view) -> None:  # type: ignore[no-untyped-def]
    x = _data(np.random.default_rng(len(shape)), tuple(shape), dt)
    dx = device_session.to_device(x)
    if view == "T":
        x, dx = x.T, dx.T
    elif view == "step" and x.shape[0] > 1:
        x, dx = x[::2], dx[::2]
    elif view == "inner" and x.shape[-1] > 2:
        x, dx = x[..., 1:-1], dx[..., 1:-1]
    ndim = x.ndim
    axes = data.draw(st.lists(st.integers(-ndim, ndim - 1), unique_by=lambda a: a % ndim, max_size=ndim))
    axis = None if not axes else tuple(axes) if len(axes) > 1 else axes[0]
    _check(ops.sum(dx, axis=axis).to_host(), x, axis)
