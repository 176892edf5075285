"""The CPU device's native half on its own: the shim (templates/host/kd_host.h) and the runtime
library (templates/host/kd_host_runtime.cpp), compiled with the system C++ compiler using exactly
the command lines of notes/HOST_ABI.md, loaded with ctypes (the runtime with RTLD_GLOBAL first)
and launched through ``kd_host_launch``, as the Python host driver and the C launch path do.
Kernels here are small hand-written CUDA sources in the shape kernel.cu.j2 renders (a ``#line``
into the body, then ``KD_HOST_KERNEL``)."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SHIM_DIR = Path(__file__).resolve().parent.parent / "templates" / "host"
CXX = shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no system C++ compiler (c++) on PATH")

RUNTIME_COMMAND = ["-O2", "-std=c++17", "-shared", "-fPIC", "-pthread", "-fno-strict-aliasing"]
MODULE_COMMAND = [
    "-O2",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-fno-strict-aliasing",
    "-ffp-contract=off",
    "-fno-math-errno",
]
LAUNCH_ARGTYPES = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
INVALID_VALUE, ASSERT_FAILED, LAUNCH_FAILED, NOT_SUPPORTED = 1, 710, 719, 801


@dataclass(frozen=True)
class Outcome:
    """What a launch returned, and the runtime's message when it failed."""

    code: int
    error: str


class Runtime:
    """The runtime library, loaded once, with the launch entries typed."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        self.lib.kd_host_launch.argtypes = LAUNCH_ARGTYPES
        self.lib.kd_host_launch.restype = ctypes.c_int
        self.lib.kd_host_launch_ex.argtypes = [ctypes.c_void_p] * 4
        self.lib.kd_host_launch_ex.restype = ctypes.c_int
        self.lib.kd_host_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.kd_host_last_error.restype = ctypes.c_size_t
        self.lib.kd_host_set_workers.argtypes = [ctypes.c_int]
        self.lib.kd_host_workers.restype = ctypes.c_int

    def last_error(self) -> str:
        buffer = ctypes.create_string_buffer(4096)
        self.lib.kd_host_last_error(buffer, len(buffer))
        return buffer.value.decode()


def compile_runtime(folder: Path) -> Path:
    out = folder / "libkd_host_runtime.so"
    subprocess.run([CXX, *RUNTIME_COMMAND, str(SHIM_DIR / "kd_host_runtime.cpp"), "-o", str(out)], check=True)
    return out


def compile_module(folder: Path, name: str, source: str, fibers: bool) -> Path:
    """One kernel module, exactly as the Python side builds it (the shim force-included)."""
    src = folder / f"{name}.cu"
    out = folder / f"{name}.so"
    src.write_text(source)
    flags = [*MODULE_COMMAND, "-DKD_HOST_EMULATION=1", f"-DKD_HOST_FIBERS={int(fibers)}"]
    done = subprocess.run(
        [CXX, *flags, "-include", str(SHIM_DIR / "kd_host.h"), "-x", "c++", str(src), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise AssertionError(f"{name} did not compile:\n{done.stderr}")
    return out


Arg = np.ndarray | ctypes._SimpleCData


class Module:
    """A loaded kernel module; ``launch`` runs one of its kernels through ``kd_host_launch``."""

    def __init__(self, runtime: Runtime, path: Path) -> None:
        self.runtime = runtime
        self.lib = ctypes.CDLL(str(path))

    def descriptor(self, entry: str) -> int:
        return ctypes.addressof(ctypes.c_uint.in_dll(self.lib, f"kd_host_fn_{entry}"))

    def launch(
        self, entry: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Arg], shared: int = 0
    ) -> Outcome:
        grid3 = [*grid, 1, 1][:3]
        block3 = [*block, 1, 1][:3]
        holders = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else a for a in args]
        params = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
        code = self.runtime.lib.kd_host_launch(self.descriptor(entry), *grid3, *block3, shared, None, params, None)
        return Outcome(code, self.runtime.last_error() if code else "")

    def run(self, entry: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Arg], shared: int = 0) -> None:
        outcome = self.launch(entry, grid, block, args, shared)
        assert outcome.code == 0, outcome.error


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("host_runtime")


@pytest.fixture(scope="module")
def runtime(build_dir: Path) -> Iterator[Runtime]:
    rt = Runtime(compile_runtime(build_dir))
    workers = rt.lib.kd_host_workers()
    yield rt
    rt.lib.kd_host_set_workers(workers)


@pytest.fixture(scope="module")
def kernels(runtime: Runtime, build_dir: Path) -> Callable[[str, bool], Module]:
    """Compiles (once per source and mode) and loads a module of this file's kernel sources."""
    built: dict[tuple[str, bool], Module] = {}

    def get(name: str, fibers: bool = True) -> Module:
        if (name, fibers) not in built:
            path = compile_module(build_dir, f"{name}_{int(fibers)}", SOURCES[name], fibers)
            built[name, fibers] = Module(runtime, path)
        return built[name, fibers]

    return get


