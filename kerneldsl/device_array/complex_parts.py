"""NumPy's complex-part attributes of ``kd.DeviceArray``: ``a.real`` and ``a.imag`` of a complex
array are views of its memory (float32 / float64 elements two apart, the imaginary ones offset by
one part), so ``a.imag[...] = 0`` writes into ``a`` as in NumPy; ``a.conj()`` is ``kd.ops.conj``.
Of a real array, ``a.real`` is a view of ``a`` and ``a.imag`` a new array of zeros (NumPy's is
read-only: writes to ours land nowhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..array.engine import ops

if TYPE_CHECKING:
    from .ndarray import DeviceArray


class ComplexParts:
    """``real``, ``imag`` (views, assignable), ``conj()`` and ``conjugate()``."""

    __slots__ = ()

    @property
    def real(self) -> DeviceArray:
        """The real parts: a view of a complex array, ``a`` itself viewed for a real one."""
        return _part(_array(self), 0)

    @real.setter
    def real(self, value: Any) -> None:
        _part(_array(self), 0)[...] = value

    @property
    def imag(self) -> DeviceArray:
        """The imaginary parts: a view of a complex array, new zeros for a real one."""
        a = _array(self)
        if a.dtype.kind != "c":
            return cast("DeviceArray", a.session.zeros(a.shape, a.dtype))
        return _part(a, 1)

    @imag.setter
    def imag(self, value: Any) -> None:
        a = _array(self)
        if a.dtype.kind != "c":
            raise TypeError(f"array of dtype {a.dtype} does not have a writable imaginary part")
        _part(a, 1)[...] = value

    def conj(self) -> DeviceArray:
        """``kd.ops.conj(a)``: a new array (a real one's copy)."""
        result: DeviceArray = ops().conj(_array(self))
        return result

    conjugate = conj


def _part(a: DeviceArray, which: int) -> DeviceArray:
    """Part ``which`` (0 real, 1 imaginary) of every element of ``a`` as a view."""
    a._check()
    if a.dtype.kind != "c":
        return a[...]
    part = np.dtype(np.float32 if a.dtype == np.complex64 else np.float64)
    return a._view(a.shape, a.strides, which * part.itemsize, part)


def _array(a: object) -> DeviceArray:
    """A mixin's ``self``: always a DeviceArray (the one class that mixes these in)."""
    return cast("DeviceArray", a)
