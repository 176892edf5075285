"""Result dtypes: NumPy's own rules, asked of NumPy itself.

The rule is exactly NumPy 2's (NEP 50): array dtypes are strong, Python scalars are weak
(``int8_array + 3`` stays int8, ``uint8_array + (-1)`` raises OverflowError), numpy scalars
are strong. Instead of a hand-written table that could drift, the ufunc (or function) is
called on empty arrays of the operand dtypes and its result dtype is taken; a combination
NumPy refuses (``subtract`` of bools) raises NumPy's TypeError. A result kerneldsl cannot
store (object, ...) or does not compute in yet (complex) raises TypeError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import dtypes

Operand = Any  # an np.dtype (array operand) or a Python / numpy scalar


def copyable(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype kernels can hold and copy (complex ones included), or TypeError."""
    try:
        return dtypes.element_type(dtype).numpy
    except KeyError as exc:
        raise TypeError(exc.args[0]) from None


def supported(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype the array layer computes in, or TypeError naming the supported
    types. Complex types are kernels' (``@kd.kernel`` arrays and scalars) but not yet the ops'."""
    et = dtypes.element_type(copyable(dtype))
    if et.kind == "c":
        raise TypeError(
            f"{et.name}: complex arrays work in @kd.kernel bodies (kd_complex64 / kd_complex128); "
            "kd.ops, reductions and @kd.fuse take real and integer dtypes only"
        )
    return et.numpy


def _probe(operand: Operand) -> Any:
    if isinstance(operand, np.dtype):
        return np.empty(0, operand)
    if isinstance(operand, np.generic):
        return np.empty(0, operand.dtype)  # numpy scalars are strong
    return operand


def _key(operand: Operand) -> Any:
    if isinstance(operand, np.dtype):
        return operand
    if isinstance(operand, np.generic):
        return operand.dtype
    return type(operand)


def result_dtype(func: Callable[..., Any], *operands: Operand) -> np.dtype:
    """The dtype ``func`` (a numpy ufunc or array function) gives these operands."""
    if any(type(o) is int for o in operands):  # a Python int's range check depends on its value
        return _result(func, operands)
    return _cached(func, tuple(_key(o) for o in operands), operands)


_cache: dict[tuple[Any, ...], np.dtype] = {}


def _cached(func: Callable[..., Any], key: tuple[Any, ...], operands: tuple[Operand, ...]) -> np.dtype:
    found = _cache.get((func, key))
    if found is None:
        found = _cache[(func, key)] = _result(func, operands)
    return found


def _result(func: Callable[..., Any], operands: tuple[Operand, ...]) -> np.dtype:
    for operand in operands:
        if isinstance(operand, (np.dtype, np.generic)):
            supported(operand if isinstance(operand, np.dtype) else operand.dtype)
    with np.errstate(all="ignore"):
        value = func(*(_probe(o) for o in operands))
    return supported(np.asarray(value).dtype)
