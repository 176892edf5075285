"""DeviceArray's NumPy methods and scalar conversions on the GPU, against NumPy on fresh random
data: odd shapes, tuple and negative axes, keepdims, float16, int32 and bool."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.gpu

SHAPE = (7, 33, 5)
AXES = [None, 1, -1, (0, 2), (-3, -2)]


def _data(dtype: Any, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    rng = np.random.default_rng()
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "i":
        return rng.integers(-9, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _close(got: Any, want: np.ndarray, dtype: Any) -> None:
    host = got.to_host()
    assert (host.shape, host.dtype) == (np.shape(want), np.asarray(want).dtype)
    rtol = {np.float16: 5e-3, np.float32: 1e-4}.get(np.dtype(dtype).type, 1e-12)
    np.testing.assert_allclose(host.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("method", ["sum", "mean", "min", "max", "std", "var"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32])
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_reduction_methods_match_numpy(device_session: kd.Session, method: str, dtype: Any, axis: Any) -> None:
    x = _data(dtype)
    want = getattr(x.astype(np.float64) if np.dtype(dtype) == np.float16 else x, method)(axis=axis, keepdims=True)
    got = getattr(device_session.to_device(x), method)(axis=axis, keepdims=True)
    _close(got, np.asarray(want).astype(getattr(x, method)(axis=axis, keepdims=True).dtype), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_prod_matches_numpy(device_session: kd.Session, dtype: Any) -> None:
    x = (_data(np.float32, (5, 13)) * 0.2 + 1).astype(dtype) if dtype == np.float32 else _data(dtype, (5, 13)) % 3
    _close(device_session.to_device(x).prod(axis=-1), x.prod(axis=-1), dtype)


@pytest.mark.parametrize("ddof", [1, 2])
def test_std_and_var_with_ddof(device_session: kd.Session, ddof: int) -> None:
    x = _data(np.float32, (9, 17))
    d = device_session.to_device(x)
    _close(d.var(axis=0, ddof=ddof), x.var(axis=0, ddof=ddof), np.float32)
    _close(d.std(axis=(0, 1), ddof=ddof), x.std(axis=(0, 1), ddof=ddof), np.float32)


def test_sum_with_a_dtype_accumulates_in_it(device_session: kd.Session) -> None:
    x = np.full((3, 300), 100, np.int8)
    _close(device_session.to_device(x).sum(axis=1, dtype=np.int8), x.sum(axis=1, dtype=np.int8), np.int8)
    _close(device_session.to_device(x).sum(axis=1, dtype=np.float32), x.sum(axis=1, dtype=np.float32), np.float32)


@pytest.mark.parametrize("method", ["argmin", "argmax"])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_arg_extremes_match_numpy(device_session: kd.Session, method: str, axis: Any) -> None:
    x = _data(np.float32)
    assert np.array_equal(
        getattr(device_session.to_device(x), method)(axis=axis).to_host(), getattr(x, method)(axis=axis)
    )


@pytest.mark.parametrize("method", ["any", "all"])
@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.float32])
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_any_and_all_match_numpy(device_session: kd.Session, method: str, dtype: Any, axis: Any) -> None:
    x = _data(dtype) * (_data(np.bool_) if dtype != np.bool_ else True)
    x = x.astype(dtype)
    got = getattr(device_session.to_device(x), method)(axis=axis, keepdims=True).to_host()
    assert np.array_equal(got, getattr(x, method)(axis=axis, keepdims=True))


def test_any_counts_nan_as_true(device_session: kd.Session) -> None:
    x = np.array([0.0, np.nan, 0.0], np.float32)
    assert bool(device_session.to_device(x).any()) and not bool(device_session.to_device(np.zeros(3, np.float32)).any())


@pytest.mark.parametrize("method", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_scan_methods_match_numpy(device_session: kd.Session, method: str, axis: Any) -> None:
    x = _data(np.int32, (6, 11)) % 3
    got = getattr(device_session.to_device(x), method)(axis=axis)
    assert np.array_equal(got.to_host(), getattr(x, method)(axis=axis))


def test_scalar_conversions_read_the_value(device_session: kd.Session) -> None:
    x = device_session.to_device(np.array([3.75, -2.0], np.float32))
    total = x.sum()
    assert (float(total), int(total), bool(total), total.item()) == (1.75, 1, True, 1.75)
    n = device_session.to_device(np.array(4, np.int32))
    assert operator.index(n) == 4 and list(range(5))[n] == 4 and x.item(1) == -2.0


def test_mT_of_a_stack_matches_numpy(device_session: kd.Session) -> None:
    x = _data(np.float32, (2, 3, 5))
    assert np.array_equal(device_session.to_device(x).mT.to_host(), x.mT)


def test_to_device_of_another_session_copies_the_values(device_session: kd.Session) -> None:
    x = _data(np.float32, (4, 5))
    with kd.Session(0) as other:
        assert np.array_equal(device_session.to_device(x).to_device(other).to_host(), x)
