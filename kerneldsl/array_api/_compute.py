"""The Array API's statistical, searching, utility and linear algebra functions on kerneldsl's
arrays: each is the ``kd.ops`` reduction, scan, elementwise op or ``kd.matmul`` of the same
meaning with the standard's signature and dtype rules (``vecdot``/``matmul`` keep the operands'
promoted dtype; ``count_nonzero`` is a sum of ``x != 0``; ``searchsorted`` counts the sorted
elements before each value, NaN last, with a few elementwise kernels and one sum: O(len(x1) *
x2.size) work, meant for the modest sizes a sorted table has). ``matmul`` of integer operands,
which cuBLAS does not serve, is a broadcast product summed over the shared axis (two kernels)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..array import ops
from ..array.ndarray import DeviceArray
from ..device_array.creation import asarray, full
from ..runtime.views import normalize_axis
from ._gather import take
from ._manipulation import broadcast_arrays, concat, reshape


def _axis(axis: Any) -> Any:
    return tuple(axis) if isinstance(axis, list) else axis


def sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.sum(axis=_axis(axis), dtype=dtype, keepdims=keepdims)  # type: ignore[no-any-return]


def prod(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.prod(axis=_axis(axis), dtype=dtype, keepdims=keepdims)  # type: ignore[no-any-return]


def max(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.max(axis=_axis(axis), keepdims=keepdims)  # type: ignore[no-any-return]


def min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.min(axis=_axis(axis), keepdims=keepdims)  # type: ignore[no-any-return]


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.mean(axis=_axis(axis), keepdims=keepdims)  # type: ignore[no-any-return]


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> DeviceArray:
    return x.std(axis=_axis(axis), correction=correction, keepdims=keepdims)  # type: ignore[no-any-return]


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> DeviceArray:
    return x.var(axis=_axis(axis), correction=correction, keepdims=keepdims)  # type: ignore[no-any-return]


def all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.all(axis=_axis(axis), keepdims=keepdims)  # type: ignore[no-any-return]


def any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> DeviceArray:
    return x.any(axis=_axis(axis), keepdims=keepdims)  # type: ignore[no-any-return]


def argmax(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> DeviceArray:
    return x.argmax(axis=axis, keepdims=keepdims)  # type: ignore[no-any-return]


def argmin(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> DeviceArray:
    return x.argmin(axis=axis, keepdims=keepdims)  # type: ignore[no-any-return]


def count_nonzero(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> DeviceArray:
    """How many elements are not zero (int64), over ``axis``."""
    return ops.not_equal(x, 0).sum(axis=_axis(axis), dtype=np.int64, keepdims=keepdims)  # type: ignore[no-any-return]


def _cumulative(scan: Any, x: Any, axis: int | None, dtype: Any, include_initial: bool, initial: int) -> DeviceArray:
    """The scan method ``scan`` of ``x`` along ``axis``, accumulating and returning ``dtype`` when given
    (the standard's rule: ``dtype`` is the result's, whatever ``x``'s), else NumPy's ``cumsum``
    dtypes, which are the standard's defaults (integers widen to int64/uint64, floats stay)."""
    if axis is None:
        if x.ndim > 1:
            raise ValueError("axis must be given for an array of more than one dimension")
        axis = 0
    axis = normalize_axis(axis, x.ndim)
    result: DeviceArray = scan(x, axis=axis, dtype=dtype)
    if include_initial:
        edge = full((*x.shape[:axis], 1, *x.shape[axis + 1 :]), initial, result.dtype, result.session)
        result = concat([edge, result], axis=axis)
    return result


def cumulative_sum(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> DeviceArray:
    """Running sums along ``axis`` (``include_initial``: a leading 0)."""
    return _cumulative(DeviceArray.cumsum, x, axis, dtype, include_initial, 0)


def cumulative_prod(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> DeviceArray:
    """Running products along ``axis`` (``include_initial``: a leading 1)."""
    return _cumulative(DeviceArray.cumprod, x, axis, dtype, include_initial, 1)


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> DeviceArray:
    """The ``n``-th forward difference along ``axis``."""
    axis = normalize_axis(axis, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    y = concat(parts, axis=axis) if len(parts) > 1 else x
    lead = (slice(None),) * axis
    for _ in range(n):
        y = ops.subtract(y[lead + (slice(1, None),)], y[lead + (slice(None, -1),)])
    return y


def where(condition: Any, x1: Any, x2: Any, /) -> DeviceArray:
    return ops.where(condition, x1, x2)  # type: ignore[no-any-return]


def clip(x: Any, /, min: Any = None, max: Any = None) -> DeviceArray:
    """``x`` limited to ``[min, max]`` (either bound may be None), in ``x``'s dtype."""
    result = x
    if min is not None:
        result = ops.maximum(result, min)
    if max is not None:
        result = ops.minimum(result, max)
    if result is x:
        return x.copy()  # type: ignore[no-any-return]
    clipped: DeviceArray = result if result.dtype == x.dtype else result.astype(x.dtype)
    return clipped


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> DeviceArray:
    """Where each value of ``x2`` (an array or a scalar) would be inserted in the sorted 1-D
    ``x1`` (or ``x1`` in the order ``sorter`` gives) to keep it sorted (int64; NaNs sort last)."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if x1.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be 1-D, got shape {x1.shape}")
    if sorter is not None:
        x1 = take(x1, sorter)  # x1 in sorted order: one gather
    if type(x2) is not DeviceArray:  # a Python scalar (or host data): x1's dtype, as the standard says
        x2 = asarray(x2, dtype=x1.dtype, session=x1.session)
    table = x1.reshape(*((1,) * x2.ndim), -1)
    value = x2.expand_dims(x2.ndim)
    if side == "left":
        before = ops.logical_or(
            ops.less(table, value), ops.logical_and(ops.isnan(value), ops.logical_not(ops.isnan(table)))
        )
    else:
        before = ops.logical_or(ops.less_equal(table, value), ops.isnan(value))
    return before.sum(axis=-1, dtype=np.int64)  # type: ignore[no-any-return]


def matmul(x1: Any, x2: Any, /) -> DeviceArray:
    """NumPy's matmul: ``kd.matmul`` (cuBLAS) for floats; integers a broadcast product summed."""
    dtype = np.result_type(x1.dtype, x2.dtype)
    if dtype.kind == "f":
        from ..blas.np_matmul import matmul as blas_matmul  # kerneldsl[blas]: imported when used

        return blas_matmul(x1, x2)  # type: ignore[no-any-return]
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: operands must be at least 1-D")
    a = x1.reshape(1, -1) if x1.ndim == 1 else x1
    b = x2.reshape(-1, 1) if x2.ndim == 1 else x2
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {x1.shape} and {x2.shape} not aligned on the shared axis")
    product = ops.multiply(a.expand_dims(a.ndim), b.expand_dims(b.ndim - 2))
    result: DeviceArray = product.sum(axis=-2, dtype=dtype)
    if x1.ndim == 1:
        result = result.squeeze(-2)
    if x2.ndim == 1:
        result = result.squeeze(-1)
    return result


def matrix_transpose(x: Any, /) -> DeviceArray:
    return x.mT  # type: ignore[no-any-return]


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> DeviceArray:
    """The dot product of ``x1`` and ``x2`` along ``axis``, broadcast over the others."""
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("vecdot: operands must be at least 1-D")
    a, b = broadcast_arrays(x1, x2)
    axis = normalize_axis(axis, a.ndim) - a.ndim  # counted from the end: both operands' own axis
    if -axis > x1.ndim or -axis > x2.ndim or x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: shapes {x1.shape} and {x2.shape} differ along axis {axis}")
    dtype = np.result_type(x1.dtype, x2.dtype)
    product: DeviceArray = ops.multiply(ops.conj(a) if a.dtype.kind == "c" else a, b)  # the standard's conj(x1)
    return product.sum(axis=axis, dtype=dtype)


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> DeviceArray:
    """The sum of products over ``axes`` (an int: the last of ``x1`` and first of ``x2``; or two
    sequences of axes), as one matmul of the operands permuted and flattened."""
    if isinstance(axes, int):
        if axes < 0:
            raise ValueError("tensordot: axes must be non-negative")
        a_axes, b_axes = list(range(x1.ndim - axes, x1.ndim)), list(range(axes))
    else:
        a_axes = [normalize_axis(i, x1.ndim) for i in axes[0]]
        b_axes = [normalize_axis(i, x2.ndim) for i in axes[1]]
    if len(a_axes) != len(b_axes) or builtins.any(x1.shape[i] != x2.shape[j] for i, j in zip(a_axes, b_axes)):
        raise ValueError(f"tensordot: shapes {x1.shape} and {x2.shape} are not aligned on axes {axes}")
    a_keep = [i for i in range(x1.ndim) if i not in a_axes]
    b_keep = [j for j in range(x2.ndim) if j not in b_axes]
    k = int(np.prod([x1.shape[i] for i in a_axes]))
    a2 = reshape(x1.transpose(tuple(a_keep + a_axes)), (-1, k))
    b2 = reshape(x2.transpose(tuple(b_axes + b_keep)), (k, -1))
    shape = tuple(x1.shape[i] for i in a_keep) + tuple(x2.shape[j] for j in b_keep)
    return reshape(matmul(a2, b2), shape)
