"""Array code as users write it, side by side with PyTorch and CuPy in one process (GPU required).

- chain: ``(x + y) * x - y`` with DeviceArray operators, every result allocated and dropped, on
  1k, 64k and 1M float32: wall-clock per op over a loop of chains ended by a sync, against the
  same expression on torch and CuPy tensors (contenders take turns every repetition).
- fused: a tanh GELU under ``@kd.fuse`` returning a new array on 2^26 float32, event-timed,
  against ``torch.compile`` of the same function.
- alloc: host cost of allocating a 1 MiB buffer and dropping it, against ``torch.empty`` and
  ``cupy.empty``, stream held by a spin kernel so no free waits for the GPU.
- numpy: a ``@kd.kernel`` saxpy called with numpy arrays (copy in, launch, copy back into y) on 1k
  and 2^24 elements, against torch ``from_numpy().cuda()``, ``add_`` and ``copy_`` back into the
  tensor over y (both write into the existing array); each call checked before and after timing.
- keywords: host cost of ``gemm(a, b, out=c)``, ``alpha=``/``beta=`` and ``stream=`` against
  ``gemm(a, b, c)``, of a kernel called with ``stream=`` and of ``kd.ops.add(out=, stream=)``,
  against their plain spellings, the stream each runs on held by a spin kernel.
- cg, matmul, roundtrip: NumPy code as written (``arrays_numpy_code``): the CuPy CG solver per
  iteration, an allocating ``a @ b``'s host cost, and numpy -> device -> numpy round trips.
- transfers: uploads and downloads alone, and kerneldsl's direct copies against its pinned
  pipeline (``arrays_transfers``).

Each section ends with its ratios named after the issue's targets. Results are checked against
NumPy before anything is timed.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench import arrays_numpy_code, arrays_transfers, error_bounds, held_timing, ops_bench, runtime_bench
from kerneldsl.bench.report import Report, Section, run_sections
from kerneldsl.errors import BlasNotAvailableError

CHAIN_SIZES = (1 << 10, 1 << 16, 1 << 20)
CHAIN_OPS = 3
GELU_N = 1 << 26
ALLOC_BYTES = 1 << 20
NUMPY_SIZES = (1 << 10, 1 << 24)
GEMM_N = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per measurement (median reported)")
    parser.add_argument("--calls", type=int, default=200, help="calls per repetition of a host-cost measurement")
    parser.add_argument(
        "--only",
        choices=list(SECTIONS),
        action="append",
        help="run only these sections (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _taking_turns(contenders: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], reps: int) -> dict[str, float]:
    """Median seconds of ``run(); sync()`` per contender, each taking its turn every repetition."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for run, sync in contenders.values():
        run()
        sync()
    for _ in range(reps):
        for name, (run, sync) in contenders.items():
            start = time.perf_counter()
            run()
            sync()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def _chain(x: Any, y: Any) -> Any:
    return (x + y) * x - y


def _chain_loop(calls: int) -> Callable[[Any, Any], Callable[[], None]]:
    """``loop(a, b)``: a function running ``calls`` chains on ``a`` and ``b``, dropping each result."""

    def loop(a: Any, b: Any) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                _chain(a, b)

        return run

    return loop


