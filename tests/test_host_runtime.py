"""The CPU device's native half on its own: the shim (templates/host/kd_host.h) and the runtime
library (templates/host/kd_host_runtime.cpp). Modules are compiled with the system C++ compiler
using the module command line of the Python side, loaded with ctypes and launched through the
process's one runtime library (kerneldsl's, loaded RTLD_GLOBAL) with ``kd_host_launch``, as the
Python host driver and the C launch path do.
Kernels here are small hand-written CUDA sources in the shape kernel.cu.j2 renders (a ``#line``
into the body, then ``KD_HOST_KERNEL``)."""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mpmath as mp
import numpy as np
import pytest

SHIM_DIR = Path(__file__).resolve().parent.parent / "templates" / "host"
CXX = shutil.which(os.environ.get("KERNELDSL_HOST_CXX", "c++"))  # the compiler the CPU device is told to use
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler ($KERNELDSL_HOST_CXX or c++) on PATH")

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

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
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


def process_runtime() -> ctypes.CDLL:
    """The process's one runtime library, as kerneldsl builds and loads it (RTLD_GLOBAL): modules
    resolve the runtime's symbols against the first one loaded, so a second copy in the process
    would launch kernels whose failures land in the other."""
    from kerneldsl.runtime.host_runtime import runtime_library

    return runtime_library()


def compile_module(
    folder: Path, name: str, source: str, fibers: bool, warps: bool = True, optimized: bool = True
) -> Path:
    """One kernel module, exactly as the Python side builds it (the shim force-included); not
    ``optimized``: as a debug build (KERNELDSL_HOST_DEBUG), whose inline waits write where they wait."""
    src = folder / f"{name}.cu"
    out = folder / f"{name}.so"
    src.write_text(source)
    flags = [
        *MODULE_COMMAND,
        "-DKD_HOST_EMULATION=1",
        f"-DKD_HOST_FIBERS={int(fibers)}",
        f"-DKD_HOST_WARPS={int(warps)}",
        *(() if optimized else ("-O0",)),
    ]
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
def runtime() -> Iterator[Runtime]:
    rt = Runtime(process_runtime())
    workers = rt.lib.kd_host_workers()
    yield rt
    rt.lib.kd_host_set_workers(workers)


@pytest.fixture(scope="module")
def kernels(runtime: Runtime, build_dir: Path) -> Callable[..., Module]:
    """Compiles (once per source and mode) and loads a module of this file's kernel sources;
    ``warps=False`` builds it as the Python side builds a kernel with barriers and no warp collective."""
    built: dict[tuple[str, bool, bool, bool], Module] = {}

    def get(name: str, fibers: bool = True, warps: bool = True, optimized: bool = True) -> Module:
        key = (name, fibers, warps, optimized)
        if key not in built:
            path = compile_module(
                build_dir, f"{name}_{int(fibers)}{int(warps)}{int(optimized)}", SOURCES[name], *key[1:]
            )
            built[key] = Module(runtime, path)
        return built[key]

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


# --- errors: assert and __trap, barriers not every thread reaches, collectives without fibers -----

SOURCES["checked"] = r"""
extern "C" __global__ void kd_checked(const int* x, int n, unsigned int* blocks_run) {
#line 1 "checked.body"
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) atomicAdd(blocks_run, 1u);
    if (i < n) assert(x[i] >= 0);
}
KD_HOST_KERNEL(kd_checked, const int*, int, unsigned int*)
extern "C" __global__ void kd_trapped(int at) {
#line 1 "trapped.body"
    if ((int)(blockIdx.x * blockDim.x + threadIdx.x) == at)
        __trap();
}
KD_HOST_KERNEL(kd_trapped, int)
"""

SOURCES["early_exit"] = r"""
extern "C" __global__ void kd_early_exit(float* out) {
#line 1 "early_exit.body"
    __shared__ float s[256];
    if (threadIdx.x >= 200) return;
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[199 - threadIdx.x];
}
KD_HOST_KERNEL(kd_early_exit, float*)
extern "C" __global__ void kd_lanes_exit(int* out) {
#line 1 "lanes_exit.body"
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
KD_HOST_KERNEL(kd_lanes_exit, int*)
extern "C" __global__ void kd_lane_gone(int* out) {
#line 1 "lane_gone.body"
    if (threadIdx.x == 0) return;
    __syncwarp();
    out[threadIdx.x] = 1;
}
KD_HOST_KERNEL(kd_lane_gone, int*)
extern "C" __global__ void kd_split_barriers(int* out) {
#line 1 "split_barriers.body"
    if (threadIdx.x < 32 || threadIdx.x >= 48) {
        __syncthreads();
    } else {
        __syncwarp();
        out[0] = 1;
    }
}
KD_HOST_KERNEL(kd_split_barriers, int*)
"""


@pytest.mark.parametrize("fibers", [False, True])
def test_a_failed_assert_names_the_kernel_block_thread_line_and_expression(
    kernels: Callable[..., Module], fibers: bool
) -> None:
    x = np.zeros(1000, np.int32)
    x[3 * 64 + 5] = -1
    ran = np.zeros(1, np.uint32)
    outcome = kernels("checked", fibers).launch("kd_checked", [16], [64], [x, i32(1000), ran])
    assert outcome.code == ASSERT_FAILED
    assert outcome.error == (
        "kernel 'kd_checked' block (3,0,0) thread (5,0,0): assertion 'x[i] >= 0' failed at checked.body:3"
    )


def test_a_failed_assert_abandons_the_rest_of_the_grid(
    kernels: Callable[..., Module], workers: Callable[[int], None]
) -> None:
    workers(1)
    x = np.full(64 * 4096, -1, np.int32)
    ran = np.zeros(1, np.uint32)
    outcome = kernels("checked", False).launch("kd_checked", [4096], [64], [x, i32(x.size), ran])
    assert outcome.code == ASSERT_FAILED
    assert ran[0] == 1


@pytest.mark.parametrize("fibers", [False, True])
def test_trap_fails_the_launch_naming_where(kernels: Callable[..., Module], fibers: bool) -> None:
    outcome = kernels("checked", fibers).launch("kd_trapped", [4], [32], [i32(70)])
    assert outcome.code == ASSERT_FAILED
    assert outcome.error == "kernel 'kd_trapped' block (2,0,0) thread (6,0,0): __trap() at trapped.body:2"


@pytest.mark.parametrize("fibers", [False, True])
def test_a_launch_after_a_failed_one_runs_normally(kernels: Callable[..., Module], fibers: bool) -> None:
    module = kernels("checked", fibers)
    assert module.launch("kd_trapped", [8], [64], [i32(1)]).code == ASSERT_FAILED
    x = np.arange(512, dtype=np.int32)
    ran = np.zeros(1, np.uint32)
    module.run("kd_checked", [8], [64], [x, i32(512), ran])
    assert ran[0] == 8


@pytest.mark.parametrize("warps", [True, False], ids=["exits recorded", "exits not recorded"])
def test_a_barrier_some_threads_exited_before_is_an_error_naming_who_waits_and_who_left(
    kernels: Callable[..., Module], warps: bool
) -> None:
    outcome = kernels("early_exit", warps=warps).launch("kd_early_exit", [1], [256], [np.zeros(256, np.float32)])
    assert outcome.code == LAUNCH_FAILED
    assert outcome.error == (
        "kernel 'kd_early_exit' block (0,0,0): __syncthreads at early_exit.body:4 is not reached by every thread "
        "of the block: threads 0-199 wait there; threads 200-255 exited"
    )


def test_a_lane_exiting_while_its_warp_waits_in_a_shuffle_is_an_error(kernels: Callable[..., Module]) -> None:
    outcome = kernels("early_exit").launch("kd_lanes_exit", [1], [32], [np.zeros(32, np.int32)])
    assert outcome.code == LAUNCH_FAILED
    assert outcome.error == (
        "kernel 'kd_lanes_exit' block (0,0,0): thread 16 exited while threads 0-15 wait for it at "
        "__shfl_xor_sync (mask 0xffffffff) at lanes_exit.body:2"
    )


