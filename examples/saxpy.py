"""The main example: declare saxpy once, compile and cache its specializations, run it two ways.

Without a GPU it compiles the cubins all the same (NVRTC needs no driver), then runs saxpy on the
CPU device (the same CUDA C++ compiled for the host) and checks the result against NumPy.
"""

from __future__ import annotations

import os
import time
from typing import NewType, TypeVar

import numpy as np

import kerneldsl as kd
from kerneldsl.jit.build import Build

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


def run(device: int | str) -> None:
    n = 1 << 20
    rng = np.random.default_rng()
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    expected = 2.0 * x + y

    with kd.Session(device=device) as s:
        name = s.gpu.name
        borrowed = y.copy()
        # numpy in: copy in, launch, copy back within the call (on the stream's session)
        saxpy(borrowed, x, np.float32(2.0), stream=s.stream)
        np.testing.assert_allclose(borrowed, expected, rtol=1e-6)
        print(f"numpy borrowing path on {name}: result matches numpy")

        dy, dx = s.to_device(y), s.to_device(x)  # persistent path: upload once, launch many, download once
        launches = 1000 if device != "cpu" else 20
        start = time.perf_counter()
        for _ in range(launches):
            saxpy(dy, dx, np.float32(2.0))
        s.synchronize()
        elapsed = time.perf_counter() - start
        result = dy.to_host()
    np.testing.assert_allclose(result, y + launches * 2.0 * x, rtol=1e-3, atol=1e-2)
    print(f"session path on {name}: {launches} launches in {elapsed * 1e3:.1f} ms, result matches numpy")


def main() -> None:
    has_gpu = kd.is_available("cuda")
    arch = None if has_gpu else os.environ.get("KERNELDSL_ARCH", "sm_90")
    compile_specializations(arch or kd.resolve_arch())
    if not has_gpu:
        print("no CUDA GPU on this machine: running on the CPU device (the same CUDA C++, compiled for the host)")
    run(0 if has_gpu else "cpu")


if __name__ == "__main__":
    main()
