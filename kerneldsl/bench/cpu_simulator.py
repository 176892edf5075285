"""The computations of ``kerneldsl bench cpu`` in Numba's CUDA simulator, run as a child process.

``python -m kerneldsl.bench.cpu_simulator QUICK`` (``0`` or ``1``) prints, as JSON, the seconds per
element of each kernel. The simulator is chosen by ``NUMBA_ENABLE_CUDASIM=1`` before
``numba.cuda`` is first imported, so it runs in its own process (``measure``) and the variable
never reaches the benchmark's. Kernels are written as a Numba CUDA user writes them, with the same
launch shapes as kerneldsl's (``cpu_kernels``); the simulator has no warp shuffles
(``cuda.shfl_down_sync`` is missing), so its block sum reduces in shared memory. It runs one
Python thread per CUDA thread, about 100,000x slower than native code, hence its small sizes.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .cpu_cases import BINS, FULL, QUICK, SAXPY_ALPHA, STENCIL_WEIGHT, THREAD_ELEMENTS, Case, Sizes, poison_value

ENV = "NUMBA_ENABLE_CUDASIM"
# numba.cuda, imported by ``simulate`` once the simulator is known to be chosen. A module global,
# because the simulator runs a kernel by swapping its fake module in for every global of its
# function that is numba.cuda.
cuda: Any = None
BLOCK = 256
TILE, TILE_ROWS = 32, 8


def measure(quick: bool, timeout: float = 3600.0) -> dict[str, float]:
    """Seconds per element of each simulated kernel, measured in a child process."""
    env = dict(os.environ, **{ENV: "1"})
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(int(quick))], env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        raise RuntimeError(f"the Numba CUDA simulator child failed:\n{done.stderr[-4000:]}")
    return cast(dict[str, float], json.loads(done.stdout.strip().splitlines()[-1]))


def _kernels() -> dict[str, Any]:
    jit = cast(Callable[[Callable[..., None]], Any], cuda.jit)
    float32, int32 = np.float32, np.int32

    @jit
    def saxpy(alpha: Any, x: Any, y: Any, out: Any) -> None:
        i = cuda.grid(1)
        if i < x.size:
            out[i] = alpha * x[i] + y[i]

    @jit
    def transpose(x: Any, out: Any) -> None:
        tile = cuda.shared.array((TILE, TILE + 1), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
        for j in range(0, TILE, TILE_ROWS):
            if col < x.shape[1] and row + j < x.shape[0]:
                tile[ty + j, tx] = x[row + j, col]
        cuda.syncthreads()
        col, row = cuda.blockIdx.y * TILE + tx, cuda.blockIdx.x * TILE + ty
        for j in range(0, TILE, TILE_ROWS):
            if col < x.shape[0] and row + j < x.shape[1]:
                out[row + j, col] = tile[tx, ty + j]

    @jit
    def block_sum(x: Any, out: Any) -> None:
        partial = cuda.shared.array(BLOCK, float32)
        t = cuda.threadIdx.x
        v = float32(0.0)
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            v += x[i]
        partial[t] = v
        cuda.syncthreads()
        step = BLOCK // 2
        while step > 0:
            if t < step:
                partial[t] += partial[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            cuda.atomic.add(out, 0, partial[0])

    @jit
    def histogram(values: Any, out: Any) -> None:
        bins = cuda.shared.array(BINS, int32)
        t = cuda.threadIdx.x
        for b in range(t, BINS, cuda.blockDim.x):
            bins[b] = 0
        cuda.syncthreads()
        for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
            cuda.atomic.add(bins, values[i], 1)
        cuda.syncthreads()
        for b in range(t, BINS, cuda.blockDim.x):
            cuda.atomic.add(out, b, bins[b])

    @jit
    def stencil(weight: Any, x: Any, out: Any) -> None:
        j, i = cuda.grid(2)
        m, n = x.shape
        if i < m and j < n:
            if i == 0 or j == 0 or i == m - 1 or j == n - 1:
                out[i, j] = x[i, j]
            else:
                out[i, j] = (x[i, j] + x[i - 1, j] + x[i + 1, j] + x[i, j - 1] + x[i, j + 1]) * weight

    return {"saxpy": saxpy, "transpose": transpose, "sum": block_sum, "histogram": histogram, "stencil": stencil}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _launches(kernels: dict[str, Any], case: Case, out: np.ndarray, per_thread: bool) -> Callable[[], None]:
    """The launch of ``case`` with kerneldsl's launch shape: a grid-stride kernel gets a grid
    whose threads each handle ``THREAD_ELEMENTS`` elements, unless ``per_thread``."""
    x = next(iter(case.inputs.values()))
    if case.name == "saxpy":
        grid = _cdiv(x.size, BLOCK)
        return lambda: kernels["saxpy"][grid, BLOCK](SAXPY_ALPHA, x, case.inputs["y"], out)
    if case.name == "transpose":
        grid2 = (_cdiv(x.shape[1], TILE), _cdiv(x.shape[0], TILE))
        return lambda: kernels["transpose"][grid2, (TILE, TILE_ROWS)](x, out)
    if case.name == "stencil":
        grid2 = (_cdiv(x.shape[1], TILE), _cdiv(x.shape[0], TILE_ROWS))
        return lambda: kernels["stencil"][grid2, (TILE, TILE_ROWS)](STENCIL_WEIGHT, x, out)
    grid = _cdiv(x.size, BLOCK) if per_thread else max(1, x.size // (BLOCK * THREAD_ELEMENTS))
    kernel = kernels[case.name]

    def accumulate() -> None:
        out[...] = 0
        kernel[grid, BLOCK](x, out)

    return accumulate


def simulate(sizes: Sizes) -> dict[str, float]:
    """Seconds per element of each kernel in the simulator, each result checked against NumPy."""
    if os.environ.get(ENV) != "1":
        raise RuntimeError(f"{ENV}=1 must be set before numba.cuda is imported")
    global cuda
    cuda = importlib.import_module("numba.cuda")
    kernels = _kernels()
    timings: dict[str, float] = {}
    for case in sizes.simulated_cases().values():
        variants = {case.name: False}
        if case.name in ("sum", "histogram"):
            variants[f"{case.name} (a thread an element)"] = True
        for label, per_thread in variants.items():
            out = np.full(case.want.shape, poison_value(case.want.dtype), case.want.dtype)
            launch = _launches(kernels, case, out, per_thread)
            launch()  # the simulator's first launch starts its machinery: not a kernel's cost
            out[...] = poison_value(case.want.dtype)
            start = time.perf_counter()
            launch()
            timings[label] = (time.perf_counter() - start) / case.elements
            case.check("numba simulator", out)
    return timings


if __name__ == "__main__":
    print(json.dumps(simulate(QUICK if sys.argv[1:] == ["1"] else FULL)))
