"""Autotuning on the GPU (``kerneldsl bench tune``): does the tuned call run the best
configuration, what does tuning cost, and is a warm tuned call as cheap as an untuned one.

- matmul: a shared-memory tiled float32 matmul ``@kd.kernel`` (``TILE`` x ``TILE`` outputs a
  block, ``TX`` x ``TY`` threads, ``TILE / TY`` x ``TILE / TX`` outputs a thread), six configs,
  three shapes;
- rows: a row sum (one block a row, ``ITEMS`` independent coalesced loads in flight a thread,
  warp shuffles) with ``block`` overrides and ``ITEMS``, twelve configs, three shapes.

For each shape: every configuration measured on its own (GPU time with the stream held, its
output poisoned before every pass and checked after the last), the winner the tuner picked and
its tuning time (compiles included: the run uses a fresh cache), tuned / best (target <= 1.03).
Then the host cost of a warm call (µs) of a tuned kernel against its winner called directly, for
a shape key (a Python dispatch to the winner's C path) and a dtype key (the winner's C entry
remembered on the tuned kernel itself; target: the same cost).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from typing import Any, NewType, TypeVar

import numpy as np

import kerneldsl as kd
from kerneldsl.bench.held_timing import gpu_cycles_per_ms, held_timing, kd_lane
from kerneldsl.bench.ops_bench import _check
from kerneldsl.bench.report import Report, Section, run_sections

T = TypeVar("T")
m = NewType("m", int)
k = NewType("k", int)
n = NewType("n", int)
rows = NewType("rows", int)
cols = NewType("cols", int)

BK = 16  # the matmul's k-slice per shared-memory stage
MATMUL_CONFIGS = [{"TILE": t, "TX": tx, "TY": ty} for t in (32, 64, 128) for tx, ty in ((16, 16), (32, 8))]
ROWS_CONFIGS = {"block": [128, 256, 512], "ITEMS": [1, 2, 4, 8]}
MATMUL_SHAPES = ((512, 512, 512), (2048, 2048, 2048), (4096, 1024, 4096))  # (m, k, n)
ROWS_SHAPES = ((16384, 1024), (4096, 8192), (512, 65536))
HOST_CALLS = 2000


@kd.kernel(grid=(kd.cdiv(n, "TILE"), kd.cdiv(m, "TILE")), block=("TX", "TY"))
def tiled_matmul(
    out: kd.Out[kd.float32, m, n],
    a: kd.In[kd.float32, m, k],
    b: kd.In[kd.float32, k, n],
    TILE: kd.Const[int] = 64,
    TX: kd.Const[int] = 16,
    TY: kd.Const[int] = 16,
) -> str:
    return f"""
    constexpr int TILE = {TILE}, TX = {TX}, TY = {TY}, BK = {BK}, RM = TILE / TY, RN = TILE / TX;
    __shared__ float As[BK][TILE + 4];
    __shared__ float Bs[BK][TILE + 4];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
    const index_t row0 = (index_t)blockIdx.y * TILE, col0 = (index_t)blockIdx.x * TILE;
    float acc[RM][RN];
    #pragma unroll
    for (int i = 0; i < RM; ++i)
      #pragma unroll
      for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
    for (index_t k0 = 0; k0 < k; k0 += BK) {{
      for (int e = tid; e < TILE * BK; e += TX * TY) {{
        const int r = e / BK, q = e % BK;
        const index_t gr = row0 + r, gq = k0 + q;
        As[q][r] = (gr < m && gq < k) ? {a}[gr * k + gq] : 0.0f;
      }}
      for (int e = tid; e < TILE * BK; e += TX * TY) {{
        const int r = e / TILE, q = e % TILE;
        const index_t gr = k0 + r, gq = col0 + q;
        Bs[r][q] = (gr < k && gq < n) ? {b}[gr * n + gq] : 0.0f;
      }}
      __syncthreads();
      #pragma unroll
      for (int kk = 0; kk < BK; ++kk) {{
        float av[RM], bv[RN];
        #pragma unroll
        for (int i = 0; i < RM; ++i) av[i] = As[kk][ty + i * TY];
        #pragma unroll
        for (int j = 0; j < RN; ++j) bv[j] = Bs[kk][tx + j * TX];
        #pragma unroll
        for (int i = 0; i < RM; ++i)
          #pragma unroll
          for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }}
      __syncthreads();
    }}
    #pragma unroll
    for (int i = 0; i < RM; ++i) {{
      const index_t r = row0 + ty + i * TY;
      #pragma unroll
      for (int j = 0; j < RN; ++j) {{
        const index_t q = col0 + tx + j * TX;
        if (r < m && q < n) {out}[r * n + q] = acc[i][j];
      }}
    }}
    """


@kd.kernel(grid=rows, block=256)
def row_sum(out: kd.Out[kd.float32, rows], x: kd.In[kd.float32, rows, cols], ITEMS: kd.Const[int] = 1) -> str:
    return f"""
    constexpr int ITEMS = {ITEMS};
    const index_t row = blockIdx.x, base = row * cols;
    float acc[ITEMS];
    #pragma unroll
    for (int u = 0; u < ITEMS; ++u) acc[u] = 0.0f;
    for (index_t j = threadIdx.x; j < cols; j += (index_t)blockDim.x * ITEMS) {{
      #pragma unroll
      for (int u = 0; u < ITEMS; ++u) {{
        const index_t jj = j + (index_t)u * blockDim.x;
        if (jj < cols) acc[u] += {x}[base + jj];
      }}
    }}
    float s = 0.0f;
    #pragma unroll
    for (int u = 0; u < ITEMS; ++u) s += acc[u];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    __shared__ float partial[32];
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {{
      s = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
      for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
      if (threadIdx.x == 0) {out}[row] = s;
    }}
    """


@kd.kernel(grid=kd.cdiv(n, "BLOCK"), block="BLOCK")
def fill(y: kd.Out[T, n], value: kd.Scalar[T], BLOCK: kd.Const[int] = 256) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {value};"


def tuned_matmul(rep_ms: float = 20.0) -> kd.Autotuned[Any]:
    return kd.autotune(configs=MATMUL_CONFIGS, key=("m", "k", "n"), rep_ms=rep_ms)(tiled_matmul)


def tuned_row_sum(rep_ms: float = 20.0) -> kd.Autotuned[Any]:
    return kd.autotune(configs=ROWS_CONFIGS, key=("rows", "cols"), rep_ms=rep_ms)(row_sum)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=20, help="timed batches per measurement (median reported)")
    parser.add_argument("--only", choices=list(SECTIONS), action="append", help="run only these sections (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _fresh_cache() -> None:
    """A private, empty disk cache for the run: tuning time then includes the compiles, and a
    second run measures again instead of reading the first run's records."""
    from kerneldsl.cache import DiskCache, set_default_cache

    set_default_cache(DiskCache(tempfile.mkdtemp(prefix="kerneldsl-bench-tune-")))