def bench_chain(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    s = kd.default_session()
    results: dict[str, float] = {}
    for n in CHAIN_SIZES:
        rng = np.random.default_rng(n)
        x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        dx, dy = kd.asarray(x), kd.asarray(y)
        tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        cx, cy = cp.asarray(x), cp.asarray(y)
        want, tol = _chain(x, y), dict(rtol=1e-5, atol=1e-6)  # results near zero: absolute too
        ops_bench._check("kd chain", _chain(dx, dy).to_host(), want, **tol)
        ops_bench._check("torch chain", _chain(tx, ty).cpu().numpy(), want, **tol)
        ops_bench._check("cupy chain", cp.asnumpy(_chain(cx, cy)), want, **tol)
        loop = _chain_loop(args.calls)

        times = _taking_turns(
            {
                "kerneldsl": (loop(dx, dy), s.synchronize),
                "torch": (loop(tx, ty), torch.cuda.synchronize),
                "CuPy": (loop(cx, cy), cp.cuda.get_current_stream().synchronize),
            },
            args.reps,
        )
        per_op = {name: t / (args.calls * CHAIN_OPS) * 1e6 for name, t in times.items()}
        for name, us in per_op.items():
            results[f"{name} n={n} (µs per op)"] = us
        results[f"kerneldsl / torch n={n} (target <= 1.1)"] = per_op["kerneldsl"] / per_op["torch"]
        results[f"kerneldsl / CuPy n={n} (target < 1)"] = per_op["kerneldsl"] / per_op["CuPy"]
        dx.close()
        dy.close()
    return results


def gelu_function(ops: Any) -> Callable[[Any], Any]:
    def gelu(x: Any) -> Any:
        return 0.5 * x * (1 + ops.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    return gelu


def bench_fused(args: argparse.Namespace) -> dict[str, float]:
    import torch

    s = kd.default_session()
    x = np.random.default_rng(3).standard_normal(GELU_N, dtype=np.float32)
    want = gelu_function(np)(x)
    tol = dict(rtol=2e-5, atol=2e-5)
    dx = kd.asarray(x)
    fused = kd.fuse(gelu_function(kd.ops))
    ops_bench._check("kd fused gelu", fused(dx).to_host(), want, **tol)
    results = {"kerneldsl @kd.fuse returning a new array (ms)": ops_bench._kd_timer(s)(lambda: fused(dx), args.reps)}
    dx.close()
    tx = torch.from_numpy(x).cuda()
    try:
        compiled = torch.compile(gelu_function(torch))
        ops_bench._check("torch.compile gelu", compiled(tx).cpu().numpy(), want, **tol)
        results["torch.compile (ms)"] = ops_bench._torch_timer(torch)(lambda: compiled(tx), args.reps)
    except Exception as exc:  # no triton / inductor on this machine: report, do not fail the run
        results["torch.compile (ms)"] = math.nan
        print(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
    tx = None  # frees the device memory before the next contender
    torch.cuda.empty_cache()
    results["kerneldsl (GB/s, 8 B/elem)"] = ops_bench._gbps(
        8 * GELU_N, results["kerneldsl @kd.fuse returning a new array (ms)"]
    )
    results["kerneldsl / torch.compile (target <= 1.05)"] = (
        results["kerneldsl @kd.fuse returning a new array (ms)"] / results["torch.compile (ms)"]
    )
    return results


def bench_alloc(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    s = kd.default_session()
    n = ALLOC_BYTES // 4
    spin_cycles = 4_000_000 + 40_000 * args.calls

    def hold() -> None:
        held_timing.spin(spin_cycles)

    def kd_drop() -> None:
        kd.empty(n, np.float32)

    def kd_close() -> None:
        kd.empty(n, np.float32).close()

    def torch_drop() -> None:
        torch.empty(n, dtype=torch.float32, device="cuda")

    def cupy_drop() -> None:
        cp.empty(n, np.float32)

    # The spin kernel holds the session stream: a kd free must not wait for it (torch's and CuPy's
    # caching allocators never wait either).
    times = held_timing.interleaved_enqueue_costs(
        {
            "kd.empty + drop": (hold, kd_drop, s.synchronize),
            "kd.empty + close()": (hold, kd_close, s.synchronize),
            "torch.empty + drop": (hold, torch_drop, torch.cuda.synchronize),
            "cupy.empty + drop": (hold, cupy_drop, cp.cuda.get_current_stream().synchronize),
        },
        args.calls,
        args.reps,
    )
    results = {f"{name} (µs)": t * 1e6 for name, t in times.items()}
    results["kd.empty + drop / torch (target <= 1.2)"] = times["kd.empty + drop"] / times["torch.empty + drop"]
    results["kd.empty + drop / cupy"] = times["kd.empty + drop"] / times["cupy.empty + drop"]
    return results


def bench_numpy(args: argparse.Namespace) -> dict[str, float]:
    import torch

    alpha = np.float32(1e-3)
    results: dict[str, float] = {}
    for n in NUMPY_SIZES:
        rng = np.random.default_rng(n)
        x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        calls = _numpy_calls(torch, x, y, alpha)
        for who, call in calls.items():
            checked_saxpy(call, x, y, alpha, f"{who} numpy saxpy n={n}")
        reps = args.reps if n > 1 << 20 else args.reps * 10
        times = _taking_turns({who: (call, _nothing) for who, call in calls.items()}, reps)
        for who, call in calls.items():  # the very calls timed, checked again
            checked_saxpy(call, x, y, alpha, f"{who} numpy saxpy n={n}, after timing")
        results[f"kerneldsl n={n} (µs)"] = times["kerneldsl"] * 1e6
        results[f"torch n={n} (µs)"] = times["torch"] * 1e6
        if n > 1 << 20:
            nbytes = 12 * n  # two arrays in, one out
            results[f"kerneldsl n={n} (GB/s)"] = nbytes / times["kerneldsl"] / 1e9
            results[f"torch n={n} (GB/s)"] = nbytes / times["torch"] / 1e9
            results[f"kerneldsl / torch throughput n={n} (target >= 0.95)"] = times["torch"] / times["kerneldsl"]
        else:
            results[f"kerneldsl / torch n={n} (target <= 1.2)"] = times["kerneldsl"] / times["torch"]
    return results


def _numpy_calls(torch: Any, x: np.ndarray, y: np.ndarray, alpha: np.float32) -> dict[str, Callable[[], None]]:
    """The kerneldsl and torch spellings of ``y = alpha * x + y`` on host arrays, alike: copy x and
    y in, compute, copy the result back into y's own memory (torch's ``copy_`` into a tensor over
    y, as kerneldsl writes into the numpy array it was given; ``.cpu()`` would allocate a fresh
    host tensor each call)."""
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def kd_call() -> None:
        runtime_bench.saxpy(y, x, alpha)

    def torch_call() -> None:
        dy = ty.cuda()
        dy.add_(tx.cuda(), alpha=float(alpha))
        ty.copy_(dy)

    return {"kerneldsl": kd_call, "torch": torch_call}


def checked_saxpy(call: Callable[[], None], x: np.ndarray, y: np.ndarray, alpha: np.float32, what: str) -> None:
    """Run ``call`` (``y = alpha * x + y`` in place) and raise unless y moved to ``alpha * x + y``
    as it was, within two float32 ulp: a call that does not copy its result back leaves y as it
    was and fails."""
    before = y.astype(np.float64)
    call()
    want = float(alpha) * x.astype(np.float64) + before
    error_bounds.assert_within(y, want, error_bounds.value_bound(want, 2, acc=np.float32, out=np.float32), what)


def _nothing() -> None:
    """Numpy results are on the host when a call returns: nothing left to wait for."""


def bench_keywords(args: argparse.Namespace) -> dict[str, float]:
    s = kd.default_session()
    stream = s.create_stream()
    spin_cycles = 4_000_000 + 40_000 * args.calls

    def hold() -> None:
        held_timing.spin(spin_cycles)

    def hold_stream() -> None:
        held_timing.spin(spin_cycles, stream=stream)

    dx, dy = kd.asarray(np.ones(1024, np.float32)), kd.asarray(np.zeros(1024, np.float32))
    dz = kd.empty(1024, np.float32)
    alpha = np.float32(1)  # every saxpy adds exactly 1 to each element of dy: the count is checked
    contenders: dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]] = {
        "kernel positional": (hold, lambda: runtime_bench.saxpy(dy, dx, alpha), s.synchronize),
        "kernel stream=None": (hold, lambda: runtime_bench.saxpy(dy, dx, alpha, stream=None), s.synchronize),
        "kernel stream=s": (hold_stream, lambda: runtime_bench.saxpy(dy, dx, alpha, stream=stream), s.synchronize),
        "ops.add(out=)": (hold, lambda: kd.ops.add(dx, dy, out=dz), s.synchronize),
        "ops.add(out=, stream=s)": (hold_stream, lambda: kd.ops.add(dx, dy, out=dz, stream=stream), s.synchronize),
    }
    for _, run, _ in contenders.values():
        run()
        run()  # the second call of each spelling is the first the C path may take
    try:
        from kerneldsl import blas

        rng = np.random.default_rng(4)
        a, b = (kd.asarray(rng.standard_normal((GEMM_N, GEMM_N), dtype=np.float32)) for _ in range(2))
        c = kd.empty((GEMM_N, GEMM_N), np.float32)
        gemms: dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]] = {
            "gemm(a, b, c)": (hold, lambda: blas.gemm(a, b, c), s.synchronize),
            "gemm(a, b, out=c)": (hold, lambda: blas.gemm(a, b, out=c), s.synchronize),
            "gemm(a, b, c, alpha=, beta=)": (hold, lambda: blas.gemm(a, b, c, alpha=1.0, beta=0.0), s.synchronize),
            "gemm(a, b, out=c, stream=s)": (hold_stream, lambda: blas.gemm(a, b, out=c, stream=stream), s.synchronize),
        }
        for _, run, _ in gemms.values():
            run()
            run()
        contenders.update(gemms)
    except BlasNotAvailableError as exc:
        print(f"gemm rows skipped: {exc}")
    times = held_timing.interleaved_enqueue_costs(contenders, args.calls, args.reps)
    stream.synchronize()
    s.synchronize()
    saxpys = [name for name in contenders if name.startswith("kernel")]
    runtime_bench.check_count(dy.to_host(), len(saxpys) * (2 + args.calls * args.reps), ", ".join(saxpys))
    ops_bench._check("ops.add(out=) after timing", dz.to_host(), dx.to_host() + dy.to_host())  # adds ran last
    if "gemm(a, b, c)" in contenders:
        want = a.to_host().astype(np.float64) @ b.to_host().astype(np.float64)
        ops_bench._check("gemm after timing", c.to_host(), want, rtol=1e-4, atol=1e-4)
    results = {f"{name} (µs)": t * 1e6 for name, t in times.items()}
    for name in ("kernel stream=None", "kernel stream=s"):
        results[f"{name} / positional (target <= 1.1)"] = times[name] / times["kernel positional"]
    results["ops.add(out=, stream=s) / ops.add(out=) (target <= 1.1)"] = (
        times["ops.add(out=, stream=s)"] / times["ops.add(out=)"]
    )
    for name in ("gemm(a, b, out=c)", "gemm(a, b, c, alpha=, beta=)", "gemm(a, b, out=c, stream=s)"):
        if name in times:
            results[f"{name} / gemm(a, b, c) (target <= 1.1)"] = times[name] / times["gemm(a, b, c)"]
    return results


SECTIONS: dict[str, Section] = {
    "chain": ("unfused chain allocating every result, float32", bench_chain),
    "fused": ("fused GELU returning a new array, 2^26 float32", bench_fused),
    "alloc": ("allocate + free 1 MiB, host cost", bench_alloc),
    "numpy": ("numpy -> @kd.kernel -> numpy", bench_numpy),
    "keywords": ("C-path spellings, host cost per call", bench_keywords),
    "cg": ("conjugate gradients as CuPy spells it, 4096² SPD, per iteration", arrays_numpy_code.bench_cg),
    "matmul": ("allocating a @ b, host cost, 128² and 1024² float32", arrays_numpy_code.bench_matmul),
    "roundtrip": ("numpy -> device -> x * 2 -> numpy, 1k..64M float32", arrays_numpy_code.bench_roundtrip),
    "transfers": ("numpy -> device, device -> numpy alone; direct vs pipelined", arrays_transfers.bench_transfers),
}


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
