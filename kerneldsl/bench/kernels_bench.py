"""CUDA C++ as people write it, timed against kerneldsl's own ops (GPU and the headers extra).

- grid_sync: a one-kernel sum of 2^28 float32 with a cooperative launch (each block reduces a
  grid-stride share, ``cooperative_groups::this_grid().sync()``, block 0 folds the partials),
  against ``kd.ops.sum`` of the same array (target: <= 1.1x), both checked against NumPy.
- cub: the same sum with ``cub::BlockReduce`` per block and a second ``kd.ops.sum`` over the
  block sums, checked against NumPy; timed beside ``kd.ops.sum`` for reference.

Every kernel here launches from the C path when warm, as any kernel does.
"""

from __future__ import annotations

import argparse
from typing import Any, Literal, NewType

import numpy as np

import kerneldsl as kd
from kerneldsl.bench.ops_bench import _gbps, _kd_timer
from kerneldsl.bench.report import Report, Section, run_sections

N = 1 << 28
BLOCK = 256
g = NewType("g", int)  # shape symbols: the partial sums, and the input
n = NewType("n", int)
BLOCKS_PER_SM = 4  # 4 x 256 threads: resident together on any sm_90 SM at this kernel's registers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per measurement (median reported)")
    parser.add_argument("--only", choices=["grid_sync", "cub"], action="append", help="run only these sections")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


_SHARE = """
    float acc = 0.0f;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const float4* v = reinterpret_cast<const float4*>({x});
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n / 4; i += stride) {{
        const float4 t = v[i];
        acc += (t.x + t.y) + (t.z + t.w);
    }}
    for (index_t i = n / 4 * 4 + blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n; i += stride) acc += {x}[i];
"""


def _block_sum(x: Any, partial: Any) -> str:
    """Each block's grid-stride share of ``x`` folded with cub::BlockReduce into ``partial[blockIdx.x]``."""
    return f"""
    #include <cub/block/block_reduce.cuh>
    typedef cub::BlockReduce<float, {BLOCK}> Reduce;
    __shared__ typename Reduce::TempStorage scratch;
    {_SHARE.format(x=x)}
    const float block_total = Reduce(scratch).Sum(acc);
    if (threadIdx.x == 0) {partial}[blockIdx.x] = block_total;
    """


@kd.kernel(grid=kd.sym("g"), block=BLOCK, cooperative=True)
def grid_sum(total: kd.Out[kd.float32, Literal[1]], partial: kd.InOut[kd.float32, g], x: kd.In[kd.float32, n]) -> str:
    return f"""
    #include <cooperative_groups.h>
    {_block_sum(x, partial)}
    cooperative_groups::this_grid().sync();
    if (blockIdx.x == 0) {{
        float folded = 0.0f;
        for (index_t b = threadIdx.x; b < g; b += blockDim.x) folded += {partial}[b];
        __syncthreads();
        const float all = Reduce(scratch).Sum(folded);
        if (threadIdx.x == 0) {total}[0] = all;
    }}
    """


@kd.kernel(grid=kd.sym("g"), block=BLOCK)
def cub_block_sums(partial: kd.Out[kd.float32, g], x: kd.In[kd.float32, n]) -> str:
    return _block_sum(x, partial)


def _data(session: kd.Session) -> tuple[Any, float]:
    x = kd.random.uniform(N, dtype=np.float32, seed=7, session=session)
    return x, float(x.to_host().astype(np.float64).sum())


def _check(name: str, got: float, want: float) -> None:
    if abs(got - want) > 1e-4 * abs(want):
        raise AssertionError(f"{name}: {got} against NumPy's float64 {want}")


def bench_grid_sync(args: argparse.Namespace) -> dict[str, float]:
    s = kd.default_session()
    x, want = _data(s)
    g = BLOCKS_PER_SM * s.gpu.multiprocessors
    total, partial = s.zeros(1, np.float32), s.zeros(g, np.float32)
    grid_sum(total, partial, x)
    _check("grid_sum", float(total.to_host()[0]), want)
    _check("kd.ops.sum", float(kd.ops.sum(x).to_host()), want)
    timer = _kd_timer(s)
    total.fill(np.nan)
    ours = timer(lambda: grid_sum(total, partial, x), args.reps)
    _check("grid_sum after timing", float(total.to_host()[0]), want)
    ops = timer(lambda: kd.ops.sum(x), args.reps)
    _check("kd.ops.sum after timing", float(kd.ops.sum(x).to_host()), want)
    return {
        "cooperative grid.sync sum (ms)": ours,
        "kd.ops.sum (ms)": ops,
        "grid.sync sum (GB/s read)": _gbps(N * 4, ours),
        "grid.sync / kd.ops.sum (target <= 1.1)": ours / ops,
    }


def bench_cub(args: argparse.Namespace) -> dict[str, float]:
    s = kd.default_session()
    x, want = _data(s)
    g = BLOCKS_PER_SM * s.gpu.multiprocessors
    partial = s.zeros(g, np.float32)

    def two_pass() -> Any:
        cub_block_sums(partial, x)
        return kd.ops.sum(partial)

    _check("cub::BlockReduce + kd.ops.sum", float(two_pass().to_host()), want)
    timer = _kd_timer(s)
    partial.fill(np.nan)
    ours = timer(two_pass, args.reps)
    _check("cub::BlockReduce + kd.ops.sum after timing", float(kd.ops.sum(partial).to_host()), want)
    ops = timer(lambda: kd.ops.sum(x), args.reps)
    return {
        "cub::BlockReduce + kd.ops.sum of the block sums (ms)": ours,
        "kd.ops.sum (ms)": ops,
        "cub two-pass / kd.ops.sum": ours / ops,
    }


SECTIONS: dict[str, Section] = {
    "grid_sync": ("sum of 2^28 float32 in one cooperative kernel (grid.sync)", bench_grid_sync),
    "cub": ("sum of 2^28 float32 with cub::BlockReduce", bench_cub),
}


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
