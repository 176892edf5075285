"""The Array API's ``linalg`` extension, the part kerneldsl serves without a dense solver:
``matmul``, ``matrix_transpose``, ``vecdot``, ``tensordot`` (the main namespace's), ``outer``,
``diagonal`` (a view: one stride, the sum of the last two), ``trace``, ``vector_norm`` (one
reduction over ``|x|`` or ``|x|**ord``), ``cross`` (three-component products of slices), ``inv``
(a Gauss-Jordan kernel, ``_inverse``) and ``matrix_power`` (repeated squaring; of the inverse
for ``n < 0``). Decompositions, solvers, ``matrix_norm`` (its 2 and nuclear norms need an SVD)
and the rest are not implemented: cuSOLVER is not bound (``.ci/array-api-skips.txt`` names each)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..array import ops
from ..array.ndarray import DeviceArray
from ..runtime.views import normalize_axis
from ._compute import matmul, matrix_transpose, tensordot, vecdot
from ._creation import eye
from ._inverse import inv
from ._manipulation import broadcast_arrays, broadcast_to, stack

__all__ = [
    "cross",
    "diagonal",
    "inv",
    "matmul",
    "matrix_power",
    "matrix_transpose",
    "outer",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]


def outer(x1: Any, x2: Any, /) -> DeviceArray:
    """The outer product of two 1-D arrays."""
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"outer takes two 1-D arrays, got shapes {x1.shape} and {x2.shape}")
    product: DeviceArray = ops.multiply(x1.reshape(-1, 1), x2.reshape(1, -1))
    return product


def diagonal(x: Any, /, *, offset: int = 0) -> DeviceArray:
    """A view of the ``offset``-th diagonals of the last two axes (above the main one when positive)."""
    if x.ndim < 2:
        raise ValueError(f"diagonal needs an array of at least 2 dimensions, got shape {x.shape}")
    m, n = x.shape[-2:]
    sm, sn = x.strides[-2:]
    length = builtins.max(0, builtins.min(m, n - offset) if offset >= 0 else builtins.min(m + offset, n))
    start = offset * sn if offset >= 0 else -offset * sm
    view: DeviceArray = x._view((*x.shape[:-2], length), (*x.strides[:-2], sm + sn), start if length else 0)
    return view


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> DeviceArray:
    """The sums of the ``offset``-th diagonals (``sum``'s dtypes, or ``dtype``)."""
    result: DeviceArray = diagonal(x, offset=offset).sum(axis=-1, dtype=dtype)
    return result


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: float = 2) -> DeviceArray:
    """The ``ord``-norm over ``axis`` (all axes when None) of a floating array."""
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    magnitude = ops.abs(x)
    result: DeviceArray
    if ord == np.inf:
        result = magnitude.max(axis=axes, keepdims=keepdims)
    elif ord == -np.inf:
        result = magnitude.min(axis=axes, keepdims=keepdims)
    elif ord == 0:
        result = ops.not_equal(x, 0).sum(axis=axes, dtype=x.dtype, keepdims=keepdims)
    elif ord == 1:
        result = magnitude.sum(axis=axes, keepdims=keepdims)
    elif ord == 2:
        result = ops.sqrt(ops.square(magnitude).sum(axis=axes, keepdims=keepdims))
    else:
        result = ops.power(ops.power(magnitude, ord).sum(axis=axes, keepdims=keepdims), 1.0 / ord)
    return result


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> DeviceArray:
    """The cross product of 3-element vectors along ``axis`` (broadcast over the others)."""
    a, b = broadcast_arrays(x1, x2)
    axis = normalize_axis(axis, a.ndim)
    if a.shape[axis] != 3:
        raise ValueError(f"cross needs 3 elements along axis {axis}, got shape {a.shape}")
    lead = (slice(None),) * axis

    def part(v: DeviceArray, i: int) -> DeviceArray:
        return v[lead + (i,)]

    def term(i: int, j: int) -> DeviceArray:
        difference: DeviceArray = ops.subtract(
            ops.multiply(part(a, i), part(b, j)), ops.multiply(part(a, j), part(b, i))
        )
        return difference

    return stack([term(1, 2), term(2, 0), term(0, 1)], axis=axis)


def matrix_power(x: Any, n: int, /) -> DeviceArray:
    """``x`` (square matrices in the last two axes) multiplied by itself ``n`` times, by repeated
    squaring (of its inverse for ``n < 0``; the identity for ``n == 0``); always a new array."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"matrix_power needs square matrices in the last two axes, got shape {x.shape}")
    if n == 0:
        identity: DeviceArray = broadcast_to(eye(x.shape[-1], dtype=x.dtype, device=x.session), x.shape).copy()
        return identity
    square: DeviceArray = inv(x) if n < 0 else x
    n = builtins.abs(n)
    while not n & 1:  # square up to the lowest set bit of n: the first factor
        square, n = matmul(square, square), n >> 1
    result, n = square, n >> 1
    while n:
        square = matmul(square, square)
        if n & 1:
            result = matmul(result, square)
        n >>= 1
    return result.copy() if result is x else result