CALLS = 10  # calls queued behind the spin kernel per timed pass


def _tuned_case(
    name: str, tuned: kd.Autotuned[Any], args: tuple[Any, ...], check: Callable[[], None], reps: int
) -> dict[str, float]:
    """Tune for ``args``, then measure every configuration one at a time and the tuned call, each
    with the stream held (GPU time per call) and checked on the calls it timed: ``args[0]``, the
    output, is poisoned before every pass and checked after the last."""
    lane, cycles_per_ms = kd_lane(kd.default_session()), gpu_cycles_per_ms()
    out = args[0]

    def timed(run: Callable[[], Any]) -> float:
        def drained(results: list[Any], final: bool) -> None:
            if final:
                check()
            out.fill(np.nan)

        out.fill(np.nan)
        return held_timing(lane, run, calls=CALLS, reps=reps, cycles_per_ms=cycles_per_ms, drained=drained).gpu_ms

    start = time.perf_counter()
    choice = tuned.tune(*args)
    tuning_s = time.perf_counter() - start
    out.fill(np.nan)
    tuned(*args)
    check()
    measured: list[tuple[str, float]] = []
    for config in tuned.configs:
        variant = tuned.variant(config)
        ms = timed(lambda: variant(*args)) if choice.timings[config.label].ms is not None else math.nan  # noqa: B023
        measured.append((config.label, ms))
    tuned_ms = timed(lambda: tuned(*args))
    best_label, best_ms = min(((label, ms) for label, ms in measured if not math.isnan(ms)), key=lambda r: r[1])
    print(f"  {name}: winner {choice.config.label} (tuner {choice.ms:.4f} ms), tuning {tuning_s:.2f} s")
    for label, ms in measured:
        mark = " <- winner" if label == choice.config.label else (" <- best alone" if label == best_label else "")
        shown = "skipped: " + str(choice.timings[label].error) if math.isnan(ms) else f"{ms:9.4f} ms"
        print(f"    {label:28s} {shown}{mark}")
    return {
        f"{name}: tuning time (s)": tuning_s,
        f"{name}: best config alone (GPU ms, stream held)": best_ms,
        f"{name}: tuned call (GPU ms, stream held)": tuned_ms,
        f"{name}: tuned / best (target <= 1.03)": tuned_ms / best_ms,
    }


