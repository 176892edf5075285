"""The Array API's manipulation functions on kerneldsl's arrays. Views where the memory allows
one (``permute_dims``, ``broadcast_arrays``, ``unstack``, ``reshape`` when NumPy would give a
view); copies by the elementwise copy kernel otherwise: ``roll`` and ``concat`` copy slices into
the result, ``tile`` and ``repeat`` copy a broadcast view (one kernel), ``repeat`` with an
array of counts copies one broadcast slice per element of the axis (it reads the counts on the
host: it synchronizes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..array.ndarray import DeviceArray
from ..device_array import manipulation
from ..errors import ViewError
from ..runtime.views import normalize_axis


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> DeviceArray:
    """The arrays joined along ``axis`` (flattened first when None), in their promoted dtype."""
    result: DeviceArray = manipulation.concatenate(list(arrays), axis)
    return result


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> DeviceArray:
    result: DeviceArray = manipulation.stack(list(arrays), axis)
    return result


def expand_dims(x: Any, /, axis: int = 0) -> DeviceArray:
    result: DeviceArray = manipulation.expand_dims(x, axis)
    return result


def squeeze(x: Any, /, axis: int | tuple[int, ...]) -> DeviceArray:
    result: DeviceArray = manipulation.squeeze(x, axis)
    return result


def flip(x: Any, /, *, axis: int | tuple[int, ...] | None = None) -> DeviceArray:
    result: DeviceArray = manipulation.flip(x, axis)
    return result


def moveaxis(x: Any, source: int | tuple[int, ...], destination: int | tuple[int, ...], /) -> DeviceArray:
    result: DeviceArray = manipulation.moveaxis(x, source, destination)
    return result


def broadcast_to(x: Any, /, shape: tuple[int, ...]) -> DeviceArray:
    result: DeviceArray = manipulation.broadcast_to(x, shape)
    return result


def broadcast_arrays(*arrays: Any) -> list[DeviceArray]:
    """Views of the arrays broadcast to their common shape."""
    shape = np.broadcast_shapes(*(tuple(a.shape) for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


def permute_dims(x: Any, /, axes: tuple[int, ...]) -> DeviceArray:
    """A view with the axes in the order ``axes``."""
    if sorted(normalize_axis(a, x.ndim) for a in axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of the {x.ndim} axes")
    result: DeviceArray = x.transpose(tuple(axes))
    return result


def reshape(x: Any, /, shape: tuple[int, ...], *, copy: bool | None = None) -> DeviceArray:
    """``x`` with ``shape``: a view when the layout allows, else a copy (``copy=False`` refuses
    one with ValueError; ``copy=True`` always copies)."""
    if copy:
        return x.copy().reshape(tuple(shape))  # type: ignore[no-any-return]
    try:
        return x.reshape(tuple(shape))  # type: ignore[no-any-return]
    except ViewError:
        if copy is False:
            raise
        return x.copy().reshape(tuple(shape))  # type: ignore[no-any-return]


def unstack(x: Any, /, *, axis: int = 0) -> tuple[DeviceArray, ...]:
    """Views of ``x``'s slices along ``axis``."""
    axis = normalize_axis(axis, x.ndim)
    return tuple(x[(slice(None),) * axis + (i,)] for i in range(x.shape[axis]))


def roll(x: Any, /, shift: int | tuple[int, ...], *, axis: int | tuple[int, ...] | None = None) -> DeviceArray:
    """``x`` with its elements shifted by ``shift`` along ``axis`` (over the flattened array when
    None), wrapping around; a copy."""
    if axis is None:
        flat = x.reshape(-1) if x.is_contiguous else x.copy().reshape(-1)
        return roll(flat, int(shift) if not isinstance(shift, tuple) else sum(shift), axis=0).reshape(x.shape)
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ValueError("roll: shift and axis must have the same length")
    per_axis: dict[int, int] = {}
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim)
        per_axis[a] = per_axis.get(a, 0) + int(s)
    result = x.copy()
    for a, s in per_axis.items():
        n = x.shape[a]
        if n == 0 or s % n == 0:
            continue
        s %= n
        lead = (slice(None),) * a
        source = result.copy()
        result[lead + (slice(s, None),)] = source[lead + (slice(None, n - s),)]
        result[lead + (slice(None, s),)] = source[lead + (slice(n - s, None),)]
    rolled: DeviceArray = result
    return rolled


def tile(x: Any, repetitions: tuple[int, ...], /) -> DeviceArray:
    """``x`` repeated ``repetitions[k]`` times along each axis (one broadcast copy)."""
    reps = tuple(int(r) for r in repetitions)
    ndim = max(len(reps), x.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - x.ndim) + tuple(x.shape)
    interleaved = reshape(x, tuple(e for n in shape for e in (1, n)))
    wide = broadcast_to(interleaved, tuple(e for r, n in zip(reps, shape) for e in (r, n)))
    return wide.copy().reshape(tuple(r * n for r, n in zip(reps, shape)))


def repeat(x: Any, repeats: Any, /, *, axis: int | None = None) -> DeviceArray:
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (the flattened array when
    None): an int, or an array of counts of shape ``(1,)`` (one count for all) or ``(n,)``."""
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    axis = normalize_axis(axis, x.ndim)
    n = x.shape[axis]
    if isinstance(repeats, (int, np.integer)) or (type(repeats) is DeviceArray and repeats.ndim == 0):
        return _repeat_each(x, int(repeats), axis)
    counts = repeats.to_host() if type(repeats) is DeviceArray else np.asarray(repeats)
    if counts.shape == (1,):  # broadcast to (n,): the same count for every element
        return _repeat_each(x, int(counts[0]), axis)
    if counts.shape != (n,):
        raise ValueError(f"repeat: repeats must have shape (1,) or ({n},), got {counts.shape}")
    if (counts < 0).any():
        raise ValueError("repeat: repeats must be non-negative")
    lead = (slice(None),) * axis
    pieces = [
        broadcast_to(x[lead + (slice(i, i + 1),)], (*x.shape[:axis], int(c), *x.shape[axis + 1 :]))
        for i, c in enumerate(counts)
        if c
    ]
    if not pieces:
        return x.session.empty((*x.shape[:axis], 0, *x.shape[axis + 1 :]), x.dtype)  # type: ignore[no-any-return]
    return concat(pieces, axis=axis)


def _repeat_each(x: DeviceArray, r: int, axis: int) -> DeviceArray:
    """Every element of ``x`` ``r`` times along ``axis``: one broadcast copy."""
    if r < 0:
        raise ValueError("repeat: repeats must be non-negative")
    n = x.shape[axis]
    wide = broadcast_to(x.expand_dims(axis + 1), (*x.shape[: axis + 1], r, *x.shape[axis + 1 :]))
    return wide.copy().reshape((*x.shape[:axis], n * r, *x.shape[axis + 1 :]))
