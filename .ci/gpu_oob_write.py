"""A kernel that writes one element past the end of its array: the classic ``i <= n`` bug.

On a GPU, ``.ci/gpu-truth`` runs it under NVIDIA's memcheck:

    compute-sanitizer --tool memcheck python3 .ci/gpu_oob_write.py

and counts the report's lines that name this file: the kernels are built with ``-lineinfo`` and
their ``#line`` directives name this file, so memcheck's "Invalid __global__ write of size 4"
says ``at ...(gpu_oob_write.py:LINE)``, LINE being the body's ``y[i] = ...`` line (printed
below). The GPU itself does not fault on so small an overrun: without the sanitizer the script
finishes and prints the same lines.

On the CPU device (no GPU, or ``KERNELDSL_DEVICE=cpu``) the script runs too: the stray 4 bytes
land in the slack the host allocator keeps after a 4,000-byte block (its usable size is larger
than asked, by 8 bytes for this size), so nothing is noticed; the CPU device's bounds checks
(issue 42, ``checks="bounds"``) are what refuse it there, naming the same line.
"""

import inspect
from typing import NewType

import numpy as np

import kerneldsl as kd

N = 1000  # a multiple of 4 floats: see the docstring on the CPU device's allocator slack
n = NewType("n", int)  # the array's extent, bound at the call


@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def off_by_one(y: kd.Out[kd.float32, n]) -> str:
    return """
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i <= n) {  // the bug: i == n is one past the end
        y[i] = 1.0f;
    }
    """


def bad_line() -> int:
    """The file line of the body's out-of-bounds store, which the sanitizer's report names."""
    lines, first = inspect.getsourcelines(off_by_one.body)
    return first + next(k for k, text in enumerate(lines) if "y[i] = " + "1.0f;" in text)


def main() -> None:
    session = kd.default_session()
    y = kd.zeros(N, np.float32)
    off_by_one(y)
    session.synchronize()
    print(f"device: {session.device}")
    print(f"the out-of-bounds store is at {__file__}:{bad_line()}")
    print(f"y[:{N}] all written: {bool((y.to_host() == 1.0).all())}")


if __name__ == "__main__":
    main()
