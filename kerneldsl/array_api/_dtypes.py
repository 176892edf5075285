"""The Array API's data type functions and inspection namespace: ``finfo``, ``iinfo``,
``isdtype``, ``result_type``, ``can_cast``, ``astype`` and ``__array_namespace_info__``.

Dtypes are NumPy's dtype objects (``DeviceArray.dtype`` is one), so ``x.dtype == xp.float32``
holds and every rule is NumPy 2's, asked of NumPy. ``finfo``/``iinfo`` give Python numbers, as
the standard asks (NumPy's give numpy scalars)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..array import promotion

BOOL = np.dtype(np.bool_)
SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
REAL_FLOATING: tuple[np.dtype, ...] = (np.dtype(np.float32), np.dtype(np.float64))
COMPLEX_FLOATING: tuple[np.dtype, ...] = (np.dtype(np.complex64), np.dtype(np.complex128))
DEFAULT_INT = np.dtype(np.int64)
DEFAULT_FLOAT = np.dtype(np.float64)

_KINDS: dict[str, tuple[np.dtype, ...]] = {
    "bool": (BOOL,),
    "signed integer": SIGNED,
    "unsigned integer": UNSIGNED,
    "integral": SIGNED + UNSIGNED,
    "real floating": REAL_FLOATING,
    "complex floating": COMPLEX_FLOATING,
    "numeric": SIGNED + UNSIGNED + REAL_FLOATING + COMPLEX_FLOATING,
}


@dataclass(frozen=True)
class FInfo:
    """Machine limits of a floating dtype, as Python floats."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


@dataclass(frozen=True)
class IInfo:
    """Machine limits of an integer dtype, as Python ints."""

    bits: int
    max: int
    min: int
    dtype: np.dtype


def _dtype_of(x: Any) -> np.dtype:
    found: np.dtype = np.dtype(x.dtype if hasattr(x, "dtype") and not isinstance(x, np.dtype) else x)
    return found


def finfo(type: Any, /) -> FInfo:
    """Limits of a floating dtype (or of an array's dtype)."""
    f = np.finfo(_dtype_of(type))
    return FInfo(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), np.dtype(f.dtype))


def iinfo(type: Any, /) -> IInfo:
    """Limits of an integer dtype (or of an array's dtype)."""
    i = np.iinfo(_dtype_of(type))
    return IInfo(int(i.bits), int(i.max), int(i.min), np.dtype(i.dtype))


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is ``kind``: a dtype, a kind name (``"integral"``, ...) or a tuple of them."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; the kinds are {sorted(_KINDS)}")
        return np.dtype(dtype) in _KINDS[kind]
    return bool(np.dtype(dtype) == np.dtype(kind))


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """NumPy 2's result dtype of arrays, dtypes and Python scalars (weak, as the standard says)."""
    if not arrays_and_dtypes:
        raise ValueError("at least one array or dtype is required")
    probes = [a if isinstance(a, (bool, int, float, complex)) else _dtype_of(a) for a in arrays_and_dtypes]
    if all(isinstance(p, (bool, int, float, complex)) for p in probes):
        raise ValueError("at least one array or dtype is required (Python scalars alone have no result type)")
    return np.result_type(*probes)


def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether ``from_`` (a dtype or an array) promotes to ``to`` under the standard's rules."""
    return bool(np.can_cast(_dtype_of(from_), np.dtype(to), casting="safe"))


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """``x`` in ``dtype``: ``x`` itself when it already is and ``copy`` is False, else a new array."""
    from ..array import ops

    target = np.dtype(dtype)
    if x.dtype == target:
        return x.copy() if copy else x
    promotion.supported(target)
    return ops.astype(x, target)


class Info:
    """``__array_namespace_info__()``: what the namespace supports, its devices and dtypes."""

    def capabilities(self) -> dict[str, Any]:
        """Boolean indexing: no (``x[mask]``); data-dependent shapes: yes (``nonzero``, ``unique_*``,
        which read their result's size on the host)."""
        return {"boolean indexing": False, "data-dependent shapes": True, "max dimensions": 32}

    def default_device(self) -> int:
        return 0

    def devices(self) -> list[int]:
        from ..runtime.driver import device_count

        return list(range(device_count()))

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        return {
            "real floating": DEFAULT_FLOAT,
            "complex floating": np.dtype(np.complex128),
            "integral": DEFAULT_INT,
            "indexing": DEFAULT_INT,
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype]:
        every = (BOOL, *SIGNED, *UNSIGNED, *REAL_FLOATING, *COMPLEX_FLOATING)
        return {d.name if d != BOOL else "bool": d for d in every if kind is None or isdtype(d, kind)}


def __array_namespace_info__() -> Info:
    return Info()
