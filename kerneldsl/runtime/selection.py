"""Which device a session runs on: a GPU ordinal, or ``"cpu"``, the CPU device.

The rule, in order: a device the caller names; else ``$KERNELDSL_DEVICE`` (``cpu``, ``cuda``,
``cuda:N`` or ``N``), which holds for the whole process and is inherited by subprocesses and
Dask workers; else GPU 0 when a driver sees one; else the CPU device, with a one-time notice.
With ``KERNELDSL_DEVICE=cpu`` GPU ordinal 0 names the CPU device too, so code written for a GPU
runs unchanged on it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .. import logs
from ..errors import NoDeviceError
from . import driver

CPU = "cpu"
CPU_ARCH = "sm_90"  # the arch whose rendering decisions the CPU device runs: the H200's
DEVICE_ENV = "KERNELDSL_DEVICE"
PLAN_ENV = "KERNELDSL_CPU_PLAN"  # "gpu": the CPU device runs a GPU's plans (debugging their fidelity)
DeviceSpec = int | str

log = logs.get("runtime.selection")
_noticed = threading.Event()


def gpu_plans() -> bool:
    """Whether ``KERNELDSL_CPU_PLAN=gpu`` asks the CPU device to run a GPU's plans (an H200's SM
    count, the GPU's stages and strategies) instead of the host's."""
    return os.environ.get(PLAN_ENV, "").strip().lower() == "gpu"


def host_plans(session: Any) -> bool:
    """Whether launches on ``session``'s device take the host's plans: on the CPU device, unless
    ``KERNELDSL_CPU_PLAN=gpu`` asks for a GPU's (``Decisions.host_plan`` names a host plan)."""
    return bool(session.gpu.host) and not gpu_plans()


def _parse(text: str, where: str) -> DeviceSpec:
    value = text.strip().lower()
    if value == CPU:
        return CPU
    if value in ("cuda", "gpu"):
        return 0
    number = value.removeprefix("cuda:").removeprefix("gpu:")
    if number.isdigit():
        return int(number)
    raise NoDeviceError(f"{where}={text!r} names no device: use 'cpu', 'cuda', 'cuda:N' or a GPU ordinal N")


def forced_device() -> DeviceSpec | None:
    """What ``$KERNELDSL_DEVICE`` asks for, or None when it is unset."""
    text = os.environ.get(DEVICE_ENV, "").strip()
    return _parse(text, DEVICE_ENV) if text else None


def resolve_device(device: DeviceSpec | None = None) -> DeviceSpec:
    """The device a session opened with ``device`` runs on: an int GPU ordinal or ``"cpu"``."""
    forced = forced_device()
    if device is not None:
        if type(device) is str:
            device = _parse(device, "device")
        elif type(device) is not int:
            raise NoDeviceError(f"device={device!r} must be a GPU ordinal (int) or 'cpu'")
        if forced == CPU and device == 0:
            return CPU
        return device
    if forced is not None:
        return forced
    if driver.driver_available() or not is_available(CPU):
        return 0  # without either, opening GPU 0 raises the error that says what is missing
    if not _noticed.is_set():
        _noticed.set()
        log.warning("no CUDA GPU found: kerneldsl runs kernels on the CPU device (set %s=cpu to silence)", DEVICE_ENV)
    return CPU


def devices() -> list[str]:
    """The devices this process can open sessions on: ``cuda:N`` for each visible GPU, then ``cpu``."""
    gpus = driver.device_count() if driver.driver_available() else 0
    return [f"cuda:{i}" for i in range(gpus)] + [CPU]


def is_available(device: DeviceSpec = "cuda") -> bool:
    """Whether ``device`` can be opened here: ``"cuda"`` (any GPU), ``"cuda:N"``/N, or ``"cpu"``
    (a host C++ compiler is found). Never raises."""
    try:
        wanted = _parse(device, "device") if isinstance(device, str) else device
        if wanted == CPU:
            from .host_toolchain import host_compiler, shim_dir

            host_compiler()
            return (shim_dir() / "kd_host.h").is_file() and (shim_dir() / "kd_host_runtime.cpp").is_file()
        return driver.driver_available() and 0 <= int(wanted) < driver.device_count()
    except Exception:
        return False
