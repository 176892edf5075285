"""A trap in a kernel fails its launch on the CPU device, as a GPU fails a launch, instead of ending
the Python process: an integer division by zero (or of the most negative value by -1, whose result
a GPU leaves unspecified), an access to unmapped memory (a GPU's illegal address), a thread's stack
overflowing, an illegal instruction (``__builtin_trap``). The error names the kernel and, where its
threads run as fibers, the block and thread; the session runs the next launch. A signal that is not
a kernel's still reaches the action installed before the runtime's."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import KernelFaultError


def divide(barrier: bool) -> kd.Kernel:
    """``out = a / b`` a thread an element (between barriers: its threads run as fibers)."""
    sync = "__syncthreads();" if barrier else ""

    @kd.kernel(grid=kd.cdiv("n", 64), block=64)
    def quotient(out: kd.Out[kd.int32, "n"], a: kd.In[kd.int32, "n"], b: kd.In[kd.int32, "n"]) -> str:
        return f"""
        index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
        int q = 0;
        {sync}
        if (i < n) q = a[i] / b[i];
        {sync}
        if (i < n) out[i] = q;
        """

    return quotient


def operands(cpu: Any, divisor_at_70: int, dividend_at_70: int = 7) -> tuple[Any, Any, Any]:
    a = np.full(160, 7, np.int32)
    b = np.full(160, 2, np.int32)
    a[70], b[70] = dividend_at_70, divisor_at_70
    return cpu.empty(160, np.int32), cpu.to_device(a), cpu.to_device(b)


@pytest.mark.parametrize(
    ("dividend", "divisor"), [(7, 0), (np.iinfo(np.int32).min, -1)], ids=["by zero", "most negative by -1"]
)
def test_a_trapping_division_fails_the_launch_naming_the_kernel(cpu: Any, dividend: int, divisor: int) -> None:
    with pytest.raises(KernelFaultError, match=r"kernel 'kd_quotient': integer division by zero, or of the most"):
        divide(barrier=False)(*operands(cpu, divisor, dividend))


def test_a_trapping_division_among_fibers_names_the_block_and_thread(cpu: Any) -> None:
    with pytest.raises(KernelFaultError, match=r"block \(1,0,0\) thread \(6,0,0\): integer division by zero"):
        divide(barrier=True)(*operands(cpu, 0))


@pytest.mark.parametrize("barrier", [False, True], ids=["loop", "fibers"])
def test_the_session_runs_the_next_launch_after_a_trapping_division(cpu: Any, barrier: bool) -> None:
    with pytest.raises(KernelFaultError):
        divide(barrier)(*operands(cpu, 0))
    out, a, b = operands(cpu, 7)
    divide(barrier)(out, a, b)
    np.testing.assert_array_equal(out.to_host()[[0, 70]], [3, 1])


def faulting(body: str, barrier: bool) -> kd.Kernel:
    """A kernel whose thread 70 runs ``body`` (between barriers: its threads run as fibers)."""
    sync = "__syncthreads();" if barrier else ""

    @kd.kernel(grid=kd.cdiv("n", 64), block=64)
    def fault(out: kd.Out[kd.float32, "n"]) -> str:
        return f"""
        struct Deep {{
            static __device__ __attribute__((noinline)) float down(int k, volatile float* above) {{
                volatile float frame[64];
                frame[0] = (float)k;
                return k == 0 ? frame[0] : down(k - 1, frame) + above[0];
            }}
        }};
        index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
        {sync}
        if (i == 70) {{ {body} }}
        {sync}
        if (i < n) out[i] = (float)i;
        """

    return fault


FAULTS = {
    "a null pointer": ("*(volatile float*)nullptr = 1.0f;", r"illegal memory access at address 0x0 "),
    "far past an array": ("out[i + (1LL << 40)] = 1.0f;", r"illegal memory access at address 0x[0-9a-f]+ "),
    "deep recursion": ("volatile float z = 0; out[i] = Deep::down(1 << 20, &z);", r"stack overflow"),
}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("barrier", [False, True], ids=["loop", "fibers"])
def test_a_memory_fault_fails_the_launch_as_a_gpus_illegal_address(cpu: Any, fault: str, barrier: bool) -> None:
    body, message = FAULTS[fault]
    where = r" block \(1,0,0\) thread \(6,0,0\)" if barrier else ""
    with pytest.raises(KernelFaultError, match=rf"ILLEGAL_ADDRESS \(700\): kernel 'kd_fault'{where}: {message}"):
        faulting(body, barrier)(cpu.empty(128, np.float32))
    out, a, b = operands(cpu, 7)
    divide(barrier)(out, a, b)
    np.testing.assert_array_equal(out.to_host()[[0, 70]], [3, 1])


@pytest.mark.parametrize("barrier", [False, True], ids=["loop", "fibers"])
def test_an_illegal_instruction_fails_the_launch_as_a_gpus(cpu: Any, barrier: bool) -> None:
    where = r" block \(1,0,0\) thread \(6,0,0\)" if barrier else ""
    message = rf"ILLEGAL_INSTRUCTION \(715\): kernel 'kd_fault'{where}: illegal instruction"
    with pytest.raises(KernelFaultError, match=message):
        faulting("__builtin_trap();", barrier)(cpu.empty(128, np.float32))


@pytest.mark.parametrize("signal_name", ["SIGFPE", "SIGILL", "SIGSEGV", "SIGBUS"])
def test_a_signal_that_is_not_a_kernels_still_ends_the_process(signal_name: str) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal
        import numpy as np
        import kerneldsl as kd
        with kd.Session(device="cpu") as s:
            kd.ops.add(s.to_device(np.ones(4, np.int32)), 1)  # (the CPU device's runtime is loaded)
        os.kill(os.getpid(), signal.{signal_name})
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300, check=False)
    assert done.returncode == -getattr(signal, signal_name), done.stderr.decode()[-2000:]
