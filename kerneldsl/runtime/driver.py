"""The one door to the CUDA driver API, and the map from CUresult codes to exceptions.

Everything in ``kerneldsl.runtime`` reaches ``cuda.bindings.driver`` through :func:`api`, so a
test can swap in a double with :func:`use_driver` and no GPU. Importing this module touches
nothing: the bindings are imported and ``cuInit`` runs on first use.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import (
    CudaError,
    DriverNotFoundError,
    ForkedProcessError,
    LaunchError,
    NoDeviceError,
    OutOfMemoryError,
    StickyCudaError,
)

# CUresult values from cuda.h (a stable ABI); a CPU test checks them against the bindings.
SUCCESS = 0
ERROR_INVALID_VALUE = 1
ERROR_OUT_OF_MEMORY = 2
ERROR_NO_DEVICE = 100
ERROR_INVALID_CONTEXT = 201
ERROR_INVALID_DEVICE = 101
ERROR_NOT_READY = 600

# Errors that leave the context unusable: every later call in the process fails the same way.
STICKY_ERRORS = frozenset(
    {
        700,  # ILLEGAL_ADDRESS
        702,  # LAUNCH_TIMEOUT
        710,  # ASSERT
        714,  # HARDWARE_STACK_ERROR
        715,  # ILLEGAL_INSTRUCTION
        716,  # MISALIGNED_ADDRESS
        717,  # INVALID_ADDRESS_SPACE
        718,  # INVALID_PC
        719,  # LAUNCH_FAILED
    }
)

_MISSING_DRIVER = (
    "the CUDA driver library (libcuda.so.1 / nvcuda.dll) was not found: install the NVIDIA "
    "display driver for your GPU (it ships libcuda); in a container, run it with the NVIDIA "
    "container toolkit (e.g. docker run --gpus all)"
)

_driver: Any = None
_init_lock = threading.Lock()
_init_pid: int | None = None


def _renew_lock_in_child() -> None:
    global _init_lock
    _init_lock = threading.Lock()  # a parent thread may have held it at fork time


os.register_at_fork(after_in_child=_renew_lock_in_child)


def api() -> Any:
    """The driver module in use (``cuda.bindings.driver`` unless a test swapped it)."""
    global _driver
    if _driver is None:
        try:
            from cuda.bindings import driver as bindings
        except ImportError as exc:
            raise DriverNotFoundError(
                f"cuda-bindings is not importable ({exc}): pip install 'cuda-bindings>=13,<14'"
            ) from exc
        _driver = bindings
    return _driver


def set_driver(obj: Any) -> Any:
    """Route every later driver call to ``obj`` (``None``: the real bindings); return the old one."""
    global _driver, _init_pid
    with _init_lock:
        previous, _driver, _init_pid = _driver, obj, None
    return previous


@contextlib.contextmanager
def use_driver(obj: Any) -> Iterator[Any]:
    """Use ``obj`` as the driver inside the block (tests); ``cuInit`` runs again on it."""
    previous = set_driver(obj)
    try:
        yield obj
    finally:
        set_driver(previous)


def ensure_init() -> Any:
    """Run ``cuInit`` once per process and return the driver module.

    A child forked after the parent initialized CUDA cannot use it: say so instead of
    letting the driver fail in some obscure way.
    """
    global _init_pid
    pid = os.getpid()
    if _init_pid == pid:
        return _driver
    with _init_lock:
        if _init_pid is not None and _init_pid != pid:
            raise ForkedProcessError(
                "CUDA was initialized in the parent process before fork(); a forked child "
                "cannot use it. Use the 'spawn' or 'forkserver' multiprocessing start method."
            )
        if _init_pid is None:
            d = api()
            result = _call_missing_aware(d.cuInit, 0)
            if result[0] == ERROR_NO_DEVICE:
                raise NoDeviceError("the CUDA driver found no CUDA-capable device")
            check("cuInit", result)
            _init_pid = pid
    return _driver


def _call_missing_aware(fn: Any, *args: Any) -> tuple[Any, ...]:
    """Call ``fn``; a driver library that cannot be loaded becomes DriverNotFoundError."""
    try:
        result: tuple[Any, ...] = fn(*args)
        return result
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "LibNotFound" not in type(exc).__name__:
            raise
        raise DriverNotFoundError(f"{_MISSING_DRIVER} ({exc})") from exc


def error_name(code: int) -> str:
    """``cuGetErrorName`` of ``code``, falling back to the enum name or the number."""
    d = api()
    try:
        err, name = d.cuGetErrorName(d.CUresult(code))
        if not err and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # naming an error must never hide the error itself
        pass
    try:
        enum_name: str = d.CUresult(code).name
        return enum_name
    except Exception:
        return f"CUDA_ERROR_{code}"


def error(api_name: str, code: int, *, requested: int | None = None, launch: bool = False) -> CudaError:
    """The exception for a failed call: OOM, sticky, launch refusal or plain CudaError."""
    code = int(code)
    name = error_name(code)
    if code in STICKY_ERRORS:
        return StickyCudaError(code, name, api_name)
    if code == ERROR_OUT_OF_MEMORY and requested is not None:
        return OutOfMemoryError(code, name, api_name, requested)
    if launch:
        return LaunchError(code, name, api_name)
    return CudaError(code, name, api_name)


def check(api_name: str, result: tuple[Any, ...], *, requested: int | None = None) -> Any:
    """Raise for a non-success ``(CUresult, *values)`` tuple; else return the value(s).

    ``requested`` is the allocation size when ``api_name`` allocates, so an out-of-memory
    error can say how much was asked for.
    """
    if result[0]:
        raise error(api_name, result[0], requested=requested)
    n = len(result)
    return None if n == 1 else result[1] if n == 2 else result[1:]


def driver_available() -> bool:
    """True when a driver loads and at least one device is visible; never raises."""
    try:
        return device_count() > 0
    except Exception:
        return False


def device_count() -> int:
    """Number of visible CUDA devices (0 when the driver reports none)."""
    try:
        d = ensure_init()
    except NoDeviceError:
        return 0
    return int(check("cuDeviceGetCount", d.cuDeviceGetCount()))


def driver_version() -> tuple[int, int]:
    """The driver's CUDA version as ``(major, minor)``, e.g. ``(13, 0)``."""
    v = int(check("cuDriverGetVersion", api().cuDriverGetVersion()))
    return v // 1000, (v % 1000) // 10


