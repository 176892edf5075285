"""The ``kerneldsl`` command: inspect the installation and the cache, compile ahead of time, benchmark.

Each subcommand is a function from parsed arguments to an exit code: 0 ok, 1 failure, 2 usage
(argparse's own). A kerneldsl error is one ``kerneldsl: error: ...`` line, never a traceback:
it is the user's setup, not a bug, that the message has to explain. Looking never creates
anything: ``info`` and ``cache`` leave a cache directory that does not exist yet alone.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from . import __version__, fastpath
from .bench import BENCHMARKS, plot
from .build import fingerprint
from .cache import DiskCache, default_cache_dir, get_default_cache
from .checks import CHECKS_ENV, REPORT_ENV, parse_checks
from .compiler import OUTPUTS, normalize_arch, nvrtc_version, supported_archs
from .dispatch import Kernel
from .errors import CacheError, DriverNotFoundError, KernelDSLError, NoDeviceError
from .progress import Progress
from .runtime import driver
from .runtime.host_toolchain import ADDRESS_EXIT, address_sanitizer_environment, host_compiler, shim_dir
from .runtime.selection import DEVICE_ENV
from .target import ARCH_ENV, device_arch, resolve_arch

_PACKAGES = ("cuda-bindings", "cuda-core", "numpy")
_NO_DRIVER = f"no CUDA driver found: kernels can be compiled (set {ARCH_ENV} or pass --arch), not launched on a GPU"

# --- info ------------------------------------------------------------------------------------


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
        "cache": _cache_info(),
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


def _cache_info() -> dict[str, Any]:
    configured = default_cache_dir()
    info: dict[str, Any] = {"configured": str(configured), "exists": configured.is_dir()}
    try:
        store = _existing_cache()
        if store is None:
            info.update(directory=None, in_memory=False, entries=0, bytes=0)
            return info
        info.update(
            directory=None if store.in_memory else str(store.directory),
            in_memory=store.in_memory,
            entries=len(store.entries()),
            bytes=store.volume(),
        )
    except CacheError as exc:  # info reports a broken setup instead of failing on it
        info["error"] = str(exc)
    return info


def _existing_cache() -> DiskCache | None:
    """The default cache, or None while its directory does not exist yet but could be made:
    opening it would create the directory, and looking must not."""
    path = default_cache_dir()
    parent = path
    while not parent.exists():
        parent = parent.parent
    if parent != path and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return None
    return get_default_cache()  # present, or unusable: opening says how (degrades to memory)


def format_info(info: dict[str, Any]) -> str:
    rows = [
        ("kerneldsl", f"{info['kerneldsl']['version']} (fingerprint {info['kerneldsl']['fingerprint']})"),
        ("NVRTC", info["nvrtc"]),
        *((name, version or "not installed") for name, version in info["packages"].items()),
        ("archs", " ".join(info["supported_archs"])),
        ("C launch path", info["c_launch_path"]),
        *_driver_rows(info["driver"]),
        ("CPU device", _cpu_device_line(info["cpu_device"])),
        ("cache", _cache_line(info["cache"])),
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


def _cache_line(c: dict[str, Any]) -> str:
    if "error" in c:
        return f"{c['configured']}: unusable: {c['error']}"
    if not c["exists"] and not c["in_memory"]:
        return f"{c['configured']}: does not exist yet (the first compile creates it)"
    where = f"in memory only ({c['configured']} is unusable)" if c["in_memory"] else c["directory"]
    return f"{where}: {c['entries']} entries, {_size(c['bytes'])}"


def cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0


# --- cache -----------------------------------------------------------------------------------


def cmd_cache_info(args: argparse.Namespace) -> int:
    info = _cache_info()
    if "error" in info:
        raise CacheError(info["error"])
    print(json.dumps(info, indent=2) if args.json else _cache_line(info))
    return 0


def cmd_cache_list(args: argparse.Namespace) -> int:
    store = _existing_cache()
    entries = sorted(store.entries(), key=lambda e: e.stored_at) if store else []
    rows: list[dict[str, Any]] = [
        {
            "kernel": e.material.get("kernel"),
            "arch": e.material.get("arch"),
            "output": e.material.get("output"),
            "size": e.size,
            "key": e.key,
            "stored_at": e.stored_at,
            "bindings": e.material.get("bindings"),
            "parameters": _parameters(e.material),
        }
        for e in entries
    ]
    tunings = _tuning_rows(store, entries)
    rows = [r for r in rows if r["output"] != "tuning"]
    if args.json:
        print(json.dumps(rows + tunings, indent=2))
        return 0
    if not rows and not tunings:
        print(f"the cache is empty ({_where(store)})")
    if rows:
        print(
            _table(
                ("KERNEL", "ARCH", "OUTPUT", "SIZE", "KEY", "STORED", "BINDINGS", "PARAMETERS"),
                [
                    (
                        r["kernel"],
                        r["arch"],
                        r["output"],
                        _size(r["size"]),
                        r["key"][:12],
                        _stamp(r["stored_at"]),
                        _entry_bindings(r["bindings"]),
                        r["parameters"],
                    )
                    for r in rows
                ],
            )
        )
    if tunings:
        print(("\n" if rows else "") + "tuning records:")
        print(
            _table(
                ("KERNEL", "DEVICE", "KEY", "WINNER", "MS", "CONFIGS", "STORED"),
                [
                    (
                        t["kernel"],
                        t["device"],
                        t["tuning"]["key"],
                        t["tuning"]["winner"] or "-",
                        "-" if t["tuning"]["winner_ms"] is None else f"{t['tuning']['winner_ms']:.4f}",
                        f"{t['tuning']['measured']} measured, {t['tuning']['skipped']} skipped",
                        _stamp(t["stored_at"]),
                    )
                    for t in tunings
                ],
            )
        )
    return 0


def _tuning_rows(store: DiskCache | None, entries: list[Any]) -> list[dict[str, Any]]:
    """The tuning records (``kerneldsl.tune.records``) among ``entries``, one row per key."""
    from .tune import records

    return records.listed(store, entries) if store is not None else []


def _entry_bindings(bindings: dict[str, Any] | None) -> str:
    """``T=float32 TILE=128 n=1024 32-bit``: the dtypes, constants, specialized extents and index
    width that tell one kernel's entries apart (checked by ``DiskCache.entries``)."""
    if bindings is None:
        return ""
    named = {**bindings["dtypes"], **bindings["constants"], **bindings["extents"]}
    return " ".join([*(f"{name}={value}" for name, value in named.items()), f"{bindings['index_bits']}-bit"])


