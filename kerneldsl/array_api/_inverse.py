"""``linalg.inv`` without a dense solver library: Gauss-Jordan elimination with partial pivoting,
one thread block per matrix of the stack (``matrix_power`` with ``n < 0`` is the inverse's power).

Each of the ``n`` steps picks the largest remaining entry of column ``k`` as the pivot (one
thread scans the column), swaps its row up, scales it and subtracts it from every other row of
the matrix and of the identity beside it, the block's threads striding over the row-major
elements (coalesced). O(n³) work on one SM per matrix: it suits stacks of small and moderate
matrices; a singular matrix gives non-finite values (the kernel cannot raise). float16 and
bfloat16 stacks are inverted in float32, float64 ones in float64."""

from __future__ import annotations

import math
from typing import Any, NewType, TypeVar

import numpy as np

from ..array.ndarray import DeviceArray
from ..errors import OperandDtypeError
from ..jit.signature import InOut, Out
from ..launch.dispatch import kernel

BLOCK = 256
T = TypeVar("T")  # the dtype the elimination runs in: float32 or float64
batch = NewType("batch", int)  # matrices in the stack
n = NewType("n", int)  # their order

_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


@kernel(grid=batch, block=BLOCK)
def _gauss_jordan(a: InOut[T, batch, n, n], inv: Out[T, batch, n, n], factors: InOut[T, batch, n]) -> str:
    return f"""
    T* A = {a} + (index_t)blockIdx.x * n * n;
    T* V = {inv} + (index_t)blockIdx.x * n * n;
    T* F = {factors} + (index_t)blockIdx.x * n;
    __shared__ index_t pivot;
    for (index_t e = threadIdx.x; e < n * n; e += blockDim.x) V[e] = e / n == e % n ? (T)1 : (T)0;
    for (index_t k = 0; k < n; ++k) {{
        __syncthreads();
        if (threadIdx.x == 0) {{
            index_t p = k;
            T best = fabs(A[k * n + k]);
            for (index_t i = k + 1; i < n; ++i) {{
                T v = fabs(A[i * n + k]);
                if (v > best) {{ best = v; p = i; }}
            }}
            pivot = p;
        }}
        __syncthreads();
        const index_t p = pivot;
        if (p != k) {{
            for (index_t j = threadIdx.x; j < n; j += blockDim.x) {{
                T t = A[k * n + j]; A[k * n + j] = A[p * n + j]; A[p * n + j] = t;
                t = V[k * n + j]; V[k * n + j] = V[p * n + j]; V[p * n + j] = t;
            }}
            __syncthreads();
        }}
        const T d = A[k * n + k];
        for (index_t i = threadIdx.x; i < n; i += blockDim.x) F[i] = A[i * n + k];
        __syncthreads();
        for (index_t j = threadIdx.x; j < n; j += blockDim.x) {{ A[k * n + j] /= d; V[k * n + j] /= d; }}
        __syncthreads();
        for (index_t e = threadIdx.x; e < n * n; e += blockDim.x) {{
            const index_t i = e / n, j = e % n;
            if (i != k) {{ const T f = F[i]; A[e] -= f * A[k * n + j]; V[e] -= f * V[k * n + j]; }}
        }}
    }}
    """


def inv(x: Any, /) -> DeviceArray:
    """The inverse of each square matrix in the last two axes of a floating array."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"inv needs square matrices in the last two axes, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise OperandDtypeError(f"inv needs a floating array, got {x.dtype}")
    work = _FLOAT64 if x.dtype == _FLOAT64 else _FLOAT32
    order = x.shape[-1]
    stack = math.prod(x.shape[:-2])
    result: DeviceArray = x.session.empty(x.shape, work)
    if result.size:
        a = x.astype(work)  # a fresh C-contiguous copy, eliminated in place
        factors = x.session.empty((stack, order), work)
        _gauss_jordan(a.reshape(stack, order, order), result.reshape(stack, order, order), factors)
    return result if work == x.dtype else result.astype(x.dtype)
