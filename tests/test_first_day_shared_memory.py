"""Too much static shared memory, explained: the compiler's hexadecimal log becomes the sizes in
decimal, the 48 KiB limit and the way past it (``extern __shared__`` and ``shared=``), once; the
CPU device refuses such a kernel with the same words, so what runs there compiles for a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import KernelCompileError
from kerneldsl.jit.compile_hints import compile_error_message, hints
from kerneldsl.runtime.host_image import static_shared_bytes

PTXAS_LOG = """\
ptxas info    : Used 12 registers, used 1 barriers, 80000 bytes smem
ptxas error   : Entry function 'kd_big' uses too much shared data (0x13880 bytes, 0xc000 max)
"""


def shared_kernel(floats: int) -> kd.Kernel:
    """A kernel declaring ``floats`` floats of static shared memory, all of them used."""

    @kd.kernel(grid=1, block=256)
    def staged(y: kd.Out[kd.float32, "n"]) -> str:
        return f"""
        __shared__ float tile[{floats}];
        for (int i = threadIdx.x; i < {floats}; i += blockDim.x) tile[i] = (float)i;
        __syncthreads();
        if (threadIdx.x < n) {y}[threadIdx.x] = tile[{floats} - 1 - threadIdx.x];
        """

    return staged


def test_the_ptxas_shared_memory_error_becomes_decimal_sizes_and_the_way_past_the_limit() -> None:
    (hint,) = hints(PTXAS_LOG)
    assert "80000 bytes (78.1 KiB) of static __shared__ memory" in hint
    assert "at most 49152 bytes (48 KiB) statically" in hint
    assert "extern __shared__" in hint and "shared=" in hint and "227 KiB" in hint


def test_a_log_without_a_recognised_failure_gets_no_hint() -> None:
    assert hints('k.body(1): error: identifier "x" is undefined') == []


def test_an_unmapped_log_is_in_the_message_once() -> None:
    message = compile_error_message("NVRTC", "big[sm_90]", [], PTXAS_LOG)
    assert message.count("uses too much shared data") == 1 and "--- NVRTC log ---" not in message


def test_a_mapped_failure_keeps_the_whole_log_after_the_mapped_lines() -> None:
    message = compile_error_message("NVRTC", "k[sm_90]", ["k.py:3: error: x is undefined"], "k.body(1): error: x")
    assert message.index("k.py:3") < message.index("--- NVRTC log ---\nk.body(1): error: x")


def test_nvrtc_refuses_too_much_static_shared_memory_with_the_hint(isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError) as info:
        shared_kernel(20000).inspect(np.zeros(256, np.float32), arch="sm_90")
    message = str(info.value)
    assert "hint: the kernel declares 80000 bytes (78.1 KiB)" in message
    assert message.count("uses too much shared data") == 1


def test_the_host_image_reports_the_kernels_static_shared_bytes() -> None:
    assert static_shared_bytes(b"not an ELF image", "kd_k") is None


@pytest.mark.gpu
def test_a_call_with_too_much_static_shared_memory_is_refused_with_the_hint(isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError, match=r"80000 bytes \(78.1 KiB\) of static __shared__ memory"):
        shared_kernel(20000)(np.zeros(256, np.float32))


@pytest.mark.gpu
def test_static_shared_memory_of_exactly_48_kib_runs(isolated_cache: Path) -> None:
    y = np.zeros(256, np.float32)
    shared_kernel(12288)(y)
    np.testing.assert_array_equal(y, np.arange(12287, 12287 - 256, -1, dtype=np.float32))


@pytest.mark.gpu
def test_dynamic_shared_memory_past_48_kib_runs_as_the_hint_says(isolated_cache: Path) -> None:
    @kd.kernel(grid=1, block=256, shared=20000 * 4)
    def staged(y: kd.Out[kd.float32, "n"]) -> str:
        return f"""
        extern __shared__ float tile[];
        for (int i = threadIdx.x; i < 20000; i += blockDim.x) tile[i] = (float)i;
        __syncthreads();
        if (threadIdx.x < n) {y}[threadIdx.x] = tile[19999 - threadIdx.x];
        """

    y = np.zeros(256, np.float32)
    staged(y)
    np.testing.assert_array_equal(y, np.arange(19999, 19999 - 256, -1, dtype=np.float32))
