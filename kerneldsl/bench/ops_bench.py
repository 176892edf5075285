"""kd.ops measured side by side with PyTorch and CuPy in one process (GPU required).

- saxpy: ``y = a*x + y`` on 2^28 float32, 12 bytes moved per element, event-timed median
  (one 16-byte vector per thread), against PyTorch ``y.add_(x, alpha=a)``, a CuPy ElementwiseKernel
  and a device-to-device copy.
- sum: full sum of 2^28 float32 against ``cupy.sum`` and ``torch.sum``.
- chain: ``square(sin(((x*2 + y)*x - 3)*0.5) + y)`` on 2^26 float32, fused, against
  ``torch.compile``, ``cupy.fuse`` and unfused CuPy; plus the fused kernel's cold compile time
  (fresh cache directory) and its disk-cache hit time.
- launch: host cost of ``kd.ops.add`` on small DeviceArrays with ``out=`` (and without: one
  allocation per call) against a warm ``@kd.kernel`` launch, stream held by a spin kernel.

Outputs are poisoned before the checked runs; kd's results are compared with NumPy before timing and
on the calls timed after it, the baselines' before timing. A wrong result raises.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.array.kernels import KERNELS
from kerneldsl.bench import held_timing, runtime_bench
from kerneldsl.bench.report import Report, Section, run_sections

SAXPY_N = 1 << 28
SUM_N = 1 << 28
CHAIN_N = 1 << 26


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per measurement (median reported)")
    parser.add_argument("--launches", type=int, default=500, help="launches enqueued per launch-cost repetition")
    parser.add_argument(
        "--only",
        choices=["saxpy", "sum", "chain", "launch"],
        action="append",
        help="run only these sections (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


BATCH = 10  # calls between two events: the host's launch latency is paid once per batch, not per call


def _event_timer(
    record: Callable[[], Any], elapsed_ms: Callable[[Any, Any], float], sync: Callable[[], None]
) -> Callable[[Callable[[], Any], int], float]:
    """Median GPU milliseconds per call over ``reps`` batches of back-to-back calls."""

    def timed(run: Callable[[], Any], reps: int) -> float:
        run()
        sync()
        samples = []
        for _ in range(reps):
            start = record()
            for _ in range(BATCH):
                run()
            end = record()
            sync()
            samples.append(elapsed_ms(start, end) / BATCH)
        return statistics.median(samples)

    return timed


ROUNDS = 3  # timed rounds of every contender per case, interleaved (the best of each is reported)


def best_rounds(contenders: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Each contender's best of ``ROUNDS`` timings, the contenders taking turns: none is timed
    alone on a GPU that another has just warmed or heated."""
    best: dict[str, float] = {}
    for _ in range(ROUNDS):
        for label, time_it in contenders.items():
            best[label] = min(best.get(label, float("inf")), time_it())
    return best


def _kd_timer(session: Any) -> Callable[[Callable[[], Any], int], float]:
    return _event_timer(lambda: session.create_event().record(), lambda a, b: b.elapsed_since(a), session.synchronize)


def _torch_timer(torch: Any) -> Callable[[Callable[[], Any], int], float]:
    def record() -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    return _event_timer(record, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)


def _cupy_timer(cp: Any) -> Callable[[Callable[[], Any], int], float]:
    def record() -> Any:
        event = cp.cuda.Event()
        event.record()
        return event

    return _event_timer(record, cp.cuda.get_elapsed_time, lambda: cp.cuda.get_current_stream().synchronize())


