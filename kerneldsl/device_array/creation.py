"""Creating device arrays the NumPy way: ``kd.asarray``, ``kd.empty``, ``kd.zeros``, ``kd.ones``,
``kd.full``, ``kd.arange`` and the ``*_like`` forms, on the default session of device 0 unless
``session=`` names another. Values that are not zeros are made on the host and uploaded once."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array.ndarray import DeviceArray, as_array
from ..runtime.foreign import adopt, is_foreign
from ..runtime.session import Session, default_session


def _session(session: Session | None) -> Session:
    return default_session() if session is None else session


def asarray(obj: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``obj`` on the device: a DeviceArray of the session as it is (no copy unless ``dtype``
    differs), a CuPy/PyTorch array adopted without a copy, anything else through numpy.

    Parameters
    ----------
    obj : array_like
        A DeviceArray, a CUDA array (``__cuda_array_interface__`` or DLPack), a numpy array, a
        scalar or nested sequences.
    dtype : dtype, optional
        Convert to this element type (a copy).
    session : Session, optional
        Where the array lives (default: ``kd.default_session()``).

    Returns
    -------
    DeviceArray
        ``obj`` itself when it already is one of the session's, else a new array.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        a = kd.asarray([1.0, 2.0, 3.0])
    """
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
    """An array of ``shape`` whose values are whatever the memory held: fill it before reading.

    Parameters
    ----------
    shape : int or tuple of int
        The array's extents.
    dtype : dtype, optional
        The element type (default: float32).
    session : Session, optional
        Where the array lives (default: ``kd.default_session()``).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        a = kd.empty((2, 3), np.float32)
    """
    return as_array(_session(session).empty(shape, dtype))


def zeros(shape: Any, dtype: Any = np.float32, session: Session | None = None) -> DeviceArray:
    """An array of ``shape`` filled with zeros, set on the device (nothing is uploaded).

    Parameters
    ----------
    shape : int or tuple of int
        The array's extents.
    dtype : dtype, optional
        The element type (default: float32).
    session : Session, optional
        Where the array lives (default: ``kd.default_session()``).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        a = kd.zeros((2, 3), np.int32)
    """
    return as_array(_session(session).zeros(shape, dtype))


def ones(shape: Any, dtype: Any = np.float32, session: Session | None = None) -> DeviceArray:
    """An array of ``shape`` filled with ones (made on the host and uploaded).

    Parameters
    ----------
    shape : int or tuple of int
        The array's extents.
    dtype : dtype, optional
        The element type (default: float32).
    session : Session, optional
        Where the array lives (default: ``kd.default_session()``).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        a = kd.ones(4, np.float64)
    """
    return full(shape, 1, dtype, session)


def full(shape: Any, fill_value: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """An array of ``shape`` filled with ``fill_value`` (made on the host and uploaded).

    Parameters
    ----------
    shape : int or tuple of int
        The array's extents.
    fill_value : scalar
        Every element's value.
    dtype : dtype, optional
        The element type (default: NumPy's for ``fill_value``).
    session : Session, optional
        Where the array lives (default: ``kd.default_session()``).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        a = kd.full((2, 2), 3, dtype=np.int64)
    """
    return as_array(_session(session).to_device(np.full(shape, fill_value, dtype=dtype)))


def arange(
    start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, session: Session | None = None
) -> DeviceArray:
    """``numpy.arange``'s values on the device (made on the host and uploaded).

    Parameters
    ----------
    start, stop, step : scalar
        As ``numpy.arange``: ``kd.arange(5)`` is 0 to 4, ``kd.arange(1, 2, 0.25)`` steps of a quarter.
    dtype : dtype, optional
        The element type (default: NumPy's for the arguments).
    session : Session, optional
        Where the array lives (default: ``kd.default_session()``).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        a = kd.arange(10, dtype=np.float32)
    """
    values = np.arange(start, stop, step, dtype=dtype) if stop is not None else np.arange(start, dtype=dtype)
    return as_array(_session(session).to_device(values))


def empty_like(a: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``kd.empty`` with ``a``'s shape and dtype.

    Parameters
    ----------
    a : array_like
        An array whose shape, and dtype unless ``dtype`` is given, the result takes.
    dtype : dtype, optional
        The element type instead of ``a``'s.
    session : Session, optional
        Where the array lives (default: ``a``'s session when ``a`` is a DeviceArray, else the default one).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        b = kd.empty_like(np.ones((2, 3)))
    """
    return empty(a.shape, a.dtype if dtype is None else dtype, _session_of(a, session))


def zeros_like(a: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``kd.zeros`` with ``a``'s shape and dtype.

    Parameters
    ----------
    a : array_like
        An array whose shape, and dtype unless ``dtype`` is given, the result takes.
    dtype : dtype, optional
        The element type instead of ``a``'s.
    session : Session, optional
        Where the array lives (default: ``a``'s session when ``a`` is a DeviceArray, else the default one).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        b = kd.zeros_like(np.ones((2, 3)), dtype=np.float32)
    """
    return zeros(a.shape, a.dtype if dtype is None else dtype, _session_of(a, session))


def ones_like(a: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``kd.ones`` with ``a``'s shape and dtype.

    Parameters
    ----------
    a : array_like
        An array whose shape, and dtype unless ``dtype`` is given, the result takes.
    dtype : dtype, optional
        The element type instead of ``a``'s.
    session : Session, optional
        Where the array lives (default: ``a``'s session when ``a`` is a DeviceArray, else the default one).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        b = kd.ones_like(np.zeros(5, np.int16))
    """
    return ones(a.shape, a.dtype if dtype is None else dtype, _session_of(a, session))


def full_like(a: Any, fill_value: Any, dtype: Any = None, session: Session | None = None) -> DeviceArray:
    """``kd.full`` with ``a``'s shape and dtype.

    Parameters
    ----------
    a : array_like
        An array whose shape, and dtype unless ``dtype`` is given, the result takes.
    fill_value : scalar
        Every element's value.
    dtype : dtype, optional
        The element type instead of ``a``'s.
    session : Session, optional
        Where the array lives (default: ``a``'s session when ``a`` is a DeviceArray, else the default one).

    Returns
    -------
    DeviceArray
        A new C-contiguous array on the session's device.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        b = kd.full_like(np.zeros(3), 7.5)
    """
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype, _session_of(a, session))


def _session_of(a: Any, session: Session | None) -> Session:
    """An explicit session, else the array's own, else the default one."""
    if session is not None:
        return session
    return a.session if type(a) is DeviceArray else default_session()
