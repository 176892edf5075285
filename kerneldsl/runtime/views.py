"""View layouts: what basic indexing, reshape and transpose make of a (shape, byte strides) layout.

Pure arithmetic on NumPy's rules, no driver and no memory: each function returns the new
shape, strides and the byte offset of the first element, and ``DeviceArray`` turns that into a
view over the same buffer. Results match NumPy's for the same expression on an array of the same
layout (the tests compare them), including negative strides and zero-size dimensions.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ..errors import ViewError
from .interop import c_strides

# A layout: how an array's elements lie in memory, its shape and byte strides (the word's one meaning).
Layout = tuple[tuple[int, ...], tuple[int, ...]]


def is_c_contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """NumPy's C_CONTIGUOUS flag: empty arrays are contiguous, extent-1 axes' strides do not matter."""
    if 0 in shape:
        return True
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def reads_across_rows(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """Whether a view's elements are adjacent in memory across its rows rather than along them (a
    transposed matrix: unit stride on its second-to-last axis, another on its last), which the CPU
    device's elementwise plans read a tile at a time."""
    return (
        len(shape) >= 2
        and shape[-1] > 1
        and shape[-2] > 1
        and abs(strides[-2]) == itemsize
        and strides[-1] not in (0, itemsize, -itemsize)
    )


def dense_order(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, ...] | None:
    """The axes, outermost first, along which a view's elements fill its memory without gaps (a
    C-contiguous array's are its axes in order; its transpose's, reversed), or None where they do
    not (a gap, a negative or zero stride, an empty view). Extent-1 axes come first."""
    if 0 in shape:
        return None
    order = tuple(sorted(range(len(shape)), key=lambda i: (shape[i] != 1, -strides[i])))
    if is_c_contiguous([shape[i] for i in order], [strides[i] for i in order], itemsize):
        return order
    return None


def byte_span(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, int]:
    """The byte range ``[low, high)`` the elements occupy, relative to the first element; (0, 0) when empty."""
    if 0 in shape:
        return (0, 0)
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return (low, high + itemsize)


