"""Local memory a thread on the CPU device: its fiber threads' stacks hold CUDA's 512 KiB a thread
(a kernel with a few hundred KiB of local arrays runs across a barrier), and the host compiler holds
each frame to that limit, so no kernel overflows a stack: one past it is refused before it runs, the
compiler's frame-size error put as the size in decimal, the limit and the ways past it."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import KernelCompileError
from kerneldsl.jit.compile_hints import hints

LOGS = {
    "gcc": "k.cu:9:1: error: the frame size of 560000 bytes is larger than 524288 bytes [-Werror=frame-larger-than=]",
    "clang": "k.cu:9:1: error: stack frame size (560000) exceeds limit (524288) in 'kd_big' [-Wframe-larger-than]",
}


def local_kernel(floats: int, barrier: bool) -> kd.Kernel:
    """A kernel whose threads each fill and sum a local array of ``floats`` floats (around a barrier:
    its threads run as fibers, each on a stack of its own)."""

    @kd.kernel(grid=kd.cdiv("n", 64), block=64)
    def local_sum(out: kd.Out[kd.float32, "n"]) -> str:
        return f"""
        index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
        volatile float buf[{floats}];
        for (int j = 0; j < {floats}; ++j) buf[j] = (float)((i + j) % 7);
        {"__syncthreads();" if barrier else ""}
        float acc = 0.0f;
        for (int j = 0; j < {floats}; ++j) acc += buf[j];
        if (i < n) out[i] = acc;
        """

    return local_sum


@pytest.mark.parametrize("compiler", LOGS)
def test_a_frame_past_the_limit_is_explained_in_decimal_with_the_ways_past_it(compiler: str) -> None:
    (hint,) = hints(LOGS[compiler])
    assert "needs 560000 bytes (546.9 KiB) of local memory" in hint
    assert "CUDA allows 524288 bytes (512 KiB) a thread" in hint
    assert "global memory" in hint and "shared memory" in hint


@pytest.mark.parametrize("barrier", [True, False], ids=["fibers", "loop"])
def test_a_thread_with_400_kib_of_local_memory_runs(cpu: kd.Session, barrier: bool) -> None:
    out = cpu.empty(128, np.float32)
    local_kernel(100_000, barrier)(out)
    want = [sum((i + j) % 7 for j in range(100_000)) for i in (0, 1, 127)]
    np.testing.assert_array_equal(out.to_host()[[0, 1, 127]], np.array(want, np.float32))


@pytest.mark.parametrize("barrier", [True, False], ids=["fibers", "loop"])
def test_a_frame_larger_than_cuda_allows_a_thread_is_refused_with_the_hint(cpu: kd.Session, barrier: bool) -> None:
    out = cpu.empty(128, np.float32)
    with pytest.raises(KernelCompileError, match=r"CUDA allows 524288 bytes \(512 KiB\) a thread"):
        local_kernel(140_000, barrier)(out)
