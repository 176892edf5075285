"""An integer division that traps on the host (by zero, or of the most negative value by -1) fails
the launch on the CPU device, naming the kernel and, where its threads run as fibers, the block and
thread; the process and the session go on. A GPU gives such a division an unspecified result
instead, so a CUDA kernel that divides by zero never ends the Python process that runs it here. A
SIGFPE that is not a kernel's still reaches the action installed before the runtime's."""

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


def test_a_sigfpe_outside_a_kernel_still_ends_the_process() -> None:
    script = textwrap.dedent(
        """
        import os, signal
        import numpy as np
        import kerneldsl as kd
        with kd.Session(device="cpu") as s:
            kd.ops.add(s.to_device(np.ones(4, np.int32)), 1)  # (the CPU device's runtime is loaded)
        os.kill(os.getpid(), signal.SIGFPE)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300, check=False)
    assert done.returncode == -signal.SIGFPE, done.stderr.decode()[-2000:]
