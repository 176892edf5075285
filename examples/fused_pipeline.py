"""Array ops, one fused kernel for a chain of them, and a reduction at the end of the chain.

Without a GPU this prints the CUDA source the fused chain compiles to and skips the launches.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.runtime import driver


@kd.fuse
def chain(x: Any, y: Any) -> Any:  # traced: x and y are kerneldsl tracers while the kernel is built
    t = ((x * 2 + y) * x - 3) * 0.5
    return kd.ops.square(kd.ops.sin(t) + y)


@kd.fuse
def energy(x: Any, y: Any) -> Any:
    return kd.ops.sum(kd.ops.square(x - y))


def main() -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal(1 << 20, dtype=np.float32)
    y = rng.standard_normal(1 << 20, dtype=np.float32)
    if not (driver.driver_available() and driver.device_count() > 0):
        build = chain.inspect(x, y, arch=os.environ.get("KERNELDSL_ARCH", "sm_90"))
        print(build.cuda_source)
        print("no CUDA driver or device on this machine: compiled the fused chain, skipped the launch")
        return
    with kd.Session() as s:
        dx, dy = s.to_device(x), s.to_device(y)
        fused = chain(dx, dy).to_host()  # one kernel, no temporaries
        t = ((x * 2 + y) * x - 3) * np.float32(0.5)
        np.testing.assert_allclose(fused, np.square(np.sin(t) + y), rtol=1e-5, atol=1e-5)
        total = float(energy(dx, dy).to_host())  # one map-and-reduce kernel
        np.testing.assert_allclose(total, np.sum(np.square(x - y), dtype=np.float64), rtol=1e-4)
        print(f"fused chain matches numpy; sum((x - y)^2) = {total:.3f}")


if __name__ == "__main__":
    main()
