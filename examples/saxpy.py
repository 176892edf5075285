"""The main example: declare saxpy once, compile and cache its specializations, run it two ways.

Without a GPU this still does the real compile-and-cache work (NVRTC needs no driver) and says
plainly that it skipped the launch.
"""

from __future__ import annotations

import os
import time
from typing import NewType, TypeVar

import numpy as np

import kerneldsl as kd
from kerneldsl.build import Build
from kerneldsl.runtime import driver

T = TypeVar("T")  # a dtype variable: bound per call, typedef'd in the CUDA source
n = NewType("n", int)  # a shape symbol: unified across parameters, an index_t in the kernel


@kd.kernel(grid=kd.cdiv(n, 256), block=256, precompile=[{"T": np.float32}, {"T": np.float64}])
def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
    """


def registers(build: Build) -> str:
    """The count comes from ptxas's info log, which NVRTC does not always return: None then."""
    return "registers unknown" if build.registers is None else f"{build.registers} registers"


def compile_specializations(arch: str) -> None:
    for dtype in (np.float32, np.float64):
        start = time.perf_counter()
        build = saxpy.compile(T=dtype, arch=arch)
        ms = (time.perf_counter() - start) * 1e3
        print(
            f"compiled saxpy[T={np.dtype(dtype).name}] for {arch}: {build.origin}, {ms:.1f} ms, "
            f"{registers(build)}, cubin {len(build.cubin)} bytes, key {build.cache_key[:12]}"
        )
    print(f"disk cache: {kd.cache.get_default_cache().directory}")


def run_on_gpu() -> None:
    n = 1 << 20
    rng = np.random.default_rng()
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    expected = 2.0 * x + y

    borrowed = y.copy()
    saxpy(borrowed, x, np.float32(2.0))  # numpy in: copy in, launch, copy back within the call
    np.testing.assert_allclose(borrowed, expected, rtol=1e-6)
    print("numpy borrowing path: result matches numpy")

    with kd.Session(device=0) as s:  # persistent path: upload once, launch many, download once
        dy, dx = s.to_device(y), s.to_device(x)
        launches = 1000
        start = time.perf_counter()
        for _ in range(launches):
            saxpy(dy, dx, np.float32(2.0))
        s.synchronize()
        elapsed = time.perf_counter() - start
        result = dy.to_host()
    np.testing.assert_allclose(result, y + launches * 2.0 * x, rtol=1e-3, atol=1e-2)
    print(f"session path: {launches} launches in {elapsed * 1e3:.1f} ms, result matches numpy")


def main() -> None:
    has_gpu = driver.driver_available() and driver.device_count() > 0
    arch = None if has_gpu else os.environ.get("KERNELDSL_ARCH", "sm_90")
    compile_specializations(arch or kd.resolve_arch())
    if has_gpu:
        run_on_gpu()
    else:
        print("no CUDA driver or device on this machine: compiled and cached the kernels, skipped the launch")


if __name__ == "__main__":
    main()
