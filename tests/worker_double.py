"""A Dask worker plugin that installs the driver double (``driver_double.FakeDriver``) in a worker
process, so the CPU tests run ``kerneldsl.distributed`` workers that launch. Register it before
``kd.distributed.attach``: plugins run in the order they were registered, on restarts too. The
workers import it (and ``driver_double``) from ``tests/`` on their ``PYTHONPATH``."""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin


class UseDriverDouble(WorkerPlugin):  # type: ignore[misc]
    name = "kerneldsl-test-driver-double"

    def setup(self, worker: Any) -> None:
        from kerneldsl.runtime import set_driver

        set_driver(_scaling_driver())


def _scaling_driver() -> Any:
    """A driver double whose launches of ``test_distributed.scale`` (float32) really scale the
    fake device memory, so a test sees whether, and in which order, a worker ran them."""
    from driver_double import FakeDriver

    class ScalingDriver(FakeDriver):
        def __init__(self) -> None:
            super().__init__()
            self.names: dict[int, bytes] = {}

        def cuModuleGetFunction(self, module: int, name: bytes) -> tuple:
            result = super().cuModuleGetFunction(module, name)
            if not result[0]:
                self.names[int(result[1])] = name
            return result

        def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # type: ignore[no-untyped-def]
            result = super().cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)
            if not result[0] and self.names.get(int(f)) == b"kd_scale":
                slots = (ctypes.c_void_p * 3).from_address(params)  # y, a, n
                (y_ptr,) = struct.unpack("<Q", ctypes.string_at(slots[0], 8))
                (a,) = struct.unpack("<f", ctypes.string_at(slots[1], 4))
                (n,) = struct.unpack("<i", ctypes.string_at(slots[2], 4))
                buf, offset = self._locate(y_ptr)
                y = np.frombuffer(buf, np.float32, n, offset)
                buf[offset : offset + 4 * n] = (y * np.float32(a)).astype(np.float32).tobytes()
            return result

    return ScalingDriver()


def make_sticky() -> None:
    """Run on a worker: every later driver call fails as after an illegal address."""
    from kerneldsl.runtime import driver

    driver.api().sticky = 700  # CUDA_ERROR_ILLEGAL_ADDRESS


def launches() -> int:
    """Run on a worker: how many kernels its driver double launched."""
    from kerneldsl.runtime import driver

    return len(driver.api().launches)


def when_open(gate: str, value: Any) -> Any:
    """Run on a worker: return ``value`` once the file ``gate`` exists (the test creates it once it
    checked what must hold while this call runs: no sleep that a busy machine outlasts)."""
    import os
    import time

    deadline = time.monotonic() + 120
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gate} was never opened")
        time.sleep(0.01)
    return value


def cancelled_calls(dask_worker: Any) -> int:
    """``client.run(cancelled_calls)``: how many cancelled calls the worker's actors have yet to skip."""
    from kerneldsl.distributed import GPUActor

    return sum(len(a._cancelled) for a in dask_worker.state.actors.values() if isinstance(a, GPUActor))


def exit_process() -> None:
    """Run on a worker: die as a segfault or the OOM killer would (no cleanup)."""
    import os

    os._exit(1)


def failed_records(dask_worker: Any) -> int:
    """``client.run(failed_records)``: how many failed calls' errors the worker's actors keep."""
    from kerneldsl.distributed import GPUActor

    return sum(len(a._failed) for a in dask_worker.state.actors.values() if isinstance(a, GPUActor))


def ipc_state() -> dict[str, int]:
    """Run on a worker: its driver double's CUDA IPC calls so far, and what is still held (exported
    cuMemAlloc copies, mappings opened from other processes)."""
    from kerneldsl.runtime import driver

    d = driver.api()
    return {
        "exports": d.count("cuIpcGetMemHandle"),
        "opens": d.count("cuIpcOpenMemHandle"),
        "held": len(d.shared),
        "mapped": len(d.opened),
    }
