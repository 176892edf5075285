"""kd.blas measured side by side with CuPy, torch and the raw nvmath binding, in one process (GPU).

- throughput: an ``N^3`` gemm (float32 and float16, default N = 8192), kd.blas vs
  ``cupy.matmul`` on the same device arrays and the same stream; event-timed median of
  interleaved repetitions; TFLOP/s and the time ratio (target: within 3%).
- host cost: a 64^3 float32 gemm enqueued while the stream is held by a spinning kernel (so
  the queue never drains), median per call, vs the nvmath binding called directly with
  pre-computed arguments, ``cupy.matmul`` and ``torch.mm`` (targets: <= 1.2x the binding,
  <= 0.5x CuPy).

Every result is checked against numpy (sampled rows for the large products).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
from typing import Any, Callable

import numpy as np

from .. import blas
from ..runtime import DeviceArray, Session, default_session
from .report import print_report
from .runtime_bench import held_enqueue_cost, spin

CHECK_TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 1e-4}  # per unit of |A| @ |B|
TARGETS = {
    "float32 kerneldsl / CuPy time": 1.03,
    "float16 kerneldsl / CuPy time": 1.03,
    "host kerneldsl / direct binding": 1.2,
    "host kerneldsl / CuPy": 0.5,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=8192, help="N of the N^3 throughput gemm")
    parser.add_argument("--small", type=int, default=64, help="N of the N^3 host-cost gemm")
    parser.add_argument("--calls", type=int, default=200, help="gemm calls enqueued per host-cost repetition")
    parser.add_argument("--reps", type=int, default=30, help="repetitions (median reported)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _optional(name: str) -> Any:
    """A baseline library, or None when it is not installed (its rows are left out)."""
    try:
        return __import__(name)
    except ImportError:
        return None


def _check(got: np.ndarray, a: np.ndarray, b: np.ndarray, rows: np.ndarray, what: str) -> None:
    """Rows ``rows`` of ``got`` against a @ b in float64, within the dtype's tolerance."""
    a64, b64 = a[rows].astype(np.float64), b.astype(np.float64)
    ref, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)
    err = np.abs(got[rows].astype(np.float64) - ref)
    if not np.all(err <= CHECK_TOL[np.dtype(a.dtype)] * bound):
        raise AssertionError(f"{what}: wrong result (max error {np.nanmax(err):.3g})")


def _timed_ms(s: Session, run: Callable[[], None]) -> float:
    start, end = s.create_event(), s.create_event()
    start.record()
    run()
    end.record()
    end.synchronize()
    return end.elapsed_since(start)


def bench_throughput(args: argparse.Namespace, dtype: np.dtype, cp: Any) -> dict[str, float]:
    s = default_session()
    n = args.size
    rng = np.random.default_rng()
    a = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    da, db = s.to_device(a), s.to_device(b)
    poison = np.full((n, n), np.nan, dtype)
    out_kd, out_cp = s.to_device(poison), s.to_device(poison)
    contenders: dict[str, Callable[[], None]] = {"kerneldsl": lambda: blas.gemm(da, db, out_kd)}
    stream = None
    if cp is not None:
        stream = cp.cuda.ExternalStream(s.stream.handle)  # same stream, same events
        ca, cb, cc = cp.asarray(da), cp.asarray(db), cp.asarray(out_cp)

        def cupy_matmul() -> None:
            with stream:
                cp.matmul(ca, cb, out=cc)

        contenders["CuPy"] = cupy_matmul
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for run in contenders.values():  # warm: handles, workspaces, heuristics
        run()
    s.synchronize()
    for _ in range(args.reps):  # interleaved, so clock and thermal drift hit both alike
        for name, run in contenders.items():
            samples[name].append(_timed_ms(s, run))
    rows = rng.choice(n, size=4, replace=False)
    _check(out_kd.to_host(), a, b, rows, f"kd.blas.gemm {dtype}")
    flops = 2.0 * n**3
    results: dict[str, float] = {}
    for name, times in samples.items():
        ms = statistics.median(times)
        results[f"{name} ms"] = ms
        results[f"{name} TFLOP/s"] = flops / (ms * 1e-3) / 1e12
    if cp is not None:
        _check(out_cp.to_host(), a, b, rows, f"cupy.matmul {dtype}")
        results["kerneldsl / CuPy time"] = results["kerneldsl ms"] / results["CuPy ms"]
    return results


