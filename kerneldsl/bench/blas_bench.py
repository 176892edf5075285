"""kd.blas measured side by side with CuPy, torch and the raw nvmath binding, in one process (GPU).

- throughput: an ``N^3`` gemm (float32 and float16, default N = 8192), kd.blas vs
  ``cupy.matmul`` on the same device arrays and the same stream; event-timed median of
  interleaved repetitions; TFLOP/s and the time ratio (target: within 3%).
- host cost: a 64^3 float32 gemm enqueued while the stream is held by a spinning kernel (so
  the queue never drains), median per call of interleaved repetitions, vs the nvmath binding
  kd.blas calls (cublasLtMatmul, same configuration) called directly with pre-computed arguments, the
  cublasGemmEx binding, ``cupy.matmul`` and ``torch.mm`` (targets: <= 1.2x the binding,
  <= 0.5x CuPy).

Every result is checked against numpy (sampled rows for the large products).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import blas
from ..blas import lt_config
from ..blas.matmul import _gemm as python_path
from ..device_array.sessions import Session, default_session
from .held_timing import interleaved_enqueue_costs, spin
from .report import Report, print_report

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
    da, db, out = s.to_device(a), s.to_device(b), s.empty((n, n), np.float32)
    spin_cycles = 4_000_000 + 40_000 * calls  # outlasts the enqueue loop

    def hold() -> None:
        spin(spin_cycles)

    contenders: dict[str, Callable[[], Any]] = {
        "kerneldsl": lambda: blas.gemm(da, db, out),
        "kerneldsl, Python path": lambda: python_path(da, db, out),
    }
    blas.gemm(da, db, out)  # makes the handle, the matmul configuration and the C path's entry
    h = blas.handle(s)
    lt_handle = h.lt()
    config = None if lt_handle is None else lt_handle.config(blas.R_32F, blas.COMPUTE_32F, da, db, out, False, False)
    scalars = (ctypes.c_float * 2)(1.0, 0.0)
    pa, pb = ctypes.addressof(scalars), ctypes.addressof(scalars) + 4
    if lt_handle is not None and config is not None:
        # the binding kd.blas.gemm calls, with the same configuration, workspace and stream
        lt, workspace = lt_config.library(), h.workspace(s.stream)
        lt_args = (
            lt_handle.raw,
            config.desc,
            pa,
            db.ptr,
            config.layouts[1],
            da.ptr,
            config.layouts[0],
            pb,
            out.ptr,
            config.layouts[2],
            out.ptr,
            config.layouts[2],
            config.algo,
            workspace.ptr,
            workspace.nbytes,
            s.stream.handle,
        )
        contenders["nvmath cublasLt binding direct"] = lambda: lt.matmul(*lt_args)
    gemm_ex_args = (
        h.raw,
        blas.OP_N,
        blas.OP_N,
        n,
        n,
        n,
        pa,
        db.ptr,
        blas.R_32F,
        n,
        da.ptr,
        blas.R_32F,
        n,
        pb,
        out.ptr,
        blas.R_32F,
        n,
        blas.COMPUTE_32F,
        blas.GEMM_DEFAULT,
    )
    gemm_ex = h.lib.gemm_ex
    with s.activated():
        h.bind(None, blas.POINTER_MODE_HOST)  # the classic handle on the session stream, as the binding needs
    contenders["nvmath cublas gemm_ex binding direct"] = lambda: gemm_ex(*gemm_ex_args)
    scopes: list[Any] = []
    if cp is not None:
        ca, cb, cc = cp.asarray(da), cp.asarray(db), cp.asarray(out)
        contenders["CuPy matmul"] = lambda: cp.matmul(ca, cb, out=cc)
        scopes.append(cp.cuda.ExternalStream(s.stream.handle))
    if torch is not None:
        ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (da, db, out))
        contenders["torch.mm"] = lambda: torch.mm(ta, tb, out=tc)
        scopes.append(torch.cuda.stream(torch.cuda.ExternalStream(s.stream.handle)))
    with contextlib.ExitStack() as stack:
        stack.enter_context(s.activated())  # the direct bindings need the context current
        for scope in scopes:
            stack.enter_context(scope)
        for name, enqueue in contenders.items():  # each one is checked before it is timed
            out.copy_from_host(np.full((n, n), np.nan, np.float32))
            enqueue()
            s.synchronize()
            _check(out.to_host(), a, b, np.arange(n), name)
        timed = {name: (hold, enqueue, s.synchronize) for name, enqueue in contenders.items()}
        out.copy_from_host(np.full((n, n), np.nan, np.float32))
        results = interleaved_enqueue_costs(timed, calls, reps)
        s.synchronize()
        _check(out.to_host(), a, b, np.arange(n), f"{list(contenders)[-1]}, the last call timed")
    return {name: seconds * 1e6 for name, seconds in results.items()}


def run(args: argparse.Namespace) -> Report:
    cp, torch = _optional("cupy"), _optional("torch")
    n = args.size
    report: Report = {
        f"gemm {n}^3 float32": bench_throughput(args, np.dtype(np.float32), cp),
        f"gemm {n}^3 float16": bench_throughput(args, np.dtype(np.float16), cp),
        f"{args.small}^3 float32 gemm host cost (µs per call, stream held)": bench_host_cost(args, cp, torch),
    }
    host = report[f"{args.small}^3 float32 gemm host cost (µs per call, stream held)"]
    ratios = {"host kerneldsl / gemm_ex binding": host["kerneldsl"] / host["nvmath cublas gemm_ex binding direct"]}
    if "nvmath cublasLt binding direct" in host:
        ratios["host kerneldsl / direct binding"] = host["kerneldsl"] / host["nvmath cublasLt binding direct"]
    if cp is not None:
        ratios["float32 kerneldsl / CuPy time"] = report[f"gemm {n}^3 float32"]["kerneldsl / CuPy time"]
        ratios["float16 kerneldsl / CuPy time"] = report[f"gemm {n}^3 float16"]["kerneldsl / CuPy time"]
        ratios["host kerneldsl / CuPy"] = host["kerneldsl"] / host["CuPy matmul"]
    if torch is not None:
        ratios["host kerneldsl / torch"] = host["kerneldsl"] / host["torch.mm"]
    report["ratios"] = ratios
    report["targets met"] = {k: float(ratios[k] <= limit) for k, limit in TARGETS.items() if k in ratios}
    print_report(report, args)
    return report
