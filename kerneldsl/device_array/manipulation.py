"""Array manipulation the NumPy way: ``kd.broadcast_to``, ``kd.flip``, ``kd.expand_dims``,
``kd.squeeze`` and ``kd.moveaxis`` are views of the same memory (no copy, no launch);
``kd.concatenate`` and ``kd.stack`` copy into a new array (or ``out=``) with one elementwise
copy kernel per input, written into that input's slice of the result.

Each takes DeviceArrays (device result), numpy arrays only (numpy's own function, a numpy
result) or foreign CUDA arrays (adopted zero-copy). Axis rules, dtype promotion (NumPy 2's
``result_type``), ``casting=`` and ``out=`` follow NumPy. One deviation, documented: NumPy's
``broadcast_to`` returns a read-only view; a DeviceArray has no read-only flag, and writing into
a broadcast view (many elements sharing one address) gives unspecified values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..array import ops, promotion
from ..array.ndarray import DeviceArray
from ..errors import WrongSessionError
from ..runtime.views import normalize_axis
from .creation import asarray

Axes = int | Sequence[int]


def _device(a: Any) -> DeviceArray:
    """``a`` as a DeviceArray: itself, or a foreign CUDA array adopted without a copy."""
    return a if type(a) is DeviceArray else asarray(a)


def _axes(axis: Axes, ndim: int) -> tuple[int, ...]:
    """``axis`` (an int or a sequence of ints) normalized against ``ndim``; repeats refused as NumPy does."""
    found = tuple(normalize_axis(x, ndim) for x in ((axis,) if isinstance(axis, (int, np.integer)) else axis))
    if len(set(found)) != len(found):
        raise ValueError("repeated axis")
    return found


def broadcast_to(a: Any, shape: int | Sequence[int]) -> Any:
    """A view of ``a`` with ``shape`` (NumPy's broadcasting rules): broadcast axes get stride 0."""
    if isinstance(a, np.ndarray):
        return np.broadcast_to(a, shape)
    x = _device(a)
    target = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if any(n < 0 for n in target):
        raise ValueError("all elements of broadcast shape must be non-negative")
    lead = len(target) - x.ndim
    if lead < 0:
        raise ValueError(f"input operand has more dimensions than allowed by the axis remapping: {x.shape} -> {target}")
    strides = []
    for i, n in enumerate(target):
        if i < lead:
            strides.append(0)
            continue
        have = x.shape[i - lead]
        if have != n and have != 1:
            raise ValueError(f"operands could not be broadcast together with remapped shapes {x.shape} -> {target}")
        strides.append(x.strides[i - lead] if have == n else 0)
    return x._view(target, tuple(strides))


def flip(a: Any, axis: Axes | None = None) -> Any:
    """A view of ``a`` with the order of elements reversed along ``axis`` (every axis when None)."""
    if isinstance(a, np.ndarray):
        return np.flip(a, axis if axis is None or isinstance(axis, int) else tuple(axis))
    x = _device(a)
    flipped = set(range(x.ndim)) if axis is None else set(_axes(axis, x.ndim))
    return x[tuple(slice(None, None, -1) if i in flipped else slice(None) for i in range(x.ndim))]


def expand_dims(a: Any, axis: Axes) -> Any:
    """A view of ``a`` with new extent-1 axes at the positions ``axis`` names in the result."""
    if isinstance(a, np.ndarray):
        return np.expand_dims(a, axis)
    return _device(a).expand_dims(axis if isinstance(axis, (int, np.integer)) else tuple(axis))


def squeeze(a: Any, axis: Axes | None = None) -> Any:
    """A view of ``a`` without its extent-1 axes (only those of ``axis``, when given)."""
    if isinstance(a, np.ndarray):
        return np.squeeze(a, axis)
    return _device(a).squeeze(axis if axis is None or isinstance(axis, (int, np.integer)) else tuple(axis))


def moveaxis(a: Any, source: Axes, destination: Axes) -> Any:
    """A view of ``a`` with the axes ``source`` moved to ``destination``, the others in order."""
    if isinstance(a, np.ndarray):
        return np.moveaxis(a, source, destination)
    x = _device(a)
    src, dst = _axes(source, x.ndim), _axes(destination, x.ndim)
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number of elements")
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.transpose(tuple(order))


def concatenate(
    arrays: Sequence[Any],
    axis: int | None = 0,
    out: DeviceArray | np.ndarray | None = None,
    *,
    dtype: Any = None,
    casting: str = "same_kind",
) -> Any:
    """The arrays joined along ``axis`` (flattened first when None), in NumPy 2's result dtype
    (or ``dtype``, or ``out``'s), each cast with ``casting``; enqueued on the session stream."""
    if out is not None and dtype is not None:
        raise TypeError("concatenate() only takes `out` or `dtype` as an argument, but both were provided.")
    items = list(arrays)
    if not items:
        raise ValueError("need at least one array to concatenate")
    if all(isinstance(x, np.ndarray) for x in items) and not isinstance(out, DeviceArray):
        return np.concatenate(items, axis, out, dtype=dtype, casting=casting)  # type: ignore[call-overload]
    parts = _on_one_session(items)
    if axis is None:
        parts = [p.ravel() for p in parts]
        axis = 0
    ndim = parts[0].ndim
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis(axis, ndim)
    shape = _joined_shape([p.shape for p in parts], axis)
    result = _result_dtype(parts, dtype, out, casting)
    target = _target(parts[0].session, shape, result, out)
    parts = [p.copy() if p.overlaps(target) else p for p in parts]  # read every input before writing any
    start = 0
    for p in parts:
        n = p.shape[axis]
        if p.size:
            ops.astype(p, result, out=target[(slice(None),) * axis + (slice(start, start + n),)])
        start += n
    return target


def stack(
    arrays: Sequence[Any],
    axis: int = 0,
    out: DeviceArray | np.ndarray | None = None,
    *,
    dtype: Any = None,
    casting: str = "same_kind",
) -> Any:
    """The arrays (all of one shape) joined along a new axis ``axis`` of the result.

    Parameters
    ----------
    arrays : sequence of array_like
        DeviceArrays or numpy arrays (numpy ones are uploaded to the first DeviceArray's session).
    axis : int
        Where the new axis goes in the result.
    out : array, optional
        Written in place of a new result.
    dtype : dtype, optional
        The result's element type, cast with ``casting``.
    casting : str
        NumPy's casting rule for ``dtype`` and ``out`` (default ``"same_kind"``).

    Returns
    -------
    DeviceArray or numpy.ndarray
        A numpy array when every input is one, else a DeviceArray.
    """
    items = list(arrays)
    if not items:
        raise ValueError("need at least one array to stack")
    if all(isinstance(x, np.ndarray) for x in items) and not isinstance(out, DeviceArray):
        return np.stack(items, axis, out, dtype=dtype, casting=casting)  # type: ignore[call-overload]
    parts = _on_one_session(items)
    if len({p.shape for p in parts}) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = normalize_axis(axis, parts[0].ndim + 1)
    return concatenate([p.expand_dims(axis) for p in parts], axis, out, dtype=dtype, casting=casting)


def _on_one_session(items: list[Any]) -> list[DeviceArray]:
    """Every input on the device of the first DeviceArray's session (numpy inputs uploaded)."""
    session = next((x.session for x in items if type(x) is DeviceArray), None)
    parts = []
    for x in items:
        d = asarray(x, session=session) if type(x) is not DeviceArray else x
        if session is None:
            session = d.session
        if d.session is not session:
            raise WrongSessionError("the arrays to join belong to different sessions; copy them to one first")
        parts.append(d)
    return parts


def _joined_shape(shapes: list[tuple[int, ...]], axis: int) -> tuple[int, ...]:
    """NumPy's check: one ndim, equal extents off ``axis``; the result's extent on it is the sum."""
    first = shapes[0]
    for i, s in enumerate(shapes[1:], 1):
        if len(s) != len(first):
            raise ValueError(
                "all the input array dimensions except for the concatenation axis must match exactly, but "
                f"array 0 has {len(first)} dimension(s) and the array at index {i} has {len(s)} dimension(s)"
            )
        for d, (m, n) in enumerate(zip(first, s)):
            if d != axis and m != n:
                raise ValueError(
                    "all the input array dimensions except for the concatenation axis must match exactly, but "
                    f"along dimension {d}, the array at index 0 has size {m} and the array at index {i} has size {n}"
                )
    return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1 :]