def bench_host_cost(args: argparse.Namespace, cp: Any, torch: Any) -> dict[str, float]:
    s = default_session()
    n, calls, reps = args.small, args.calls, args.reps
    rng = np.random.default_rng()
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    da, db = s.to_device(a), s.to_device(b)
    spin_cycles = 4_000_000 + 40_000 * calls  # outlasts the enqueue loop

    def hold() -> None:
        spin(spin_cycles)

    all_rows = np.arange(n)
    results: dict[str, float] = {}

    def measure(name: str, enqueue: Callable[[], None], out: DeviceArray) -> None:
        out.copy_from_host(np.full((n, n), np.nan, np.float32))
        enqueue()
        s.synchronize()
        results[name] = held_enqueue_cost(hold, enqueue, s.synchronize, calls, reps) * 1e6
        _check(out.to_host(), a, b, all_rows, name)

    out = s.empty((n, n), np.float32)
    measure("kerneldsl", lambda: blas.gemm(da, db, out), out)

    h = blas.handle(s)
    lib, raw = h._lib, h.raw
    scalars = (ctypes.c_float * 2)(1.0, 0.0)
    pa, pb = ctypes.addressof(scalars), ctypes.addressof(scalars) + 4
    direct_args = (raw, blas.OP_N, blas.OP_N, n, n, n, pa, db.ptr, blas.R_32F, n, da.ptr, blas.R_32F, n,
                   pb, out.ptr, blas.R_32F, n, blas.COMPUTE_32F, blas.GEMM_DEFAULT)
    gemm_ex = lib.gemm_ex
    with s.activated():  # the binding alone: context current, handle already on the session stream
        measure("nvmath binding direct", lambda: gemm_ex(*direct_args), out)

    if cp is not None:
        stream = cp.cuda.ExternalStream(s.stream.handle)
        ca, cb, cc = cp.asarray(da), cp.asarray(db), cp.asarray(out)
        with stream:
            measure("CuPy matmul", lambda: cp.matmul(ca, cb, out=cc), out)
    if torch is not None:
        ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (da, db, out))
        with torch.cuda.stream(torch.cuda.ExternalStream(s.stream.handle)):
            measure("torch.mm", lambda: torch.mm(ta, tb, out=tc), out)
    return results


def run(args: argparse.Namespace) -> int:
    cp, torch = _optional("cupy"), _optional("torch")
    n = args.size
    report: dict[str, Any] = {
        f"gemm {n}^3 float32": bench_throughput(args, np.dtype(np.float32), cp),
        f"gemm {n}^3 float16": bench_throughput(args, np.dtype(np.float16), cp),
        f"{args.small}^3 float32 gemm host cost (µs per call, stream held)": bench_host_cost(args, cp, torch),
    }
    host = report[f"{args.small}^3 float32 gemm host cost (µs per call, stream held)"]
    ratios = {"host kerneldsl / direct binding": host["kerneldsl"] / host["nvmath binding direct"]}
    if cp is not None:
        ratios["float32 kerneldsl / CuPy time"] = report[f"gemm {n}^3 float32"]["kerneldsl / CuPy time"]
        ratios["float16 kerneldsl / CuPy time"] = report[f"gemm {n}^3 float16"]["kerneldsl / CuPy time"]
        ratios["host kerneldsl / CuPy"] = host["kerneldsl"] / host["CuPy matmul"]
    if torch is not None:
        ratios["host kerneldsl / torch"] = host["kerneldsl"] / host["torch.mm"]
    report["ratios"] = ratios
    report["targets met"] = {k: float(ratios[k] <= limit) for k, limit in TARGETS.items() if k in ratios}
    print_report(report, args.json)
    return 0
