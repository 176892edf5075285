"""``sort`` and ``argsort`` along an axis: a stable merge sort on the device, and the set
functions (``unique_*``) on top of it.

Each pass merges neighbouring sorted runs of ``width`` elements in every row, one thread per
element: an element's place in the merged run is its place in its own run plus the number of
elements of the other run that go before it, found by binary search (elements of the left run
go before equal ones of the right run, which is what makes the sort stable). ``ceil(log2(n))``
passes sort rows of ``n``; keys and their original positions move together, so ``argsort`` is
the same passes. NaNs sort last, as NumPy's do (ascending and descending).

``unique_*`` sort the flattened array, mark where a value differs from the one before it (each
NaN is its own value, as the standard says), and compact the marks with ``nonzero``: the values,
counts (differences of the starts), first indices (the stable order's first of each run) and,
for ``unique_inverse``, each element's group scattered back to its position. ``nonzero`` reads the
number of unique values on the host: these functions synchronize."""

from __future__ import annotations

from typing import Any, NamedTuple, NewType, TypeVar

import numpy as np

from ..array import ops
from ..array.ndarray import DeviceArray
from ..device_array.creation import empty
from ..dtypes import int32, int64
from ..jit.signature import In, InOut, Out, Scalar, cdiv
from ..launch.dispatch import kernel
from ..runtime.views import normalize_axis
from ._creation import arange
from ._gather import nonzero, take
from ._manipulation import broadcast_to, concat, moveaxis, reshape

BLOCK = 256
T = TypeVar("T")  # the sorted keys' dtype
total = NewType("total", int)  # elements of all rows
slots = NewType("slots", int)  # elements of a scatter's target

_BEFORE = "(desc ? (p > q) : (p < q)) || (q != q && p == p)"  # p goes before q: NaNs last


@kernel(grid=cdiv(total, BLOCK), block=BLOCK)
def _merge(
    src: In[T, total],
    src_index: In[int64, total],
    dst: Out[T, total],
    dst_index: Out[int64, total],
    length: Scalar[int64],
    width: Scalar[int64],
    descending: Scalar[int32],
) -> str:
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < total) {{
        const bool desc = {descending} != 0;
        auto before = [&](T p, T q) -> bool {{ return {_BEFORE}; }};
        long long n = {length}, w = {width};
        long long base = i / n * n, pos = i % n;
        long long start = pos / (2 * w) * (2 * w);
        long long mid = start + w < n ? start + w : n, end = start + 2 * w < n ? start + 2 * w : n;
        T a = {src}[i];
        long long lo, hi, rank;
        if (pos < mid) {{
            lo = mid; hi = end;  // right-run elements strictly before a
            while (lo < hi) {{ long long m = (lo + hi) / 2; if (before({src}[base + m], a)) lo = m + 1; else hi = m; }}
            rank = (pos - start) + (lo - mid);
        }} else {{
            lo = start; hi = mid;  // left-run elements not after a (equal ones stay first)
            while (lo < hi) {{ long long m = (lo + hi) / 2; if (!before(a, {src}[base + m])) lo = m + 1; else hi = m; }}
            rank = (pos - mid) + (lo - start);
        }}
        {dst}[base + start + rank] = a;
        {dst_index}[base + start + rank] = {src_index}[i];
    }}
    """


@kernel(grid=cdiv(total, BLOCK), block=BLOCK)
def _scatter(target: InOut[int64, slots], positions: In[int64, total], values: In[int64, total]) -> str:
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < total) {target}[{positions}[i]] = {values}[i];
    """


