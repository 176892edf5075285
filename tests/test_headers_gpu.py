"""Headers and shared device code on the GPU, against NumPy on fresh random data: a block
reduction written with ``cub::BlockReduce`` (odd lengths, a partial last block), and one
``kd.device_function`` used by two kernels."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.gpu

BLOCK = 256


@kd.kernel(grid=kd.cdiv("n", BLOCK), block=BLOCK)
def block_sums(sums: kd.Out["float64", "blocks"], x: kd.In["float64", "n"]) -> str:
    return f"""
    #include <cub/block/block_reduce.cuh>
    typedef cub::BlockReduce<double, {BLOCK}> Reduce;
    __shared__ typename Reduce::TempStorage scratch;
    index_t i = blockIdx.x * (index_t){BLOCK} + threadIdx.x;
    double total = Reduce(scratch).Sum(i < n ? x[i] : 0.0);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
    """


@pytest.mark.parametrize("n", [1, 255, 4097, 100_003])
def test_a_cub_block_reduction_matches_numpy(device_session, rng, n: int) -> None:
    x = rng.standard_normal(n)
    blocks = -(-n // BLOCK)
    sums = device_session.to_device(np.full(blocks, np.nan))
    block_sums(sums, device_session.to_device(x))
    padded = np.concatenate([x, np.zeros(blocks * BLOCK - n)]).reshape(blocks, BLOCK)
    np.testing.assert_allclose(sums.to_host(), padded.sum(axis=1), rtol=1e-12, atol=1e-12)


SQUASH = kd.device_function(
    "squash", "template <typename V> __device__ V squash(V v) { return v / (V(1) + (v < V(0) ? -v : v)); }"
)


@kd.kernel(grid=kd.cdiv("n", 128), block=128, uses=[SQUASH])
def squashed(y: kd.Out["T", "n"], x: kd.In["T", "n"]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) y[i] = squash(x[i]);"


@kd.kernel(grid=kd.cdiv("n", 128), block=128, uses=[SQUASH])
def squashed_sum(y: kd.InOut["T", "n"], x: kd.In["T", "n"]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) y[i] += squash(x[i]);"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_one_device_function_serves_two_kernels(device_session, rng, dtype) -> None:
    x = rng.standard_normal(1001).astype(dtype)
    base = rng.standard_normal(1001).astype(dtype)
    expected = x / (dtype(1) + np.abs(x))
    y = device_session.to_device(np.full(1001, np.nan, dtype))
    squashed(y, device_session.to_device(x))
    z = device_session.to_device(base)
    squashed_sum(z, device_session.to_device(x))
    tolerance = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(y.to_host(), expected, rtol=tolerance)
    np.testing.assert_allclose(z.to_host(), base + expected, rtol=tolerance, atol=tolerance)