@pytest.fixture
def workers(runtime: Runtime) -> Iterator[Callable[[int], None]]:
    """Sets the pool's size for one test."""
    before = runtime.lib.kd_host_workers()
    yield runtime.lib.kd_host_set_workers
    runtime.lib.kd_host_set_workers(before)


def i32(v: int) -> ctypes.c_int:
    return ctypes.c_int(v)


def f32(v: float) -> ctypes.c_float:
    return ctypes.c_float(v)


SOURCES: dict[str, str] = {}

SOURCES["saxpy"] = r"""
extern "C" __global__ void kd_saxpy(float* __restrict__ y, const float* __restrict__ x, float alpha, int n) {
#line 1 "saxpy.body"
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + y[i];
}
KD_HOST_KERNEL(kd_saxpy, float*, const float*, float, int)
"""

SOURCES["block_sum"] = r"""
extern "C" __global__ void kd_block_sum(float* out, const float* x, int n) {
#line 1 "block_sum.body"
    __shared__ float warps[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x + 31) / 32 ? warps[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}
KD_HOST_KERNEL(kd_block_sum, float*, const float*, int)
"""

SOURCES["indices"] = r"""
extern "C" __global__ void kd_indices(unsigned int* out) {
#line 1 "indices.body"
    const unsigned int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned int* at = out + 12 * (block * (blockDim.x * blockDim.y * blockDim.z) + thread);
    const unsigned int v[12] = {threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,
                                blockDim.x, blockDim.y, blockDim.z, gridDim.x, gridDim.y, gridDim.z};
    for (int k = 0; k < 12; ++k) at[k] = v[k];
}
KD_HOST_KERNEL(kd_indices, unsigned int*)
"""


def expected_indices(grid: tuple[int, int, int], block: tuple[int, int, int]) -> np.ndarray:
    gx, gy, gz = grid
    bx, by, bz = block
    rows = [
        (tx, ty, tz, x, y, z, bx, by, bz, gx, gy, gz)
        for z in range(gz)
        for y in range(gy)
        for x in range(gx)
        for tz in range(bz)
        for ty in range(by)
        for tx in range(bx)
    ]
    return np.array(rows, dtype=np.uint32)


# --- launching: loop mode and fiber mode ----------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 5])
def test_a_loop_mode_saxpy_matches_numpy_on_any_number_of_workers(
    kernels: Callable[..., Module], workers: Callable[[int], None], rng: np.random.Generator, count: int
) -> None:
    workers(count)
    n = 100_003
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    expected = np.float32(2.5) * x + y
    kernels("saxpy", fibers=False).run("kd_saxpy", [(n + 255) // 256], [256], [y, x, f32(2.5), i32(n)])
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("block", [32, 96, 256, 1024])
def test_a_fiber_block_sum_with_barriers_and_shuffles_matches_numpy(
    kernels: Callable[..., Module], rng: np.random.Generator, block: int
) -> None:
    n = 50_000
    x = rng.random(n, dtype=np.float32)
    blocks = (n + block - 1) // block
    out = np.zeros(blocks, np.float32)
    kernels("block_sum").run("kd_block_sum", [blocks], [block], [out, x, i32(n)])
    padded = np.zeros(blocks * block, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(out, padded.reshape(blocks, block).sum(axis=1, dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("fibers", [False, True])
@pytest.mark.parametrize(("grid", "block"), [((3, 2, 2), (4, 3, 2)), ((5, 1, 1), (7, 1, 1)), ((1, 3, 1), (1, 1, 5))])
def test_every_thread_of_every_block_sees_its_indices_and_dimensions(
    kernels: Callable[..., Module], grid: tuple[int, int, int], block: tuple[int, int, int], fibers: bool
) -> None:
    expected = expected_indices(grid, block)
    out = np.zeros_like(expected)
    kernels("indices", fibers).run("kd_indices", grid, block, [out])
    np.testing.assert_array_equal(out, expected)


def test_set_workers_sizes_the_pool_and_zero_restores_the_cpu_count(
    runtime: Runtime, workers: Callable[[int], None]
) -> None:
    workers(3)
    assert runtime.lib.kd_host_workers() == 3
    workers(0)
    assert runtime.lib.kd_host_workers() >= 1
