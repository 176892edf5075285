"""Complex kernels on the GPU against NumPy: arrays and a scalar of complex64 / complex128, the
prelude's arithmetic (Smith's division), exp, abs and conj, through a session and through the
numpy-in, numpy-out call."""

from __future__ import annotations

from typing import Any, Literal, NewType

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.gpu

n = NewType("n", int)


@kd.kernel(grid=kd.cdiv(n, 128), block=128)
def complex_ops(out: kd.Out["T", Literal[5], n], x: kd.In["T", n], y: kd.In["T", n], a: kd.Scalar["T"]) -> str:
    return """
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a * x[i] + y[i];
        out[n + i] = x[i] / y[i];
        out[2 * n + i] = kd_exp(x[i]);
        out[3 * n + i] = T(kd_abs(x[i]));
        out[4 * n + i] = kd_conj(x[i]) * y[i];
    }
    """


def _expected(x: np.ndarray, y: np.ndarray, a: complex) -> np.ndarray:
    x, y = x.astype(np.complex128), y.astype(np.complex128)
    return np.stack([a * x + y, x / y, np.exp(x), np.abs(x).astype(np.complex128), np.conj(x) * y])


def _inputs(dt: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(dt)
    y = (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(dt)
    extremes = [1e30 + 1e-30j, 1e-30 + 1e30j, -2 + 0j] if dt == np.complex128 else [1e18 + 1j, 1 + 1e18j, -2 + 0j]
    y[: min(3, size)] = extremes[:size]  # Smith's division keeps these finite
    return x, y


@pytest.mark.parametrize("dt, rtol", [(np.complex64, 2e-6), (np.complex128, 1e-14)], ids=["complex64", "complex128"])
@pytest.mark.parametrize("size", [1, 1000, 4099])
def test_complex_arithmetic_matches_numpy_on_device_arrays(dt: Any, rtol: float, size: int) -> None:
    x, y = _inputs(dt, size)
    a = dt(0.5 - 1.25j)
    with kd.Session(0) as s:
        out = s.zeros((5, size), dt)
        complex_ops(out, s.to_device(x), s.to_device(y), a)
        got = out.to_host()
    np.testing.assert_allclose(got, _expected(x, y, complex(a)), rtol=rtol * 8, atol=0)


def test_a_numpy_call_with_complex_arrays_and_a_python_complex_scalar() -> None:
    x, y = _inputs(np.complex128, 257)
    out = np.zeros((5, 257), np.complex128)
    complex_ops(out, x, y, 2 - 3j)
    np.testing.assert_allclose(out, _expected(x, y, 2 - 3j), rtol=1e-13, atol=0)


@pytest.mark.parametrize("dt", [np.complex64, np.complex128], ids=["complex64", "complex128"])
def test_views_of_complex_arrays_copy_to_the_host_and_on_the_device(dt: Any) -> None:
    host = (np.arange(60) + 1j * np.arange(60)[::-1]).astype(dt).reshape(6, 10)
    with kd.Session(0) as s:
        view = s.to_device(host)[1:5, ::3].T
        np.testing.assert_array_equal(view.to_host(), host[1:5, ::3].T)
        np.testing.assert_array_equal(kd.ops.astype(view, dt).to_host(), host[1:5, ::3].T)
