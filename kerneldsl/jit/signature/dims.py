"""Launch dimensions and computed extents: ``Expr``, a small integer expression over shape
symbols and constants (``kd.cdiv("n", 256)``, ``kd.sym(n) * 2``), checked so that no leaf carries
text into generated code. A launch dimension is evaluated by the host adapter; an array extent
written as one (``kd.Out[kd.float32, kd.cdiv(n, 256)]``) is also spelled in the kernel's C source
(``c_text``)."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

from .spelling import spelled

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # ASCII; always used with fullmatch

# What a launch dimension may be written with; a shape symbol declared ``n = NewType("n", int)``
# is, to a type checker, a callable from int.
Dim = Union[int, str, "Expr", TypeVar, Callable[[int], int]]


@dataclass(frozen=True, repr=False)
class Expr:
    """A small integer expression over shape symbols and constants, for grid/block/shared and
    computed array extents; shown in messages as it is written (``cdiv(n, 256)``)."""

    op: str  # "int", "sym", "add", "sub", "mul", "floordiv", "cdiv", "min", "max"
    args: tuple[Any, ...]

    def __post_init__(self) -> None:
        """Checked here, so that no expression, even one built by hand, carries text into generated code."""
        object.__setattr__(self, "args", _checked_args(self.op, self.args))

    def __add__(self, other: Dim) -> Expr:
        return Expr("add", (self, as_expr(other)))

    def __radd__(self, other: Dim) -> Expr:
        return Expr("add", (as_expr(other), self))

    def __sub__(self, other: Dim) -> Expr:
        return Expr("sub", (self, as_expr(other)))

    def __mul__(self, other: Dim) -> Expr:
        return Expr("mul", (self, as_expr(other)))

    def __rmul__(self, other: Dim) -> Expr:
        return Expr("mul", (as_expr(other), self))

    def __floordiv__(self, other: Dim) -> Expr:
        return Expr("floordiv", (self, as_expr(other)))

    def __repr__(self) -> str:
        if self.op in ("int", "sym"):
            return str(self.args[0])
        a, b = self.args
        if self.op in _INFIX:
            return f"({a!r} {_INFIX[self.op]} {b!r})"
        return f"{_CALLS[self.op]}({a!r}, {b!r})"

    def c_text(self) -> str:
        """The expression in C, over the kernel's ``index_t`` symbol parameters and constants
        (names only, checked identifiers); extents are non-negative, so C's division truncating
        toward zero is the floor, and the ceiling is ``a / b + (a % b != 0)``, which cannot
        overflow as ``(a + b - 1) / b`` can."""
        if self.op in ("int", "sym"):
            return str(self.args[0])
        a, b = (x.c_text() for x in self.args)
        if self.op == "cdiv":
            return f"({a} / {b} + ({a} % {b} != 0))"
        if self.op in ("min", "max"):
            return f"({a} {'<' if self.op == 'min' else '>'} {b} ? {a} : {b})"
        return f"({a} {_C_INFIX[self.op]} {b})"

    def symbols(self) -> set[str]:
        if self.op == "sym":
            return {self.args[0]}
        if self.op == "int":
            return set()
        return set().union(*(a.symbols() for a in self.args))

    def evaluate(self, values: dict[str, int]) -> int:
        """Value of the expression; used for defaults that code generation folds in."""
        return int(self.fold(lambda name: int(values[name]), _EVALUATORS))

    def fold(self, symbol: Callable[[str], Any], operations: Mapping[str, Callable[[Any, Any], Any]]) -> Any:
        """The expression computed with ``symbol(name)`` for each symbol and ``operations[op]``
        for each operator: plain ints (``evaluate``), or sizes another system traces (kd.torch's
        symbolic sizes)."""
        if self.op == "int":
            return self.args[0]
        if self.op == "sym":
            return symbol(self.args[0])
        a, b = (x.fold(symbol, operations) for x in self.args)
        return operations[self.op](a, b)


_EVALUATORS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}


_INFIX = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//"}
_C_INFIX = {"add": "+", "sub": "-", "mul": "*", "floordiv": "/"}
_CALLS = {"cdiv": "cdiv", "min": "dmin", "max": "dmax"}


def _checked_args(op: Any, args: Any) -> tuple[Any, ...]:
    """``args`` with every leaf a plain int or an ASCII identifier; TypeError for anything else."""
    if type(op) is str and isinstance(args, tuple):
        if op == "int" and len(args) == 1:
            return (plain_int(args[0], "launch dimension"),)
        if op == "sym" and len(args) == 1:
            return (plain_identifier(args[0], "launch dimension symbol"),)
        if op in _EVALUATORS and len(args) == 2 and all(isinstance(a, Expr) for a in args):
            return args
    raise TypeError(f"not a launch-dimension expression: op {op!r} with arguments {args!r}")


def extent_c_text(extent: int | str | Expr) -> str:
    """An array extent as the kernel's C source spells it: a fixed one as a literal, a symbol by
    its ``index_t`` parameter, a computed one as its expression cast to ``index_t``."""
    return f"((index_t){extent.c_text()})" if isinstance(extent, Expr) else str(extent)


def plain_int(value: Any, what: str) -> int:
    """``value`` as an exact int (``operator.index``): an int subclass's ``__str__`` never renders."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {value!r}") from None


