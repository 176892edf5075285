"""The outputs a call makes, from the declaration alone: shapes from shape symbols, dtypes from
dtype variables, with the checks a kerneldsl call makes and the same errors.

The fake kernel runs this on fake tensors whose sizes may be symbolic (``torch.compile(dynamic=True)``):
an extent is only compared (``!=``, which guards on a symbolic size), copied into an output shape
or computed by arithmetic torch traces (a computed extent, ``kd.cdiv(n, 256)``, is
``(n + 255) // 256``), never turned into a Python int. The real kernel runs it when its own quick
reading of the shapes fails, so an eager call raises what tracing raises.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..dtypes import is_dtype_name
from ..errors import BindingError, ShapeMismatchError
from ..jit.signature import Expr
from .declaration import OpDeclaration
from .tensors import element_name, torch_dtype

OutputSpec = tuple[tuple[Any, ...], torch.dtype]  # shape (ints or SymInts), dtype


def bind_outputs(decl: OpDeclaration, values: Mapping[str, Any]) -> list[OutputSpec]:
    """Unify the input tensors' extents and dtypes with the declaration (``ShapeMismatchError``,
    ``BindingError`` naming the argument) and give each output's shape and dtype."""
    name = decl.signature.name
    extents: dict[str, Any] = {}
    types: dict[str, torch.dtype] = {}
    computed: list[tuple[str, int, Expr, Any]] = []  # checked once every symbol is bound
    for p in decl.inputs:
        t = values.get(p.name)
        if not isinstance(t, torch.Tensor):
            raise BindingError(name, p.name, f"expected a Tensor ({p.direction}), got {type(t).__name__}")
        if t.dim() != len(p.shape):
            raise ShapeMismatchError(
                name, p.name, f"expected {len(p.shape)} dimension(s) {p.shape}, got shape {tuple(t.shape)}"
            )
        _unify_dtype(name, p.name, p.dtype, t.dtype, types)
        for axis, (declared, actual) in enumerate(zip(p.shape, t.shape)):
            if isinstance(declared, int):
                if actual != declared:
                    raise ShapeMismatchError(name, p.name, f"axis {axis} must be {declared}, got {actual}")
                continue
            if isinstance(declared, Expr):
                computed.append((p.name, axis, declared, actual))
                continue
            symbol = declared
            bound = extents.setdefault(symbol, actual)
            if bound is not actual and bound != actual:
                first, first_axis = _first_use(decl, symbol)
                raise ShapeMismatchError(
                    name,
                    p.name,
                    f"axis {axis} is {actual} but symbol {declared!r} is {bound} from {first!r} axis {first_axis}",
                )
    for s in decl.sizes:
        extent = values.get(s)
        if isinstance(extent, bool) or not isinstance(extent, (int, torch.SymInt)):
            raise BindingError(name, s, f"the output size {s!r} is an int, got {type(extent).__name__}")
        if extent < 0:
            raise ShapeMismatchError(name, s, f"the output size {s!r} is {extent}, a negative extent")
        extents[s] = extent
    for v in decl.dtype_args:
        given = values.get(v)
        if not isinstance(given, torch.dtype):
            raise BindingError(name, v, f"the output dtype {v!r} is a torch.dtype, got {type(given).__name__}")
        types[v] = given
    names = {**{c.name: values.get(c.name, c.default) for c in decl.consts}, **extents}
    for param, axis, expression, actual in computed:
        expected = computed_extent(expression, names)
        if actual != expected:
            raise ShapeMismatchError(name, param, f"axis {axis} must be {expression!r} = {expected}, got {actual}")
    return [(tuple(_extent(d, names) for d in p.shape), _output_dtype(p.dtype, types)) for p in decl.outputs]


def computed_extent(expression: Expr, names: Mapping[str, Any]) -> Any:
    """A computed extent's value from the bound symbols and constants (``names``), by arithmetic
    that keeps a symbolic size symbolic: ``kd.cdiv(n, 256)`` is ``(n + 255) // 256``, ``kd.dmin``
    ``torch.sym_min``."""
    return expression.fold(names.__getitem__, _SYMBOLIC)


_SYMBOLIC: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "cdiv": lambda a, b: (a + b - 1) // b,  # extents are non-negative
    "min": torch.sym_min,
    "max": torch.sym_max,
}


def _extent(declared: int | str | Expr, names: Mapping[str, Any]) -> Any:
    if isinstance(declared, int):
        return declared
    if isinstance(declared, Expr):
        return computed_extent(declared, names)
    return names[declared]


def _unify_dtype(kernel: str, param: str, declared: str, actual: torch.dtype, types: dict[str, torch.dtype]) -> None:
    if is_dtype_name(declared):
        if actual != torch_dtype(declared):
            raise BindingError(kernel, param, f"expected dtype {declared}, got {element_name(actual)}")
        return
    bound = types.setdefault(declared, actual)
    if bound != actual:
        raise BindingError(
            kernel,
            param,
            f"dtype variable {declared} is {element_name(bound)} from an earlier argument, got {element_name(actual)}",
        )


def _output_dtype(declared: str, types: Mapping[str, torch.dtype]) -> torch.dtype:
    return torch_dtype(declared) if is_dtype_name(declared) else types[declared]


def _first_use(decl: OpDeclaration, symbol: str) -> tuple[str, int]:
    for p in decl.inputs:
        if symbol in p.shape:
            return p.name, p.shape.index(symbol)
    return symbol, 0
