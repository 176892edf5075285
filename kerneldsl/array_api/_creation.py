"""The Array API's creation functions on kerneldsl's arrays, with the standard's signatures
and defaults (float64 and int64, as NumPy). Values other than zeros and copies are made on the
host and uploaded once (``arange``, ``eye``, ``linspace``, ``full``), as ``kd.full`` does;
``tril``/``triu`` are one ``where`` kernel against an uploaded mask of the last two axes;
``meshgrid`` copies broadcast views. ``device=`` takes None, an ordinal or a ``kd.Session``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array.ndarray import DeviceArray
from ..device_array import creation
from ..runtime.foreign import is_foreign
from ..runtime.session import Session, default_session
from ._dtypes import DEFAULT_FLOAT


def session_for(device: Any, like: Any = None) -> Session[Any]:
    """The session ``device`` names: an ordinal's default session, a Session, else ``like``'s
    session (an array's), else the default one."""
    if isinstance(device, Session):
        return device
    if device is not None:
        if type(like) is DeviceArray and like.device == device:
            return like.session
        return default_session(int(device))
    if type(like) is DeviceArray:
        return like.session
    return default_session()


def _upload(values: np.ndarray, device: Any) -> DeviceArray:
    return creation.asarray(values, session=session_for(device))


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> DeviceArray:
    """``obj`` as a device array: a DeviceArray as it is (``copy=True``: a copy; a dtype change
    copies, refused under ``copy=False``), anything else uploaded (``copy=False`` refused)."""
    if type(obj) is DeviceArray:
        same = dtype is None or np.dtype(dtype) == obj.dtype
        if copy is False and not same:
            raise ValueError("asarray(copy=False): converting the dtype needs a copy")
        result = obj if same else obj.astype(dtype)
        if device is not None:
            result = result.to_device(device)
        return result.copy() if copy and result is obj else result
    if copy is False:
        raise ValueError("asarray(copy=False): a host object must be copied to the device")
    if isinstance(obj, (list, tuple)) and any(type(v) is DeviceArray for v in _flat(obj)):
        obj = _host_nested(obj)
    made = creation.asarray(obj, dtype=dtype, session=session_for(device))
    adopted = is_foreign(obj) and not isinstance(obj, np.ndarray)  # device memory shared, not copied
    return made.copy() if copy and adopted else made


def _flat(obj: Any) -> list[Any]:
    out: list[Any] = []
    for v in obj:
        out.extend(_flat(v) if isinstance(v, (list, tuple)) else [v])
    return out


def _host_nested(obj: Any) -> Any:
    """A nested sequence with DeviceArrays among its items, each copied to the host (synchronizes)."""
    if isinstance(obj, (list, tuple)):
        return [_host_nested(v) for v in obj]
    return obj.to_host() if type(obj) is DeviceArray else obj


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    """``[start, stop)`` in steps of ``step`` (``[0, start)`` when ``stop`` is None)."""
    lo, hi = (0, start) if stop is None else (start, stop)
    return _upload(np.arange(lo, hi, step, dtype=dtype), device)


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    return creation.empty(shape, DEFAULT_FLOAT if dtype is None else dtype, session_for(device))


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    return creation.zeros(shape, DEFAULT_FLOAT if dtype is None else dtype, session_for(device))


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    return creation.ones(shape, DEFAULT_FLOAT if dtype is None else dtype, session_for(device))


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    """``shape`` filled with ``fill_value`` (dtype: ``dtype``, else bool/int64/float64 by the value)."""
    if type(fill_value) is DeviceArray:
        fill_value = fill_value.item()
    return _upload(np.full(shape, fill_value, dtype=dtype), device)


def empty_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    return creation.empty(x.shape, x.dtype if dtype is None else dtype, session_for(device, x))


def zeros_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    return creation.zeros(x.shape, x.dtype if dtype is None else dtype, session_for(device, x))


def ones_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    return creation.ones(x.shape, x.dtype if dtype is None else dtype, session_for(device, x))


def full_like(x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> DeviceArray:
    target = x.dtype if dtype is None else dtype
    return creation.asarray(np.full(x.shape, fill_value, dtype=target), session=session_for(device, x))


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: Any = None) -> DeviceArray:
    return _upload(np.eye(n_rows, n_cols, k=k, dtype=DEFAULT_FLOAT if dtype is None else dtype), device)


def linspace(
    start: Any,
    stop: Any,
    /,
    num: int,
    *,
    dtype: Any = None,
    device: Any = None,
    endpoint: bool = True,
) -> DeviceArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (computed in float64 on the host)."""
    values = np.linspace(start, stop, num, endpoint=endpoint)
    return _upload(values.astype(DEFAULT_FLOAT if dtype is None else dtype), device)


def _triangle(x: Any, k: int, lower: bool) -> DeviceArray:
    from ..array import ops

    if x.ndim < 2:
        raise ValueError(f"tril/triu need an array of at least 2 dimensions, got shape {x.shape}")
    m, n = x.shape[-2:]
    keep = np.tri(m, n, k, dtype=np.bool_) if lower else ~np.tri(m, n, k - 1, dtype=np.bool_)
    mask = creation.asarray(keep, session=x.session)
    result: DeviceArray = ops.where(mask, x, np.zeros((), x.dtype))
    return result


def tril(x: Any, /, *, k: int = 0) -> DeviceArray:
    """``x`` with the elements above the ``k``-th diagonal of its last two axes zeroed."""
    return _triangle(x, k, lower=True)


def triu(x: Any, /, *, k: int = 0) -> DeviceArray:
    """``x`` with the elements below the ``k``-th diagonal of its last two axes zeroed."""
    return _triangle(x, k, lower=False)


def meshgrid(*arrays: Any, indexing: str = "xy") -> list[DeviceArray]:
    """Coordinate arrays from 1-D arrays (``indexing="xy"``: the first two axes swapped, as NumPy)."""
    from ..device_array.manipulation import broadcast_to

    if indexing not in ("xy", "ij"):
        raise ValueError(f"indexing must be 'xy' or 'ij', got {indexing!r}")
    shape = [a.shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    grids = []
    for i, a in enumerate(arrays):
        axis = (1 if i == 0 else 0 if i == 1 else i) if indexing == "xy" and len(arrays) > 1 else i
        view = a.reshape(*(-1 if d == axis else 1 for d in range(len(arrays))))
        grids.append(broadcast_to(view, tuple(shape)).copy())
    return grids


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> DeviceArray:
    """A DLPack-exporting device array as a DeviceArray (zero-copy; ``copy=True`` copies)."""
    if type(x) is DeviceArray:
        return x.copy() if copy else x
    adopted = creation.asarray(x, session=None if device is None else session_for(device))
    return adopted.copy() if copy else adopted
