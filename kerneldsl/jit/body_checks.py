"""Checks of a body's text against its declaration, made once per specialization when the body
function has returned its text and before anything is compiled.

Two mistakes a first day makes, each found by a precise textual test (the body is C that
kerneldsl never parses, so nothing here claims more than the text shows):

* An f-string that interpolates a shape symbol or dtype variable itself (``{n}``, ``{T}``)
  renders Python's text for the typing object (``__main__.n``, ``~T``), and the compiler's
  error does not say why. The exact text Python prints for a symbol or dtype variable of the
  signature (a loaded module's name, a dot and the symbol; ``~`` and the dtype variable, which
  is a typedef in the kernel, so no C spells it so but a destructor call, which is excluded)
  and Python's own ``<class '...'>`` / ``<... at 0x...>`` reprs, which no C spells, are a
  ``DeclarationError`` with the fix.
* A per-block array (the body writes ``out[blockIdx.x]``) whose first extent nothing ties to the
  grid (``kd.Out[T, m]`` or ``kd.Out[T, 1]`` for ``grid=kd.cdiv(n, 256)``): any call that passes
  fewer elements than blocks writes past its end. Where the body writes ``name[blockIdx.x]``
  (``.y``, ``.z`` along those axes; whitespace allowed, nothing else: a write through a
  computed index is not seen) to a written one-dimensional array whose extent can be smaller
  than the grid's blocks, a ``PerBlockExtentWarning`` suggests the grid's own expression as its
  extent. "Can be smaller" is decided by evaluating both over sample values of their symbols
  and int constants (1 to 65536): an extent of a symbol the grid does not use, or a fixed one
  under a grid that grows, is smaller for some; ``n`` or ``kd.cdiv(n, 128)`` under
  ``kd.cdiv(n, 256)`` never is.
"""

from __future__ import annotations

import itertools
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .. import dtypes
from ..errors import DeclarationError, PerBlockExtentWarning
from .signature import ArrayParam, Expr, Signature, as_expr

# Python's reprs of objects, which no C source contains: a class (``{np.float32}``), a built-in
# function (``{len}``) or an object at an address (``{some_function}``).
_PYTHON_REPR = re.compile(r"<class '[\w.]+'>|<built-in (?:function|method) [\w.]+>|<[\w.]+ [^\n]*? at 0x[0-9a-fA-F]+>")
_SAMPLES = (1, 7, 256, 1000, 65536)
_MAX_SAMPLED_NAMES = 4  # 5**4 evaluations at most; a grid over more names is not checked
_WARNED: dict[Any, Any] = {}  # the warnings registry: a kernel's warning shows once, not once per build


def check_body(sig: Signature, body: Callable[..., Any], text: str) -> None:
    """DeclarationError for a typing object's or Python object's text in ``text``; a
    ``PerBlockExtentWarning`` for each per-block write past a declared extent's reach."""
    _check_interpolations(sig, text)
    for message in _per_block_hazards(sig, text):
        code = getattr(body, "__code__", None)
        warnings.warn_explicit(
            message,
            PerBlockExtentWarning,
            code.co_filename if code else "<kernel body>",
            code.co_firstlineno if code else 0,
            module=getattr(body, "__module__", None) or "kerneldsl",
            registry=_WARNED,
        )


# --- f-string traps ---------------------------------------------------------------------------


def _check_interpolations(sig: Signature, text: str) -> None:
    for shown, name, kind in _typing_texts(sig, text):
        symbol = kind == "shape symbol"
        hint = (
            f"write {name} as plain text in the f-string (the kernel takes it as an index_t parameter), "
            "or the extent of an array, {x.shape[0]}"
            if symbol
            else f"write {name} as plain text in the f-string (it is a typedef in the kernel), or {{x.ctype}}"
        )
        raise DeclarationError(
            sig.name,
            None,
            f"the body contains {shown!r}, which is how Python prints {kind} {name} "
            f"(a typing.{'NewType' if symbol else 'TypeVar'}) in an f-string such as "
            f"f'...{{{name}}}...': {hint}; braces meant for C are doubled, {{{{ and }}}}",
        )
    found = _PYTHON_REPR.search(text)
    if found:
        raise DeclarationError(
            sig.name,
            None,
            f"the body contains {found.group()!r}, a Python object's repr interpolated by an f-string: "
            "interpolate what C should see ({x} for an array, {x.ctype} for its C type, a constant's value), "
            "and double braces meant for C, {{ and }}",
        )


def _typing_texts(sig: Signature, text: str) -> Iterator[tuple[str, str, str]]:
    """``(text, name, "shape symbol" | "dtype variable")`` for each place ``text`` holds what Python
    prints for a shape symbol's NewType (``module.n``, the module one that is loaded) or a dtype
    variable's TypeVar (``~T``), as a token: not part of a longer name, not a member access, a
    call or a braced initialiser (``x.~T()``, an explicit destructor call, is C++; a typedef's
    name after ``~`` is nothing else)."""
    for name in sig.symbols:
        for found in re.finditer(rf"(?<![\w.>])((?:[A-Za-z_]\w*\.)+){re.escape(name)}(?![\w(])", text):
            if found.group(1)[:-1] in sys.modules:
                yield found.group(), name, "shape symbol"
    for name in sig.dtype_vars:
        for found in re.finditer(rf"(?<![\w.>])~{re.escape(name)}(?![\w({{])", text):
            yield found.group(), name, "dtype variable"


# --- per-block arrays -------------------------------------------------------------------------


def _per_block_hazards(sig: Signature, text: str) -> Iterator[str]:
    for axis, grid in zip("xyz", sig.grid):
        for p in sig.arrays:
            if not p.writes or len(p.shape) != 1:
                continue
            if not re.search(rf"(?<![\w.]){p.name}\s*\[\s*blockIdx\s*\.\s*{axis}\s*\]", text):
                continue
            extent = as_expr(p.shape[0])
            if _can_be_smaller(sig, extent, grid):
                yield (
                    f"kernel {sig.name!r}: the body indexes {p.name}[blockIdx.{axis}], but the extent of {p.name!r}, "
                    f"{extent!r}, can be smaller than the grid's {grid!r} blocks along {axis}: a call passing fewer "
                    f"elements writes past its end. Declare the grid's expression as the extent, "
                    f"kd.{_direction(p)}[{_dtype(p)}, kd.{_spelled(grid)}], and calls are checked against it "
                    "(a textual check of the body for name[blockIdx.x]; a guarded write may ignore it)"
                )


def _can_be_smaller(sig: Signature, extent: Expr, grid: Expr) -> bool:
    names = sorted(extent.symbols() | grid.symbols())
    if len(names) > _MAX_SAMPLED_NAMES:
        return False
    for values in itertools.product(_SAMPLES, repeat=len(names)):
        bound = dict(zip(names, values))
        try:
            if extent.evaluate(bound) < grid.evaluate(bound):
                return True
        except ZeroDivisionError:
            continue
    return False


def _dtype(p: ArrayParam) -> str:
    return f"kd.{p.dtype}" if dtypes.is_dtype_name(p.dtype) else p.dtype


def _direction(p: ArrayParam) -> str:
    return {"out": "Out", "inout": "InOut", "in": "In"}[p.direction]


def _spelled(grid: Expr) -> str:
    """The grid expression as Python spells it with kerneldsl's names (``cdiv(n, 256)``)."""
    return repr(grid) if grid.op not in ("int", "sym") else f"sym({grid!r})"
