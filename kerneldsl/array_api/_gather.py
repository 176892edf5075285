"""The Array API's functions that read by index: ``take``, ``take_along_axis`` (a gather
kernel each: one thread per output element) and ``nonzero`` (a mask, its running count by
``kd.ops.cumsum``, then a kernel writing each set element's coordinates at its count).
``nonzero``'s result size is data: it reads the count on the host (it synchronizes, as CuPy's
does). Indices are int64 and may be negative (counted from the end); out-of-range indices are
clamped to the axis, since the standard leaves them unspecified and a kernel cannot raise."""

from __future__ import annotations

import math
from typing import Any, NewType, TypeVar

import numpy as np

from ..array import ops
from ..array.ndarray import DeviceArray
from ..device_array.creation import asarray as upload
from ..dtypes import int64
from ..jit.signature import In, Out, Scalar, cdiv
from ..launch.dispatch import kernel
from ..runtime.views import normalize_axis
from ._manipulation import broadcast_to

BLOCK = 256
T = TypeVar("T")  # the gathered arrays' dtype
xlen = NewType("xlen", int)  # flat extents: the source, the indices, the result
ilen = NewType("ilen", int)
olen = NewType("olen", int)
n = NewType("n", int)  # nonzero: the elements, the axes
ndim = NewType("ndim", int)


@kernel(grid=cdiv("olen", BLOCK), block=BLOCK)
def _take(x: In[T, xlen], idx: In[int64, ilen], out: Out[T, olen], rows: Scalar[int64], inner: Scalar[int64]) -> str:
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < olen) {{
        long long k = i % {inner}, t = i / {inner}, j = t % ilen, o = t / ilen;
        long long r = {idx}[j];
        r = r < 0 ? r + {rows} : r;
        r = r < 0 ? 0 : (r >= {rows} ? {rows} - 1 : r);
        {out}[i] = {x}[(o * {rows} + r) * {inner} + k];
    }}
    """


@kernel(grid=cdiv("olen", BLOCK), block=BLOCK)
def _take_along(
    x: In[T, xlen],
    idx: In[int64, olen],
    out: Out[T, olen],
    rows: Scalar[int64],
    taken: Scalar[int64],
    inner: Scalar[int64],
) -> str:
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < olen) {{
        long long k = i % {inner}, o = i / {inner} / {taken};
        long long r = {idx}[i];
        r = r < 0 ? r + {rows} : r;
        r = r < 0 ? 0 : (r >= {rows} ? {rows} - 1 : r);
        {out}[i] = {x}[(o * {rows} + r) * {inner} + k];
    }}
    """


@kernel(grid=cdiv("n", BLOCK), block=BLOCK)
def _coordinates(counts: In[int64, n], dims: In[int64, ndim], out: Out[int64, olen], total: Scalar[int64]) -> str:
    return f"""
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n && {counts}[i] != (i ? {counts}[i - 1] : 0)) {{
        long long p = {counts}[i] - 1, r = i;
        for (int d = (int)ndim - 1; d >= 0; --d) {{
            {out}[d * {total} + p] = r % {dims}[d];
            r /= {dims}[d];
        }}
    }}
    """


def _contiguous(x: DeviceArray) -> DeviceArray:
    return x if x.is_contiguous else x.copy()


def _indices(indices: Any, session: Any) -> DeviceArray:
    found = indices if type(indices) is DeviceArray else upload(np.asarray(indices), session=session)
    if found.dtype.kind not in "iu":
        raise TypeError(f"indices must have an integer dtype, got {found.dtype}")
    return _contiguous(found if found.dtype == np.int64 else found.astype(np.int64))


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> DeviceArray:
    """The elements of ``x`` at the 1-D ``indices`` along ``axis`` (``x`` 1-D when None)."""
    if axis is None:
        if x.ndim != 1:
            raise ValueError("take: axis must be given for an array of more than one dimension")
        axis = 0
    axis = normalize_axis(axis, x.ndim)
    idx = _indices(indices, x.session)
    if idx.ndim != 1:
        raise ValueError(f"take: indices must be 1-D, got shape {idx.shape}")
    rows = x.shape[axis]
    shape = (*x.shape[:axis], idx.shape[0], *x.shape[axis + 1 :])
    out: DeviceArray = x.session.empty(shape, x.dtype)
    if out.size:
        if not rows:
            raise IndexError("take: cannot take from an empty axis")
        inner = math.prod(x.shape[axis + 1 :])
        _take(_contiguous(x).reshape(-1), idx, out.reshape(-1), rows, inner)
    return out


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> DeviceArray:
    """The elements of ``x`` at ``indices`` (``x``'s shape but along ``axis``) along ``axis``."""
    axis = normalize_axis(axis, x.ndim)
    idx = _indices(indices, x.session)
    if idx.ndim != x.ndim:
        raise ValueError(f"take_along_axis: indices must have {x.ndim} dimensions, got shape {idx.shape}")
    off_axis = [tuple(a.shape[:axis]) + (1,) + tuple(a.shape[axis + 1 :]) for a in (x, idx)]
    shape = tuple(int(n) for n in np.broadcast_shapes(*off_axis))
    target = (*shape[:axis], idx.shape[axis], *shape[axis + 1 :])
    source = (*shape[:axis], x.shape[axis], *shape[axis + 1 :])
    out: DeviceArray = x.session.empty(target, x.dtype)
    if out.size:
        if not x.shape[axis]:
            raise IndexError("take_along_axis: cannot take from an empty axis")
        xs = broadcast_to(x, source).copy()
        ids = broadcast_to(idx, target).copy()
        inner = math.prod(target[axis + 1 :])
        _take_along(xs.reshape(-1), ids.reshape(-1), out.reshape(-1), x.shape[axis], idx.shape[axis], inner)
    return out


def nonzero(x: Any, /) -> tuple[DeviceArray, ...]:
    """The coordinates of ``x``'s nonzero elements, one int64 array per axis, in C order."""
    if x.ndim == 0:
        raise ValueError("nonzero is not defined for 0-d arrays (the standard asks for an error)")
    flat = _contiguous(x).reshape(-1)
    counts: DeviceArray = ops.cumsum(ops.not_equal(flat, 0).astype(np.int64))
    total = int(counts[-1]) if counts.size else 0
    out: DeviceArray = x.session.empty((x.ndim, total), np.int64)
    if total:
        dims = upload(np.asarray(x.shape, np.int64), session=x.session)
        _coordinates(counts, dims, out.reshape(-1), total)
    return tuple(out[d] for d in range(x.ndim))
