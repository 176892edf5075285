"""NumPy's reduction and scan methods of ``kd.DeviceArray``: ``a.sum(axis=, dtype=, out=,
keepdims=)`` and friends, each the ``kd.ops`` reduction or scan of the same name (the same plans;
``any``/``all`` are reductions defined here). ``dtype=`` makes the reduction accumulate and
return in that dtype, as NumPy's does (float16/bfloat16 still accumulate in float32), in the same
single launch; ``mean``/``std``/``var`` compose ``mean``s with NumPy's result dtypes (integers
and bool give float64, float16 stays float16 and is computed in float32). Results stay on the
device: a full reduction is a 0-d DeviceArray (``float(a.sum())`` or ``a.sum().item()`` syncs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ..array.engine import dtype_variants, ops

if TYPE_CHECKING:
    from .ndarray import DeviceArray


class ReductionMethods:
    """``sum prod min max mean std var argmin argmax any all cumsum cumprod`` as NumPy's methods;
    each enqueues its launches on the session stream and returns a DeviceArray (``out`` when given)."""

    __slots__ = ()

    def sum(
        self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray:
        """``kd.ops.sum`` over ``axis`` (an int, a tuple, None: all), accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().sum, _array(self).dtype, dtype)(
            self, axis=axis, out=out, keepdims=keepdims
        )
        return result

    def prod(
        self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray:
        """``kd.ops.prod`` over ``axis``, accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().prod, _array(self).dtype, dtype)(
            self, axis=axis, out=out, keepdims=keepdims
        )
        return result

    def min(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.min`` over ``axis`` (ValueError for an empty reduction, as NumPy)."""
        result: DeviceArray = ops().min(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def max(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.max`` over ``axis`` (ValueError for an empty reduction, as NumPy)."""
        result: DeviceArray = ops().max(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def mean(
        self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray:
        """``kd.ops.mean`` over ``axis``: float64 for integers and bool, float16 stays float16."""
        result: DeviceArray = dtype_variants().typed(ops().mean, _array(self).dtype, dtype)(
            self, axis=axis, out=out, keepdims=keepdims
        )
        return result

    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: DeviceArray | None = None,
        ddof: Any = 0,
        keepdims: bool = False,
        *,
        correction: Any = None,
    ) -> DeviceArray:
        """The mean squared deviation from the mean, divided by ``n - ddof`` instead of ``n``
        (``correction`` is the Array API's name for ``ddof``): three launches, four with ``ddof``."""
        result: DeviceArray = dtype_variants().variance(
            _array(self), axis, dtype, out, ddof, correction, keepdims, root=False
        )
        return result

    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: DeviceArray | None = None,
        ddof: Any = 0,
        keepdims: bool = False,
        *,
        correction: Any = None,
    ) -> DeviceArray:
        """The square root of ``var`` (same arguments and dtypes)."""
        result: DeviceArray = dtype_variants().variance(
            _array(self), axis, dtype, out, ddof, correction, keepdims, root=True
        )
        return result

    def argmin(self, axis: Any = None, out: DeviceArray | None = None, *, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.argmin``: int64 indices of the first minimum (of the first NaN) along one axis."""
        result: DeviceArray = ops().argmin(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def argmax(self, axis: Any = None, out: DeviceArray | None = None, *, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.argmax``: int64 indices of the first maximum (of the first NaN) along one axis."""
        result: DeviceArray = ops().argmax(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def any(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """Whether any element along ``axis`` is nonzero (bool; False for an empty reduction)."""
        result: DeviceArray = dtype_variants().any(_array(self), axis=axis, out=out, keepdims=keepdims)
        return result

    def all(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """Whether every element along ``axis`` is nonzero (bool; True for an empty reduction)."""
        result: DeviceArray = dtype_variants().all(_array(self), axis=axis, out=out, keepdims=keepdims)
        return result

    def cumsum(self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None) -> DeviceArray:
        """``kd.ops.cumsum`` along ``axis`` (None: the flattened array), accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().cumsum, _array(self).dtype, dtype)(self, axis=axis, out=out)
        return result

    def cumprod(self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None) -> DeviceArray:
        """``kd.ops.cumprod`` along ``axis`` (None: the flattened array), accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().cumprod, _array(self).dtype, dtype)(self, axis=axis, out=out)
        return result


def _array(a: object) -> DeviceArray:
    """A mixin's ``self``: always a DeviceArray (the one class that mixes these in)."""
    return cast("DeviceArray", a)