def bench_matmul(args: argparse.Namespace) -> dict[str, float]:
    _fresh_cache()
    s = kd.default_session()
    rng = np.random.default_rng(0)
    tuned = tuned_matmul()
    results: dict[str, float] = {}
    for height, depth, width in MATMUL_SHAPES:
        a = rng.uniform(-1, 1, (height, depth)).astype(np.float32)
        b = rng.uniform(-1, 1, (depth, width)).astype(np.float32)
        da, db, out = s.to_device(a), s.to_device(b), s.empty((height, width), np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        name = f"{height}x{depth} @ {depth}x{width}"

        def check() -> None:
            _check(f"matmul {name}", out.to_host(), want, rtol=1e-4, atol=1e-3)  # noqa: B023

        results.update(_tuned_case(name, tuned, (out, da, db), check, args.reps))
        for d in (da, db, out):
            d.close()
    return results


def bench_rows(args: argparse.Namespace) -> dict[str, float]:
    _fresh_cache()
    s = kd.default_session()
    rng = np.random.default_rng(1)
    tuned = tuned_row_sum()
    results: dict[str, float] = {}
    for height, width in ROWS_SHAPES:
        x = rng.random((height, width), dtype=np.float32)
        dx, out = s.to_device(x), s.empty(height, np.float32)
        want = x.astype(np.float64).sum(axis=1)
        name = f"{height}x{width} row sums"

        def check() -> None:
            _check(f"row sums {name}", out.to_host(), want, rtol=1e-4, atol=0.0)  # noqa: B023

        results.update(_tuned_case(name, tuned, (out, dx), check, args.reps))
        dx.close()
        out.close()
    return results


def _host_us(call: Callable[[], Any]) -> float:
    """Median µs per call over batches of ``HOST_CALLS`` warm calls of a tiny kernel."""
    s = kd.default_session()
    call()
    s.synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(HOST_CALLS):
            call()
        samples.append((time.perf_counter() - start) / HOST_CALLS * 1e6)
        s.synchronize()
    return sorted(samples)[len(samples) // 2]


def bench_host(args: argparse.Namespace) -> dict[str, float]:
    _fresh_cache()
    s = kd.default_session()
    out, x = s.empty(4, np.float32), s.to_device(np.ones((4, 256), np.float32))
    rows = tuned_row_sum(rep_ms=2.0)
    winner = rows.tune(out, x).variant
    by_dtype = kd.autotune(configs={"BLOCK": [128, 256]}, key=("T",), rep_ms=2.0)(fill)
    y = s.empty(1024, np.float32)
    plain = by_dtype.tune(y, np.float32(1)).variant
    shape_key, shape_plain = _host_us(lambda: rows(out, x)), _host_us(lambda: winner(out, x))
    dtype_key, dtype_plain = _host_us(lambda: by_dtype(y, 1.0)), _host_us(lambda: plain(y, 1.0))
    checks: list[tuple[str, Callable[[], Any], kd.DeviceArray, np.ndarray]] = [
        ("tuned row sums", lambda: rows(out, x), out, np.full(4, 256, np.float32)),
        ("tuned fill", lambda: by_dtype(y, 1.0), y, np.ones(1024, np.float32)),
    ]
    for label, call, target, want in checks:  # the calls timed, on poisoned outputs
        target.fill(np.nan)
        call()
        _check(f"{label} after timing", target.to_host(), want)
    return {
        "shape key: tuned call (µs)": shape_key,
        "shape key: its winner called directly (µs)": shape_plain,
        "shape key: tuned / direct": shape_key / shape_plain,
        "dtype key: tuned call (µs)": dtype_key,
        "dtype key: its winner called directly (µs)": dtype_plain,
        "dtype key: tuned / direct (target 1.0)": dtype_key / dtype_plain,
    }


SECTIONS: dict[str, Section] = {
    "matmul": ("tiled matmul, TILE x block configs (ms)", bench_matmul),
    "rows": ("row sums, block x ITEMS configs (ms)", bench_rows),
    "host": ("warm call host cost, tuned vs its winner (µs)", bench_host),
}


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