def _result_dtype(parts: list[DeviceArray], dtype: Any, out: Any, casting: str) -> np.dtype:
    """NumPy 2's result dtype of the inputs (or ``dtype`` / ``out``'s), each input castable to it."""
    if dtype is not None:
        result = promotion.supported(dtype)
    elif out is not None:
        result = promotion.supported(out.dtype)
    else:
        result = promotion.supported(np.result_type(*(p.dtype for p in parts)))
    for p in parts:
        if not np.can_cast(p.dtype, result, casting):  # type: ignore[arg-type]
            raise TypeError(
                f"Cannot cast array data from dtype('{p.dtype}') to dtype('{result}') according to the rule '{casting}'"
            )
    return result


def _target(session: Any, shape: tuple[int, ...], dtype: np.dtype, out: Any) -> DeviceArray:
    """``out`` checked against the result (a DeviceArray of its session and shape), or a new array."""
    if out is None:
        made: DeviceArray = session.empty(shape, dtype)
        return made
    if type(out) is not DeviceArray:
        raise TypeError("concatenate: the inputs are on the device, so out= must be a kerneldsl DeviceArray")
    if out.session is not session:
        raise WrongSessionError("concatenate: out= belongs to another session than the inputs")
    if tuple(out.shape) != shape:
        raise ValueError(f"Output array is the wrong shape: out= has shape {tuple(out.shape)}, the result {shape}")
    return out
