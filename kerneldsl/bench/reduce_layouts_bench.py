"""Issue 21's sections of ``kerneldsl bench reduce``: any axis set, strided views and host cost,
side by side with CuPy and PyTorch in one process (GPU required).

- table: every row of the issue's table (interleaved axis sets, views, (37, 1000, 129) float16
  along each axis, (4194304, 16) axis 1 and (8192, 8192) axis 0), kd / the faster of cupy and
  torch (target <= 1.1) and, for inputs of 64 MiB or more, kd / reading the input once (every
  32-byte sector it has values in) at the device-to-device copy bandwidth (target <= 1.5);
- sweep: seeded random 1-D..4-D shapes with odd extents, tuple and negative axes, float16,
  float32 and int32, the worst ratio printed;
- views: ``x.T``, ``x[::2]``, ``x[:, ::2]``, ``x[..., 1:-1]`` of an (8192, 8192) float32 array
  against torch on the same view (target <= 1.1);
- host: the per-call host cost of a warm allocating ``kd.ops.sum`` on 1024 float32 and on
  (64, 1024) along each axis against ``torch.sum``, and of the allocating vector products of a
  CG iteration against torch's ``@``: ``kd.blas.gemv`` and ``A @ v`` (4096^2 float32), ``p @ q``
  (4096) (target <= 1.0).

The table, sweep and views kernels take microseconds: each library is timed with its stream held
(``held_timing``: GPU time of calls queued behind a spin kernel, host time per call beside it).
Every library's last timed result is checked against a float64 NumPy reference within each
output's error bound (``error_bounds``; CuPy's and torch's own accumulation within
``BASELINE_SLACK`` times it), the results of every pass poisoned once drained; the host section's
calls are checked before and after timing. A wrong result raises.
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
from kerneldsl.bench import error_bounds
from kerneldsl.bench.held_timing import Lane, Timing, cupy_lane, gpu_cycles_per_ms, held_timing, kd_lane, torch_lane
from kerneldsl.bench.ops_bench import _check, best_rounds

BIG = 64 << 20  # inputs from this many bytes are also held to the copy bandwidth
SECTOR = 32  # bytes: the unit a read of DRAM moves
SWEEP_CASES = 24
SWEEP_SEED = 21
HOST_CALLS = 200

View = Callable[[Any], Any]
Case = tuple[str, tuple[int, ...], Any, Any, View]  # name, shape, dtype, axis, view

_VIEWS: dict[str, View] = {
    "x.T": lambda a: a.T,
    "x[::2]": lambda a: a[::2],
    "x[:, ::2]": lambda a: a[:, ::2],
    "x[..., 1:-1]": lambda a: a[..., 1:-1],
}
_PLAIN: View = lambda a: a  # noqa: E731


def _table_cases() -> list[Case]:
    f16, f32 = np.float16, np.float32
    cases: list[Case] = [
        ("float16 (1001, 7, 513) axis (0, 2)", (1001, 7, 513), f16, (0, 2), _PLAIN),
        ("float32 (129, 77, 1025) axis (0, 2)", (129, 77, 1025), f32, (0, 2), _PLAIN),
        ("float16 (3, 5, 1000003) axis (0, 2)", (3, 5, 1000003), f16, (0, 2), _PLAIN),
        ("x.T of (8192, 8192) float32 axis 0", (8192, 8192), f32, 0, _VIEWS["x.T"]),
        ("x[::2] of (8192, 8192) float32 axis 0", (8192, 8192), f32, 0, _VIEWS["x[::2]"]),
        ("x[:, ::2] of (8192, 8192) float32 axis 1", (8192, 8192), f32, 1, _VIEWS["x[:, ::2]"]),
    ]
    cases += [(f"float16 (37, 1000, 129) axis {a}", (37, 1000, 129), f16, a, _PLAIN) for a in range(3)]
    cases += [  # short slabs (few reduced values between kept axes) and short rows
        ("float16 (93011, 11, 5) axis 1", (93011, 11, 5), f16, 1, _PLAIN),
        ("float32 (100003, 3, 40) axis 1", (100003, 3, 40), f32, 1, _PLAIN),
        ("int32 (250001, 4, 7) axis -2", (250001, 4, 7), np.int32, -2, _PLAIN),
        ("float32 (20001, 5, 3, 9) axis (1, 2)", (20001, 5, 3, 9), f32, (1, 2), _PLAIN),
        ("float32 (1000003, 5) axis 1", (1000003, 5), f32, 1, _PLAIN),
    ]
    cases.append(("float32 (4194304, 16) axis 1", (4194304, 16), f32, 1, _PLAIN))
    cases.append(("float32 (8192, 8192) axis 0", (8192, 8192), f32, 0, _PLAIN))
    return cases


def _sweep_cases(count: int, seed: int) -> list[Case]:
    """Random shapes of 2^20..2^24 elements with odd extents, random axis sets (tuples, negative)."""
    rng = np.random.default_rng(seed)
    cases: list[Case] = []
    while len(cases) < count:
        ndim = int(rng.choice(4, p=[0.1, 0.3, 0.3, 0.3])) + 1
        target = 2 ** rng.uniform(20, 24)
        weights = rng.dirichlet(np.ones(ndim))
        shape = tuple(int(max(1, round(target**w))) | 1 for w in weights)  # odd extents
        dt = rng.choice(np.array([np.float16, np.float32, np.int32], dtype=object))
        k = int(rng.integers(1, ndim + 1))
        picked = sorted(int(a) for a in rng.choice(ndim, k, replace=False))
        axes = tuple(a - ndim if rng.random() < 0.5 else a for a in picked)  # some negative
        axis = axes[0] if len(axes) == 1 else axes
        cases.append((f"{np.dtype(dt).name} {shape} axis {axis}", shape, dt, axis, _PLAIN))
    return cases


def _data(shape: tuple[int, ...], dt: Any, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dt).kind == "i":
        return rng.integers(-100, 100, shape, dtype=np.int32)
    return (2 * rng.random(shape, dtype=np.float32) - 1).astype(dt)  # sums of either sign: no float16 overflow


CALLS = 10  # calls queued behind the spin kernel per timed pass
BASELINE_SLACK = 10.0  # CuPy's and torch's own accumulation (CuPy may sum float16 in float16): 10x kd's bound


def _expected(hx: np.ndarray, axis: Any) -> tuple[np.ndarray, np.ndarray]:
    """The float64 sum of ``hx`` over ``axis`` and each output's error bound (float32
    accumulation, the result's own rounding; integer sums exact)."""
    want = np.sum(hx.astype(np.float64), axis=axis)
    if hx.dtype.kind != "f":
        return want, np.zeros(np.shape(want))
    return want, error_bounds.sum_bound(hx, axis, acc=np.float32, out=hx.dtype)


