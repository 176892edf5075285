"""``kerneldsl compile`` and ``kerneldsl tune``: a module's declared kernels compiled, or tuned,
ahead of time into the disk cache. Both find the kernels by importing the target, which runs its
code."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import KernelDSLError, NoDeviceError
from ..jit.compiler import normalize_arch
from ..jit.target import ARCH_ENV, resolve_arch
from ..launch.dispatch import Kernel
from ..progress import Progress
from .formatting import table


def cmd_compile(args: argparse.Namespace) -> int:
    """Every declared precompile binding of every module-level kernel, for every arch, into the cache.

    One ``Kernel.compile`` call a line, so each line can say how long its build took.
    """
    archs = _archs(args.arch)
    module = import_target(args.target)
    kernels = module_kernels(module)
    if not kernels:
        raise KernelDSLError(f"{args.target} defines no kerneldsl kernels at module level")
    jobs, skipped = [], []
    for name, k in kernels:
        reason = skip_reason(k)
        if reason:
            skipped.append(f"{name}: skipped: {reason}")
            continue
        jobs += [(name, k, arch, bindings) for arch in archs for bindings in k.precompile or ({},)]
    progress = Progress(len(jobs), sys.stderr)
    rows = []
    for name, k, arch, bindings in jobs:
        progress.show(f"{name} {_spelled(bindings)} {arch}")
        rows.append(_compile_one(name, k, arch, args.output, bindings))
    progress.close()
    if rows:
        print(table(("KERNEL", "BINDINGS", "ARCH", "OUTPUT", "ORIGIN", "TIME", "REGISTERS"), rows))
    for line in skipped:
        print(line)
    return 0


def _spelled(bindings: dict[str, Any]) -> str:
    return ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in bindings.items()) or "-"


def _compile_one(name: str, k: Kernel, arch: str, output: str, bindings: dict[str, Any]) -> tuple[str, ...]:
    start = time.perf_counter()
    b = k.compile(arch=arch, output=output, **bindings)
    ms = (time.perf_counter() - start) * 1e3
    regs = "-" if b.registers is None else f"{b.registers} regs"
    return (name, _bindings(b.specialization), arch, output, b.origin, f"{ms:.1f} ms", regs)


def _archs(spelled: str | None) -> list[str]:
    """``sm_80,sm_90`` checked up front, so a typo fails before anything is compiled."""
    if spelled is None:
        try:
            return [resolve_arch()]
        except NoDeviceError:
            raise NoDeviceError(
                f"no CUDA device to take the target arch from: pass --arch sm_90 (or another) or set {ARCH_ENV}"
            ) from None
    return list(dict.fromkeys(normalize_arch(a) for a in spelled.split(",")))


def import_target(target: str) -> ModuleType:
    """A module by file path (``kernels.py``) or by dotted name importable from the current directory."""
    path = Path(target)
    if path.suffix == ".py" or os.sep in target:
        return _import_file(path)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and f"{target}.".startswith(f"{exc.name}."):  # the target itself, not its imports
            raise KernelDSLError(f"cannot import {target!r}: {exc} (pass a .py file or a dotted module name)") from None
        raise


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise KernelDSLError(f"no such file: {path}")
    path = path.resolve()
    # A private name: a file called json.py must not replace the json module.
    spec = importlib.util.spec_from_file_location(f"_kerneldsl_target_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise KernelDSLError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    if str(path.parent) not in sys.path:  # as ``python file.py`` would: sibling imports work
        sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def module_kernels(module: ModuleType) -> list[tuple[str, Kernel]]:
    seen: set[int] = set()
    found = []
    for name, value in vars(module).items():
        if isinstance(value, Kernel) and id(value) not in seen:
            seen.add(id(value))
            found.append((name, value))
    return found


def skip_reason(k: Kernel) -> str | None:
    """Why a kernel cannot be compiled without call arguments, or None if it can."""
    sig = k.signature
    if sig.specialize:
        return f"specializes shape symbols {', '.join(sig.specialize)}: only a call can fix their extents"
    if sig.dtype_vars and not k.precompile:
        return f"dtype variable(s) {', '.join(sig.dtype_vars)} but no precompile=[{{...}}] bindings declared"
    return None


def _bindings(spec: Any) -> str:
    parts = [f"{var}={name}" for var, name in spec.type_vars]
    parts += [f"{name}={value!r}" for name, value in spec.consts]
    return ",".join(parts) or "-"


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune every module-level ``@kd.autotune`` kernel for its ``tune_for=`` entries, on this
    GPU, into the disk cache: one line per key with the winner and whether it was measured now."""
    from ..tune import Autotuned

    module = import_target(args.target)
    tuned = [(name, v) for name, v in vars(module).items() if isinstance(v, Autotuned)]
    if not tuned:
        raise KernelDSLError(f"{args.target} defines no @kd.autotune kernels at module level")
    rows, skipped = [], []
    for name, t in tuned:
        if not t.tune_for:
            skipped.append(f"{name}: skipped: no tune_for=[...] entries declared")
            continue
        start = time.perf_counter()
        for choice in t.tune_ahead():
            took = f"{time.perf_counter() - start:.2f} s"
            rows.append((name, choice.key, choice.config.label, f"{choice.ms:.4f}", choice.source, took))
            start = time.perf_counter()
    if rows:
        print(table(("KERNEL", "KEY", "WINNER", "MS", "TIMINGS", "TIME"), rows))
    for line in skipped:
        print(line)
    return 0