def test_a_collective_naming_a_lane_that_exited_is_an_error(kernels: Callable[..., Module]) -> None:
    outcome = kernels("early_exit").launch("kd_lane_gone", [1], [32], [np.zeros(32, np.int32)])
    assert outcome.code == LAUNCH_FAILED
    assert outcome.error == (
        "kernel 'kd_lane_gone' block (0,0,0) thread 1: __syncwarp (mask 0xffffffff) at lane_gone.body:2: "
        "lanes 0x00000001 named in the mask have exited"
    )


@pytest.mark.parametrize("optimized", [True, False], ids=["sites recorded at compile time", "debug build"])
def test_threads_waiting_at_different_collectives_are_a_deadlock_listing_each_place(
    kernels: Callable[..., Module], optimized: bool
) -> None:
    outcome = kernels("early_exit", optimized=optimized).launch("kd_split_barriers", [1], [64], [np.zeros(1, np.int32)])
    assert outcome.code == LAUNCH_FAILED
    assert outcome.error == (
        "kernel 'kd_split_barriers' block (0,0,0): no thread can proceed: threads 0-31, 48-63 wait at __syncthreads at "
        "split_barriers.body:2; threads 32-47 wait at __syncwarp (mask 0xffffffff) at split_barriers.body:4"
    )


@pytest.mark.parametrize(
    ("built", "why"),
    [
        ({"fibers": False}, "the module was compiled without fibers (KD_HOST_FIBERS=0)"),
        ({"warps": False}, "the module was compiled without warp collectives (KD_HOST_WARPS=0)"),
    ],
    ids=["without fibers", "without warp collectives"],
)
def test_a_collective_in_a_module_built_without_it_fails_the_launch(
    kernels: Callable[..., Module], built: dict[str, bool], why: str
) -> None:
    outcome = kernels("block_sum", **built).launch(
        "kd_block_sum", [1], [64], [np.zeros(1, np.float32), np.zeros(64, np.float32), i32(64)]
    )
    assert outcome.code == LAUNCH_FAILED
    assert outcome.error == (
        f"kernel 'kd_block_sum' block (0,0,0) thread (0,0,0): __shfl_down_sync at block_sum.body:4: {why}"
    )


@pytest.mark.parametrize("warps", [True, False], ids=["exits recorded", "exits not recorded"])
def test_a_block_whose_threads_pass_barriers_and_exit_at_different_times_ends_normally(
    kernels: Callable[..., Module], warps: bool
) -> None:
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(256, np.float32)
    kernels("staggered", warps=warps).run("kd_staggered", [1], [256], [y, x])
    np.testing.assert_array_equal(y, x[::-1] * np.where(np.arange(256) % 3 == 0, 1, 2))


# --- launch configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "block", "shared", "message"),
    [
        ((0, 1, 1), (32, 1, 1), 0, "grid (0,1,1) is outside CUDA's limits"),
        ((1, 70000, 1), (32, 1, 1), 0, "grid (1,70000,1) is outside CUDA's limits"),
        ((1, 1, 1), (2048, 1, 1), 0, "block (2048,1,1) is outside CUDA's limits"),
        ((1, 1, 1), (32, 32, 2), 0, "block (32,32,2) is outside CUDA's limits"),
        ((1, 1, 1), (32, 1, 1), 1 << 21, "2097152 bytes of dynamic shared memory"),
    ],
)
def test_a_launch_outside_the_limits_is_invalid_and_says_which(
    kernels: Callable[..., Module], grid: tuple[int, ...], block: tuple[int, ...], shared: int, message: str
) -> None:
    outcome = kernels("saxpy", False).launch(
        "kd_saxpy", grid, block, [np.zeros(1, np.float32)] * 2 + [f32(1), i32(0)], shared
    )
    assert outcome.code == INVALID_VALUE
    assert message in outcome.error


def test_a_launch_of_what_is_not_a_kernel_descriptor_is_invalid(runtime: Runtime) -> None:
    junk = (ctypes.c_uint * 16)()
    code = runtime.lib.kd_host_launch(ctypes.addressof(junk), 1, 1, 1, 1, 1, 1, 0, None, None, None)
    assert code == INVALID_VALUE
    assert "not a kernel of the CPU device" in runtime.last_error()


def test_a_kernel_with_parameters_launched_without_them_is_invalid(
    runtime: Runtime, kernels: Callable[..., Module]
) -> None:
    module = kernels("saxpy", False)
    code = runtime.lib.kd_host_launch(module.descriptor("kd_saxpy"), 1, 1, 1, 32, 1, 1, 0, None, None, None)
    assert code == INVALID_VALUE
    assert runtime.last_error() == "kernel 'kd_saxpy' takes 4 parameters and kernelParams is NULL"


# --- warp collectives and block barriers with results --------------------------------------------

SOURCES["staggered"] = r"""
extern "C" __global__ void kd_staggered(float* out, const float* x) {
#line 1 "staggered.body"
    __shared__ float s[256];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    const float v = s[255 - threadIdx.x];
    if (threadIdx.x % 3 == 0) {
        out[threadIdx.x] = v;
        return;
    }
    out[threadIdx.x] = 2 * v;
}
KD_HOST_KERNEL(kd_staggered, float*, const float*)
"""

SOURCES["collectives"] = r"""
struct pair16 { double a; long long b; };
extern "C" __global__ void kd_shuffles(int* out, int b, int width) {
#line 1 "shuffles.body"
    const int lane = threadIdx.x;
    const int v = 1000 + lane;
    out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, b, width);
    out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, (unsigned)b, width);
    out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, (unsigned)b, width);
    out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, b, width);
}
KD_HOST_KERNEL(kd_shuffles, int*, int, int)
extern "C" __global__ void kd_shuffle_types(double* d, long long* q, float4* f4, pair16* p, unsigned short* h) {
#line 1 "shuffle_types.body"
    const int lane = threadIdx.x;
    d[lane] = __shfl_xor_sync(0xffffffffu, 0.5 + lane, 5);
    q[lane] = __shfl_down_sync(0xffffffffu, (1ll << 40) + lane, 3);
    f4[lane] = __shfl_sync(0xffffffffu, make_float4(lane, 2 * lane, 3 * lane, 4 * lane), 31 - lane);
    p[lane] = __shfl_up_sync(0xffffffffu, pair16{lane * 0.25, -lane}, 2);
    h[lane] = __shfl_xor_sync(0xffffffffu, (unsigned short)(60000 + lane), 16);
}
KD_HOST_KERNEL(kd_shuffle_types, double*, long long*, float4*, pair16*, unsigned short*)
extern "C" __global__ void kd_votes(const int* x, unsigned int* out) {
#line 1 "votes.body"
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int v = x[threadIdx.x];
    unsigned int* o = out + 16 * (32 * warp + lane);
    int all_pred;
    o[0] = __ballot_sync(0xffffffffu, v > 0);
    o[1] = __any_sync(0xffffffffu, v > 5);
    o[2] = __all_sync(0xffffffffu, v > 0);
    o[3] = __uni_sync(0xffffffffu, v > 100);
    o[4] = __match_any_sync(0xffffffffu, v);
    o[5] = __match_all_sync(0xffffffffu, warp == 0 ? v : 7, &all_pred);
    o[6] = all_pred;
    o[7] = __reduce_add_sync(0xffffffffu, v);
    o[8] = (unsigned int)__reduce_min_sync(0xffffffffu, v - 4);
    o[9] = (unsigned int)__reduce_max_sync(0xffffffffu, v - 4);
    o[10] = __reduce_min_sync(0xffffffffu, (unsigned int)v);
    o[11] = __reduce_and_sync(0xffffffffu, (unsigned int)v | 0x100u);
    o[12] = __reduce_or_sync(0xffffffffu, (unsigned int)v);
    o[13] = __reduce_xor_sync(0xffffffffu, (unsigned int)v);
    o[14] = __match_any_sync(0xffffffffu, (double)(v % 3));
    __syncwarp();
    o[15] = __activemask();  // every lane is past the __syncwarp and none has exited
    __syncwarp();
}
KD_HOST_KERNEL(kd_votes, const int*, unsigned int*)
extern "C" __global__ void kd_half_warps(const int* x, int* out) {
#line 1 "half_warps.body"
    const unsigned int lane = threadIdx.x & 31;
    const unsigned int mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    int v = x[threadIdx.x];
    for (int o = 8; o > 0; o >>= 1) v += __shfl_down_sync(mask, v, o, 16);
    out[threadIdx.x] = v;
}
KD_HOST_KERNEL(kd_half_warps, const int*, int*)
extern "C" __global__ void kd_block_votes(const int* x, int* out) {
#line 1 "block_votes.body"
    const int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    const int count = __syncthreads_count(v > 0);
    const int all = __syncthreads_and(v > 0);
    const int any = __syncthreads_or(v > 1);
    if (threadIdx.x == 7) { out[3 * blockIdx.x] = count; out[3 * blockIdx.x + 1] = all; out[3 * blockIdx.x + 2] = any; }
}
KD_HOST_KERNEL(kd_block_votes, const int*, int*)
"""


