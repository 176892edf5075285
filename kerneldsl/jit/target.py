"""Which architecture to compile for: explicit ``arch=``, else the device's, else ``KERNELDSL_ARCH``."""

from __future__ import annotations

import os

from ..errors import InvalidArchError, NoDeviceError
from ..runtime import driver
from ..runtime.selection import CPU, CPU_ARCH, forced_device
from .compiler import normalize_arch

ARCH_ENV = "KERNELDSL_ARCH"


def device_arch(ordinal: int) -> str:
    """The device's own arch, ``sm_XY``: no NVRTC is loaded to choose it, so a cache hit needs none.
    A compile for an arch this NVRTC cannot target names the one to use (``compiler.require_supported``)."""
    major, minor = driver.compute_capability(ordinal)
    return f"sm_{major}{minor}"


def resolve_arch(arch: str | None = None, device: int = 0) -> str:
    """``arch`` if given; else the device's when a driver and device exist (the CPU device's
    emulated arch when ``$KERNELDSL_DEVICE=cpu``); else $KERNELDSL_ARCH."""
    if arch is not None:
        return normalize_arch(arch)
    if forced_device() == CPU:
        return CPU_ARCH
    if driver.driver_available() and driver.device_count() > device:
        return device_arch(device)
    env = os.environ.get(ARCH_ENV)
    if env:
        try:
            return normalize_arch(env)
        except InvalidArchError as exc:
            raise InvalidArchError(f"{ARCH_ENV}={env!r}: {exc}") from None
    raise NoDeviceError(
        f"no CUDA device to take the target arch from: pass arch='sm_90' (or another) or set {ARCH_ENV}=sm_90"
    )
