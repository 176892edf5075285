"""Reductions and scans in another dtype, and the dtype rules of NumPy's array methods
(``DeviceArray.sum(dtype=)``, ``var``/``std``, ``any``/``all``): one Reduction or Scan per
(operation, dtype), made once, so their plans compile once as ``kd.ops``'s do."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes
from . import ops, promotion
from .placement import check_out
from .reduction.api import Reduction
from .reduction.axes import normalize_axes, result_shape
from .reduction.reducers import REDUCERS, Reducer, accumulation_dtype
from .scan import Scan

if TYPE_CHECKING:
    from .ndarray import DeviceArray

_BOOL = np.dtype(np.bool_)
_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)

any = Reduction(
    Reducer("any", {"fiub": "a || b"}, "0", lambda dt: _BOOL, lambda dt: _BOOL, absorbing="1"), home=__name__
)  # NaN is true, as in NumPy
all = Reduction(
    Reducer("all", {"fiub": "a && b"}, "1", lambda dt: _BOOL, lambda dt: _BOOL, absorbing="0"), home=__name__
)

_variants: dict[tuple[str, np.dtype], Any] = {}


def with_dtype(base: Any, dtype: np.dtype) -> Any:
    """``base`` (a kd.ops reduction or scan) accumulating and returning ``dtype``, made once per
    dtype (its plans compile once, as ``base``'s)."""
    key = (base.name, dtype)
    found = _variants.get(key)
    if found is None:
        acc = accumulation_dtype(dtype)
        reducer = replace(base.reducer, result=lambda dt: dtype, accumulate=lambda dt: acc)
        found = _variants[key] = Scan(reducer) if isinstance(base, Scan) else Reduction(reducer)
    return found


def typed(base: Any, value: np.dtype, dtype: Any) -> Any:
    """The callable for ``dtype=``: ``base`` itself when ``dtype`` is what it does anyway."""
    if dtype is None:
        return base
    dt = promotion.supported(dtype)
    if base.reducer.result(value) == dt and base.reducer.accumulate(value) == accumulation_dtype(dt):
        return base
    return with_dtype(base, dt)


def variance_dtypes(value: np.dtype, dtype: Any) -> tuple[np.dtype, np.dtype]:
    """NumPy's result dtype of ``var``/``std`` (``dtype``, else float64 for integers and bool,
    else the input's) and the float dtype it is computed in (float32 for float16/bfloat16,
    float64 for an integer ``dtype``)."""
    given = (value,) if dtype is None else (value, promotion.supported(dtype))
    promotion.refuse_complex("var/std", *given, why="the variance of complex values is not implemented")
    if dtype is not None:
        result = promotion.supported(dtype)
    elif dtypes.element_type(value).kind in "biu":
        result = _FLOAT64
    else:
        result = value
    if dtypes.element_type(result).kind != "f":
        return result, _FLOAT64
    return result, accumulation_dtype(result)


def ddof_value(ddof: Any, correction: Any) -> float:
    if correction is not None:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    if isinstance(ddof, bool) or not isinstance(ddof, (int, float, np.integer, np.floating)):
        raise TypeError(f"ddof must be a number, not {ddof!r}")
    return float(ddof)


def mean_of_squares(dtype: np.dtype) -> Reduction:
    """The mean of ``v * v`` in ``dtype`` (the deviations' second moment), one per dtype."""
    key = ("meansq", dtype)
    found = _variants.get(key)
    if found is None:
        reducer = replace(
            REDUCERS["mean"], name="var", pre="v * v", result=lambda dt: dtype, accumulate=lambda dt: dtype
        )
        found = _variants[key] = Reduction(reducer)
    return found


def variance(
    x: DeviceArray,
    axis: Any,
    dtype: Any,
    out: DeviceArray | None,
    ddof: Any,
    correction: Any,
    keepdims: bool,
    root: bool,
) -> DeviceArray:
    """``var``/``std``: the mean (computed in ``compute``), the deviations, the mean of their
    squares, scaled by ``n / (n - ddof)``; every argument is checked before the first launch."""
    ddof = ddof_value(ddof, correction)
    result_dtype, compute = variance_dtypes(x.dtype, dtype)
    axes = normalize_axes(axis, x.ndim, "std" if root else "var")
    reduced = tuple(range(x.ndim)) if axes is None else axes
    shape = result_shape(x.shape, reduced, keepdims)
    if out is not None:
        check_out(out, shape, result_dtype, "std" if root else "var")
    n = int(np.prod([x.shape[j] for j in reduced], dtype=np.int64))
    mean = typed(ops.mean, x.dtype, compute)(x, axis=axis, keepdims=True)
    deviations = ops.subtract(x, mean)
    mean.close()
    squares: DeviceArray = mean_of_squares(deviations.dtype)(deviations, axis=axis, keepdims=keepdims)
    deviations.close()
    if ddof:
        with np.errstate(all="ignore"):
            scale = np.float64(n) / np.float64(np.maximum(n - ddof, 0))
        ops.multiply(squares, float(scale), out=squares)
    if root:
        ops.sqrt(squares, out=squares)
    if out is None and squares.dtype == result_dtype:
        return squares
    done: DeviceArray = ops.astype(squares, result_dtype if out is None else out.dtype, out=out)
    squares.close()
    return done