def shuffle_reference(b: int, width: int) -> np.ndarray:
    """CUDA's documented shuffle results for one warp holding 1000 + lane (not PTX's formula)."""
    lanes = np.arange(32)
    first = lanes // width * width
    idx = first + b % width
    up = np.where(lanes - b >= first, lanes - b, lanes)
    down = np.where(lanes + b < first + width, lanes + b, lanes)
    xor = np.where((lanes ^ b) < first + width, lanes ^ b, lanes)
    return 1000 + np.concatenate([idx, up, down, xor])


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("b", [0, 1, 3, 7, 16, 31])
def test_shuffles_give_cudas_results_for_every_mode_width_and_offset(
    kernels: Callable[..., Module], b: int, width: int
) -> None:
    out = np.zeros(128, np.int32)
    kernels("collectives").run("kd_shuffles", [1], [32], [out, i32(b), i32(width)])
    np.testing.assert_array_equal(out, shuffle_reference(b, width))


def test_shuffles_move_64_bit_16_byte_and_16_bit_values(kernels: Callable[..., Module]) -> None:
    lanes = np.arange(32)
    d, q = np.zeros(32), np.zeros(32, np.int64)
    f4 = np.zeros((32, 4), np.float32)
    p = np.zeros(32, dtype=[("a", np.float64), ("b", np.int64)])
    h = np.zeros(32, np.uint16)
    kernels("collectives").run("kd_shuffle_types", [1], [32], [d, q, f4, p, h])
    np.testing.assert_array_equal(d, 0.5 + (lanes ^ 5))
    np.testing.assert_array_equal(q, (1 << 40) + np.where(lanes + 3 < 32, lanes + 3, lanes))
    np.testing.assert_array_equal(f4, (31 - lanes)[:, None] * np.arange(1, 5))
    source = np.where(lanes >= 2, lanes - 2, lanes)
    np.testing.assert_array_equal(p["a"], source * 0.25)
    np.testing.assert_array_equal(p["b"], -source)
    np.testing.assert_array_equal(h, 60000 + (lanes ^ 16))


