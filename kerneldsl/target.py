"""Which architecture to compile for: explicit ``arch=``, else the device's, else ``KERNELDSL_ARCH``."""

from __future__ import annotations

import os

from .compiler import normalize_arch, supported_archs
from .errors import InvalidArchError, NoDeviceError
from .runtime import driver

ARCH_ENV = "KERNELDSL_ARCH"


def arch_for_capability(major: int, minor: int) -> str:
    """The newest arch NVRTC supports that a device of this compute capability runs as cubin."""
    wanted = major * 10 + minor
    usable = [a for a in supported_archs() if a // 10 == major and a <= wanted]
    if not usable:
        raise InvalidArchError(f"this NVRTC cannot build cubins for compute capability {major}.{minor}")
    return f"sm_{max(usable)}"


def device_arch(ordinal: int) -> str:
    """The device's own arch, ``sm_XY``: no NVRTC is loaded to choose it, so a cache hit needs none.
    A compile for an arch this NVRTC cannot target says which one it can (``arch_for_capability``)."""
    major, minor = driver.compute_capability(ordinal)
    return f"sm_{major}{minor}"


def resolve_arch(arch: str | None = None, device: int = 0) -> str:
    """``arch`` if given; else the device's when a driver and device exist; else $KERNELDSL_ARCH."""
    if arch is not None:
        return normalize_arch(arch)
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
