"""A Dask worker plugin that installs the driver double (``driver_double.FakeDriver``) in a worker
process, so the CPU tests run ``kerneldsl.distributed`` workers that launch. Register it before
``kd.distributed.attach``: plugins run in the order they were registered, on restarts too. The
workers import it (and ``driver_double``) from ``tests/`` on their ``PYTHONPATH``."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


class UseDriverDouble(WorkerPlugin):  # type: ignore[misc]
    name = "kerneldsl-test-driver-double"

    def setup(self, worker: Any) -> None:
        from driver_double import FakeDriver

        from kerneldsl.runtime import set_driver

        set_driver(FakeDriver())


def make_sticky() -> None:
    """Run on a worker: every later driver call fails as after an illegal address."""
    from kerneldsl.runtime import driver

    driver.api().sticky = 700  # CUDA_ERROR_ILLEGAL_ADDRESS


def launches() -> int:
    """Run on a worker: how many kernels its driver double launched."""
    from kerneldsl.runtime import driver

    return len(driver.api().launches)


def sleep_then(seconds: float, value: Any) -> Any:
    import time

    time.sleep(seconds)
    return value


def exit_process() -> None:
    """Run on a worker: die as a segfault or the OOM killer would (no cleanup)."""
    import os

    os._exit(1)
