"""The shape and dtype of the runtime's arrays, device and pinned: validated once per spelling.

Allocating a result costs a dict lookup, not the checks: ``ShapeDtype._init_layout`` fills an
array's shape, dtype and derived sizes from a table keyed by the shape and dtype as the caller
spelled them.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import numpy as np

from .interop import c_strides

Shape = tuple[int, ...]
_S = TypeVar("_S", bound="ShapeDtype")

_LayoutSlots = tuple[Shape, np.dtype, int, int, int, tuple[int, ...]]
_layouts: dict[Any, _LayoutSlots] = {}  # by (type of shape, shape, dtype) as the caller gave them
MAX_LAYOUTS = 4096


def _shape(shape: int | tuple[int, ...] | list[int]) -> Shape:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    out = tuple(int(n) for n in dims)
    if any(n < 0 for n in out):
        raise ValueError(f"negative dimension in shape {out}")
    return out


def _dtype(dtype: Any) -> np.dtype[Any]:
    dt: np.dtype[Any] = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype {dt} holds Python objects and cannot live in device memory")
    return dt


def _layout(shape: Any, dtype: Any) -> _LayoutSlots:
    """Shape, dtype, ndim, size, nbytes and strides of a new C-contiguous array, validated once
    per spelling: allocating a result costs a dict lookup, not the checks."""
    key: tuple[Any, ...] | None = (type(shape), shape, dtype)
    try:
        return _layouts[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable spelling (a list): validated every time
        key = None
    dims, dt = _shape(shape), _dtype(dtype)
    size = math.prod(dims)
    layout = (dims, dt, len(dims), size, size * dt.itemsize, c_strides(dims, dt.itemsize))
    if key is not None:
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        _layouts[key] = layout
    return layout


class ShapeDtype:
    """Shape, dtype and derived sizes shared by device and pinned arrays."""

    __slots__ = ()  # the subclasses declare the slots; these annotations only type them
    shape: Shape
    dtype: np.dtype[Any]
    ndim: int
    size: int
    nbytes: int
    strides: tuple[int, ...]

    def _init_layout(self: _S, shape: Any, dtype: Any) -> int:
        """Fill the layout slots; ``self`` is typed as the subclass, which is what declares them."""
        self.shape, self.dtype, self.ndim, self.size, nbytes, self.strides = _layout(shape, dtype)
        self.nbytes = nbytes
        return nbytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]