def _gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def _check(name: str, got: np.ndarray, want: np.ndarray, rtol: float = 0.0, atol: float = 0.0) -> None:
    if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        bad = np.count_nonzero(~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
        raise AssertionError(f"{name}: {bad} wrong element(s)")


def bench_saxpy(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    s = kd.default_session()
    rng = np.random.default_rng(0)
    x = rng.random(SAXPY_N, dtype=np.float32)
    y = rng.random(SAXPY_N, dtype=np.float32)
    a = np.float32(0.75)
    want = a * x + y
    nbytes = 12 * SAXPY_N
    dx, dy = s.to_device(x), s.to_device(y)
    timed = _kd_timer(s)
    results: dict[str, float] = {}
    dy.copy_from_host(y)
    kd.ops.axpy(a, dx, dy, out=dy)
    _check("kd saxpy", dy.to_host(), want)
    results["kerneldsl ops.axpy (GB/s)"] = _gbps(nbytes, timed(lambda: kd.ops.axpy(a, dx, dy, out=dy), args.reps))
    dz = s.empty(SAXPY_N, np.float32)
    dz.fill(np.nan)
    kd.ops.axpy(a, dx, dy, out=dz)  # the call timed, on a poisoned output: y has moved on since
    _check("kd saxpy after timing", dz.to_host(), a * x + dy.to_host())
    dz.fill(np.nan)
    results["kerneldsl D2D copy (GB/s, 8 B/elem)"] = _gbps(8 * SAXPY_N, timed(lambda: dx.copy_to(dz), args.reps))
    _check("kd copy", dz.to_host(), x)

    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    ty.add_(tx, alpha=float(a))
    _check("torch saxpy", ty.cpu().numpy(), want, rtol=1e-6)
    torch_ms = _torch_timer(torch)(lambda: ty.add_(tx, alpha=float(a)), args.reps)
    results["torch y.add_(x, alpha) (GB/s)"] = _gbps(nbytes, torch_ms)
    tx = ty = None  # frees the device memory before the next contender
    torch.cuda.empty_cache()

    cx, cy = cp.asarray(x), cp.asarray(y)
    kernel = cp.ElementwiseKernel("float32 a, float32 x, float32 y", "float32 z", "z = a * x + y", "kd_bench_saxpy")
    kernel(a, cx, cy, cy)
    _check("cupy saxpy", cp.asnumpy(cy), want, rtol=1e-6)
    results["CuPy ElementwiseKernel (GB/s)"] = _gbps(nbytes, _cupy_timer(cp)(lambda: kernel(a, cx, cy, cy), args.reps))
    cx = cy = None  # frees the device memory before the next contender
    cp.get_default_memory_pool().free_all_blocks()
    dz.close()
    dx.close()
    dy.close()
    best = max(v for k, v in results.items() if k.startswith("kerneldsl ops"))
    results["kerneldsl best / torch"] = best / results["torch y.add_(x, alpha) (GB/s)"]
    return results


def bench_sum(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    s = kd.default_session()
    x = np.random.default_rng(1).random(SUM_N, dtype=np.float32)
    exact = float(np.sum(x, dtype=np.float64))
    tol = 1e-5 * exact
    dx = s.to_device(x)
    out = s.to_device(np.full((), np.nan, np.float32))
    kd.ops.sum(dx, out=out)
    _check("kd sum", out.to_host(), np.float32(exact), atol=tol)
    out.fill(np.nan)
    results = {"kerneldsl ops.sum (ms)": _kd_timer(s)(lambda: kd.ops.sum(dx, out=out), args.reps)}
    _check("kd sum after timing", out.to_host(), np.float32(exact), atol=tol)
    cx = cp.asarray(x)
    _check("cupy sum", cp.asnumpy(cp.sum(cx)), np.float32(exact), atol=tol)
    results["cupy.sum (ms)"] = _cupy_timer(cp)(lambda: cp.sum(cx), args.reps)
    cx = None  # frees the device memory before the next contender
    cp.get_default_memory_pool().free_all_blocks()
    tx = torch.from_numpy(x).cuda()
    _check("torch sum", torch.sum(tx).cpu().numpy(), np.float32(exact), atol=tol)
    results["torch.sum (ms)"] = _torch_timer(torch)(lambda: torch.sum(tx), args.reps)
    tx = None  # frees the device memory before the next contender
    torch.cuda.empty_cache()
    dx.close()
    results["kerneldsl (GB/s)"] = _gbps(4 * SUM_N, results["kerneldsl ops.sum (ms)"])
    results["faster of cupy/torch / kerneldsl"] = (
        min(results["cupy.sum (ms)"], results["torch.sum (ms)"]) / results["kerneldsl ops.sum (ms)"]
    )
    return results


def chain_function(ops: Any) -> Callable[[Any, Any], Any]:
    def chain(x: Any, y: Any) -> Any:
        t = ((x * 2 + y) * x - 3) * 0.5
        return ops.square(ops.sin(t) + y)

    return chain


def unfused_chain(x: Any, y: Any) -> Any:
    """The same chain, one kd.ops kernel per step (DeviceArrays have no arithmetic operators)."""
    ops = kd.ops
    t = ops.multiply(ops.subtract(ops.multiply(ops.add(ops.multiply(x, 2), y), x), 3), 0.5)
    return ops.square(ops.add(ops.sin(t), y))


def _compile_times(x: Any, y: Any) -> dict[str, float]:
    """Cold (fresh cache dir, nothing in process) and disk-hit first-call times of the fused chain."""
    s = kd.default_session()
    previous = os.environ.get("KERNELDSL_CACHE_DIR")
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        os.environ["KERNELDSL_CACHE_DIR"] = directory
        kd.cache.set_default_cache(None)
        try:
            for label in ("cold compile, fresh cache dir (ms)", "disk-cache hit, fresh in-process state (ms)"):
                KERNELS.clear()
                fused = kd.fuse(chain_function(kd.ops))
                start = time.perf_counter()
                fused(x, y)
                s.synchronize()
                times[label] = (time.perf_counter() - start) * 1e3
        finally:
            if previous is None:
                os.environ.pop("KERNELDSL_CACHE_DIR", None)
            else:
                os.environ["KERNELDSL_CACHE_DIR"] = previous
            kd.cache.set_default_cache(None)
            KERNELS.clear()
    return times


def bench_chain(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    s = kd.default_session()
    rng = np.random.default_rng(2)
    x = rng.standard_normal(CHAIN_N, dtype=np.float32)
    y = rng.standard_normal(CHAIN_N, dtype=np.float32)
    want = chain_function(np)(x, y)
    tol = dict(rtol=2e-5, atol=2e-5)
    dx, dy = s.to_device(x), s.to_device(y)
    results = _compile_times(dx, dy)
    fused = kd.fuse(chain_function(kd.ops))
    out = s.to_device(np.full(CHAIN_N, np.nan, np.float32))
    fused(dx, dy, out=out)
    _check("kd fused chain", out.to_host(), want, **tol)
    out.fill(np.nan)
    results["kerneldsl fused (ms)"] = _kd_timer(s)(lambda: fused(dx, dy, out=out), args.reps)
    _check("kd fused chain after timing", out.to_host(), want, **tol)
    unfused = unfused_chain
    _check("kd unfused chain", unfused(dx, dy).to_host(), out.to_host())
    results["kerneldsl unfused (ms)"] = _kd_timer(s)(lambda: unfused(dx, dy), args.reps)
    dx.close()
    dy.close()
    out.close()

    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    try:
        compiled = torch.compile(chain_function(torch))
        _check("torch.compile chain", compiled(tx, ty).cpu().numpy(), want, **tol)
        results["torch.compile (ms)"] = _torch_timer(torch)(lambda: compiled(tx, ty), args.reps)
    except Exception as exc:  # no triton / inductor on this machine: report, do not fail the run
        results["torch.compile (ms)"] = math.nan
        print(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
    tx = ty = None  # frees the device memory before the next contender
    torch.cuda.empty_cache()

    cx, cy = cp.asarray(x), cp.asarray(y)
    cfused = cp.fuse(chain_function(cp))
    _check("cupy.fuse chain", cp.asnumpy(cfused(cx, cy)), want, **tol)
    results["cupy.fuse (ms)"] = _cupy_timer(cp)(lambda: cfused(cx, cy), args.reps)
    cunfused = chain_function(cp)
    results["CuPy unfused (ms)"] = _cupy_timer(cp)(lambda: cunfused(cx, cy), args.reps)
    cx = cy = None  # frees the device memory before the next contender
    cp.get_default_memory_pool().free_all_blocks()
    results["kerneldsl fused (GB/s, 12 B/elem)"] = _gbps(12 * CHAIN_N, results["kerneldsl fused (ms)"])
    return results


def bench_launch(args: argparse.Namespace) -> dict[str, float]:
    s = kd.default_session()
    n = 1024
    dx, dy = s.to_device(np.ones(n, np.float32)), s.to_device(np.full(n, 2, np.float32))
    out = s.to_device(np.full(n, np.nan, np.float32))
    alpha = np.float32(1e-3)
    spin_cycles = 4_000_000 + 40_000 * args.launches

    def hold() -> None:
        held_timing.spin(spin_cycles)

    kd.ops.add(dx, dy, out=out)
    _check("kd add", out.to_host(), np.full(n, 3, np.float32))
    runtime_bench.saxpy(dy, dx, alpha)
    s.synchronize()
    results = {
        "@kd.kernel warm launch (µs)": held_timing.held_enqueue_cost(
            hold, lambda: runtime_bench.saxpy(dy, dx, alpha), s.synchronize, args.launches, args.reps
        ),
        "kd.ops.add with out= (µs)": held_timing.held_enqueue_cost(
            hold, lambda: kd.ops.add(dx, dy, out=out), s.synchronize, args.launches, args.reps
        ),
    }
    kept: list[Any] = []  # outputs stay alive until the stream drains: frees never wait on the spin kernel

    def allocating() -> None:
        kept.append(kd.ops.add(dx, dy))

    def sync() -> None:
        s.synchronize()
        kept.clear()

    results["kd.ops.add allocating its output (µs)"] = held_timing.held_enqueue_cost(
        hold, allocating, sync, args.launches, args.reps
    )
    out.copy_from_host(np.full(n, np.nan, np.float32))
    kd.ops.add(dx, dy, out=out)  # the call timed above, on poisoned output, after dy's saxpys
    _check("kd add after timing", out.to_host(), dx.to_host() + dy.to_host())
    results = {k: v * 1e6 for k, v in results.items()}
    results["ops.add(out=) / @kd.kernel"] = (
        results["kd.ops.add with out= (µs)"] / results["@kd.kernel warm launch (µs)"]
    )
    return results


SECTIONS: dict[str, Section] = {
    "saxpy": ("saxpy 2^28 float32", bench_saxpy),
    "sum": ("full sum 2^28 float32", bench_sum),
    "chain": ("8-op chain 2^26 float32", bench_chain),
    "launch": ("launch cost, 1024 elements", bench_launch),
}


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
