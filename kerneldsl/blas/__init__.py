"""cuBLAS on session buffers: gemm, batched gemm, gemv, axpy, dot, nrm2 (the ``kerneldsl[blas]`` extra).

On the CPU device the same calls run on the host BLAS (``host``: NumPy's matmul and dot, which
is OpenBLAS) in the session's memory, with cuBLAS's arguments and precision rules; it needs no
extra, has no cuBLASLt (every gemm is one ``gemm_ex`` on the Python path) and computes float32
in full even with ``tf32=True``.

Every operation is asynchronous on a session stream (default: the session stream), so it
orders with kernels, copies and graph capture like any launch. Nothing here imports
nvmath-python until the first call: ``import kerneldsl`` works without the extra.

Layout: arrays are row-major, cuBLAS is column-major. A row-major ``(r, c)`` buffer *is* the
column-major ``(c, r)`` matrix, its transpose, with leading dimension ``c``. So
``C = op(A) @ op(B)`` is computed as ``C^T = op(B)^T @ op(A)^T``: the operands swap, each
``trans_*`` flag keeps its meaning, and every leading dimension is a buffer's row length.
Nothing is ever copied or transposed in memory.

Precision: float16 and bfloat16 multiply with float32 accumulation (``CUBLAS_COMPUTE_32F``,
alpha and beta are float32); float32 uses full float32 (``tf32=True`` opts into TF32 tensor
cores); float64 uses ``CUBLAS_COMPUTE_64F``.

One module per concern: ``binding`` (the library and its ABI values), ``handles`` (the
per-session handle, its streams, workspaces and scalars), ``checks`` (validation),
``lt_config`` (cuBLASLt matmul configurations), ``matmul`` (gemm, gemm_batched), ``vector``
(levels 1 and 2), ``np_matmul`` (``kd.matmul`` and ``@``: NumPy's matmul on those calls),
``reduced`` (products with a 1-D operand as dot reductions) and ``host`` (the CPU device's BLAS).
"""

from __future__ import annotations

from .binding import (
    COMPUTE_32F,
    COMPUTE_32F_FAST_TF32,
    COMPUTE_64F,
    GEMM_DEFAULT,
    OP_N,
    OP_T,
    POINTER_MODE_DEVICE,
    POINTER_MODE_HOST,
    R_16BF,
    R_16F,
    R_32F,
    R_64F,
    available,
    library,
    status_name,
)
from .handles import WORKSPACE_BYTES, BlasHandle, handle
from .matmul import gemm, gemm_batched
from .vector import axpy, dot, gemv, nrm2

__all__ = [
    "COMPUTE_32F",
    "COMPUTE_32F_FAST_TF32",
    "COMPUTE_64F",
    "GEMM_DEFAULT",
    "OP_N",
    "OP_T",
    "POINTER_MODE_DEVICE",
    "POINTER_MODE_HOST",
    "R_16BF",
    "R_16F",
    "R_32F",
    "R_64F",
    "WORKSPACE_BYTES",
    "BlasHandle",
    "available",
    "axpy",
    "dot",
    "gemm",
    "gemm_batched",
    "gemv",
    "handle",
    "library",
    "nrm2",
    "status_name",
]
