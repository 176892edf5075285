"""Result dtypes: NumPy's own rules, asked of NumPy itself.

The rule is exactly NumPy 2's (NEP 50): array dtypes are strong, Python scalars are weak
(``int8_array + 3`` stays int8, ``uint8_array + (-1)`` raises OverflowError), numpy scalars
are strong. Instead of a hand-written table that could drift, the ufunc (or function) is
called on empty arrays of the operand dtypes and its result dtype is taken; a combination
NumPy refuses (``subtract`` of bools) raises NumPy's TypeError. A result kerneldsl cannot
store (object, ...) raises TypeError. Complex dtypes are computed in (``kd_complex<R>``); what
a complex value has no meaning for (ordering, rounding, scans) is refused where it is asked,
through ``refuse_complex``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ComplexUnsupportedError, OperandDtypeError

Operand = Any  # an np.dtype (array operand) or a Python / numpy scalar


def copyable(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype kernels can hold and copy (complex ones included), or
    OperandDtypeError (a TypeError) naming the supported types."""
    try:
        return dtypes.element_type(dtype).numpy
    except KeyError as exc:
        raise OperandDtypeError(exc.args[0]) from None


def supported(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype the array layer computes in (every dtype kernels hold, complex
    ones included), or OperandDtypeError naming the supported types."""
    return copyable(dtype)


def is_complex(dtype: np.dtype) -> bool:
    return dtypes.element_type(dtype).kind == "c"


def operand_dtype(operand: Operand) -> np.dtype:
    """An operand's own dtype: an array's, a numpy scalar's, a Python scalar's default."""
    if isinstance(operand, np.dtype):
        return operand
    if isinstance(operand, np.generic):
        return operand.dtype
    return np.dtype(complex) if isinstance(operand, complex) else np.dtype(np.float64)


def refuse_complex(what: str, *dtypes_: np.dtype, why: str = "complex numbers have no order") -> None:
    """ComplexUnsupportedError naming ``what`` and the first complex dtype among ``dtypes_``."""
    for dt in dtypes_:
        if is_complex(dt):
            raise ComplexUnsupportedError(f"{what} is not defined for {np.dtype(dt).name} operands: {why}")


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
        value = func(*(_probe(o) for o in _weak_beside_bfloat16(operands)))
    return supported(np.asarray(value).dtype)


def _weak_beside_bfloat16(operands: tuple[Operand, ...]) -> tuple[Operand, ...]:
    """NEP 50 for a Python int or float beside a bfloat16 array: ml_dtypes before 0.7 promotes the
    scalar as a float64 (``bfloat16_array + 1e-5`` is float32 there), NumPy 2's rule keeps
    bfloat16. Probing the scalar as a bfloat16 gives NumPy 2's answer under either version."""
    bf16 = next((o for o in operands if isinstance(o, np.dtype) and o.name == "bfloat16"), None)
    if bf16 is None:
        return operands
    return tuple(bf16 if type(o) in (int, float) else o for o in operands)
