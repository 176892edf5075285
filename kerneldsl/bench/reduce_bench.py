"""Reductions and scans side by side with CuPy and PyTorch in one process (GPU required).

- axes: ``kd.ops.sum`` over each axis of every 2-D float32 shape (2^k, 2^(26-k)), k in
  {4, 8, 13, 18, 22}, and over the middle axis of a 3-D array, each into a preallocated output
  (``out=`` for all three libraries), event-timed median; against the faster of
  ``cupy.sum`` and ``torch.sum`` (target <= 1.1x) and against reading the input once at the
  device-to-device copy bandwidth measured in the same run (target <= 1.5x).
- full: the full sum of 2^28 float32 against ``cupy.sum`` (target: kd/cupy <= 1/0.97).
- cumsum: 2^28 float32 against ``torch.cumsum`` (target: throughput >= 0.9x) and ``cupy.cumsum``.
- table, sweep, views, host: issue 21's (``reduce_layouts_bench``): every axis set, strided
  views and the host cost of small reductions and gemv.

Every result is checked, before timing and on the calls timed after it (outputs poisoned with NaN
first), against a float64 NumPy reference within each output's error bound (``error_bounds``);
the full sum and the scan run on sparse ones, whose float32 sums are exact, so they are compared
exactly. A wrong result raises.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench import error_bounds
from kerneldsl.bench import reduce_layouts_bench as layouts
from kerneldsl.bench.ops_bench import _cupy_timer, _kd_timer, _torch_timer
from kerneldsl.bench.report import Report, Section, run_sections

AXES_ELEMENTS = 1 << 26
FULL_N = 1 << 28
CUMSUM_N = 1 << 28
SHAPES_K = (4, 8, 13, 18, 22)
THREE_D = (256, 1024, 256)
ONES_PER_ZERO = 1 / 32  # sparse ones: 2^28 of them sum to about 2^23, exactly in float32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per measurement (median reported)")
    parser.add_argument(
        "--only",
        choices=["axes", "full", "cumsum", "table", "sweep", "views", "host"],
        action="append",
        help="run only these sections (repeatable)",
    )
    parser.add_argument("--sweep", type=int, default=layouts.SWEEP_CASES, help="random cases in the sweep section")
    parser.add_argument("--seed", type=int, default=layouts.SWEEP_SEED, help="the sweep's seed")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _cases() -> list[tuple[tuple[int, ...], int]]:
    cases = [((1 << k, AXES_ELEMENTS >> k), axis) for k in SHAPES_K for axis in (0, 1)]
    return [*cases, (THREE_D, 1)]


def sparse_ones(n: int, seed: int) -> np.ndarray:
    """float32 zeros and ones (one in 32): every partial sum of 2^28 of them is an integer below
    2^24, exact in float32 in any order, so a sum or a scan of them is compared exactly."""
    ones: np.ndarray = (np.random.default_rng(seed).random(n, dtype=np.float32) < ONES_PER_ZERO).astype(np.float32)
    return ones


def _bench_case(
    shape: tuple[int, ...], axis: int, reps: int, timers: tuple[Any, Any, Any]
) -> tuple[float, float, float]:
    """(kd ms, the faster baseline's ms, ms to read the input once at the copy bandwidth), every
    output checked before timing and after, on poisoned outputs."""
    import cupy as cp
    import torch

    kd_time, cp_time, torch_time = timers
    s = kd.default_session()
    x = np.random.default_rng(sum(shape) + axis).random(shape, dtype=np.float32)
    want = np.sum(x.astype(np.float64), axis=axis)
    bound = error_bounds.sum_bound(x, axis, acc=np.float32, out=np.float32)
    dx, out = s.to_device(x), s.empty(want.shape, np.float32)
    cx, cout = cp.asarray(x), cp.empty(want.shape, np.float32)
    tx = torch.from_numpy(x).cuda()
    tout, copy_dst = torch.empty(want.shape, device="cuda"), torch.empty_like(tx)
    calls: dict[str, Callable[[], Any]] = {
        "kd": lambda: kd.ops.sum(dx, axis=axis, out=out),
        "cupy": lambda: cp.sum(cx, axis=axis, out=cout),
        "torch": lambda: torch.sum(tx, dim=axis, out=tout),
    }
    outputs: dict[str, Callable[[], Any]] = {
        "kd": out.to_host,
        "cupy": lambda: cp.asnumpy(cout),
        "torch": lambda: tout.cpu().numpy(),
    }
    poisons: dict[str, Callable[[float], Any]] = {"kd": out.fill, "cupy": cout.fill, "torch": tout.fill_}

    def checked(who: str, when: str) -> None:
        error_bounds.assert_within(outputs[who](), want, bound, f"{who} sum {shape} axis {axis} {when}")
        poisons[who](np.nan)

    for who, call in calls.items():
        poisons[who](np.nan)
        call()
        checked(who, "before timing")
    read_ms = torch_time(lambda: copy_dst.copy_(tx), reps) / 2  # a copy reads and writes
    ours = kd_time(calls["kd"], reps)
    theirs = min(cp_time(calls["cupy"], reps), torch_time(calls["torch"], reps))
    for who in calls:
        checked(who, "after timing")
    dx.close()
    out.close()
    return ours, theirs, read_ms


def bench_axes(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    timers = (_kd_timer(kd.default_session()), _cupy_timer(cp), _torch_timer(torch))
    results: dict[str, float] = {}
    worst_baseline = worst_read = 0.0
    for shape, axis in _cases():
        ours, theirs, read_ms = _bench_case(shape, axis, args.reps, timers)
        name = "x".join(str(d) for d in shape) + f" axis {axis}"
        results[f"{name}: kd (ms)"] = ours
        results[f"{name}: faster of cupy/torch (ms)"] = theirs
        results[f"{name}: kd / faster (target <= 1.1)"] = ours / theirs
        results[f"{name}: kd / read once (target <= 1.5)"] = ours / read_ms
        worst_baseline, worst_read = max(worst_baseline, ours / theirs), max(worst_read, ours / read_ms)
    results["worst kd / faster (target <= 1.1)"] = worst_baseline
    results["worst kd / read once (target <= 1.5)"] = worst_read
    return results


def bench_full(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp

    s = kd.default_session()
    x = sparse_ones(FULL_N, 1)
    exact = np.float32(np.sum(x, dtype=np.float64))
    dx, cx = s.to_device(x), cp.asarray(x)
    out = s.empty((), np.float32)
    results: dict[str, Any] = {}

    def checked(what: str, got: Any) -> None:
        error_bounds.assert_within(got, exact, 0.0, what)

    out.fill(np.nan)
    kd.ops.sum(dx, out=out)
    checked("kd sum before timing", out.to_host())
    out.fill(np.nan)
    ours = _kd_timer(s)(lambda: kd.ops.sum(dx, out=out), args.reps)
    checked("kd sum after timing", out.to_host())

    def cupy_sum() -> None:
        results["cupy"] = cp.sum(cx)

    theirs = _cupy_timer(cp)(cupy_sum, args.reps)
    checked("cupy.sum after timing", cp.asnumpy(results["cupy"]))
    dx.close()
    return {"kd (ms)": ours, "cupy.sum (ms)": theirs, "cupy / kd (target >= 0.97)": theirs / ours}


def bench_cumsum(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    s = kd.default_session()
    x = sparse_ones(CUMSUM_N, 2)
    exact = np.cumsum(x, dtype=np.float64)
    dx, cx = s.to_device(x), cp.asarray(x)
    tx = torch.from_numpy(x).cuda()
    out, tout = s.empty(CUMSUM_N, np.float32), torch.empty_like(tx)
    latest: dict[str, Any] = {}

    def checked(what: str, got: np.ndarray) -> None:
        error_bounds.assert_within(got, exact, 0.0, what)  # integers below 2^24: exact

    def cupy_cumsum() -> None:
        latest["cupy"] = cp.cumsum(cx)

    out.fill(np.nan)
    kd.ops.cumsum(dx, out=out)
    got = out.to_host()
    checked("kd cumsum before timing", got)
    out.fill(np.nan)
    tout.fill_(np.nan)
    ours = _kd_timer(s)(lambda: kd.ops.cumsum(dx, out=out), args.reps)
    torch_ms = _torch_timer(torch)(lambda: torch.cumsum(tx, 0, out=tout), args.reps)
    cupy_ms = _cupy_timer(cp)(cupy_cumsum, args.reps)
    checked("kd cumsum after timing", out.to_host())
    checked("torch.cumsum after timing", tout.cpu().numpy())
    checked("cupy.cumsum after timing", cp.asnumpy(latest["cupy"]))
    for run in range(3):
        if kd.ops.cumsum(dx, out=out) is not out or out.to_host().tobytes() != got.tobytes():
            raise AssertionError(f"kd cumsum: rerun {run + 1} of the same input gave other bits")
    dx.close()
    out.close()
    return {
        "kd (ms)": ours,
        "torch.cumsum (ms)": torch_ms,
        "cupy.cumsum (ms)": cupy_ms,
        "kd throughput / torch (target >= 0.9)": torch_ms / ours,
    }


SECTIONS: dict[str, Section] = {
    "axes": ("sum over one axis, 2^26 float32", bench_axes),
    "full": ("full sum 2^28 float32", bench_full),
    "cumsum": ("cumsum 2^28 float32", bench_cumsum),
    "table": ("issue 21's table: kd / cupy / torch (ms, allocating)", layouts.bench_table),
    "sweep": ("seeded random shapes and axis sets (ms, allocating)", layouts.bench_sweep),
    "views": ("strided views of (8192, 8192) float32 (ms, allocating)", layouts.bench_views),
    "host": ("host cost per warm allocating call (µs)", layouts.bench_host),
}


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