def _compare(case: Case, reps: int, lanes: tuple[Lane, Lane, Lane], cp: Any, torch: Any) -> dict[str, float]:
    """kd, cupy and torch GPU ms (allocating results; the stream held, as these kernels are
    small) and host µs per call on one case; every library's last timed result checked, each
    pass's results poisoned once drained."""
    name, shape, dt, axis, view = case
    kd_stream, cupy_stream, torch_stream = lanes
    s = kd.default_session()
    x = _data(shape, dt, sum(shape))
    hx = view(x)
    dx: kd.DeviceArray = view(s.to_device(x))
    cx, tx = view(cp.asarray(x)), view(torch.from_numpy(x).cuda())
    dim = axis if isinstance(axis, int) else tuple(axis)
    want, bound = _expected(hx, axis)
    poison = np.nan if hx.dtype.kind == "f" else -1
    ways: dict[str, tuple[Lane, Callable[[], Any], Callable[[Any], np.ndarray], Callable[[Any], object], Any]] = {
        "kd": (kd_stream, lambda: kd.ops.sum(dx, axis=axis), lambda r: r.to_host(), lambda r: r.fill(poison), bound),
        "cupy": (
            cupy_stream,
            lambda: cp.sum(cx, axis=axis),
            cp.asnumpy,
            lambda r: r.fill(poison),
            BASELINE_SLACK * bound,
        ),
        "torch": (
            torch_stream,
            lambda: torch.sum(tx, dim=dim),
            lambda r: r.cpu().numpy(),
            lambda r: r.fill_(poison),
            BASELINE_SLACK * bound,
        ),
    }
    cycles_per_ms = gpu_cycles_per_ms()
    timings: dict[str, Timing] = {}
    wrong: set[str] = set()  # baselines whose answer fell off the bound: reported, never the bar

    def turn(who: str) -> Callable[[], float]:
        lane, run, host, fill, allowed = ways[who]

        def drained(results: list[Any], final: bool) -> None:
            if final:
                got = host(results[-1]).astype(np.float64)
                if who == "kd":
                    error_bounds.assert_within(got, want, allowed, f"{who} sum {name}")
                elif error_bounds.violations(got, want, allowed).any():
                    wrong.add(who)
            for result in results:
                fill(result)

        def time_it() -> float:
            timing = held_timing(lane, run, calls=CALLS, reps=reps, cycles_per_ms=cycles_per_ms, drained=drained)
            if who not in timings or timing.gpu_ms < timings[who].gpu_ms:
                timings[who] = timing
            return timing.gpu_ms

        return time_it

    best_rounds({who: turn(who) for who in ways})
    row = {f"{who} GPU": t.gpu_ms for who, t in timings.items()}
    row.update({f"{who} host": t.host_us for who, t in timings.items()})
    row.update({f"{who} off its error bound": 1.0 for who in sorted(wrong)})
    correct = [timings[who].gpu_ms for who in ("cupy", "torch") if who not in wrong]
    row["ratio"] = timings["kd"].gpu_ms / min(correct) if correct else float("nan")
    if hx.nbytes >= BIG:
        read = sector_bytes(cp, x.shape, hx.itemsize, view)  # a strided view reads the sectors it lies in
        flat = torch.empty(read // hx.itemsize, dtype=tx.dtype, device="cuda")
        copy_dst = torch.empty_like(flat)
        copy = held_timing(
            torch_stream, lambda: copy_dst.copy_(flat), calls=CALLS, reps=reps, cycles_per_ms=cycles_per_ms
        )
        row["read"] = timings["kd"].gpu_ms / (copy.gpu_ms / 2)  # a copy reads and writes
    return row


def sector_bytes(xp: Any, shape: tuple[int, ...], itemsize: int, view: View) -> int:
    """Bytes of the 32-byte sectors (the least DRAM delivers) that ``view`` of a C-contiguous
    array of ``shape`` has values in, counted with the array module ``xp`` (cupy, or numpy): the
    least any read of the view moves. A contiguous view's own bytes; all of the base for
    ``x[:, ::2]`` of 4-byte values."""
    index = view(xp.arange(math.prod(shape)).reshape(shape)).reshape(-1)
    return len(xp.unique(index // (SECTOR // itemsize))) * SECTOR


def _rows(cases: list[Case], args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    lanes = (kd_lane(kd.default_session()), cupy_lane(cp), torch_lane(torch))
    results: dict[str, float] = {}
    worst, worst_read, worst_name = 0.0, 0.0, ""
    for case in cases:
        row = _compare(case, args.reps, lanes, cp, torch)
        name = case[0]
        for who in ("kd", "cupy", "torch"):
            results[f"{name}: {who} GPU (ms, stream held)"] = row[f"{who} GPU"]
            results[f"{name}: {who} host (µs per call)"] = row[f"{who} host"]
        results[f"{name}: kd / faster GPU time (target <= 1.1)"] = row["ratio"]
        if "read" in row:
            results[f"{name}: kd / read once (target <= 1.5)"] = row["read"]
            worst_read = max(worst_read, row["read"])
        if row["ratio"] > worst:
            worst, worst_name = row["ratio"], name
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    results[f"worst kd / faster (target <= 1.1): {worst_name}"] = worst
    if worst_read:
        results["worst kd / read once, inputs >= 64 MiB (target <= 1.5)"] = worst_read
    return results


def bench_table(args: argparse.Namespace) -> dict[str, float]:
    return _rows(_table_cases(), args)


def bench_sweep(args: argparse.Namespace) -> dict[str, float]:
    return _rows(_sweep_cases(args.sweep, args.seed), args)


def bench_views(args: argparse.Namespace) -> dict[str, float]:
    cases: list[Case] = [
        (f"{v} of (8192, 8192) float32 axis {a}", (8192, 8192), np.float32, a, view)
        for v, view in _VIEWS.items()
        for a in (0, 1)
    ]
    return _rows(cases, args)


def _per_call(
    contenders: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], calls: int, reps: int
) -> dict[str, float]:
    """Median host µs per call of ``calls`` back-to-back calls, contenders taking turns; the sync
    after each loop is not timed (fewer calls than a stream queues: the host never waits)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for run, sync in contenders.values():
        run()
        sync()
    for _ in range(reps):
        for name, (run, sync) in contenders.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
            sync()
    return {name: statistics.median(values) for name, values in samples.items()}


def bench_host(args: argparse.Namespace) -> dict[str, float]:
    import torch

    s = kd.default_session()
    results: dict[str, float] = {}
    for shape, axis in (((1024,), None), ((64, 1024), 1), ((1024, 64), 0), ((64, 1024), 0), ((1024, 64), 1)):
        x = np.random.default_rng(1).random(shape, dtype=np.float32)
        dx, tx = s.to_device(x), torch.from_numpy(x).cuda()
        _check(f"kd sum {shape}", kd.ops.sum(dx, axis=axis).to_host(), np.asarray(np.sum(x, axis=axis)), rtol=1e-5)

        def ours(dx: kd.DeviceArray = dx, axis: int | None = axis) -> Any:
            return kd.ops.sum(dx, axis=axis)

        def theirs(tx: Any = tx, axis: int | None = axis) -> Any:
            return torch.sum(tx) if axis is None else torch.sum(tx, dim=axis)

        costs = _per_call(
            {"kd": (ours, s.synchronize), "torch": (theirs, torch.cuda.synchronize)}, HOST_CALLS, args.reps
        )
        _check(f"kd sum {shape} after timing", ours().to_host(), np.asarray(np.sum(x, axis=axis)), rtol=1e-5)
        _check(f"torch sum {shape} after timing", theirs().cpu().numpy(), np.asarray(np.sum(x, axis=axis)), rtol=1e-5)
        name = f"sum {shape} axis {axis}, allocating"
        results[f"{name}: kd (µs)"] = costs["kd"]
        results[f"{name}: torch.sum (µs)"] = costs["torch"]
        results[f"{name}: kd / torch (target <= 1.0)"] = costs["kd"] / costs["torch"]
    a = np.random.default_rng(2).random((4096, 4096), dtype=np.float32)
    v = np.random.default_rng(3).random(4096, dtype=np.float32)
    da, dv, ta, tv = s.to_device(a), s.to_device(v), torch.from_numpy(a).cuda(), torch.from_numpy(v).cuda()
    # name -> (ours, theirs, the float64 reference): the vector products of a CG iteration
    products: dict[str, tuple[Callable[[], Any], Callable[[], Any], np.ndarray]] = {
        "gemv 4096^2": (lambda: kd.blas.gemv(da, dv), lambda: ta @ tv, a.astype(np.float64) @ v),
        "A @ v 4096^2": (lambda: da @ dv, lambda: ta @ tv, a.astype(np.float64) @ v),
        "p @ q 4096": (lambda: dv @ dv, lambda: tv @ tv, np.asarray(v.astype(np.float64) @ v)),
    }
    for name, (ours_product, torch_product, want) in products.items():
        _check(f"kd {name}", ours_product().to_host(), want, rtol=1e-4)
        costs = _per_call(
            {"kd": (ours_product, s.synchronize), "torch": (torch_product, torch.cuda.synchronize)},
            HOST_CALLS,
            args.reps,
        )
        _check(f"kd {name} after timing", ours_product().to_host(), want, rtol=1e-4)
        _check(f"torch {name} after timing", torch_product().cpu().numpy(), want, rtol=1e-4)
        results[f"{name} allocating: kd (µs)"] = costs["kd"]
        results[f"{name} allocating: torch @ (µs)"] = costs["torch"]
        results[f"{name} allocating: kd / torch (target <= 1.0)"] = costs["kd"] / costs["torch"]
    return results
