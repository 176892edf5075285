"""NumPy's axis and keepdims rules for reductions and scans: which axes a call names, and the
shape of its result."""

from __future__ import annotations

from typing import Any

import numpy as np


def normalize_axes(axis: Any, ndim: int, what: str, single: bool = False) -> tuple[int, ...] | None:
    """NumPy's ``axis=``: None (every axis), an int, or (unless ``single``) a tuple of distinct ints."""
    if axis is None:
        return None
    items = axis if isinstance(axis, tuple) else (axis,)
    if single and isinstance(axis, tuple):
        raise TypeError(f"{what}: axis must be an int or None, not a tuple")
    normalized = []
    for a in items:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"{what}: axis must be an int, a tuple of ints or None, not {axis!r}")
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(int(a), ndim)
        normalized.append(int(a) % ndim)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{what}: duplicate value in axis {axis!r}")
    return tuple(sorted(normalized))


def result_shape(value_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """NumPy's: the reduced axes dropped, or kept with extent 1 under ``keepdims``."""
    if keepdims:
        return tuple(1 if j in axes else d for j, d in enumerate(value_shape))
    return tuple(d for j, d in enumerate(value_shape) if j not in axes)


def memory_order(
    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, axes: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """For a view (``strides`` in bytes) whose elements are a C-contiguous block read in another
    axis order (a transposed array): that order (the permutation making it C-contiguous) and
    ``axes`` renumbered in it. None unless the permutation keeps the reduced axes' order among
    themselves and the kept axes' among themselves, so that reducing the permuted array visits
    each output's values in the same order and gives the same result shape."""
    if any(d <= 1 for d in shape):
        return None
    order = tuple(sorted(range(len(shape)), key=lambda j: -strides[j]))
    expected = itemsize
    for j in reversed(order):
        if strides[j] != expected:
            return None
        expected *= shape[j]
    position = {a: k for k, a in enumerate(order)}
    reduced = [position[a] for a in axes]
    kept = [position[a] for a in range(len(shape)) if a not in axes]
    if order == tuple(range(len(shape))) or reduced != sorted(reduced) or kept != sorted(kept):
        return None
    return order, tuple(reduced)


def check_keepdims(keepdims: Any, what: str) -> bool:
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"{what}: keepdims must be True or False, not {keepdims!r}")
    return bool(keepdims)