def plain_identifier(value: Any, what: str) -> str:
    """``value`` as an exact str that fully matches ``[A-Za-z_][A-Za-z0-9_]*``."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise TypeError(f"{what} {value!r} is not an identifier (ASCII [A-Za-z_][A-Za-z0-9_]*)")
    return str.__str__(value)


def as_expr(value: Dim) -> Expr:
    """An int, a symbol (name, NewType or TypeVar) or an expression as an expression; TypeError
    for anything else."""
    if isinstance(value, Expr):
        return value
    value = spelled(value)
    return Expr("sym", (value,)) if isinstance(value, str) else Expr("int", (value,))


def sym(name: Dim) -> Expr:
    """A shape symbol or constant, for arithmetic in launch dimensions: ``kd.sym(n) * 2``.

    Parameters
    ----------
    name : str, NewType or int
        A shape symbol (``n = NewType("n", int)`` or its name ``"n"``), a ``kd.Const`` parameter's
        name (``kd.sym("TILE")``), or an int.

    Returns
    -------
    Expr
        An expression that ``+ - * // %`` combine with ints and other expressions; launch
        dimensions (``grid``, ``block``, ``shared``, ``cluster``) evaluate it at each call.

    Examples
    --------
    .. code-block:: python

        import kerneldsl as kd

        block = (kd.sym("TILE"), kd.sym("TILE"))
        shared = kd.sym("TILE") * 4
    """
    return as_expr(name) if not isinstance(name, str) else Expr("sym", (name,))


def cdiv(a: Dim, b: Dim) -> Expr:
    """Ceiling division, the usual grid size: ``grid=kd.cdiv(n, 256)``.

    Parameters
    ----------
    a, b : shape symbol, expression or int
        The dividend and the divisor; ``(a + b - 1) // b`` at launch.

    Returns
    -------
    Expr
        A launch-dimension expression.

    Examples
    --------
    .. code-block:: python

        from typing import NewType

        import kerneldsl as kd

        n = NewType("n", int)
        grid = kd.cdiv(n, 256)  # enough 256-thread blocks to cover n elements
    """
    return Expr("cdiv", (as_expr(a), as_expr(b)))


def dmin(a: Dim, b: Dim) -> Expr:
    """The smaller of two launch-dimension values, evaluated at launch.

    Parameters
    ----------
    a, b : shape symbol, expression or int
        The values compared.

    Returns
    -------
    Expr
        A launch-dimension expression: ``grid=kd.dmin(kd.cdiv(n, 256), 1024)`` caps a grid.
    """
    return Expr("min", (as_expr(a), as_expr(b)))


def dmax(a: Dim, b: Dim) -> Expr:
    """The larger of two launch-dimension values, evaluated at launch.

    Parameters
    ----------
    a, b : shape symbol, expression or int
        The values compared.

    Returns
    -------
    Expr
        A launch-dimension expression: ``grid=kd.dmax(kd.cdiv(n, 256), 1)`` launches at least one block.
    """
    return Expr("max", (as_expr(a), as_expr(b)))
