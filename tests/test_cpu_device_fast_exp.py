"""The CPU device's float exp where CUDA's accuracy contract is the fast one (``__expf``, and
``expf`` in a kernel built with ``--use_fast_math``): the shim's polynomial, which the host
compiler vectorizes. It stays within 2 ulp of the rounded result over the whole float range, and
overflows, underflows and propagates NaN as ``expf`` does."""

from __future__ import annotations

from typing import Any, NewType

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="no host C++ compiler for the CPU device")

n = NewType("n", int)
ULPS = 2.0


@kd.kernel(grid=kd.cdiv(n, 128), block=128, options=("--use_fast_math",))
def exp_fast_math(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) { y[i] = expf(x[i]); }"


@kd.kernel(grid=kd.cdiv(n, 128), block=128, options=("--use_fast_math",))
def exp_overload_fast_math(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) { y[i] = exp(x[i]); }"


@kd.kernel(grid=kd.cdiv(n, 128), block=128)
def exp_intrinsic(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) { y[i] = __expf(x[i]); }"


KERNELS = [exp_fast_math, exp_overload_fast_math, exp_intrinsic]


def run(cpu: Any, kernel: Any, x: np.ndarray) -> np.ndarray:
    y = cpu.empty(x.shape, np.float32)
    kernel(y, cpu.to_device(x))
    result: np.ndarray = y.to_host()
    return result


def ulp_errors(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - exp(x)| in units of the rounded result's last place (denormals: the smallest denormal)."""
    exact = np.exp(x.astype(np.float64))
    rounded = exact.astype(np.float32)
    spacing = np.spacing(rounded).astype(np.float64)
    errors: np.ndarray = np.abs(got.astype(np.float64) - exact) / spacing
    return errors


@pytest.mark.parametrize("kernel", KERNELS, ids=["expf fast math", "exp overload fast math", "__expf"])
def test_fast_exp_is_within_two_ulp_across_the_float_range(cpu: Any, kernel: Any) -> None:
    x = np.linspace(-103.9, 88.7, 400_001, dtype=np.float32)
    with np.errstate(over="ignore"):
        errors = ulp_errors(run(cpu, kernel, x), x)
    assert errors.max() <= ULPS, f"{errors.max():.3f} ulp at x = {x[int(errors.argmax())]!r}"


@pytest.mark.parametrize("kernel", KERNELS, ids=["expf fast math", "exp overload fast math", "__expf"])
def test_fast_exp_rounds_small_arguments_to_one(cpu: Any, kernel: Any) -> None:
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8], np.float32)
    np.testing.assert_array_equal(run(cpu, kernel, x), np.ones(6, np.float32))


@pytest.mark.parametrize("kernel", KERNELS, ids=["expf fast math", "exp overload fast math", "__expf"])
def test_fast_exp_overflows_underflows_and_keeps_nan_as_expf(cpu: Any, kernel: Any) -> None:
    x = np.array([np.inf, 88.73, 1e30, -np.inf, -104.0, -1e30, np.nan], np.float32)
    got = run(cpu, kernel, x)
    np.testing.assert_array_equal(got[:6], np.array([np.inf] * 3 + [0.0] * 3, np.float32))
    assert np.isnan(got[6])
