"""The CPU device against NumPy on random data: elementwise ops, reductions along any axis and
scans, for every dtype, shapes hypothesis draws (odd extents, 1-D to 3-D, views). Seeded by
hypothesis itself (``derandomize``), never by ``PYTHONHASHSEED``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kerneldsl as kd
from kerneldsl import ops

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="no host C++ compiler for the CPU device")

DTYPES = [np.dtype(t) for t in ("bool", "int8", "uint8", "int16", "int32", "int64", "uint32", "float32", "float64")]
FLOATS = [np.dtype("float32"), np.dtype("float64")]
DIFFERENTIAL = settings(
    max_examples=12, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def arrays(dtypes: list[np.dtype], max_dims: int = 3) -> st.SearchStrategy[np.ndarray]:
    """Arrays of up to ``max_dims`` axes of 1..40 elements, small values (integer ops stay exact)."""
    shapes = hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=40)

    def elements(dt: np.dtype) -> st.SearchStrategy[Any]:
        if dt.kind == "b":
            return st.booleans()
        if dt.kind in "iu":
            return st.integers(0 if dt.kind == "u" else -50, 50)
        return st.floats(-1e3, 1e3, allow_nan=False, width=dt.itemsize * 8)

    return st.sampled_from(dtypes).flatmap(lambda dt: hnp.arrays(dt, shapes, elements=elements(dt)))


@DIFFERENTIAL
@given(a=arrays(DTYPES), name=st.sampled_from(["add", "multiply", "maximum", "minimum", "subtract"]))
def test_binary_ops_match_numpy(cpu: Any, a: np.ndarray, name: str) -> None:
    if a.dtype == np.bool_ and name == "subtract":
        return  # NumPy refuses boolean subtraction too
    b = np.flip(a).copy()
    got = getattr(ops, name)(cpu.to_device(a), cpu.to_device(b)).to_host()
    np.testing.assert_array_equal(got, getattr(np, name)(a, b))


@DIFFERENTIAL
@given(a=arrays(DTYPES), data=st.data())
def test_reductions_along_any_axis_match_numpy(cpu: Any, a: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-1, a.ndim - 1).map(lambda k: None if k < 0 else k))
    name = data.draw(st.sampled_from(["sum", "max", "min", "argmax"]))
    got = getattr(ops, name)(cpu.to_device(a), axis=axis)
    got = got.to_host() if hasattr(got, "to_host") else np.asarray(got)
    want = getattr(np, name)(a, axis=axis)
    if a.dtype.kind == "f" and name == "sum":
        bound = np.sum(np.abs(a), axis=axis) * a.shape[axis or 0] * np.finfo(a.dtype).eps * 2
        assert np.all(np.abs(got - want) <= bound)
    else:
        np.testing.assert_array_equal(got, want)


@DIFFERENTIAL
@given(a=arrays([np.dtype("int32"), np.dtype("int64")], max_dims=1))
def test_cumsum_matches_numpy(cpu: Any, a: np.ndarray) -> None:
    np.testing.assert_array_equal(ops.cumsum(cpu.to_device(a)).to_host(), np.cumsum(a))


@DIFFERENTIAL
@given(a=arrays(FLOATS, max_dims=2), data=st.data())
def test_strided_views_match_numpy(cpu: Any, a: np.ndarray, data: st.DataObject) -> None:
    step = data.draw(st.integers(1, 3))
    view = cpu.to_device(a)[..., ::step]
    np.testing.assert_array_equal(ops.multiply(view, view).to_host(), a[..., ::step] * a[..., ::step])
