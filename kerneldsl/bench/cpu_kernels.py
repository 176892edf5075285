"""The kernels ``kerneldsl bench cpu`` runs on the CPU device, written as CUDA users write them.

The five computations of ``cpu_cases`` as ``@kd.kernel``s with CUDA C++ bodies, compiled
unchanged for the host: saxpy and the stencil a thread an element (no barrier: the CPU device
runs their threads as a loop); a 32x32 shared-memory tiled transpose with ``__syncthreads``; a
block sum of warp shuffles and a 256-bin shared-memory histogram of ``atomicAdd``s, both over a
grid-stride loop and a thread an element (the CPU device splits them at their waits). Then the
micro-kernels of waiting: the same trivial work with ``k`` barriers or ``k`` warp shuffles a
thread, ``k`` a run-time scalar, against that work without either, split and (``ON_FIBERS``) on
fibers.
"""

from __future__ import annotations

from typing import Literal, NewType

import kerneldsl as kd

n = NewType("n", int)
m = NewType("m", int)

BLOCK = 256
TILE, TILE_ROWS = 32, 8


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def saxpy(
    out: kd.Out[kd.float32, n], x: kd.In[kd.float32, n], y: kd.In[kd.float32, n], alpha: kd.Scalar[kd.float32]
) -> str:
    return """
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
    """


@kd.kernel(grid=(kd.cdiv(n, TILE), kd.cdiv(m, TILE)), block=(TILE, TILE_ROWS))
def transpose(out: kd.Out[kd.float32, n, m], x: kd.In[kd.float32, m, n]) -> str:
    # The classic: a tile read along x's rows, written along out's rows, a column of padding
    # against shared-memory bank conflicts.
    return f"""
    __shared__ float tile[{TILE}][{TILE + 1}];
    index_t col = blockIdx.x * {TILE} + threadIdx.x, row = blockIdx.y * {TILE} + threadIdx.y;
    for (int j = 0; j < {TILE}; j += {TILE_ROWS})
        if (col < n && row + j < m) tile[threadIdx.y + j][threadIdx.x] = x[(row + j) * n + col];
    __syncthreads();
    col = blockIdx.y * {TILE} + threadIdx.x;
    row = blockIdx.x * {TILE} + threadIdx.y;
    for (int j = 0; j < {TILE}; j += {TILE_ROWS})
        if (col < m && row + j < n) out[(row + j) * m + col] = tile[threadIdx.x][threadIdx.y + j];
    """


_GRID_STRIDE = (
    "for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n; i += (index_t)blockDim.x * gridDim.x)"
)
_ONE_ELEMENT = "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n)"


def _block_sum(each_element: str) -> str:
    """Warp shuffles down to a lane, a shared slot a warp, the first warp shuffles those, and one
    ``atomicAdd`` a block."""
    return f"""
    float v = 0.0f;
    {{ {each_element} v += x[i]; }}
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    __shared__ float warp_sums[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {{
        v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) atomicAdd(&out[0], v);
    }}
    """


def _histogram(each_element: str) -> str:
    """Bins in shared memory, zeroed, counted with shared ``atomicAdd``s, added to the global bins."""
    return f"""
    __shared__ int bins[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    {{ {each_element} atomicAdd(&bins[values[i]], 1); }}
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&out[b], bins[b]);
    """


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def block_sum(out: kd.InOut[kd.float32, Literal[1]], x: kd.In[kd.float32, n]) -> str:
    return _block_sum(_GRID_STRIDE)


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def block_sum_per_element(out: kd.InOut[kd.float32, Literal[1]], x: kd.In[kd.float32, n]) -> str:
    return _block_sum(_ONE_ELEMENT)


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def histogram(out: kd.InOut[kd.int32, Literal[256]], values: kd.In[kd.int32, n]) -> str:
    return _histogram(_GRID_STRIDE)


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def histogram_per_element(out: kd.InOut[kd.int32, Literal[256]], values: kd.In[kd.int32, n]) -> str:
    return _histogram(_ONE_ELEMENT)


@kd.kernel(grid=(kd.cdiv(n, TILE), kd.cdiv(m, TILE_ROWS)), block=(TILE, TILE_ROWS))
def stencil(out: kd.Out[kd.float32, m, n], x: kd.In[kd.float32, m, n], weight: kd.Scalar[kd.float32]) -> str:
    return """
    index_t j = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    index_t i = blockIdx.y * (index_t)blockDim.y + threadIdx.y;
    if (i < m && j < n) {
        index_t k = i * n + j;
        if (i == 0 || j == 0 || i == m - 1 || j == n - 1) out[k] = x[k];
        else out[k] = (x[k] + x[k - n] + x[k + n] + x[k - 1] + x[k + 1]) * weight;
    }
    """


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def threads_plain(out: kd.Out[kd.uint32, n], k: kd.Scalar[kd.int32]) -> str:
    # The work of the two below without a barrier or shuffle: the CPU device runs it as a loop.
    return """
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    unsigned v = threadIdx.x;
    if (i < n) out[i] = v + (unsigned)k;
    """


_BARRIERS = """
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    unsigned v = threadIdx.x;
    for (int r = 0; r < k; ++r) __syncthreads();
    if (i < n) out[i] = v + (unsigned)k;
    """
_SHUFFLES = """
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    unsigned v = threadIdx.x;
    for (int r = 0; r < k; ++r) v += __shfl_down_sync(0xffffffffu, v, 1);
    if (i < n) out[i] = v;
    """
# The CPU device's opt-out of splitting a kernel at its waits: these run their threads as fibers.
ON_FIBERS = ("-DKD_HOST_SPLIT=0",)


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def threads_barriers(out: kd.Out[kd.uint32, n], k: kd.Scalar[kd.int32]) -> str:
    return _BARRIERS


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def threads_shuffles(out: kd.Out[kd.uint32, n], k: kd.Scalar[kd.int32]) -> str:
    return _SHUFFLES


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK, options=ON_FIBERS)
def fiber_barriers(out: kd.Out[kd.uint32, n], k: kd.Scalar[kd.int32]) -> str:
    return _BARRIERS


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK, options=ON_FIBERS)
def fiber_shuffles(out: kd.Out[kd.uint32, n], k: kd.Scalar[kd.int32]) -> str:
    return _SHUFFLES
