"""Reducers: how values fold (the combine expression, the identity, pre- and post-maps) and the
dtype rules, shared by reductions and scans.

Accumulation dtype: NumPy's result dtype (``sum`` of int8 accumulates in int64, of uint8 in
uint64, ``mean`` of ints in float64), except that float16 and bfloat16 always accumulate in
float32 and round once at the end (NumPy sums float16 pairwise in float16: we are more
accurate); float32 accumulates in float32, float64 in float64, complex64 in complex64 and
complex128 in complex128 (as NumPy). Complex values fold where the combine has a ``c`` form
(sum, prod, mean, dot); the others (min, max, argmin, argmax, norm, any, all, user reducers)
refuse them with ``ComplexUnsupportedError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from .. import promotion
from ..program import compute_ctype, unsigned_ctype

_HALF = ("float16", "bfloat16")
SHUFFLE = {"bool": "int", "int8": "int", "int16": "int", "uint8": "unsigned int", "uint16": "unsigned int"}
"""The C type a warp shuffle moves an accumulator of these dtypes as (shuffles take 32 bits at least)."""


def accumulator_context(acc: np.dtype) -> dict[str, str]:
    """What the reduction templates name an accumulator's C types: its compute type ``cctype``,
    the unsigned ``kdU`` of its width, and ``shfl``, the type a warp shuffle moves it as."""
    return {
        "cctype": compute_ctype(acc),
        "kdU": unsigned_ctype(acc),
        "shfl": SHUFFLE.get(dtypes.element_type(acc).name, compute_ctype(acc)),
    }


def accumulation_dtype(dt: np.dtype) -> np.dtype:
    """float16/bfloat16 accumulate in float32."""
    return np.dtype(np.float32) if dtypes.element_type(dt).name in _HALF else dt


def _numpy_dtype(func: Callable[..., Any]) -> Callable[[np.dtype], np.dtype]:
    def rule(dt: np.dtype) -> np.dtype:
        with np.errstate(all="ignore"):
            return promotion.supported(np.asarray(func(np.ones(1, dt))).dtype)

    return rule


def _same(dt: np.dtype) -> np.dtype:
    return dt


def _int64(dt: np.dtype) -> np.dtype:
    return np.dtype(np.int64)


def identity_literal(which: str, dt: np.dtype) -> str:
    """C text of 0, 1, +inf / the maximum (``"max"``) or -inf / the minimum (``"min"``) of ``dt``."""
    if which in ("0", "1"):
        return f"(kdA){which}"
    et = dtypes.element_type(dt)
    high = which == "max"
    if et.kind == "b":
        return "true" if high else "false"
    if et.kind == "f":
        inf = "__longlong_as_double(0x7ff0000000000000LL)" if dt == np.float64 else "__int_as_float(0x7f800000)"
        return f"{'' if high else '-'}(kdA){inf}"
    info = np.iinfo(dt)
    value = int(info.max if high else info.min)
    if value == -(2**63):
        return "(kdA)(-9223372036854775807LL - 1)"
    return f"(kdA)({value}{'ULL' if et.kind == 'u' else 'LL'})"


@dataclass(frozen=True, eq=False)
class Reducer:
    """How values fold: ``combine`` over ``a``, ``b`` (or ``better`` over ``a, ai, b, bi`` when
    ``indexed``); ``identity`` names the starting value; ``pre`` maps each value ``v`` (already in
    the accumulation dtype) first; ``post`` turns the result ``r`` (``n`` values, index ``i``) into
    the output."""

    name: str
    combine: dict[str, str]  # dtype kinds -> expression
    identity: str  # "0", "1", "max", "min" or a C expression
    result: Callable[[np.dtype], np.dtype]  # output dtype from the value dtype
    accumulate: Callable[[np.dtype], np.dtype]  # accumulation dtype from the value dtype
    pre: str = "v"
    post: str = "r"
    pre_param: str = "v"
    indexed: bool = False
    needs_values: bool = False  # an empty reduction has no result (min, max, argmax)
    absorbing: str | None = None  # names (as ``identity``) the value no later value changes: max's maximum

    def check(self, value: np.dtype) -> None:
        """ComplexUnsupportedError when complex values reach a reducer without a complex form."""
        if not any("c" in kinds for kinds in self.combine):
            why = "complex numbers have no order" if self.needs_values else "it has no complex form in kerneldsl"
            promotion.refuse_complex(self.name, value, why=why)

    def expression(self, acc: np.dtype) -> str:
        self.check(acc)
        k = dtypes.element_type(acc).kind
        for kinds, expr in self.combine.items():
            if k in kinds:
                return expr
        raise TypeError(f"reduction {self.name} does not support accumulation dtype {acc}")

    def identity_text(self, acc: np.dtype) -> str:
        if self.identity in ("0", "1", "max", "min"):
            return identity_literal(self.identity, acc)
        return f"(kdA)({self.identity})"

    def absorbing_text(self, acc: np.dtype) -> str:
        """C text of the value a bool accumulation keeps once it holds it (true for max and any),
        where the CPU device's runs stop early, as NumPy's bool reductions do; '' for none. Other
        dtypes reach theirs too rarely to test for it (and a float max's NaN beats +inf)."""
        if self.absorbing is None or acc != np.bool_:
            return ""
        return identity_literal(self.absorbing, acc)


_REAL_ADD = {"f": "a + b", "iu": "(kdA)(0u + (kdU)a + (kdU)b)", "b": "a || b"}
_ADD = {**_REAL_ADD, "c": "a + b"}
_MUL = {"f": "a * b", "iu": "(kdA)(1u * (kdU)a * (kdU)b)", "b": "a && b", "c": "a * b"}
_MIN = {"fiub": "(a < b || a != a) ? a : b"}
_MAX = {"fiub": "(a > b || a != a) ? a : b"}
_ARGMAX = "b > a || (b != b && a == a) || ((b == a || (b != b && a != a)) && bi < ai)"
_ARGMIN = "b < a || (b != b && a == a) || ((b == a || (b != b && a != a)) && bi < ai)"


def _sum_dtype(dt: np.dtype) -> np.dtype:
    return _numpy_dtype(np.sum)(dt)


REDUCERS: dict[str, Reducer] = {
    "sum": Reducer("sum", _ADD, "0", _sum_dtype, lambda dt: accumulation_dtype(_sum_dtype(dt))),
    "prod": Reducer("prod", _MUL, "1", _numpy_dtype(np.prod), lambda dt: accumulation_dtype(_numpy_dtype(np.prod)(dt))),
    "min": Reducer("min", _MIN, "max", _same, accumulation_dtype, needs_values=True, absorbing="min"),
    "max": Reducer("max", _MAX, "min", _same, accumulation_dtype, needs_values=True, absorbing="max"),
    "mean": Reducer(
        "mean",
        _ADD,
        "0",
        _numpy_dtype(np.mean),
        lambda dt: accumulation_dtype(_numpy_dtype(np.mean)(dt)),
        post="r / (kdA)n",
    ),
    "argmax": Reducer(
        "argmax",
        {"fiub": _ARGMAX},
        "min",
        _int64,
        accumulation_dtype,
        post="i",
        indexed=True,
        needs_values=True,
        absorbing="max",
    ),
    "argmin": Reducer(
        "argmin",
        {"fiub": _ARGMIN},
        "max",
        _int64,
        accumulation_dtype,
        post="i",
        indexed=True,
        needs_values=True,
        absorbing="min",
    ),
    "norm": Reducer(
        "norm",
        _REAL_ADD,  # |v|^2 of a complex v is not v * v
        "0",
        _numpy_dtype(np.linalg.norm),
        lambda dt: accumulation_dtype(_numpy_dtype(np.linalg.norm)(dt)),
        pre="v * v",
        post="sqrt(r)",
    ),
    "dot": Reducer("dot", _ADD, "0", _same, accumulation_dtype),
}


def user_reducer(name: str, combine: str, identity: str, map: str, dtype: Any, post: str = "r") -> Reducer:
    """A Reducer declared from C expressions (``kd.reduction``, ``kd.scan``): every dtype kind
    combines with ``combine``, values accumulate in their own dtype (float16/bfloat16 in float32)
    and the result is ``dtype`` or the input's."""
    out_dtype = None if dtype is None else promotion.supported(dtype)
    return Reducer(
        name,
        {"fiub": combine},
        identity,
        (lambda dt: dt) if out_dtype is None else (lambda dt: out_dtype),
        accumulation_dtype,
        pre=map,
        post=post,
        pre_param="x",
    )
