"""Creating device arrays the NumPy way: ``kd.asarray``, ``kd.empty``, ``kd.zeros``, ``kd.ones``,
``kd.full``, ``kd.arange`` and the ``*_like`` forms, on the default session of device 0 unless
``session=`` names another. Values that are not zeros are made on the host and uploaded once."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array.arraytype import as_array
from ..runtime.foreign import adopt, is_foreign
from ..runtime.session import Session, default_session
from .ndarray import DeviceArray


def _session(session: Session | None) -> Session:
    return default_session() if session is None else session


def asarray(obj: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``obj`` on the device: a DeviceArray of the session as it is (no copy unless ``dtype``
    differs), a CuPy/PyTorch array adopted without a copy, anything else through numpy."""
    if type(obj) is np.ndarray and dtype is None:  # the common upload, without probing protocols
        return as_array(_session(session).to_device(obj))
    if type(obj) is DeviceArray and (session is None or obj.session is session):
        if dtype is None or np.dtype(dtype) == obj.dtype:
            return obj
        return obj.astype(dtype)
    if is_foreign(obj) and not isinstance(obj, np.ndarray) and dtype is None:
        return as_array(adopt(obj, session, "kd.asarray", None))
    return as_array(_session(session).to_device(np.asarray(obj, dtype=dtype)))


def empty(shape: Any, dtype: Any = np.float32, session: Session | None = None) -> DeviceArray:
    return as_array(_session(session).empty(shape, dtype))


def zeros(shape: Any, dtype: Any = np.float32, session: Session | None = None) -> DeviceArray:
    return as_array(_session(session).zeros(shape, dtype))


def ones(shape: Any, dtype: Any = np.float32, session: Session | None = None) -> DeviceArray:
    return full(shape, 1, dtype, session)


def full(shape: Any, fill_value: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``shape`` filled with ``fill_value`` (dtype: ``dtype``, else numpy's for the value)."""
    return as_array(_session(session).to_device(np.full(shape, fill_value, dtype=dtype)))


def arange(
    start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, session: Session | None = None
) -> DeviceArray:
    """``numpy.arange``'s values on the device."""
    values = np.arange(start, stop, step, dtype=dtype) if stop is not None else np.arange(start, dtype=dtype)
    return as_array(_session(session).to_device(values))


def empty_like(a: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    return empty(a.shape, a.dtype if dtype is None else dtype, _session_of(a, session))


def zeros_like(a: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    return zeros(a.shape, a.dtype if dtype is None else dtype, _session_of(a, session))


def ones_like(a: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    return ones(a.shape, a.dtype if dtype is None else dtype, _session_of(a, session))


def full_like(a: Any, fill_value: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype, _session_of(a, session))


def _session_of(a: Any, session: Session | None) -> Session:
    """An explicit session, else the array's own, else the default one."""
    if session is not None:
        return session
    return a.session if type(a) is DeviceArray else default_session()
