"""Checked execution's corpus: buggy kernels, one per bug class in several variants (1-D and 2-D
indexing, shared and global memory, 32- and 64-bit index types), each reported with its class at
its line, and the corrected version of each reported clean. Global memory's races include those
between blocks of one launch, and its init check the buffers ``empty()`` made.

Each kernel takes a constant ``FIXED``: False renders the bug, True the correction. The line a
report must name is the body line marked ``// BUG`` (its number in the rendered body file, which
the ``#line`` directives name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NewType

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import (
    BoundsCheckError,
    CheckError,
    InitCheckError,
    RaceCheckError,
    SyncCheckError,
    UndefinedBehaviorError,
)

n = NewType("n", int)
m = NewType("m", int)
f32 = kd.float32

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="the CPU device needs a host C++ compiler")


def pick(fixed: bool, buggy: str, correct: str) -> str:
    return correct if fixed else buggy


# --- bounds ----------------------------------------------------------------------------------------


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def bounds_1d_le(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    cond = pick(FIXED, "i <= n", "i < n")
    return f"""
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if ({cond}) y[i] = 2.0f * x[i];  // BUG
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def bounds_1d_64(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    left = pick(FIXED, "x[i - 1]", "x[i > 0 ? i - 1 : 0]")
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = {left} + x[i];  // BUG
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def bounds_partial_sums(partial: kd.Out[f32, Literal[4]], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    slot = pick(FIXED, "blockIdx.x", "blockIdx.x % 4")
    return f"""
    __shared__ float s[64];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {{
        float t = 0.0f;
        for (int k = 0; k < 64; ++k) t += s[k];
        atomicAdd(&partial[{slot}], t);  // BUG
    }}
    """


@kd.kernel(grid=(kd.cdiv(n, 16), kd.cdiv(m, 16)), block=(16, 16))
def bounds_2d_transposed(out: kd.Out[f32, m, n], x: kd.In[f32, m, n], FIXED: kd.Const[bool] = False) -> str:
    index = pick(FIXED, "j * n + i", "i * n + j")
    return f"""
    index_t j = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    index_t i = blockIdx.y * (index_t)blockDim.y + threadIdx.y;
    if (i < m && j < n) out[i * n + j] = x[{index}];  // BUG
    """


@kd.kernel(grid=(kd.cdiv(n, 16), kd.cdiv(m, 16)), block=(16, 16))
def bounds_2d_right_neighbour(out: kd.Out[f32, m, n], x: kd.In[f32, m, n], FIXED: kd.Const[bool] = False) -> str:
    right = pick(FIXED, "k + 1", "j + 1 < n ? k + 1 : k")
    return f"""
    long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long i = blockIdx.y * (long long)blockDim.y + threadIdx.y;
    long long k = i * n + j;
    if (i < m && j < n) out[k] = x[k] - x[{right}];  // BUG
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def bounds_shared(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    size = pick(FIXED, "64", "65")
    return f"""
    __shared__ float halo[{size}];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    halo[threadIdx.x + 1] = i < n ? x[i] : 0.0f;  // BUG
    __syncthreads();
    if (i < n) y[i] = halo[threadIdx.x + 1];
    """


@kd.kernel(grid=(1, 1), block=(16, 16))
def bounds_shared_2d(out: kd.Out[f32, Literal[16], Literal[16]], FIXED: kd.Const[bool] = False) -> str:
    cols = pick(FIXED, "16", "17")
    return f"""
    __shared__ float tile[16][{cols}];
    tile[threadIdx.y][threadIdx.x + 1] = (float)threadIdx.x;  // BUG
    __syncthreads();
    out[threadIdx.y * 16 + threadIdx.x] = tile[threadIdx.y][threadIdx.x + 1];
    """


# --- races -----------------------------------------------------------------------------------------


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def race_shared_rotate(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    sync = pick(FIXED, "", "__syncthreads();")
    return f"""
    __shared__ float s[64];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    float v = s[(threadIdx.x + 1) % 64];  // BUG
    {sync}
    s[threadIdx.x] = v * 2.0f;
    __syncthreads();
    if (i < n) y[i] = s[threadIdx.x];
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def race_global_neighbour(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    other = pick(FIXED, "y[i ^ 1] += 1.0f;", "y[i] += 1.0f;")
    return f"""
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];  // BUG
    if ((i ^ 1) < n) {other}
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def race_global_64(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    source = pick(FIXED, "y[i ^ 63]", "x[i ^ 63]")
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
    __syncthreads();
    if (i < n) y[i] = y[i] + {source};  // BUG
    """


@kd.kernel(grid=(kd.cdiv(n, 16), kd.cdiv(m, 16)), block=(16, 16))
def race_shared_transpose_2d(out: kd.Out[f32, n, m], x: kd.In[f32, m, n], FIXED: kd.Const[bool] = False) -> str:
    sync = pick(FIXED, "", "__syncthreads();")
    return f"""
    __shared__ float tile[16][17];
    tile[threadIdx.y][threadIdx.x] = 0.0f;
    __syncthreads();
    index_t j = blockIdx.x * (index_t)16 + threadIdx.x, i = blockIdx.y * (index_t)16 + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = (i < m && j < n) ? x[i * n + j] : 0.0f;  // BUG
    {sync}
    index_t oi = blockIdx.x * (index_t)16 + threadIdx.y, oj = blockIdx.y * (index_t)16 + threadIdx.x;
    if (oi < n && oj < m) out[oi * m + oj] = tile[threadIdx.x][threadIdx.y];
    """


@kd.kernel(grid=1, block=64)
def race_shared_counter(count: kd.Out[kd.int32, Literal[1]], FIXED: kd.Const[bool] = False) -> str:
    bump = pick(FIXED, "c += 1;", "atomicAdd(&c, 1);")
    return f"""
    __shared__ int c;
    if (threadIdx.x == 0) c = 0;
    __syncthreads();
    {bump}  // BUG
    __syncthreads();
    if (threadIdx.x == 0) count[0] = c;
    """


@kd.kernel(grid=1, block=64)
def race_warp_exchange(y: kd.Out[f32, Literal[64]], FIXED: kd.Const[bool] = False) -> str:
    sync = pick(FIXED, "", "__syncwarp();")
    return f"""
    __shared__ float s[64];
    s[threadIdx.x] = 0.0f;
    __syncthreads();
    s[threadIdx.x] = (float)threadIdx.x;  // BUG
    {sync}
    y[threadIdx.x] = s[threadIdx.x ^ 1];
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64, shared=64 * 4)
def race_dynamic_shared(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    sync = pick(FIXED, "", "__syncthreads();")
    return f"""
    extern __shared__ float buffer[];
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    buffer[threadIdx.x] = 0.0f;
    __syncthreads();
    buffer[threadIdx.x] = i < n ? x[i] : 0.0f;  // BUG
    {sync}
    if (i < n) y[i] = buffer[threadIdx.x ^ 32];
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def race_blocks_neighbour(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    other = pick(FIXED, "y[i ^ 64]", "y[i]")
    return f"""
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
    if ((i ^ 64) < n) {other} += 1.0f;  // BUG
    """


@kd.kernel(grid=(kd.cdiv(n, 16), kd.cdiv(m, 16)), block=(16, 16))
def race_blocks_2d_64(out: kd.Out[f32, m, n], x: kd.In[f32, m, n], FIXED: kd.Const[bool] = False) -> str:
    source = pick(FIXED, "out[k + 16]", "x[k + 16]")
    return f"""
    long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long i = blockIdx.y * (long long)blockDim.y + threadIdx.y;
    long long k = i * n + j;
    if (i < m && j < n) out[k] = x[k];
    if (i < m && j + 16 < n) out[k] += {source};  // BUG
    """


@kd.kernel(grid=16, block=64)
def race_blocks_unfenced_partials(
    total: kd.Out[f32, Literal[1]],
    partial: kd.Out[f32, Literal[16]],
    ticket: kd.Out[kd.uint32, Literal[1]],
    x: kd.In[f32, Literal[1024]],
    FIXED: kd.Const[bool] = False,
) -> str:
    fence = pick(FIXED, "", "__threadfence();")
    return f"""
    __shared__ float s[64];
    __shared__ bool last;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    s[threadIdx.x] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) {{
        float t = 0.0f;
        for (int k = 0; k < 64; ++k) t += s[k];
        partial[blockIdx.x] = t;
        {fence}
        last = atomicAdd(&ticket[0], 1u) == gridDim.x - 1;
    }}
    __syncthreads();
    if (last && threadIdx.x == 0) {{
        float t = 0.0f;
        for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b];  // BUG
        total[0] = t;
    }}
    """


# --- init ------------------------------------------------------------------------------------------


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def init_half_written(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    limit = pick(FIXED, "32", "64")
    return f"""
    __shared__ float s[64];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < {limit}) s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = s[63 - threadIdx.x];  // BUG
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64, shared=64 * 4)
def init_dynamic(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    limit = pick(FIXED, "63", "64")
    return f"""
    extern __shared__ float buffer[];
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (threadIdx.x < {limit}) buffer[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = buffer[63 - threadIdx.x];  // BUG
    """


@kd.kernel(grid=1, block=(16, 16))
def init_2d_edge(out: kd.Out[f32, Literal[16], Literal[16]], FIXED: kd.Const[bool] = False) -> str:
    fill = pick(FIXED, "", "if (threadIdx.x == 0) tile[threadIdx.y][16] = 0.0f;")
    return f"""
    __shared__ float tile[16][17];
    tile[threadIdx.y][threadIdx.x] = (float)threadIdx.y;
    {fill}
    __syncthreads();
    out[threadIdx.y * 16 + threadIdx.x] = tile[threadIdx.y][threadIdx.x + 1];  // BUG
    """


@kd.kernel(grid=1, block=64)
def init_broadcast(y: kd.Out[f32, Literal[64]], x: kd.In[f32, Literal[64]], FIXED: kd.Const[bool] = False) -> str:
    leader = pick(FIXED, "64", "0")
    return f"""
    __shared__ float scale;
    if (threadIdx.x == {leader}) scale = x[0];
    __syncthreads();
    long long t = threadIdx.x;
    y[t] = x[t] * scale;  // BUG
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def init_empty_tail(y: kd.Out[f32, n], scratch: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    limit = pick(FIXED, "n / 2", "n")
    return f"""
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < {limit}) scratch[i] = x[i];
    if (i < n) y[i] = 2.0f * scratch[i];  // BUG
    """


@kd.kernel(grid=(kd.cdiv(n, 16), kd.cdiv(m, 16)), block=(16, 16))
def init_empty_2d_64(
    out: kd.Out[f32, m, n], scratch: kd.Out[f32, m, n], x: kd.In[f32, m, n], FIXED: kd.Const[bool] = False
) -> str:
    columns = pick(FIXED, "n - 1", "n")
    return f"""
    long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long i = blockIdx.y * (long long)blockDim.y + threadIdx.y;
    long long k = i * n + j;
    if (i < m && j < {columns}) scratch[k] = x[k] * x[k];
    if (i < m && j < n) out[k] = scratch[k] + 1.0f;  // BUG
    """


# --- sync ------------------------------------------------------------------------------------------


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def sync_early_exit(y: kd.Out[f32, n], x: kd.In[f32, n], FIXED: kd.Const[bool] = False) -> str:
    leave = pick(FIXED, "if (i >= n) return;", "")
    return f"""
    __shared__ float s[64];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    {leave}
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();  // BUG
    if (i < n) y[i] = s[threadIdx.x ^ 1];
    """


@kd.kernel(grid=1, block=64)
def sync_divergent_barriers(y: kd.Out[f32, Literal[64]], FIXED: kd.Const[bool] = False) -> str:
    inner = pick(FIXED, "__syncthreads();", "")
    other = pick(FIXED, "__syncthreads();", "")
    after = pick(FIXED, "", "__syncthreads();")
    return f"""
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x < 16) {{
        {inner}  // BUG
    }} else {{
        {other}
    }}
    {after}
    y[threadIdx.x] = s[63 - threadIdx.x];
    """


@kd.kernel(grid=(1, 1), block=(8, 8))
def sync_trip_count_2d(y: kd.Out[f32, Literal[64]], FIXED: kd.Const[bool] = False) -> str:
    trips = pick(FIXED, "threadIdx.y % 2 + 1", "2")
    return f"""
    __shared__ float s[64];
    unsigned t = threadIdx.y * 8 + threadIdx.x;
    s[t] = 0.0f;
    for (unsigned k = 0; k < {trips}; ++k) {{
        __syncthreads();  // BUG
        s[t] += 1.0f;
    }}
    y[t] = s[t];
    """


@kd.kernel(grid=1, block=32)
def sync_mask_excludes_lane(y: kd.Out[f32, Literal[32]], FIXED: kd.Const[bool] = False) -> str:
    mask = pick(FIXED, "0xfffffffeu", "0xffffffffu")
    return f"""
    float v = (float)threadIdx.x;
    v = __shfl_sync({mask}, v, 1);  // BUG
    y[threadIdx.x] = v;
    """


@kd.kernel(grid=1, block=32)
def sync_mask_names_exited(y: kd.Out[f32, Literal[32]], FIXED: kd.Const[bool] = False) -> str:
    mask = pick(FIXED, "0xffffffffu", "0x0000ffffu")
    return f"""
    float v = (float)threadIdx.x;
    if (threadIdx.x >= 16) {{ y[threadIdx.x] = v; return; }}
    v += __shfl_down_sync({mask}, v, 1);  // BUG
    y[threadIdx.x] = v;
    """


@kd.kernel(grid=1, block=64)
def sync_warp_count(y: kd.Out[kd.int32, Literal[64]], FIXED: kd.Const[bool] = False) -> str:
    guard = pick(FIXED, "if (threadIdx.x % 2 == 0)", "")
    return f"""
    int votes = 0;
    {guard} votes = __popc(__ballot_sync(0xffffffffu, threadIdx.x % 3 == 0));  // BUG
    y[threadIdx.x] = votes;
    """


# --- undefined behaviour ---------------------------------------------------------------------------


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def undefined_shift(y: kd.Out[kd.int32, n], x: kd.In[kd.int32, n], FIXED: kd.Const[bool] = False) -> str:
    amount = pick(FIXED, "x[i]", "(x[i] & 31)")
    return f"""
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1 << {amount};  // BUG
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def undefined_overflow(y: kd.Out[kd.int32, n], x: kd.In[kd.int32, n], FIXED: kd.Const[bool] = False) -> str:
    product = pick(FIXED, "x[i] * 0x4000000", "(int)((unsigned)x[i] * 0x4000000u)")
    return f"""
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {product};  // BUG
    """


# --- the corpus ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A corpus kernel, the class its bug is reported as, and the arguments it is called with."""

    kernel: Any
    error: type[CheckError]
    arguments: Callable[[Any], tuple[Any, ...]]

    @property
    def name(self) -> str:
        return str(self.kernel.signature.name)


def vectors(length: int, dtype: Any = np.float32) -> Callable[[Any], tuple[Any, ...]]:
    def make(session: Any) -> tuple[Any, ...]:
        values = np.arange(length).astype(dtype)
        return session.to_device(np.zeros(length, dtype)), session.to_device(values)

    return make


def one(shape: tuple[int, ...], dtype: Any = np.float32) -> Callable[[Any], tuple[Any, ...]]:
    return lambda session: (session.to_device(np.zeros(shape, dtype)),)


def partial_sums(session: Any) -> tuple[Any, ...]:
    return session.to_device(np.zeros(4, np.float32)), session.to_device(np.ones(1000, np.float32))


def matrices(rows: int, cols: int, transposed: bool) -> Callable[[Any], tuple[Any, ...]]:
    def make(session: Any) -> tuple[Any, ...]:
        x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
        out = np.zeros((cols, rows) if transposed else (rows, cols), np.float32)
        return session.to_device(out), session.to_device(x)

    return make


def partials(session: Any) -> tuple[Any, ...]:
    """The unfenced partial sums' arguments: the partials' buffer is the kernel's to write."""
    up = session.to_device
    return up(np.zeros(1, np.float32)), session.empty(16), up(np.zeros(1, np.uint32)), up(np.ones(1024, np.float32))


def with_scratch(*shape: int) -> Callable[[Any], tuple[Any, ...]]:
    """An output, a scratch buffer made by ``empty`` (nothing written), an input."""

    def make(session: Any) -> tuple[Any, ...]:
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        return session.to_device(np.zeros(shape, np.float32)), session.empty(shape), session.to_device(x)

    return make


def shifts(session: Any) -> tuple[Any, ...]:
    return session.to_device(np.zeros(64, np.int32)), session.to_device(np.arange(64, dtype=np.int32))


def accumulate(session: Any) -> tuple[Any, ...]:
    return session.to_device(np.zeros(64, np.float32)), session.to_device(np.ones(64, np.float32))


CORPUS = (
    Case(bounds_1d_le, BoundsCheckError, vectors(1000)),
    Case(bounds_1d_64, BoundsCheckError, vectors(1000)),
    Case(bounds_partial_sums, BoundsCheckError, partial_sums),
    Case(bounds_2d_transposed, BoundsCheckError, matrices(20, 40, transposed=False)),
    Case(bounds_2d_right_neighbour, BoundsCheckError, matrices(20, 40, transposed=False)),
    Case(bounds_shared, BoundsCheckError, vectors(256)),
    Case(bounds_shared_2d, BoundsCheckError, one((16, 16))),
    Case(race_shared_rotate, RaceCheckError, vectors(256)),
    Case(race_global_neighbour, RaceCheckError, vectors(256)),
    Case(race_global_64, RaceCheckError, vectors(256)),
    Case(race_shared_transpose_2d, RaceCheckError, matrices(32, 48, transposed=True)),
    Case(race_shared_counter, RaceCheckError, one((1,), np.int32)),
    Case(race_warp_exchange, RaceCheckError, one((64,))),
    Case(race_dynamic_shared, RaceCheckError, vectors(256)),
    Case(race_blocks_neighbour, RaceCheckError, vectors(256)),
    Case(race_blocks_2d_64, RaceCheckError, matrices(20, 40, transposed=False)),
    Case(race_blocks_unfenced_partials, RaceCheckError, partials),
    Case(init_half_written, InitCheckError, vectors(256)),
    Case(init_dynamic, InitCheckError, vectors(256)),
    Case(init_2d_edge, InitCheckError, one((16, 16))),
    Case(init_broadcast, InitCheckError, accumulate),
    Case(init_empty_tail, InitCheckError, with_scratch(1000)),
    Case(init_empty_2d_64, InitCheckError, with_scratch(20, 40)),
    Case(sync_early_exit, SyncCheckError, vectors(200)),
    Case(sync_divergent_barriers, SyncCheckError, one((64,))),
    Case(sync_trip_count_2d, SyncCheckError, one((64,))),
    Case(sync_mask_excludes_lane, SyncCheckError, one((32,))),
    Case(sync_mask_names_exited, SyncCheckError, one((32,))),
    Case(sync_warp_count, SyncCheckError, one((64,), np.int32)),
    Case(undefined_shift, UndefinedBehaviorError, shifts),
    Case(undefined_overflow, UndefinedBehaviorError, shifts),
)
CHECKS = "all,undefined"


@pytest.fixture(scope="module")
def checked() -> Any:
    with kd.Session(device="cpu", checks=CHECKS) as session:
        yield session


def marked_line(case: Case, session: Any, arguments: tuple[Any, ...]) -> str:
    """``file:line`` of the body line marked ``// BUG``, as the rendered source's ``#line`` names it
    (this file's line, where the body is written)."""
    build = case.kernel.inspect(*arguments, arch=session.gpu.arch, output=session.gpu.output, FIXED=False)
    body = build.generated.body.splitlines()
    number = next(k for k, text in enumerate(body, 1) if "// BUG" in text)
    file, line = build.generated.body_places[number - 1]
    return f"{file}:{line}"


def test_the_corpus_has_a_kernel_per_class_in_several_variants() -> None:
    by_class: dict[type[CheckError], int] = {}
    for case in CORPUS:
        by_class[case.error] = by_class.get(case.error, 0) + 1
    assert len(CORPUS) >= 25 and min(by_class.values()) >= 2


# bounds_partial_sums is also caught before it runs: its first build warns (PerBlockExtentWarning)
@pytest.mark.filterwarnings("ignore::kerneldsl.errors.PerBlockExtentWarning")
@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_a_buggy_kernel_is_reported_with_its_class_at_its_line(checked: Any, case: Case) -> None:
    arguments = case.arguments(checked)
    with pytest.raises(CheckError) as found:
        case.kernel(*arguments, FIXED=False)
        checked.synchronize()
    assert type(found.value) is case.error, str(found.value)
    assert marked_line(case, checked, arguments) in found.value.sites, str(found.value)
    assert f"kernel 'kd_{case.name}'" in str(found.value)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_the_corrected_kernel_is_reported_clean(checked: Any, case: Case) -> None:
    case.kernel(*case.arguments(checked), FIXED=True)
    checked.synchronize()
