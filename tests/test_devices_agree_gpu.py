"""The CPU device and a real GPU agree: the same kernels on the same inputs give the same bits
where the operation is exact (integer and bitwise ops, comparisons, the Philox random bits, sums
of small integers) and results within both math libraries' stated ulp bounds where it is not.

The GPU's bounds are the CUDA Math API's documented maximum errors; the CPU device's are those
``test_host_runtime`` holds its math to (4 ulp of a correctly rounded result). Two results each
within their own bound of the exact value differ by at most the sum."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NewType

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.bench import error_bounds

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not kd.is_available("cpu"), reason="no host C++ compiler for the CPU device"),
]

HOST_ULPS = 4
# CUDA Math API, maximum ulp error over the full range (single, double precision)
CUDA_ULPS = {
    "sin": (2, 2),
    "cos": (2, 2),
    "tan": (4, 2),
    "exp": (2, 1),
    "expm1": (1, 1),
    "log": (1, 1),
    "log1p": (1, 1),
    "log2": (1, 1),
    "tanh": (2, 2),
    "sinh": (3, 2),
    "cosh": (2, 1),
    "atan": (2, 2),
    "asinh": (3, 3),
    "erf": (2, 2),
    "erfc": (4, 5),
    "sqrt": (0, 0),
}
N = NewType("N", int)
BLOCKS = NewType("BLOCKS", int)
INTEGER_DTYPES = ["int8", "uint8", "int16", "int32", "int64", "uint32"]


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[Any, Any]]:
    if not kd.is_available("cuda"):
        pytest.skip("compares the CPU device with a real GPU")
    with kd.Session(device="cpu") as cpu, kd.Session(device=0) as gpu:
        yield cpu, gpu


def run_on(session: Any, fn: Any, *arrays: np.ndarray, **kw: Any) -> np.ndarray:
    return np.asarray(fn(*(session.to_device(a) for a in arrays), **kw).to_host())


def ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many units in the last place of the dtype separate ``a`` and ``b`` element by element."""
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    scale = error_bounds.ulp(np.maximum(np.abs(wide_a), np.abs(wide_b)), a.dtype)
    return np.abs(wide_a - wide_b) / scale


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CUDA_ULPS))
def test_math_functions_agree_within_both_libraries_bounds(
    both: tuple[Any, Any], rng: np.random.Generator, name: str, dtype: str
) -> None:
    cpu, gpu = both
    domain = {"log": (1e-3, 1e3), "log2": (1e-3, 1e3), "log1p": (-0.9, 1e3), "sqrt": (0, 1e6)}
    low, high = domain.get(name, (-20.0, 20.0))
    x = rng.uniform(low, high, 100_000).astype(dtype)
    on_cpu, on_gpu = run_on(cpu, getattr(ops, name), x), run_on(gpu, getattr(ops, name), x)
    allowed = CUDA_ULPS[name][dtype == "float64"] + HOST_ULPS
    finite = np.isfinite(on_cpu) & np.isfinite(on_gpu)
    assert np.array_equal(np.isfinite(on_cpu), np.isfinite(on_gpu))
    worst = float(ulps_apart(on_cpu[finite], on_gpu[finite]).max())
    assert worst <= allowed, f"{name} {dtype}: {worst} ulp apart, allowed {allowed}"


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "bitwise_xor", "maximum", "less", "floor_divide"])
def test_integer_ops_agree_bit_for_bit(both: tuple[Any, Any], rng: np.random.Generator, name: str, dtype: str) -> None:
    cpu, gpu = both
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (333, 257), dtype=dtype, endpoint=True)
    b = rng.integers(1, min(info.max, 1000), (333, 257), dtype=dtype)
    assert np.array_equal(run_on(cpu, getattr(ops, name), a, b), run_on(gpu, getattr(ops, name), a, b))


@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2)])
@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_sums_of_small_integers_agree_exactly(
    both: tuple[Any, Any], rng: np.random.Generator, dtype: str, axis: Any
) -> None:
    cpu, gpu = both
    x = rng.integers(-50, 50, (93, 77, 129)).astype(dtype)
    assert np.array_equal(run_on(cpu, ops.sum, x, axis=axis), run_on(gpu, ops.sum, x, axis=axis))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cumsum_agrees_within_its_bound(both: tuple[Any, Any], rng: np.random.Generator, dtype: str) -> None:
    cpu, gpu = both
    x = rng.standard_normal((37, 10_001)).astype(dtype)
    want = np.cumsum(x.astype(np.float64), axis=1)
    bound = error_bounds.cumsum_bound(x, axis=1, acc=dtype, out=dtype)
    for got in (run_on(cpu, ops.cumsum, x, axis=1), run_on(gpu, ops.cumsum, x, axis=1)):
        error_bounds.assert_within(got, want, bound, "cumsum")


@pytest.mark.parametrize("draw", ["uniform", "normal", "integers"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_streams_agree(both: tuple[Any, Any], draw: str, dtype: str) -> None:
    cpu, gpu = both
    args: dict[str, Any] = {"dtype": dtype} if draw != "integers" else {"low": -7, "high": 1 << 20}
    on_cpu = kd.random.Generator(1234).__getattribute__(draw)((1000, 1001), session=cpu, **args).to_host()
    on_gpu = kd.random.Generator(1234).__getattribute__(draw)((1000, 1001), session=gpu, **args).to_host()
    if draw == "normal":  # Box-Muller's log, sqrt and sincos run in each device's math library
        assert float(ulps_apart(on_cpu, on_gpu).max()) <= 64
    else:
        assert np.array_equal(on_cpu, on_gpu)


def test_a_user_kernel_with_shared_memory_and_shuffles_agrees(both: tuple[Any, Any], rng: np.random.Generator) -> None:
    cpu, gpu = both

    @kd.kernel(grid=kd.cdiv(N, 256), block=256)
    def block_sums(x: kd.In[kd.float32, N], out: kd.Out[kd.int64, BLOCKS]) -> str:
        return """
        __shared__ long long warp_sums[8];
        index_t i = blockIdx.x * (index_t)256 + threadIdx.x;
        long long v = i < N ? (long long)x[i] : 0;
        for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
        if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
        __syncthreads();
        if (threadIdx.x == 0) {
            long long s = 0;
            for (int w = 0; w < 8; ++w) s += warp_sums[w];
            out[blockIdx.x] = s;
        }
        """

    x = rng.integers(-1000, 1000, 1_000_003).astype(np.float32)
    blocks = -(-x.size // 256)
    results = []
    for session in (cpu, gpu):
        out = session.empty(blocks, np.int64)
        block_sums(session.to_device(x), out)
        results.append(out.to_host())
    assert np.array_equal(results[0], results[1])
    assert int(results[0].sum()) == int(x.astype(np.int64).sum())