def _sorted_rows(x: Any, axis: int, descending: bool) -> tuple[DeviceArray, DeviceArray, int]:
    """``x`` with ``axis`` last, each row sorted, and each element's original position in its row."""
    axis = normalize_axis(axis, x.ndim) if x.ndim else 0
    moved = moveaxis(x, axis, -1) if x.ndim else reshape(x, (1,))
    keys = moved.copy()
    n = keys.shape[-1] if keys.ndim else 1
    index = broadcast_to(arange(n, dtype=np.int64, device=x.session), keys.shape).copy()
    if keys.size and n > 1:
        spare_keys, spare_index = empty(keys.shape, keys.dtype, keys.session), empty(keys.shape, np.int64, keys.session)
        width = 1
        while width < n:
            _merge(
                keys.reshape(-1),
                index.reshape(-1),
                spare_keys.reshape(-1),
                spare_index.reshape(-1),
                n,
                width,
                int(descending),
            )
            keys, spare_keys, index, spare_index = spare_keys, keys, spare_index, index
            width *= 2
    return keys, index, axis


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> DeviceArray:
    """``x`` sorted along ``axis`` (always stably; NaNs last)."""
    keys, _, axis = _sorted_rows(x, axis, descending)
    result: DeviceArray = moveaxis(keys, -1, axis) if x.ndim else keys.reshape(())
    return result


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> DeviceArray:
    """The int64 positions that sort ``x`` along ``axis`` (always stably; NaNs last)."""
    _, index, axis = _sorted_rows(x, axis, descending)
    result: DeviceArray = moveaxis(index, -1, axis) if x.ndim else index.reshape(())
    return result


class UniqueAll(NamedTuple):
    values: DeviceArray
    indices: DeviceArray
    inverse_indices: DeviceArray
    counts: DeviceArray


class UniqueCounts(NamedTuple):
    values: DeviceArray
    counts: DeviceArray


class UniqueInverse(NamedTuple):
    values: DeviceArray
    inverse_indices: DeviceArray


def _runs(x: Any) -> tuple[DeviceArray, DeviceArray, DeviceArray, DeviceArray]:
    """The flattened ``x`` sorted, its original positions, the start of each run of equal values
    (int64 positions in the sorted order) and whether each sorted element starts a run."""
    keys, index, _ = _sorted_rows(reshape(x, (-1,)), 0, False)
    n = keys.shape[0]
    first = x.session.empty((n,), np.bool_)
    if n:
        first[:1] = True
        if n > 1:
            ops.not_equal(keys[1:], keys[:-1], out=first[1:])
    (starts,) = nonzero(first) if n else (x.session.empty((0,), np.int64),)
    return keys, index, starts, first


def _counts(starts: DeviceArray, n: int) -> DeviceArray:
    ends = concat([starts[1:], arange(n, n + 1, dtype=np.int64, device=starts.session)])
    counts: DeviceArray = ops.subtract(ends, starts)
    return counts


def _inverse(x: Any, index: DeviceArray, first: DeviceArray) -> DeviceArray:
    groups = ops.subtract(ops.cumsum(first.astype(np.int64)), 1)
    inverse: DeviceArray = x.session.empty((index.shape[0],), np.int64)
    if index.shape[0]:
        _scatter(inverse, index, groups)
    return inverse.reshape(x.shape)


def unique_values(x: Any, /) -> DeviceArray:
    keys, _, starts, _ = _runs(x)
    return take(keys, starts) if starts.shape[0] else keys[:0]


def unique_counts(x: Any, /) -> UniqueCounts:
    keys, _, starts, _ = _runs(x)
    if not starts.shape[0]:
        return UniqueCounts(keys[:0], starts)
    return UniqueCounts(take(keys, starts), _counts(starts, keys.shape[0]))


def unique_inverse(x: Any, /) -> UniqueInverse:
    keys, index, starts, first = _runs(x)
    values = take(keys, starts) if starts.shape[0] else keys[:0]
    return UniqueInverse(values, _inverse(x, index, first))


def unique_all(x: Any, /) -> UniqueAll:
    keys, index, starts, first = _runs(x)
    if not starts.shape[0]:
        return UniqueAll(keys[:0], starts, _inverse(x, index, first), starts)
    return UniqueAll(take(keys, starts), take(index, starts), _inverse(x, index, first), _counts(starts, keys.shape[0]))
