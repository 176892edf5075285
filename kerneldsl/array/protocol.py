"""The Python and Array API protocol of ``kd.DeviceArray``: scalar conversions (``item()``,
``float``/``int``/``bool``/``operator.index``), ``__array_namespace__``, ``.mT`` and
``to_device`` (the operators are ``array/operators.py``'s). ``.device`` is the array's device
ordinal (an int), which ``to_device`` and ``kd.default_session`` take.

Scalar conversions synchronize: they wait for the work queued on the session stream and copy
one element to the host. Which arrays convert is NumPy's rule, decided on a host stand-in of
the same shape and dtype (no device work, NumPy's message): ``float``/``int`` take 0-d arrays,
``bool`` and ``item()`` any array of one element, ``operator.index`` 0-d integer arrays; the
refusals are ``errors.ArrayScalarError`` (a TypeError) and ``errors.ArraySizeError`` (a ValueError).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..errors import ArrayScalarError, ArraySizeError, InvalidOptionError, ViewError
from ..runtime.session import Session, default_session, session_of
from .engine import namespace

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..runtime.memory import DeviceBuffer

API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")
"""Array API revisions ``__array_namespace__`` accepts (the namespace is ``kerneldsl.array_api`` for each)."""


def _converted(a: DeviceBuffer, convert: Callable[[Any], Any]) -> Any:
    """``convert`` of ``a``'s one value, after NumPy's rule accepted an array of its shape and dtype."""
    standin = np.broadcast_to(np.zeros((), a.dtype), a.shape)
    try:
        value = convert(standin)
    except TypeError as e:
        raise ArrayScalarError(str(e)) from None
    except ValueError as e:
        raise ArraySizeError(str(e)) from None
    if a.size != 1:  # accepted without a value to read (none is, under NumPy 2.4)
        return value
    return convert(a.reshape(()).to_host())


def _array(a: object) -> DeviceBuffer:
    """A mixin's ``self``: the memory of the array class that mixes these in (``DeviceArray``);
    what it gives back is typed ``Self``, that class."""
    return cast("DeviceBuffer", a)


class ArrayProtocol:
    """Scalar conversions, the Array API namespace, ``.mT`` and ``to_device``."""

    __slots__ = ()

    def item(self, *index: Any) -> Any:
        """The element at ``index`` (a flat int, or one int per axis; none for a one-element
        array) as a Python scalar, as ``numpy.ndarray.item``; synchronizes."""
        a = _array(self)
        standin = np.broadcast_to(np.zeros((), a.dtype), a.shape)
        try:
            standin.item(*index)
        except ValueError as e:
            raise ArraySizeError(str(e)) from None
        if len(index) == 1 and not isinstance(index[0], tuple):
            index = tuple(int(i) for i in np.unravel_index(operator.index(index[0]) % max(a.size, 1), a.shape))
        elif len(index) == 1:
            index = index[0]
        element = a[tuple(index)] if index else a.reshape(())
        return element.to_host().item()

    def __float__(self) -> float:
        """The value of a 0-d array (synchronizes)."""
        value: float = _converted(_array(self), float)
        return value

    def __complex__(self) -> complex:
        """The value of a 0-d array (synchronizes)."""
        value: complex = _converted(_array(self), complex)
        return value

    def __int__(self) -> int:
        """The value of a 0-d array, truncated as ``int(numpy_array)`` (synchronizes)."""
        value: int = _converted(_array(self), int)
        return value

    def __bool__(self) -> bool:
        """The truth of a one-element array (synchronizes); ArraySizeError for any other size."""
        value: bool = _converted(_array(self), bool)
        return value

    def __index__(self) -> int:
        """The value of a 0-d integer array, for indexing and ``range`` (synchronizes)."""
        value: int = _converted(_array(self), operator.index)
        return value

    def __array_namespace__(self, *, api_version: str | None = None) -> ModuleType:
        """The Array API namespace of these arrays: ``kerneldsl.array_api``."""
        if api_version is not None and api_version not in API_VERSIONS:
            raise InvalidOptionError(f"unsupported Array API version {api_version!r}; supported: {API_VERSIONS}")
        return namespace()

    @property
    def mT(self) -> Self:
        """A view with the last two axes swapped (a stack of transposed matrices)."""
        a = _array(self)
        if a.ndim < 2:
            raise ViewError(f"matrix transpose with ndim < 2 is undefined (the array has shape {a.shape})")
        return cast("Self", a.transpose(*range(a.ndim - 2), a.ndim - 1, a.ndim - 2))

    def to_device(self, device: int | Session[Any], /, *, stream: Any = None) -> Self:
        """This array on ``device`` (an ordinal: its default session unless it is this array's
        device; or a Session): the array itself when it is already there, else a copy through
        the host (synchronizes, so no ``stream`` needs to order it: the Array API's argument is
        accepted and not used)."""
        a = _array(self)
        if isinstance(device, Session):
            target = device
        elif isinstance(device, (int, np.integer)) and not isinstance(device, bool):
            target = session_of(a) if device == a.device else default_session(int(device))
        else:
            raise TypeError(f"to_device: expected a device ordinal or a kd.Session, got {type(device).__name__}")
        if target is a.session:
            return self
        moved: Self = target.to_device(a.to_host())
        return moved