def _parameters(material: dict[str, Any]) -> str:
    """The kernel's C parameter list from the ABI in the key material: it tells specializations apart."""
    slots = [s for s in material.get("abi", ()) if isinstance(s, list) and len(s) == 2]
    return ", ".join(f"{ctype} {name}" for name, ctype in slots)


def cmd_cache_clear(args: argparse.Namespace) -> int:
    store = _existing_cache()
    removed = store.clear() if store else 0
    print(f"removed {removed} entries ({_where(store)})")
    return 0


def _where(store: DiskCache | None) -> str:
    if store is None:
        return f"{default_cache_dir()} does not exist yet"
    return str(store.directory) if store.directory else "in memory"


# --- compile ---------------------------------------------------------------------------------


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
        print(_table(("KERNEL", "BINDINGS", "ARCH", "OUTPUT", "ORIGIN", "TIME", "REGISTERS"), rows))
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


# --- tune ------------------------------------------------------------------------------------


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune every module-level ``@kd.autotune`` kernel for its ``tune_for=`` entries, on this
    GPU, into the disk cache: one line per key with the winner and whether it was measured now."""
    from .tune import Autotuned

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
        print(_table(("KERNEL", "KEY", "WINNER", "MS", "TIMINGS", "TIME"), rows))
    for line in skipped:
        print(line)
    return 0


# --- bench -----------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    """Run a benchmark once what it needs is known to be here (else one line, exit 2), then plot it.

    The benchmark's own options are parsed here, by a parser its module builds: the ``kerneldsl``
    parser knows only the names, so no other command imports a benchmark (or its baselines).
    """
    name = args.benchmark
    benchmark = BENCHMARKS[name]
    parser = argparse.ArgumentParser(prog=f"kerneldsl bench {name}", description=benchmark.help)
    benchmark.add_arguments(parser)
    parser.add_argument(
        "--plot", metavar="FILE.svg", help="also draw the figures, one bar chart per section (needs matplotlib)"
    )
    args = parser.parse_args(args.options)
    unmet = benchmark.unmet(name) or (plot.unavailable() if args.plot else None)
    if unmet:
        print(f"kerneldsl: error: {unmet}", file=sys.stderr)
        return 2
    report = benchmark.run(args)
    if args.plot:
        plot.save(report, args.plot, f"kerneldsl bench {name}")
        print(f"plotted to {args.plot}", file=sys.stderr)  # stdout may be --json
    return 0


# --- check -----------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """Run SCRIPT on the CPU device with every check on, then print one report per finding: exit 1
    when there were findings, else the script's own exit status."""
    spelled = "bounds,sync,address,undefined" if args.address else "all,undefined"
    checks = parse_checks(f"{spelled}{f',seed={args.seed}' if args.seed else ''}")
    with tempfile.TemporaryDirectory(prefix="kerneldsl-check-") as scratch:
        findings_file = Path(scratch) / "findings.jsonl"
        env = {**os.environ, CHECKS_ENV: checks.spelled(), DEVICE_ENV: "cpu", REPORT_ENV: str(findings_file)}
        if args.address:
            env.update(address_sanitizer_environment())
        status = subprocess.run([sys.executable, args.script, *args.args], env=env, check=False).returncode
        lines = findings_file.read_text(encoding="utf-8").splitlines() if findings_file.exists() else []
    findings = list(dict.fromkeys(lines))  # a finding met twice (a retried call) is reported once
    for number, line in enumerate(findings, 1):
        finding = json.loads(line)
        print(f"finding {number} [{finding['check']}]: {finding['report']}")
    print(f"kerneldsl check: {len(findings) or 'no'} finding{'s' * (len(findings) != 1)} ({checks.spelled()})")
    if args.address and status == ADDRESS_EXIT:
        print("kerneldsl check: AddressSanitizer stopped the script: its report is above")
        return 1
    return 1 if findings else status