def _index(value: Any) -> int | None:
    """An integer index (int, numpy integer, anything with ``__index__`` but bool), else None."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        return None
    try:
        return operator.index(value)
    except TypeError:  # an array of several integers: advanced indexing
        return None


def index(shape: tuple[int, ...], strides: tuple[int, ...], key: Any) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """``(shape, strides, offset)`` of ``a[key]`` for basic indexing: ints, slices, ``...``, ``None``.

    Anything else (lists, arrays, booleans) is advanced indexing, which copies in NumPy; it is
    refused with an IndexError rather than silently copied.
    """
    items = key if isinstance(key, tuple) else (key,)
    ellipses = sum(1 for k in items if k is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    if consumed > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but {consumed} were indexed")
    if not ellipses:
        items = (*items, Ellipsis)
    new_shape: list[int] = []
    new_strides: list[int] = []
    offset = 0
    axis = 0
    for k in items:
        if k is Ellipsis:
            for _ in range(len(shape) - consumed):
                new_shape.append(shape[axis])
                new_strides.append(strides[axis])
                axis += 1
        elif k is None:
            new_shape.append(1)
            new_strides.append(0)
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[axis])
            length = len(range(start, stop, step))
            if length:
                offset += start * strides[axis]
            new_shape.append(length)
            new_strides.append(strides[axis] * step)
            axis += 1
        else:
            i = _index(k)
            if i is None:
                raise IndexError(
                    f"only integers, slices (':'), ellipsis ('...') and None are valid indices of a DeviceArray, "
                    f"not {type(k).__name__}: advanced (array or boolean) indexing is not supported"
                )
            n = shape[axis]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            offset += (i % n) * strides[axis]
            axis += 1
    return tuple(new_shape), tuple(new_strides), offset


def _new_shape(size: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with its one ``-1`` resolved against ``size``, checked like NumPy does."""
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    if any(n < -1 for n in shape):
        raise ValueError(f"negative dimensions not allowed in shape {shape}")
    known = 1
    for n in shape:
        if n != -1:
            known *= n
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
        shape = shape[: unknown[0]] + (size // known,) + shape[unknown[0] + 1 :]
    elif known != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
    return shape


def reshape(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, new: tuple[int, ...]) -> Layout:
    """``(shape, strides)`` of ``a.reshape(new)`` as a view, or ``ViewError`` where NumPy would copy."""
    size = 1
    for n in shape:
        size *= n
    if new == shape:  # as NumPy: the same shape spelled out (no -1) keeps the strides
        return shape, strides
    new = _new_shape(size, new)
    if is_c_contiguous(shape, strides, itemsize):
        return new, c_strides(new, itemsize)
    found = _nocopy_strides(shape, strides, itemsize, new)
    if found is None:
        raise ViewError(
            f"cannot reshape the strided view of shape {shape} (strides {strides}) into {new} without a copy: "
            "use .copy().reshape(...) for a reshaped copy"
        )
    return new, found


def _nocopy_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, new: tuple[int, ...]
) -> tuple[int, ...] | None:
    """NumPy's ``_attempt_nocopy_reshape`` (C order): split or merge runs of axes that are
    contiguous with each other; None when some merged run is not."""
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    dims, steps = [n for n, _ in old], [s for _, s in old]
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(dims):
        np_, op = new[ni], dims[oi]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= dims[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if steps[ok] != dims[ok + 1] * steps[ok + 1]:
                return None
        out[nj - 1] = steps[oj - 1]
        for nk in range(nj - 1, ni, -1):
            out[nk - 1] = out[nk] * new[nk]
        ni, nj = nj, nj + 1
        oi, oj = oj, oj + 1
    last = out[ni - 1] if ni >= 1 else itemsize
    for nk in range(ni, len(new)):
        out[nk] = last
    return tuple(out)


def normalize_axis(axis: Any, ndim: int) -> int:
    i = _index(axis)
    if i is None:
        raise TypeError(f"an axis must be an integer, not {type(axis).__name__}")
    if not -ndim <= i < ndim:
        raise IndexError(f"axis {i} is out of bounds for array of dimension {ndim}")
    return i % ndim


def transpose(shape: tuple[int, ...], strides: tuple[int, ...], axes: Sequence[Any] | None) -> Layout:
    """``a.transpose(axes)``: ``axes`` a permutation of the axes; None reverses them."""
    ndim = len(shape)
    order = list(range(ndim))[::-1] if axes is None else [normalize_axis(a, ndim) for a in axes]
    if sorted(order) != list(range(ndim)):
        raise ValueError(f"axes {tuple(axes or ())} don't match array of dimension {ndim}")
    return tuple(shape[i] for i in order), tuple(strides[i] for i in order)


def squeeze(shape: tuple[int, ...], strides: tuple[int, ...], axis: Any) -> Layout:
    """``a.squeeze(axis)``: drop extent-1 axes (all of them when ``axis`` is None)."""
    ndim = len(shape)
    if axis is None:
        drop = {i for i, n in enumerate(shape) if n == 1}
    else:
        drop = {normalize_axis(a, ndim) for a in (axis if isinstance(axis, tuple) else (axis,))}
        if any(shape[i] != 1 for i in drop):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    keep = [i for i in range(ndim) if i not in drop]
    return tuple(shape[i] for i in keep), tuple(strides[i] for i in keep)


def expand_dims(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, axis: Any) -> Layout:
    """``np.expand_dims(a, axis)``: new extent-1 axes at the positions ``axis`` names in the
    result; like NumPy, a reshape (which never needs a copy for that)."""
    axes = axis if isinstance(axis, tuple) else (axis,)
    ndim = len(shape) + len(axes)
    where = [normalize_axis(a, ndim) for a in axes]
    if len(set(where)) != len(where):
        raise ValueError("repeated axis")
    rest = iter(shape)
    return reshape(shape, strides, itemsize, tuple(1 if i in where else next(rest) for i in range(ndim)))
