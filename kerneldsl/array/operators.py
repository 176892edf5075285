"""Python's operators on arrays, written once, each the ``kd.ops`` row of the same meaning:
``Operators`` (``+ - * / // % ** & | ^ << >>`` and their reflected forms, the six comparisons,
``-x``, ``+x``, ``~x``, ``abs(x)``) is mixed into ``kd.DeviceArray`` and the ``@kd.fuse`` tracer;
``InPlaceOperators`` (``+=`` and the rest: the row with ``out=`` the left operand) into
DeviceArray only, since a traced value is rebound by ``t += 1`` (``t = t + 1``), never written.

A comparison is elementwise, as NumPy's, so an operand hashes by identity (sessions keep arrays
in weak sets). ``@`` is DeviceArray's own (``kd.matmul``, no op row).
"""

from __future__ import annotations

from typing import Any

from .engine import ops


class Operators:
    """Arithmetic, bitwise, comparison and unary operators as ``kd.ops`` calls."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return ops().add(self, other)

    def __radd__(self, other: Any) -> Any:
        return ops().add(other, self)

    def __sub__(self, other: Any) -> Any:
        return ops().subtract(self, other)

    def __rsub__(self, other: Any) -> Any:
        return ops().subtract(other, self)

    def __mul__(self, other: Any) -> Any:
        return ops().multiply(self, other)

    def __rmul__(self, other: Any) -> Any:
        return ops().multiply(other, self)

    def __truediv__(self, other: Any) -> Any:
        return ops().divide(self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return ops().divide(other, self)

    def __floordiv__(self, other: Any) -> Any:
        return ops().floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Any:
        return ops().floor_divide(other, self)

    def __mod__(self, other: Any) -> Any:
        return ops().remainder(self, other)

    def __rmod__(self, other: Any) -> Any:
        return ops().remainder(other, self)

    def __pow__(self, other: Any) -> Any:
        return ops().power(self, other)

    def __rpow__(self, other: Any) -> Any:
        return ops().power(other, self)

    def __and__(self, other: Any) -> Any:
        return ops().bitwise_and(self, other)

    def __rand__(self, other: Any) -> Any:
        return ops().bitwise_and(other, self)

    def __or__(self, other: Any) -> Any:
        return ops().bitwise_or(self, other)

    def __ror__(self, other: Any) -> Any:
        return ops().bitwise_or(other, self)

    def __xor__(self, other: Any) -> Any:
        return ops().bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Any:
        return ops().bitwise_xor(other, self)

    def __lshift__(self, other: Any) -> Any:
        return ops().left_shift(self, other)

    def __rlshift__(self, other: Any) -> Any:
        return ops().left_shift(other, self)

    def __rshift__(self, other: Any) -> Any:
        return ops().right_shift(self, other)

    def __rrshift__(self, other: Any) -> Any:
        return ops().right_shift(other, self)

    def __lt__(self, other: Any) -> Any:
        return ops().less(self, other)

    def __le__(self, other: Any) -> Any:
        return ops().less_equal(self, other)

    def __gt__(self, other: Any) -> Any:
        return ops().greater(self, other)

    def __ge__(self, other: Any) -> Any:
        return ops().greater_equal(self, other)

    def __eq__(self, other: Any) -> Any:
        return ops().equal(self, other)

    def __ne__(self, other: Any) -> Any:
        return ops().not_equal(self, other)

    __hash__ = object.__hash__

    def __neg__(self) -> Any:
        return ops().negative(self)

    def __pos__(self) -> Any:
        return ops().positive(self)

    def __invert__(self) -> Any:
        return ops().invert(self)

    def __abs__(self) -> Any:
        return ops().abs(self)


class InPlaceOperators:
    """``+= -= *= /= //= %= **= &= |= ^= <<= >>=``: the row written into the left operand."""

    __slots__ = ()

    def __iadd__(self, other: Any) -> Any:
        return ops().add(self, other, out=self)

    def __isub__(self, other: Any) -> Any:
        return ops().subtract(self, other, out=self)

    def __imul__(self, other: Any) -> Any:
        return ops().multiply(self, other, out=self)

    def __itruediv__(self, other: Any) -> Any:
        return ops().divide(self, other, out=self)

    def __ifloordiv__(self, other: Any) -> Any:
        return ops().floor_divide(self, other, out=self)

    def __imod__(self, other: Any) -> Any:
        return ops().remainder(self, other, out=self)

    def __ipow__(self, other: Any) -> Any:
        return ops().power(self, other, out=self)

    def __iand__(self, other: Any) -> Any:
        return ops().bitwise_and(self, other, out=self)

    def __ior__(self, other: Any) -> Any:
        return ops().bitwise_or(self, other, out=self)

    def __ixor__(self, other: Any) -> Any:
        return ops().bitwise_xor(self, other, out=self)

    def __ilshift__(self, other: Any) -> Any:
        return ops().left_shift(self, other, out=self)

    def __irshift__(self, other: Any) -> Any:
        return ops().right_shift(self, other, out=self)