# --- formatting ------------------------------------------------------------------------------


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    scaled = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


# --- parser ----------------------------------------------------------------------------------

_TARGET = "dotted module name (looked up in the current directory first) or path to a .py file"
# ``compile`` and ``tune`` find kernels by importing the target: its top-level code runs
_RUNS_TARGET = (
    "MODULE_OR_FILE is imported, which runs its code as you, with your files and your GPU: "
    "pass only code you trust, as you would to python."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kerneldsl", description="Declarative CUDA kernels: tools.")
    parser.add_argument("--version", action="version", version=f"kerneldsl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="machine-readable output")

    _command(commands, "info", cmd_info, "versions, devices, target archs and the cache", parents=[as_json])

    cache = commands.add_parser("cache", help="inspect or empty the disk cache of compiled kernels")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    _command(actions, "info", cmd_cache_info, "location, entry count and size", parents=[as_json])
    _command(actions, "list", cmd_cache_list, "one line per cached kernel image", parents=[as_json])
    _command(actions, "clear", cmd_cache_clear, "remove every entry")

    compile_ = _command(
        commands,
        "compile",
        cmd_compile,
        "compile the declared precompile bindings into the cache",
        epilog=_RUNS_TARGET,
    )
    compile_.add_argument("target", metavar="MODULE_OR_FILE", help=_TARGET)
    compile_.add_argument(
        "--arch", help=f"comma-separated targets, e.g. sm_80,sm_90 (default: the device's, else ${ARCH_ENV})"
    )
    compile_.add_argument("--output", choices=OUTPUTS, default="cubin", help="image kind (default: cubin)")

    tune = _command(
        commands,
        "tune",
        cmd_tune,
        "tune the declared tune_for keys of @kd.autotune kernels (GPU)",
        epilog=_RUNS_TARGET,
    )
    tune.add_argument("target", metavar="MODULE_OR_FILE", help=_TARGET)

    check = _command(
        commands,
        "check",
        cmd_check,
        "run a script on the CPU device with every check on (bounds, races, init, sync, undefined) and report "
        "each finding at its line",
        epilog="SCRIPT runs as you, as it would with python: pass only code you trust.",
    )
    check.add_argument("--seed", type=int, default=0, help="run each block's threads in the order seed N draws")
    check.add_argument(
        "--address",
        action="store_true",
        help="AddressSanitizer instead of the race and init checks (they exclude each other): bounds, sync, "
        "address, undefined; the script runs with ASan's runtime preloaded",
    )
    check.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    check.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")

    bench = commands.add_parser("bench", help="measure kerneldsl's own costs on this machine")
    benchmarks = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, b in BENCHMARKS.items():
        _command(benchmarks, name, cmd_bench, b.help, add_help=False)  # cmd_bench parses its options
    return parser


def _command(
    group: Any, name: str, handler: Callable[[argparse.Namespace], int], help: str, **kwargs: Any
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = group.add_parser(name, help=help, description=help, **kwargs)
    sub.set_defaults(handler=handler)
    return sub


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, options = parser.parse_known_args(argv)
    if options and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    args.options = options
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return code
    except KernelDSLError as exc:
        print(f"kerneldsl: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # ``kerneldsl cache list | head``: the reader has all it wanted
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the final flush at exit would fail on the closed pipe again
    (the recipe in the ``signal`` module's documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
