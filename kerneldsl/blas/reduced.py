"""Products with a 1-D operand as ``dot`` reductions: ``A @ v``, ``v @ A`` and ``v @ w`` of
``kd.matmul`` / ``@``, and the allocating ``kd.blas.gemv``, ``dot`` and ``nrm2``.

Why not cuBLAS: its calls go from Python through the handle on every call (the scalars, the
stream, the pointer mode, the call itself), while a warm reduction is one dict lookup and a launch
from C with its result from the pool (``launch.warm``). The reduction's map multiplies the two
operands as they are read, so nothing is materialized:

- ``A @ v`` of a row-major ``A`` reduces A's rows with ``v`` broadcast along them (the ``rows``
  stage: ``dot_reduction(A, v, axis=-1)``);
- ``v @ A`` reduces A's columns with ``v`` as a column (the ``columns`` stage:
  ``dot_reduction(v[:, None], A, axis=0)``);
- a transposed contiguous ``A`` (``B.T``) swaps the two: ``B.T @ v`` is ``v @ B``;
- ``v @ w`` is a 0-d result of the ``direct`` stage (``partial`` for long vectors).

The vector is a line along the reduced axis (``Geometry.along``): the kernel reads it at the
reduced index, in 16-byte vectors beside A's where the extents and alignment allow, with no
per-element index arithmetic. Any other strided ``A`` (``A[:, ::2]``) is left to the
reduction, which reads a contiguous copy of a broadcast view (``Variant.copy`` says so).

float16/bfloat16 terms are summed in float32 (the ``dot`` reducer's accumulation dtype) and the
result rounded once; each product is first rounded to its dtype (the ``multiply`` map's NumPy
rule), where cuBLAS keeps it in float32: one more rounding per term, well inside the dtype's
error bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..array import ops
from .checks import BF16, F16, F32, F64

if TYPE_CHECKING:
    from ..array.ndarray import DeviceArray

REDUCED: frozenset[np.dtype] = frozenset(dt for dt in (F16, BF16, F32, F64) if dt is not None)
"""The real float dtypes whose products with a 1-D operand are reductions (cuBLAS's real ones)."""

dot_reduction = ops._dot
"""``sum(a * b)`` over an axis as one reduction (``kd.ops.dot``'s, without its 1-D checks)."""


def vector_product(a: DeviceArray, b: DeviceArray, out: DeviceArray | None = None) -> DeviceArray:
    """``a @ b`` of device arrays of one session and one dtype of ``REDUCED``, one of them 1-D and
    the other 1-D or 2-D, their core extents equal (the caller checked all that): the reduction
    whose stage reads the matrix along its rows in memory."""
    if a.ndim == 1:
        if b.ndim == 1:
            return dot_reduction(a, b, out=out)
        return vector_matrix(a, b, out)
    return matrix_vector(a, b, out)


def matrix_vector(m: DeviceArray, x: DeviceArray, out: DeviceArray | None = None) -> DeviceArray:
    """``m @ x``: the rows of a row-major ``m``, the columns of ``m.T`` when that is row-major."""
    if not m.is_contiguous:
        t = m.T
        if t.is_contiguous:
            return dot_reduction(x.expand_dims(-1), t, axis=0, out=out)
    return dot_reduction(m, x, axis=-1, out=out)


def vector_matrix(x: DeviceArray, m: DeviceArray, out: DeviceArray | None = None) -> DeviceArray:
    """``x @ m``: the columns of a row-major ``m``, the rows of ``m.T`` when that is row-major."""
    if not m.is_contiguous:
        t = m.T
        if t.is_contiguous:
            return dot_reduction(t, x, axis=-1, out=out)
    return dot_reduction(x.expand_dims(-1), m, axis=0, out=out)
