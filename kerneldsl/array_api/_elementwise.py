"""The Array API's elementwise functions that are not a ``kd.ops`` row: ``conj``, which the
2024.12 revision defines for real-valued arrays too (the conjugate of a real number is itself;
``vecdot``'s reference in the standard's suite conjugates its first operand whatever the dtype)."""

from __future__ import annotations

from typing import Any

from ..array.ndarray import DeviceArray
from ..errors import OperandDtypeError


def conj(x: Any, /) -> DeviceArray:
    """The complex conjugate of each element (``kd.ops.conj``): of a real-valued array, a copy of ``x``."""
    if x.dtype.kind == "c":
        from ..array import ops

        conjugated: DeviceArray = ops.conj(x)
        return conjugated
    if x.dtype.kind == "b":
        raise OperandDtypeError("conj is defined for numeric arrays, got a bool array")
    copied: DeviceArray = x.copy()
    return copied
