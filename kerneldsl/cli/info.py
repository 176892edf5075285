"""``kerneldsl info``: versions, devices, target archs, the CPU device and the cache, as a table
or as JSON."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from typing import Any

from .. import __version__
from ..errors import DriverNotFoundError, KernelDSLError
from ..jit.build import fingerprint
from ..jit.compiler import nvrtc_version, supported_archs
from ..jit.target import ARCH_ENV, device_arch
from ..launch import fastpath
from ..runtime import driver
from ..runtime.host_toolchain import host_compiler, shim_dir
from .cache import cache_info, cache_line

_PACKAGES = ("cuda-bindings", "cuda-core", "numpy")
_NO_DRIVER = f"no CUDA driver found: kernels can be compiled (set {ARCH_ENV} or pass --arch), not launched on a GPU"


def collect_info() -> dict[str, Any]:
    """Everything ``kerneldsl info`` reports, as plain data (the ``--json`` output)."""
    return {
        "kerneldsl": {"version": __version__, "fingerprint": fingerprint()},
        "nvrtc": ".".join(map(str, nvrtc_version())),
        "packages": {name: _package_version(name) for name in _PACKAGES},
        "supported_archs": [f"sm_{a}" for a in supported_archs()],
        "c_launch_path": fastpath.status(),
        "driver": _driver_info(),
        "cpu_device": _cpu_device_info(),
        "cache": cache_info(),
    }


def _cpu_device_info() -> dict[str, Any]:
    """Whether kernels can run on the CPU device here, and with which host compiler."""
    try:
        compiler = host_compiler(remember=False)
    except KernelDSLError as exc:
        return {"available": False, "compiler": None, "problem": str(exc)}
    shim = (shim_dir() / "kd_host.h").is_file()
    return {"available": shim, "compiler": f"{compiler.version} ({compiler.target})", "problem": None}


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver_info() -> dict[str, Any]:
    """Driver version and devices; ``problem`` says in words why nothing can be launched."""
    info: dict[str, Any] = {"available": False, "version": None, "devices": [], "problem": None}
    try:
        count = driver.device_count()
        info["version"] = ".".join(map(str, driver.driver_version()))
    except DriverNotFoundError:
        info["problem"] = _NO_DRIVER
        return info
    except KernelDSLError as exc:
        info["problem"] = f"the CUDA driver cannot be used ({exc}): kernels can be compiled but not launched"
        return info
    if count == 0:
        info["problem"] = "the CUDA driver sees no device: kernels can be compiled but not launched"
        return info
    info["available"] = True
    info["devices"] = [_device_info(i) for i in range(count)]
    return info


def _device_info(ordinal: int) -> dict[str, Any]:
    major, minor = driver.compute_capability(ordinal)
    try:
        arch: str | None = device_arch(ordinal)
    except KernelDSLError:  # an NVRTC too old or too new for this device
        arch = None
    return {
        "ordinal": ordinal,
        "name": driver.device_name(ordinal),
        "compute_capability": f"{major}.{minor}",
        "arch": arch,
    }


def format_info(info: dict[str, Any]) -> str:
    rows = [
        ("kerneldsl", f"{info['kerneldsl']['version']} (fingerprint {info['kerneldsl']['fingerprint']})"),
        ("NVRTC", info["nvrtc"]),
        *((name, version or "not installed") for name, version in info["packages"].items()),
        ("archs", " ".join(info["supported_archs"])),
        ("C launch path", info["c_launch_path"]),
        *_driver_rows(info["driver"]),
        ("CPU device", _cpu_device_line(info["cpu_device"])),
        ("cache", cache_line(info["cache"])),
    ]
    return "\n".join(f"{label:<14} {value}" for label, value in rows)


def _cpu_device_line(c: dict[str, Any]) -> str:
    if c["compiler"] is None:
        return f"unavailable: {c['problem']}"
    return f"kernels run on the host, compiled by {c['compiler']}" if c["available"] else "unavailable: no shim"


def _driver_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    if not d["available"]:
        return [("driver", d["problem"] if d["version"] is None else f"CUDA {d['version']}; {d['problem']}")]
    rows = [("driver", f"CUDA {d['version']}, {len(d['devices'])} device(s)")]
    for dev in d["devices"]:
        target = f"compiles for {dev['arch']}" if dev["arch"] else "no NVRTC arch can target it"
        summary = f"{dev['name']}, compute capability {dev['compute_capability']}, {target}"
        rows.append((f"device {dev['ordinal']}", summary))
    return rows


def cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0
