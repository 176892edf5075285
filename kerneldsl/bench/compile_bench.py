"""What a specialization costs at each cache level: cold NVRTC, disk hit in a new process, in-process hit.

The three differ by orders of magnitude (tens of ms, about 1 ms, under 1 µs): the whole case for
the two-level cache; this measures them on this machine for float32 saxpy. No GPU is needed:
the target arch is given, and nothing is launched.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl import cache
from kerneldsl.errors import KernelDSLError
from kerneldsl.jit.compiler import normalize_arch, nvrtc_version

from .report import Report, print_json

# Run in a fresh interpreter against a warm cache directory; times only the builds.
_CHILD = """
import json, sys, time
from kerneldsl.bench.compile_bench import make_saxpy, saxpy_arguments
arch, args = sys.argv[1], saxpy_arguments()
first, later = make_saxpy(), make_saxpy()
t0 = time.perf_counter()
a = first.inspect(*args, arch=arch)
t1 = time.perf_counter()
b = later.inspect(*args, arch=arch)
t2 = time.perf_counter()
print(json.dumps({"first": t1 - t0, "later": t2 - t1, "origins": [a.origin, b.origin]}))
"""


def make_saxpy() -> kd.Kernel:
    """A new kernel object each call, so no in-process build is shared between measurements."""

    @kd.kernel(grid=kd.cdiv("n", 256), block=256)
    def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]) -> str:
        return f"""
        index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
        if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
        """

    return saxpy


def saxpy_arguments() -> tuple[Any, ...]:
    y = np.ones(1 << 10, np.float32)
    return y, y.copy(), np.float32(2.0)


@contextmanager
def _cache_in(directory: str) -> Iterator[None]:
    store = cache.DiskCache(directory)
    cache.set_default_cache(store)
    try:
        yield
    finally:
        store.close()
        cache.set_default_cache(None)


def cold_compiles(arch: str, runs: int) -> tuple[list[float], list[float]]:
    """Seconds of a build into an empty cache, and of its NVRTC part, per run."""
    totals, nvrtc = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="kerneldsl-bench-") as tmp, _cache_in(tmp):
            kernel = make_saxpy()
            start = time.perf_counter()
            build = kernel.inspect(*saxpy_arguments(), arch=arch)
            totals.append(time.perf_counter() - start)
            _expect(build.origin, "nvrtc", "an empty cache")
            nvrtc.append(build.compile_seconds)
    return totals, nvrtc


def lookups(arch: str, iterations: int) -> tuple[float, float]:
    """Median ns of ``get_build(spec)``, and of ``specialize(...)`` + ``get_build`` (the miss-free dispatch)."""
    kernel, args = make_saxpy(), saxpy_arguments()
    spec = kernel.specialize(*args, arch=arch)
    kernel.get_build(spec)
    names = {"kernel": kernel, "spec": spec, "args": args, "arch": arch}
    return (
        _ns_per_call("kernel.get_build(spec)", names, iterations),
        _ns_per_call("kernel.get_build(kernel.specialize(*args, arch=arch))", names, iterations),
    )


def _ns_per_call(statement: str, names: dict[str, Any], iterations: int) -> float:
    repeats = 5
    number = max(1, iterations // repeats)
    times = timeit.Timer(statement, globals=names).repeat(repeat=repeats, number=number)
    return statistics.median(times) / number * 1e9


def fresh_process_hits(arch: str, directory: str, runs: int) -> tuple[list[float], list[float]]:
    """Seconds of the first and of a later build in new interpreters that find the cache warm."""
    package_root = str(Path(kd.__file__).resolve().parent.parent)
    env = dict(os.environ, KERNELDSL_CACHE_DIR=directory)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_root, env.get("PYTHONPATH"))))
    first, later = [], []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, arch], env=env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise KernelDSLError(f"the benchmark subprocess failed:\n{done.stderr.strip()}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for origin in result["origins"]:
            _expect(origin, "disk", "a new process with a warm cache (the disk key is not stable across processes)")
        first.append(result["first"])
        later.append(result["later"])
    return first, later


def _expect(origin: str, wanted: str, situation: str) -> None:
    if origin != wanted:
        raise KernelDSLError(f"expected a build from {wanted} in {situation}, got one from {origin}")


def measure(arch: str, runs: int, disk_runs: int, iterations: int) -> dict[str, Any]:
    arch = normalize_arch(arch)
    with tempfile.TemporaryDirectory(prefix="kerneldsl-bench-") as warm:
        with _cache_in(warm):
            build = make_saxpy().inspect(*saxpy_arguments(), arch=arch)  # also loads NVRTC and templates
            get_build_ns, dispatch_ns = lookups(arch, iterations)
        cold, cold_nvrtc = cold_compiles(arch, runs)
        first, later = fresh_process_hits(arch, warm, disk_runs)
    return {
        "specialization": build.specialization.describe(),
        "nvrtc": ".".join(map(str, nvrtc_version())),
        "cold_compile_s": statistics.median(cold),
        "cold_nvrtc_s": statistics.median(cold_nvrtc),
        "disk_hit_first_s": statistics.median(first),
        "disk_hit_later_s": statistics.median(later),
        "get_build_ns": get_build_ns,
        "dispatch_ns": dispatch_ns,
        "samples": {"cold_compile_s": cold, "disk_hit_first_s": first, "disk_hit_later_s": later},
        "runs": {"cold": runs, "fresh_processes": disk_runs, "lookups": iterations},
    }


def format_results(r: dict[str, Any]) -> str:
    runs = r["runs"]
    rows = [
        (
            "cold compile, empty cache (codegen + NVRTC + store)",
            r["cold_compile_s"],
            f"median of {runs['cold']}; NVRTC alone {_duration(r['cold_nvrtc_s'])}",
        ),
        (
            "disk-cache hit, fresh process, first build",
            r["disk_hit_first_s"],
            f"median of {runs['fresh_processes']} processes; opens the cache, reads the stored text and image",
        ),
        ("disk-cache hit, fresh process, later build", r["disk_hit_later_s"], "codegen + key + disk read"),
        ("in-process hit: get_build(spec)", r["get_build_ns"] * 1e-9, f"median, {runs['lookups']} lookups"),
        ("in-process hit: specialize(...) + get_build", r["dispatch_ns"] * 1e-9, f"median, {runs['lookups']} lookups"),
    ]
    width = max(len(label) for label, _, _ in rows)
    lines = [f"compile benchmark: {r['specialization']}, NVRTC {r['nvrtc']}"]
    lines += [f"  {label:<{width}}  {_duration(seconds):>9}  {note}" for label, seconds, note in rows]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e9:.0f} ns"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", default="sm_90", help="target arch; no GPU needed (default: sm_90)")
    parser.add_argument("--runs", type=_positive, default=5, help="cold compiles, each into a fresh cache (default: 5)")
    parser.add_argument(
        "--disk-runs", type=_positive, default=5, help="fresh processes hitting the disk cache (default: 5)"
    )
    parser.add_argument(
        "--iterations", type=_positive, default=100_000, help="in-process lookups timed (default: 100000)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def sections(r: dict[str, Any]) -> Report:
    """The figures grouped by unit, as the other benchmarks report them (what ``--plot`` draws)."""
    return {
        "build time (ms)": {
            "cold compile, empty cache": r["cold_compile_s"] * 1e3,
            "cold compile, NVRTC alone": r["cold_nvrtc_s"] * 1e3,
            "disk-cache hit, fresh process, first build": r["disk_hit_first_s"] * 1e3,
            "disk-cache hit, fresh process, later build": r["disk_hit_later_s"] * 1e3,
        },
        "in-process hit (ns)": {
            "get_build(spec)": r["get_build_ns"],
            "specialize(...) + get_build": r["dispatch_ns"],
        },
    }


def run(args: argparse.Namespace) -> Report:
    results = measure(args.arch, args.runs, args.disk_runs, args.iterations)
    if args.json:
        print_json(results, args)
    else:
        print(format_results(results))
    return sections(results)
