"""The outputs a call makes, from the declaration alone: shapes from shape symbols, dtypes from
dtype variables, with the checks a kerneldsl call makes and the same errors.

The fake kernel runs this on fake tensors whose sizes may be symbolic (``torch.compile(dynamic=True)``):
an extent is only compared (``!=``, which guards on a symbolic size) and copied into an output
shape, never turned into a Python int. The real kernel runs it when its own quick reading of the
shapes fails, so an eager call raises what tracing raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch

from ..dtypes import is_dtype_name
from ..errors import BindingError, ShapeMismatchError
from .declaration import OpDeclaration
from .tensors import element_name, torch_dtype

OutputSpec = tuple[tuple[Any, ...], torch.dtype]  # shape (ints or SymInts), dtype


def bind_outputs(decl: OpDeclaration, values: Mapping[str, Any]) -> list[OutputSpec]:
    """Unify the input tensors' extents and dtypes with the declaration (``ShapeMismatchError``,
    ``BindingError`` naming the argument) and give each output's shape and dtype."""
    name = decl.signature.name
    extents: dict[str, Any] = {}
    types: dict[str, torch.dtype] = {}
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
            symbol = cast(str, declared)  # read_declaration refuses computed extents
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
    return [
        (tuple(d if isinstance(d, int) else extents[cast(str, d)] for d in p.shape), _output_dtype(p.dtype, types))
        for p in decl.outputs
    ]


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
