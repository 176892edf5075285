"""Array ops, one fused kernel for a chain of them, and a reduction at the end of the chain.

Runs on the first GPU, else on the CPU device (the same CUDA C++, compiled for the host), and
says what the chain compiled to in one line; ``--source`` prints the generated CUDA as well.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

import kerneldsl as kd


@kd.fuse
def chain(x: Any, y: Any) -> Any:  # traced: x and y are kerneldsl tracers while the kernel is built
    t = ((x * 2 + y) * x - 3) * 0.5
    return kd.ops.square(kd.ops.sin(t) + y)


@kd.fuse
def energy(x: Any, y: Any) -> Any:
    return kd.ops.sum(kd.ops.square(x - y))


def main() -> None:
    parser = argparse.ArgumentParser(description="A chain of array ops fused into one kernel, and a reduction.")
    parser.add_argument("--source", action="store_true", help="print the CUDA source the fused chain compiles to")
    args = parser.parse_args()
    rng = np.random.default_rng()
    x = rng.standard_normal(1 << 20, dtype=np.float32)
    y = rng.standard_normal(1 << 20, dtype=np.float32)
    build = chain.inspect(x, y, arch=None if kd.is_available("cuda") else os.environ.get("KERNELDSL_ARCH", "sm_90"))
    lines = len(build.cuda_source.splitlines())
    print(f"the chain of 8 array ops is one kernel, {build.generated.entry}: {lines} lines of CUDA (--source shows)")
    if args.source:
        print(build.cuda_source)
    device = kd.devices()[0]  # the first GPU, else the CPU device
    with kd.Session(device=device) as s:
        dx, dy = s.to_device(x), s.to_device(y)
        fused = chain(dx, dy).to_host()  # one kernel, no temporaries
        t = ((x * 2 + y) * x - 3) * np.float32(0.5)
        np.testing.assert_allclose(fused, np.square(np.sin(t) + y), rtol=1e-5, atol=1e-5)
        total = float(energy(dx, dy).to_host())  # one map-and-reduce kernel
        np.testing.assert_allclose(total, np.sum(np.square(x - y), dtype=np.float64), rtol=1e-4)
        print(f"fused chain on {device} matches numpy; sum((x - y)^2) = {total:.3f}")


if __name__ == "__main__":
    main()