def device(ordinal: int) -> Any:
    """The ``CUdevice`` for ``ordinal``; NoDeviceError if there is no such device."""
    d = ensure_init()
    count = device_count()
    if not 0 <= ordinal < count:
        raise NoDeviceError(f"no CUDA device {ordinal}: {count} device(s) visible")
    return check("cuDeviceGet", d.cuDeviceGet(ordinal))


def device_name(ordinal: int) -> str:
    """The marketing name of device ``ordinal``, e.g. ``'NVIDIA H200'``."""
    raw = check("cuDeviceGetName", api().cuDeviceGetName(256, device(ordinal)))
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def pci_bus_id(ordinal: int) -> str:
    """Where device ``ordinal`` sits, e.g. ``'0000:1B:00.0'``: the same GPU in every process,
    whatever ``CUDA_VISIBLE_DEVICES`` numbers it there."""
    raw = check("cuDeviceGetPCIBusId", api().cuDeviceGetPCIBusId(32, device(ordinal)))
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def compute_capability(ordinal: int) -> tuple[int, int]:
    """``(major, minor)`` of device ``ordinal``; pick the NVRTC arch ``sm_{major}{minor}`` from it."""
    d = api()
    dev = device(ordinal)
    attr = d.CUdevice_attribute
    major = check(
        "cuDeviceGetAttribute", d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    )
    minor = check(
        "cuDeviceGetAttribute", d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    )
    return int(major), int(minor)


def entry_point(name: str, bindings: Any = None) -> int:
    """The address of driver function ``name`` (e.g. ``cuLaunchKernel``) in ``bindings`` (default:
    the driver in use; a session passes its own), for the C launch path; 0 when it offers none."""
    d = api() if bindings is None else bindings
    version = int(check("cuDriverGetVersion", d.cuDriverGetVersion()))
    flags = d.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    result = d.cuGetProcAddress(name.encode(), version, flags)
    if result[0] or not result[1]:
        return 0
    return int(result[1])