def test_votes_matches_and_reductions_give_cudas_results(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    x = rng.integers(-3, 12, 64).astype(np.int32)
    x[32:] = np.abs(x[32:]) + 1  # the second warp: every predicate true
    out = np.zeros((64, 16), np.uint32)
    kernels("collectives").run("kd_votes", [1], [64], [x, out])
    for warp in range(2):
        v = x[32 * warp : 32 * warp + 32].astype(np.int64)
        o = out[32 * warp : 32 * warp + 32]
        bits = 1 << np.arange(32, dtype=np.uint64)
        assert (o[:, 0] == int(bits[v > 0].sum())).all()
        assert (o[:, 1] == int((v > 5).any())).all()
        assert (o[:, 2] == int((v > 0).all())).all()
        assert (o[:, 3] == int((v > 100).all() or not (v > 100).any())).all()
        np.testing.assert_array_equal(o[:, 4], [int(bits[v == v[i]].sum()) for i in range(32)])
        all_same = warp == 1 or len(set(v)) == 1
        assert (o[:, 5] == (0xFFFFFFFF if all_same else 0)).all()
        assert (o[:, 6] == int(all_same)).all()
        assert (o[:, 7] == int(v.sum()) % 2**32).all()
        assert (o[:, 8].view(np.int32) == (v - 4).min()).all()
        assert (o[:, 9].view(np.int32) == (v - 4).max()).all()
        assert (o[:, 10] == (v.astype(np.uint32)).min()).all()
        assert (o[:, 11] == np.bitwise_and.reduce(v.astype(np.uint32) | 0x100)).all()
        assert (o[:, 12] == np.bitwise_or.reduce(v.astype(np.uint32))).all()
        assert (o[:, 13] == np.bitwise_xor.reduce(v.astype(np.uint32))).all()
        r = np.fmod(v, 3)  # C's remainder
        np.testing.assert_array_equal(o[:, 14], [int(bits[r == r[i]].sum()) for i in range(32)])
        assert (o[:, 15] == 0xFFFFFFFF).all()


def test_collectives_of_disjoint_masks_in_one_warp_each_complete(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    x = rng.integers(-100, 100, 96).astype(np.int32)
    out = np.zeros(96, np.int32)
    kernels("collectives").run("kd_half_warps", [1], [96], [x, out])
    np.testing.assert_array_equal(out[::16], x.reshape(6, 16).sum(axis=1))


def test_a_partial_warp_collective_with_a_full_mask_runs_over_the_lanes_the_block_has(
    kernels: Callable[..., Module],
) -> None:
    x = np.arange(1, 41, dtype=np.int32)
    out = np.zeros((40, 16), np.uint32)
    kernels("collectives").run("kd_votes", [1], [40], [x, out])
    assert (out[32:, 0] == 0xFF).all()
    assert (out[32:, 7] == x[32:].sum()).all()
    assert (out[32:, 15] == 0xFF).all()


def test_syncthreads_count_and_or_reduce_a_predicate_over_the_block(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    x = rng.integers(-1, 3, 4 * 96).astype(np.int32)
    x[96:192] = 2
    out = np.zeros(12, np.int32)
    kernels("collectives").run("kd_block_votes", [4], [96], [x, out])
    v = x.reshape(4, 96)
    np.testing.assert_array_equal(out[0::3], (v > 0).sum(axis=1))
    np.testing.assert_array_equal(out[1::3], (v > 0).all(axis=1))
    np.testing.assert_array_equal(out[2::3], (v > 1).any(axis=1))


# --- atomics, shared memory, yielding, printf ------------------------------------------------------

SOURCES["atomics"] = r"""
extern "C" __global__ void kd_histogram(const int* x, int n, unsigned int* bins, float* fsum, double* dsum,
                                        unsigned long long* usum, int* extremes, unsigned int* wrap,
                                        unsigned short* cas16, long long* bits) {
#line 1 "histogram.body"
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int v = x[i];
        atomicAdd(&bins[v & 255], 1u);
        atomicAdd(fsum, 1.0f);
        atomicAdd_block(dsum, 0.5);
        atomicAdd_system(usum, (unsigned long long)v);
        atomicMin(&extremes[0], v);
        atomicMax(&extremes[1], v);
        atomicInc(&wrap[0], 9u);
        atomicDec(&wrap[1], 9u);
        atomicOr((unsigned int*)&bits[0], 1u << (v & 31));
        atomicXor((unsigned long long*)&bits[1], 1ull << (v & 63));
        atomicAnd(&wrap[2], ~(1u << (v & 31)));
        unsigned short seen = cas16[0], want;
        do {
            want = (unsigned short)(seen + 1);
        } while ((seen = atomicCAS(&cas16[0], seen, want)) != (unsigned short)(want - 1));
        atomicExch(&wrap[3], 7u);
    }
}
KD_HOST_KERNEL(kd_histogram, const int*, int, unsigned int*, float*, double*, unsigned long long*, int*,
               unsigned int*, unsigned short*, long long*)
"""

SOURCES["shared"] = r"""
KD_DYNAMIC_SHARED(int, module_stage);  // a namespace-scope extern __shared__, as the rewrite gives it
extern "C" __global__ void kd_reverse(float* out, const float* x, int n) {
#line 1 "reverse.body"
    KD_DYNAMIC_SHARED(float, stage);
    for (int i = threadIdx.x; i < n; i += blockDim.x) stage[i] = x[blockIdx.x * n + i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = stage[n - 1 - i];
    __syncthreads();  // every extern __shared__ array starts at the same address, as on the GPU
    if (threadIdx.x == 0) module_stage[0] = (int)((long long)stage == (long long)module_stage);
    __syncthreads();
    if (threadIdx.x == 0 && !module_stage[0]) __trap();
}
KD_HOST_KERNEL(kd_reverse, float*, const float*, int)
extern "C" __global__ void kd_wait_for_flag(int* out) {
#line 1 "wait_for_flag.body"
    __shared__ volatile int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (threadIdx.x == 0) flag = 1;
    else while (!flag) __nanosleep(100);
    out[blockIdx.x * blockDim.x + threadIdx.x] = flag;
}
KD_HOST_KERNEL(kd_wait_for_flag, int*)
extern "C" __global__ void kd_hello(int value) {
#line 1 "hello.body"
    if (threadIdx.x == 3 && blockIdx.x == 1)
        printf("hello from block %d thread %d: %d %.2f\n", blockIdx.x, threadIdx.x, value, 0.5);
}
KD_HOST_KERNEL(kd_hello, int)
"""


def test_atomics_of_every_type_are_atomic_across_workers(
    kernels: Callable[..., Module], workers: Callable[[int], None], rng: np.random.Generator
) -> None:
    workers(4)
    n = 200_000
    x = rng.integers(0, 1 << 20, n).astype(np.int32)
    bins = np.zeros(256, np.uint32)
    fsum, dsum, usum = np.zeros(1, np.float32), np.zeros(1), np.zeros(1, np.uint64)
    extremes = np.array([1 << 30, -(1 << 30)], np.int32)
    wrap = np.array([0, 0, 0xFFFFFFFF, 0], np.uint32)
    cas16 = np.zeros(1, np.uint16)
    bits = np.zeros(2, np.int64)
    kernels("atomics", False).run(
        "kd_histogram", [64], [128], [x, i32(n), bins, fsum, dsum, usum, extremes, wrap, cas16, bits]
    )
    np.testing.assert_array_equal(bins, np.bincount(x & 255, minlength=256))
    assert fsum[0] == n  # every partial sum is an integer below 2^24: exact in any order
    assert dsum[0] == n / 2
    assert usum[0] == x.astype(np.uint64).sum()
    assert list(extremes) == [x.min(), x.max()]
    assert wrap[0] == n % 10  # atomicInc counts 0..9 and wraps
    assert wrap[1] == (-n) % 10
    seen31 = np.bitwise_or.reduce(np.uint32(1) << (x & 31).astype(np.uint32))
    assert wrap[2] == np.uint32(~seen31)
    assert wrap[3] == 7
    assert cas16[0] == n % 65536
    assert bits[0] == seen31
    assert np.uint64(bits[1]) == np.bitwise_xor.reduce(np.uint64(1) << (x & 63).astype(np.uint64))


SOURCES["shared_atomics"] = r"""
extern "C" __global__ void kd_shared_atomics(const int* x, int chunk, unsigned int* bins_out, int* ints,
                                             unsigned int* uints, long long* wide, float* floats, double* doubles) {
#line 1 "shared_atomics.body"
    // every atomic of every type on the block's own shared memory (static and dynamic), which the
    // CPU device does as a plain read-modify-write; the block's results go to its row of each output
    __shared__ unsigned int bins[64];
    __shared__ int s_int[4];
    __shared__ unsigned int s_uint[6];
    __shared__ unsigned long long s_ull[3];
    __shared__ long long s_ll[2];
    __shared__ float s_float[3];
    __shared__ double s_double[2];
    __shared__ unsigned short s_cas16;
    KD_DYNAMIC_SHARED(int, dyn);
    for (int b = threadIdx.x; b < 64; b += blockDim.x) bins[b] = 0;
    if (threadIdx.x == 0) {
        s_int[0] = 0; s_int[1] = 1 << 30; s_int[2] = -(1 << 30); s_int[3] = 0;
        s_uint[0] = 0; s_uint[1] = 0; s_uint[2] = 0xffffffffu; s_uint[3] = 0; s_uint[4] = 0; s_uint[5] = 0;
        s_ull[0] = 0; s_ull[1] = 0; s_ull[2] = 0;
        s_ll[0] = 0; s_ll[1] = 1ll << 40;
        s_float[0] = 0.0f; s_float[1] = 1e30f; s_float[2] = -1e30f;
        s_double[0] = 0.0; s_double[1] = 0.0;
        s_cas16 = 0;
        dyn[0] = 0; dyn[1] = -(1 << 30);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < chunk; k += blockDim.x) {
        const int v = x[blockIdx.x * chunk + k];
        atomicAdd(&bins[v & 63], 1u);
        atomicAdd(&s_int[0], v);
        atomicMin(&s_int[1], v);
        atomicMax_block(&s_int[2], v);
        atomicSub(&s_int[3], v);
        atomicInc(&s_uint[0], 9u);
        atomicDec(&s_uint[1], 9u);
        atomicAnd(&s_uint[2], ~(1u << (v & 31)));
        atomicOr_system(&s_uint[3], 1u << (v & 31));
        atomicXor(&s_uint[4], (unsigned int)v);
        atomicExch(&s_uint[5], 7u);
        atomicAdd(&s_ull[0], (unsigned long long)v);
        unsigned long long seen = s_ull[1], want;
        do {
            want = seen + 1;
        } while ((seen = atomicCAS(&s_ull[1], seen, want)) != want - 1);
        atomicXor(&s_ull[2], 1ull << (v & 63));
        atomicAdd(&s_ll[0], -(long long)v);
        atomicMin(&s_ll[1], (long long)v);
        atomicAdd(&s_float[0], 1.0f);
        atomicMin(&s_float[1], (float)v);
        atomicMax(&s_float[2], (float)v);
        atomicAdd(&s_double[0], 0.5);
        atomicExch(&s_double[1], 2.5);
        unsigned short seen16 = s_cas16, want16;
        do {
            want16 = (unsigned short)(seen16 + 1);
        } while ((seen16 = atomicCAS(&s_cas16, seen16, want16)) != (unsigned short)(want16 - 1));
        atomicAdd(&dyn[0], 1);
        atomicMax(&dyn[1], v);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 64; b += blockDim.x) bins_out[blockIdx.x * 64 + b] = bins[b];
    if (threadIdx.x == 0) {
        int* i = ints + blockIdx.x * 6;
        i[0] = s_int[0]; i[1] = s_int[1]; i[2] = s_int[2]; i[3] = s_int[3]; i[4] = dyn[0]; i[5] = dyn[1];
        unsigned int* u = uints + blockIdx.x * 7;
        for (int k = 0; k < 6; ++k) u[k] = s_uint[k];
        u[6] = s_cas16;
        long long* w = wide + blockIdx.x * 5;
        for (int k = 0; k < 3; ++k) w[k] = (long long)s_ull[k];
        w[3] = s_ll[0];
        w[4] = s_ll[1];
        float* f = floats + blockIdx.x * 3;
        f[0] = s_float[0]; f[1] = s_float[1]; f[2] = s_float[2];
        doubles[blockIdx.x * 2] = s_double[0];
        doubles[blockIdx.x * 2 + 1] = s_double[1];
    }
}
KD_HOST_KERNEL(kd_shared_atomics, const int*, int, unsigned int*, int*, unsigned int*, long long*, float*, double*)
"""


def test_atomics_of_every_type_on_a_blocks_own_shared_memory_give_cudas_results(
    kernels: Callable[..., Module], workers: Callable[[int], None], rng: np.random.Generator
) -> None:
    workers(2)
    blocks, chunk = 8, 3000
    x = rng.integers(-(1 << 20), 1 << 20, blocks * chunk).astype(np.int32)
    bins = np.zeros((blocks, 64), np.uint32)
    ints, uints = np.zeros((blocks, 6), np.int32), np.zeros((blocks, 7), np.uint32)
    wide, floats, doubles = np.zeros((blocks, 5), np.int64), np.zeros((blocks, 3), np.float32), np.zeros((blocks, 2))
    kernels("shared_atomics").run(
        "kd_shared_atomics", [blocks], [96], [x, i32(chunk), bins, ints, uints, wide, floats, doubles], shared=8
    )
    for b, v in enumerate(x.reshape(blocks, chunk).astype(np.int64)):
        np.testing.assert_array_equal(bins[b], np.bincount(v & 63, minlength=64))
        total = int(v.sum())
        assert list(ints[b]) == [total, v.min(), v.max(), -total, chunk, v.max()]
        seen31 = int(np.bitwise_or.reduce(1 << (v & 31)))
        xor = int(np.bitwise_xor.reduce(v.astype(np.uint32)))
        assert list(uints[b]) == [chunk % 10, (-chunk) % 10, 0xFFFFFFFF & ~seen31, seen31, xor, 7, chunk]
        xor63 = np.bitwise_xor.reduce(np.uint64(1) << (v & 63).astype(np.uint64))
        wrapped = int(v.astype(np.uint64).sum().astype(np.int64))  # unsigned adds of the negatives wrap
        assert list(wide[b]) == [wrapped, chunk, int(xor63.astype(np.int64)), -total, v.min()]
        assert list(floats[b]) == [chunk, v.min(), v.max()]
        assert list(doubles[b]) == [chunk / 2, 2.5]


def test_dynamic_shared_memory_holds_the_launch_bytes_at_function_and_namespace_scope(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    n = 5000
    x = rng.random((8, n), dtype=np.float32)
    out = np.zeros_like(x)
    kernels("shared").run("kd_reverse", [8], [128], [out, x, i32(n)], shared=4 * n)
    np.testing.assert_array_equal(out, x[:, ::-1])


def test_a_spin_wait_with_nanosleep_lets_the_other_threads_of_its_block_run(kernels: Callable[..., Module]) -> None:
    out = np.zeros(3 * 64, np.int32)
    kernels("shared").run("kd_wait_for_flag", [3], [64], [out])
    assert (out == 1).all()


def test_printf_prints_through_libc_before_the_launch_returns(
    kernels: Callable[..., Module], capfd: pytest.CaptureFixture[str]
) -> None:
    kernels("shared", False).run("kd_hello", [2], [8], [i32(42)])
    assert capfd.readouterr().out == "hello from block 1 thread 3: 42 0.50\n"


# --- the math API and intrinsics ----------------------------------------------------------------

mp.mp.prec = 80
# (C expression of x, a high-precision reference, the domain of x); each is evaluated in float and
# in double (the float spellings through CUDA's float overloads and f-suffixed names).
MATH: list[tuple[str, Callable[[Any], Any], tuple[float, float]]] = [
    ("exp(x)", mp.exp, (-20, 20)),
    ("exp2(x)", lambda x: mp.power(2, x), (-20, 20)),
    ("exp10(x)", lambda x: mp.power(10, x), (-10, 10)),
    ("expm1(x)", mp.expm1, (-5, 5)),
    ("log(x)", mp.log, (1e-3, 1e3)),
    ("log2(x)", lambda x: mp.log(x, 2), (1e-3, 1e3)),
    ("log10(x)", mp.log10, (1e-3, 1e3)),
    ("log1p(x)", mp.log1p, (-0.9, 10)),
    ("pow(x, 1.75)", lambda x: mp.power(x, mp.mpf(1.75)), (0, 10)),
    ("sqrt(x)", mp.sqrt, (0, 100)),
    ("rsqrt(x)", lambda x: 1 / mp.sqrt(x), (1e-3, 100)),
    ("cbrt(x)", lambda x: mp.sign(x) * mp.cbrt(abs(x)), (-100, 100)),
    ("rcbrt(x)", lambda x: 1 / mp.cbrt(x), (0.1, 100)),
    ("sin(x)", mp.sin, (-10, 10)),
    ("cos(x)", mp.cos, (-10, 10)),
    ("tan(x)", mp.tan, (-1.5, 1.5)),
    ("asin(x)", mp.asin, (-1, 1)),
    ("acos(x)", mp.acos, (-1, 1)),
    ("atan(x)", mp.atan, (-10, 10)),
    ("atan2(x, 0.75)", lambda x: mp.atan2(x, mp.mpf(0.75)), (-10, 10)),
    ("sinh(x)", mp.sinh, (-5, 5)),
    ("cosh(x)", mp.cosh, (-5, 5)),
    ("tanh(x)", mp.tanh, (-5, 5)),
    ("asinh(x)", mp.asinh, (-10, 10)),
    ("acosh(x)", mp.acosh, (1, 10)),
    ("atanh(x)", mp.atanh, (-0.99, 0.99)),
    ("erf(x)", mp.erf, (-4, 4)),
    ("erfc(x)", mp.erfc, (-4, 9)),
    ("erfcx(x)", lambda x: mp.exp(x * x) * mp.erfc(x), (-2, 30)),
    ("normcdf(x)", mp.ncdf, (-8, 8)),
    ("lgamma(x)", mp.loggamma, (2.5, 20)),
    ("tgamma(x)", mp.gamma, (0.1, 20)),
    ("sinpi(x)", mp.sinpi, (-4, 4)),
    ("cospi(x)", mp.cospi, (-4, 4)),
    ("hypot(x, 3)", lambda x: mp.hypot(x, 3), (-10, 10)),
    ("fmod(x, 0.7)", lambda x: mp.mpf(math.fmod(float(x), 0.7)), (-10, 10)),  # exact, with C's sign
    ("fmin(x, 0.5)", lambda x: min(x, mp.mpf(0.5)), (-2, 2)),
    ("fmax(x, 0.5)", lambda x: max(x, mp.mpf(0.5)), (-2, 2)),
    ("fabs(x)", abs, (-2, 2)),
    ("floor(x)", mp.floor, (-20, 20)),
    ("ceil(x)", mp.ceil, (-20, 20)),
    ("trunc(x)", lambda x: mp.floor(x) if x >= 0 else mp.ceil(x), (-20, 20)),
    ("rint(x)", mp.nint, (-20, 20)),
    ("copysign(x, -1)", lambda x: -abs(x), (-2, 2)),
    ("fma(x, x, 1)", lambda x: x * x + 1, (-2, 2)),
    ("ldexp(x, 3)", lambda x: x * 8, (-2, 2)),
    ("min(x, 0.5)", lambda x: min(x, mp.mpf(0.5)), (-2, 2)),
    ("max(x, 1)", lambda x: max(x, mp.mpf(1)), (-2, 2)),
]


def math_source() -> str:
    lines = []
    for T, suffix in (("float", "f"), ("double", "d")):
        rows = "\n".join(
            f"    {{ const {T} x = xs[{k} * n + i]; out[{k} * n + i] = (double)({expr}); }}"
            for k, (expr, _, _) in enumerate(MATH)
        )
        lines.append(
            f'extern "C" __global__ void kd_math_{suffix}(double* out, const {T}* xs, int n) {{\n'
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n"
            f"{rows}\n}}\nKD_HOST_KERNEL(kd_math_{suffix}, double*, const {T}*, int)\n"
        )
    return "\n".join(lines)


SOURCES["math"] = math_source()


@pytest.mark.parametrize(("dtype", "suffix"), [(np.float32, "f"), (np.float64, "d")])
def test_math_functions_are_within_4_ulp_of_the_exact_result(
    kernels: Callable[..., Module], rng: np.random.Generator, dtype: type, suffix: str
) -> None:
    n = 101
    unit = rng.random(n)
    x = np.empty((len(MATH), n), dtype)
    out = np.zeros((len(MATH), n))
    for k, (_, _, (lo, hi)) in enumerate(MATH):
        x[k] = lo + (hi - lo) * unit
    kernels("math", False).run(f"kd_math_{suffix}", [1], [128], [out, x, i32(n)])
    for k, (expr, reference, _) in enumerate(MATH):
        exact = np.array([float(reference(mp.mpf(float(v)))) for v in x[k]])
        ulp = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
        with np.errstate(invalid="ignore"):  # infinities compare equal; their difference is NaN
            wrong = (out[k] != exact) & ~(np.abs(out[k] - exact) <= 4 * ulp)
        assert not wrong.any(), (
            f"{expr} in {dtype.__name__}: x={x[k][wrong][:3]} got {out[k][wrong][:3]} want {exact[wrong][:3]}"
        )


SOURCES["inverses"] = r"""
extern "C" __global__ void kd_inverses(double* out, const double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[4 * i] = erfinv(y[i]);
    out[4 * i + 1] = erfcinv(1.0 - y[i]);
    out[4 * i + 2] = normcdfinv(0.5 + 0.5 * y[i]);
    out[4 * i + 3] = erfinvf((float)y[i]);
}
KD_HOST_KERNEL(kd_inverses, double*, const double*, int)
"""


def test_the_inverse_error_functions_are_within_4_ulp_of_the_exact_result(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    y = np.concatenate([rng.uniform(-1, 1, 300), [0.0, 1e-12, -0.999999, 0.9999999999, 1 - 2.0**-40, 0.5]])
    out = np.zeros((y.size, 4))
    kernels("inverses", False).run("kd_inverses", [2], [256], [out, y, i32(y.size)])
    exact = np.array(
        [
            [
                mp.erfinv(v),
                mp.erfinv(1 - mp.mpf(1.0 - v)),
                mp.sqrt(2) * mp.erfinv(2 * mp.mpf(0.5 + 0.5 * v) - 1),
                mp.erfinv(mp.mpf(float(np.float32(v)))),
            ]
            for v in y
        ],
        dtype=np.float64,
    )
    ulp = np.spacing(np.abs(exact))
    ulp[:, 3] = np.spacing(np.abs(exact[:, 3]).astype(np.float32))
    with np.errstate(invalid="ignore"):  # infinities compare equal; their difference is NaN
        wrong = (out != exact) & ~(np.abs(out - exact) <= 4 * ulp)
    assert not wrong.any(), np.argwhere(wrong)[:5]


SOURCES["intrinsics"] = r"""
extern "C" __global__ void kd_intrinsics(long long* o, float one, float tiny, float nan) {
#line 1 "intrinsics.body"
    int k = 0;
    o[k++] = __brev(0x00000001u);
    o[k++] = (long long)__brevll(0x1ull);
    o[k++] = __byte_perm(0x33221100u, 0x77665544u, 0x4051u);
    o[k++] = __funnelshift_l(0x80000001u, 0x00000003u, 36);
    o[k++] = __funnelshift_lc(0x80000001u, 0x00000003u, 36);
    o[k++] = __funnelshift_r(0x80000001u, 0x00000003u, 33);
    o[k++] = __funnelshift_rc(0x80000001u, 0x00000003u, 33);
    o[k++] = __clz(0);
    o[k++] = __clzll(1ll);
    o[k++] = __ffs(0x50);
    o[k++] = __popcll(0xf0f0ull);
    o[k++] = __mulhi(-7, 1 << 30);
    o[k++] = __umulhi(0xffffffffu, 0xffffffffu);
    o[k++] = __mul64hi(-1ll, 5ll);
    o[k++] = (long long)__umul64hi(~0ull, 3ull);
    o[k++] = __mul24(0x00fffffe, 3);
    o[k++] = __sad(-5, 7, 1u);
    o[k++] = __hadd(0x7fffffff, 0x7fffffff);
    o[k++] = __rhadd(-3, 0);
    o[k++] = __float2int_rn(2.5f);
    o[k++] = __float2int_rn(3.5f);
    o[k++] = __float2int_rz(-2.7f);
    o[k++] = __float2int_ru(2.1f);
    o[k++] = __float2int_rd(-2.1f);
    o[k++] = __float2int_rn(3e9f);
    o[k++] = __float2int_rn(nan);
    o[k++] = __float2uint_rn(-5.0f);
    o[k++] = __double2ll_rz(-1e30);
    o[k++] = __double2hiint(1.0);
    o[k++] = __double2loint(__hiloint2double(7, -1));
    o[k++] = __float_as_int(__fadd_rz(one, tiny));
    o[k++] = __float_as_int(__fadd_ru(one, tiny));
    o[k++] = __float_as_int(__fsub_rd(one, tiny));
    o[k++] = __float_as_int(__int2float_rz(16777217));
    o[k++] = __float_as_int(__int2float_ru(16777217));
    o[k++] = __double_as_longlong(__dmul_ru(1.0 + 2.220446049250313e-16, 1.0 + 2.220446049250313e-16));
    o[k++] = __float_as_int(__saturatef(nan));
    o[k++] = __float_as_int(__saturatef(1.5f));
    o[k++] = (long long)min(-1, 2u);
    o[k++] = max(3ll, -4);
    o[k++] = __float_as_int(max(one, nan));
    o[k++] = isnan(nan) + 2 * isinf(one / 0.0f) + 4 * signbit(-0.0) + 8 * isfinite(7);
    o[k++] = clock64() > 0;
}
KD_HOST_KERNEL(kd_intrinsics, long long*, float, float, float)
"""


def f32_bits(v: float) -> int:
    return int(np.float32(v).view(np.int32))


def test_integer_and_conversion_intrinsics_give_cudas_documented_results(kernels: Callable[..., Module]) -> None:
    out = np.zeros(64, np.int64)
    kernels("intrinsics", False).run("kd_intrinsics", [1], [1], [out, f32(1.0), f32(1e-8), f32(float("nan"))])
    one_up = f32_bits(np.nextafter(np.float32(1), np.float32(2)))
    expected = [
        0x80000000,
        -(1 << 63),
        0x44005511,
        0x00000038,
        0x80000001,
        0xC0000000,
        0x00000003,
        32,
        63,
        5,
        8,
        -2,
        0xFFFFFFFE,
        -1,
        2,
        -6,
        13,
        0x7FFFFFFF,
        -1,
        2,
        4,
        -2,
        3,
        -3,
        0x7FFFFFFF,
        0,
        0,
        -(1 << 63),
        0x3FF00000,
        -1,
        f32_bits(1.0),
        one_up,
        f32_bits(np.nextafter(np.float32(1), np.float32(0))),
        f32_bits(16777216.0),
        f32_bits(16777218.0),
        int(np.float64(1 + 3 * 2.0**-52).view(np.int64)),
        0,
        f32_bits(1.0),
        2,  # min(int, unsigned) is unsigned: min(0xffffffff, 2)
        3,
        f32_bits(1.0),
        15,
        1,
    ]
    np.testing.assert_array_equal(out[: len(expected)], expected)


# --- cuLaunchKernelEx: cooperative grids and clusters; launches from several threads at once ------

SOURCES["grid_sync"] = r"""
extern "C" __global__ void kd_grid_sync(unsigned int* arrived, int* values, int* sums) {
#line 1 "grid_sync.body"
    // every block publishes a value, then waits at a ticket barrier for all of them (a grid sync
    // that only a cooperative launch, every block resident at once, can pass)
    if (threadIdx.x == 0) {
        values[blockIdx.x] = (int)blockIdx.x + 1;
        __threadfence();
        atomicAdd(arrived, 1u);
        while (atomicAdd(arrived, 0u) < gridDim.x) __nanosleep(1000);
    }
    __syncthreads();
    int sum = 0;
    for (unsigned int b = 0; b < gridDim.x; ++b) sum += values[b];
    sums[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
KD_HOST_KERNEL(kd_grid_sync, unsigned int*, int*, int*)
"""


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("nattrs", ctypes.c_uint),
    ]


def launch_ex(
    module: Module, entry: str, grid: int, block: int, args: Sequence[Arg], attrs: dict[int, list[int]], shared: int = 0
) -> Outcome:
    attributes = (LaunchAttribute * max(len(attrs), 1))()
    for slot, (key, words) in zip(attributes, attrs.items()):
        slot.id = key
        slot.value[: len(words)] = words
    config = LaunchConfig((grid, 1, 1), (block, 1, 1), shared, None, attributes, len(attrs))
    holders = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else a for a in args]
    params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    rt = module.runtime
    code = rt.lib.kd_host_launch_ex(ctypes.addressof(config), module.descriptor(entry), params, None)
    return Outcome(code, rt.last_error() if code else "")


COOPERATIVE, CLUSTER_DIMENSION = 2, 4


def test_a_cooperative_launch_runs_every_block_at_once_so_a_grid_barrier_passes(
    kernels: Callable[..., Module], workers: Callable[[int], None]
) -> None:
    workers(1)  # without the cooperative attribute this grid could never finish on one worker
    blocks, threads = 24, 64
    arrived, values = np.zeros(1, np.uint32), np.zeros(blocks, np.int32)
    sums = np.zeros(blocks * threads, np.int32)
    outcome = launch_ex(
        kernels("grid_sync"), "kd_grid_sync", blocks, threads, [arrived, values, sums], {COOPERATIVE: [1]}
    )
    assert outcome == Outcome(0, "")
    assert (sums == blocks * (blocks + 1) // 2).all()


def test_a_cooperative_launch_larger_than_the_cpu_device_runs_is_refused(kernels: Callable[..., Module]) -> None:
    arrived, values, sums = np.zeros(1, np.uint32), np.zeros(1, np.int32), np.zeros(1, np.int32)
    outcome = launch_ex(kernels("grid_sync"), "kd_grid_sync", 5000, 32, [arrived, values, sums], {COOPERATIVE: [1]})
    assert outcome.code == NOT_SUPPORTED
    assert "a cooperative launch of 5000 blocks" in outcome.error
    assert arrived[0] == 0


def test_launch_ex_without_special_attributes_is_an_ordinary_launch(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    n = 1000
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    expected = np.float32(3) * x + y
    outcome = launch_ex(kernels("saxpy", False), "kd_saxpy", 4, 256, [y, x, f32(3), i32(n)], {COOPERATIVE: [0], 8: [5]})
    assert outcome == Outcome(0, "")
    np.testing.assert_array_equal(y, expected)


SOURCES["grid_sync_failing"] = (
    SOURCES["grid_sync"]
    .replace("kd_grid_sync", "kd_grid_sync_failing")
    .replace(
        "    if (threadIdx.x == 0) {\n        values",
        "    assert(blockIdx.x != 5);\n    if (threadIdx.x == 0) {\n        values",
    )
)


def test_a_cooperative_grid_whose_block_fails_ends_instead_of_waiting_at_its_grid_barrier(
    kernels: Callable[..., Module],
) -> None:
    blocks = 8
    arrived, values, sums = np.zeros(1, np.uint32), np.zeros(blocks, np.int32), np.zeros(blocks * 32, np.int32)
    outcome = launch_ex(
        kernels("grid_sync_failing"), "kd_grid_sync_failing", blocks, 32, [arrived, values, sums], {COOPERATIVE: [1]}
    )
    assert outcome.code == ASSERT_FAILED
    assert "block (5,0,0) thread (0,0,0): assertion 'blockIdx.x != 5' failed" in outcome.error


SOURCES["clusters"] = r"""
extern "C" __global__ void kd_cluster_sum(unsigned int* ranks, int* sums, int* spread) {
#line 1 "cluster_sum.body"
    // every block of a cluster adds the values its cluster's blocks hold in shared memory, as the
    // fused rows' split reduction does (static and dynamic shared memory, read through mapa)
    __shared__ int mine;
    KD_DYNAMIC_SHARED(int, staged);
    const unsigned int rank = kd_host_cluster_rank(), size = kd_host_cluster_size();
    if (threadIdx.x == 0) { mine = (int)blockIdx.x + 1; staged[3] = 10 * ((int)blockIdx.x + 1); }
    kd_host_cluster_sync();
    int sum = 0, spread_sum = 0;
    for (unsigned int q = 0; q < size; ++q) {
        sum += *kd_host_cluster_map(&mine, q);
        spread_sum += kd_host_cluster_map(staged, q)[3];
    }
    kd_host_cluster_sync();  // no block leaves while another may still read its shared memory
    if (threadIdx.x == 0) { ranks[2 * blockIdx.x] = rank; ranks[2 * blockIdx.x + 1] = size; }
    sums[blockIdx.x * blockDim.x + threadIdx.x] = sum;
    spread[blockIdx.x * blockDim.x + threadIdx.x] = spread_sum;
}
KD_HOST_KERNEL(kd_cluster_sum, unsigned int*, int*, int*)
extern "C" __global__ void kd_cluster_fails(int* out) {
#line 1 "cluster_fails.body"
    assert(blockIdx.x != 6);
    kd_host_cluster_sync();
    out[blockIdx.x] = 1;
}
KD_HOST_KERNEL(kd_cluster_fails, int*)
"""


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_a_cluster_runs_its_blocks_at_once_and_they_read_each_others_shared_memory(
    kernels: Callable[..., Module], cluster: int
) -> None:
    blocks, threads = 16, 64
    ranks = np.zeros((blocks, 2), np.uint32)
    sums, spread = np.zeros((blocks, threads), np.int32), np.zeros((blocks, threads), np.int32)
    module = kernels("clusters")
    attributes = {CLUSTER_DIMENSION: [cluster, 1, 1]}
    holders = [ranks, sums, spread]
    outcome = launch_ex(module, "kd_cluster_sum", blocks, threads, holders, attributes, shared=64)
    assert outcome == Outcome(0, "")
    b = np.arange(blocks)
    np.testing.assert_array_equal(ranks, np.stack([b % cluster, np.full(blocks, cluster)], axis=1))
    first = b - b % cluster  # each cluster's first block
    expected = sum(first + q + 1 for q in range(cluster))
    np.testing.assert_array_equal(sums, np.repeat(expected[:, None], threads, axis=1))
    np.testing.assert_array_equal(spread, 10 * sums)


SOURCES["cluster_atomics"] = r"""
extern "C" __global__ void kd_cluster_count(unsigned long long* counts, int* ordered, int rounds) {
#line 1 "cluster_count.body"
    // every thread of every block of a cluster counts into rank 0's shared memory, static and
    // dynamic, rank 0's own threads too: other OS threads update it, so its atomics stay atomic
    __shared__ unsigned long long count;
    KD_DYNAMIC_SHARED(unsigned long long, dynamic_count);
    if (threadIdx.x == 0) { count = 0; dynamic_count[0] = 0; }
    kd_host_cluster_sync();
    unsigned long long* leader = kd_host_cluster_map(&count, 0);
    unsigned long long* dynamic_leader = kd_host_cluster_map(dynamic_count, 0);
    unsigned long long last = 0, dynamic_last = 0;
    bool increasing = true;  // the old values one thread's adds return
    for (int r = 0; r < rounds; ++r) {
        const unsigned long long old = atomicAdd(leader, 1ull), dynamic_old = atomicAdd(dynamic_leader, 2ull);
        increasing = increasing && (r == 0 || (old > last && dynamic_old > dynamic_last));
        last = old;
        dynamic_last = dynamic_old;
        if ((r & 255) == 0) __syncthreads();  // the block's other threads interleave with it
    }
    ordered[blockIdx.x * blockDim.x + threadIdx.x] = increasing;
    kd_host_cluster_sync();
    if (threadIdx.x == 0 && kd_host_cluster_rank() == 0) {
        counts[2 * blockIdx.x] = count;
        counts[2 * blockIdx.x + 1] = dynamic_count[0];
    }
}
KD_HOST_KERNEL(kd_cluster_count, unsigned long long*, int*, int)
"""


def test_atomics_on_a_cluster_blocks_shared_memory_stay_atomic_across_its_blocks(
    kernels: Callable[..., Module],
) -> None:
    blocks, cluster, threads, rounds = 8, 4, 64, 4096
    counts, ordered = np.zeros((blocks, 2), np.uint64), np.zeros((blocks, threads), np.int32)
    outcome = launch_ex(
        kernels("cluster_atomics"),
        "kd_cluster_count",
        blocks,
        threads,
        [counts, ordered, i32(rounds)],
        {CLUSTER_DIMENSION: [cluster, 1, 1]},
        shared=8,
    )
    assert outcome == Outcome(0, "")
    each = cluster * threads * rounds
    np.testing.assert_array_equal(counts[::cluster], [[each, 2 * each]] * (blocks // cluster))
    assert ordered.all()


def test_a_failing_block_of_a_cluster_fails_the_launch_without_leaving_the_others_waiting(
    kernels: Callable[..., Module],
) -> None:
    outcome = launch_ex(
        kernels("clusters"), "kd_cluster_fails", 8, 32, [np.zeros(8, np.int32)], {CLUSTER_DIMENSION: [4, 1, 1]}
    )
    assert outcome.code == ASSERT_FAILED
    assert "block (6,0,0) thread (0,0,0): assertion 'blockIdx.x != 6' failed" in outcome.error


@pytest.mark.parametrize(
    ("grid", "cluster", "code", "message"),
    [
        (6, [4, 1, 1], INVALID_VALUE, "grid (6,1,1) is not a multiple of cluster (4,1,1)"),
        (64, [32, 1, 1], NOT_SUPPORTED, "a cluster of 32 blocks; the CPU device runs at most 16"),
    ],
)
def test_a_cluster_launch_the_cpu_device_cannot_run_is_refused(
    kernels: Callable[..., Module], grid: int, cluster: list[int], code: int, message: str
) -> None:
    out = np.zeros(grid, np.int32)
    outcome = launch_ex(kernels("clusters"), "kd_cluster_fails", grid, 32, [out], {CLUSTER_DIMENSION: cluster})
    assert outcome.code == code
    assert message in outcome.error
    assert (out == 0).all()


def test_launches_from_several_threads_at_once_each_give_their_own_result(
    kernels: Callable[..., Module], rng: np.random.Generator
) -> None:
    module = kernels("block_sum")
    inputs = [rng.random(64 * 256, dtype=np.float32) for _ in range(8)]
    outputs = [np.zeros(64, np.float32) for _ in inputs]

    def work(k: int) -> Outcome:
        return module.launch("kd_block_sum", [64], [256], [outputs[k], inputs[k], i32(inputs[k].size)])

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(work, range(len(inputs))))
    assert outcomes == [Outcome(0, "")] * len(inputs)
    for x, out in zip(inputs, outputs):
        np.testing.assert_allclose(out, x.reshape(64, 256).sum(axis=1, dtype=np.float64), rtol=1e-5)


# --- what the shim declares: layouts, overloads, refusals -----------------------------------------

SOURCES["declarations"] = r"""
static_assert(sizeof(char3) == 3 && alignof(char4) == 4 && alignof(short2) == 4 && alignof(short4) == 8, "");
static_assert(alignof(int2) == 8 && alignof(int3) == 4 && alignof(int4) == 16 && sizeof(uint3) == 12, "");
static_assert(alignof(float2) == 8 && alignof(float4) == 16 && alignof(double2) == 16 && alignof(double4) == 16, "");
static_assert(alignof(longlong2) == 16 && alignof(ulonglong4) == 16 && alignof(long2) == 2 * sizeof(long), "");
static_assert(sizeof(dim3) == 12 && warpSize == 32, "");
#ifdef __CUDA_ARCH__
#error "the host compiles the portable branches"
#endif
// The prelude declares shuffles of its complex type: its overload must win over the shim's template.
template <typename R> struct cplx { R re, im; };
template <typename R> cplx<R> __shfl_down_sync(unsigned int m, cplx<R> v, unsigned int d, int w = 32) {
    return {__shfl_down_sync(m, v.re, d, w), -__shfl_down_sync(m, v.im, d, w)};
}
extern "C" __global__ void kd_overloads(float* out) {
    const cplx<float> z = {(float)threadIdx.x, (float)threadIdx.x};
    const cplx<float> r = __shfl_down_sync(0xffffffffu, z, 1);
    const float4 v = make_float4(1, 2, 3, 4);
    out[2 * threadIdx.x] = r.re + v.w - 4;
    out[2 * threadIdx.x + 1] = r.im;
}
KD_HOST_KERNEL(kd_overloads, float*)
"""


def test_vector_types_have_cudas_layouts_and_prelude_shuffle_overloads_win(kernels: Callable[..., Module]) -> None:
    out = np.zeros((32, 2), np.float32)
    kernels("declarations").run("kd_overloads", [1], [32], [out])
    source = np.minimum(np.arange(32) + 1, 31)
    source[31] = 31
    np.testing.assert_array_equal(out[:, 0], source)
    np.testing.assert_array_equal(out[:, 1], -source)


def test_inline_ptx_is_refused_at_compile_time_naming_it(build_dir: Path) -> None:
    source = 'extern "C" __global__ void kd_ptx(int* x) { asm volatile("membar.gl;"); }\nKD_HOST_KERNEL(kd_ptx, int*)\n'
    with pytest.raises(AssertionError, match="inline PTX \\(asm\\) has no host equivalent"):
        compile_module(build_dir, "ptx", source, fibers=False)


# --- the micro-bench (KERNELDSL_HOST_BENCH=1; prints figures, asserts none) -------------------------

SOURCES["bench"] = r"""
extern "C" __global__ void kd_bench_empty(int* out, int k) {  // a thread that never waits
    if ((int)threadIdx.x == k) { __syncthreads(); out[0] = 1; }
}
KD_HOST_KERNEL(kd_bench_empty, int*, int)
extern "C" __global__ void kd_bench_barriers(int* out, int k) {
    for (int i = 0; i < k; ++i) __syncthreads();
    if ((int)threadIdx.x == -1) out[0] = 1;
}
KD_HOST_KERNEL(kd_bench_barriers, int*, int)
extern "C" __global__ void kd_bench_shuffles(int* out, int k) {
    int v = threadIdx.x;
    for (int i = 0; i < k; ++i) v += __shfl_xor_sync(0xffffffffu, v, 1);
    if (v == -1) out[0] = v;
}
KD_HOST_KERNEL(kd_bench_shuffles, int*, int)
"""

SOURCES["bench_loop"] = r"""
extern "C" __global__ void kd_bench_loop(int* out, int k) {
    if ((int)threadIdx.x == k) out[0] = 1;
}
KD_HOST_KERNEL(kd_bench_loop, int*, int)
"""


@pytest.mark.skipif(not os.environ.get("KERNELDSL_HOST_BENCH"), reason="a micro-bench: set KERNELDSL_HOST_BENCH=1")
def test_micro_bench_fiber_and_loop_costs_per_cuda_thread(
    kernels: Callable[..., Module], workers: Callable[[int], None]
) -> None:
    """Per CUDA thread, on one worker, from the best of 15 launches of 2^19 threads in blocks of
    256, in this thread's CPU time: loop mode; a fiber-mode thread that starts and finishes
    without waiting; one that waits at a barrier, less one barrier (start and finish of a thread
    that needs its own stack); a barrier and a shuffle (the slope over 1 to 9 of them)."""
    workers(1)
    out = np.zeros(1, np.int32)
    threads, block = 1 << 19, 256

    def per_thread(name: str, entry: str, k: int, fibers: bool = True) -> float:
        module = kernels(name, fibers)
        best = math.inf
        for _ in range(15):
            start = time.thread_time()
            module.run(entry, [threads // block], [block], [out, i32(k)])
            best = min(best, time.thread_time() - start)
        return best * 1e9 / threads

    loop = per_thread("bench_loop", "kd_bench_loop", -1, fibers=False)
    empty = per_thread("bench", "kd_bench_empty", -1)
    b1, b9 = (per_thread("bench", "kd_bench_barriers", k) for k in (1, 9))
    s1, s9 = (per_thread("bench", "kd_bench_shuffles", k) for k in (1, 9))
    barrier, shuffle = (b9 - b1) / 8, (s9 - s1) / 8
    print(
        f"\nper CUDA thread: loop mode {loop:.2f} ns; fiber start+finish {empty:.2f} ns without waiting, "
        f"{b1 - barrier:.2f} ns with its own stack; barrier {barrier:.2f} ns; shuffle {shuffle:.2f} ns"
    )
