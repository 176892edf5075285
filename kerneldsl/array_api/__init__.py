"""``kerneldsl.array_api``: the Array API standard's namespace (2024.12) over kerneldsl's arrays,
the namespace ``DeviceArray.__array_namespace__()`` returns.

A thin layer: the standard's names and signatures bound to what kerneldsl already runs — the
``kd.ops`` elementwise table (``acos`` is ``kd.ops.arccos``, ``pow`` is ``kd.ops.power``, ...),
its reductions and scans, ``kd.matmul`` and the array manipulation functions — with the
standard's defaults (float64, int64). Dtypes are NumPy's dtype objects. What is not here is
listed, with the reason, in ``.ci/array-api-skips.txt`` (the solvers and decompositions of
``linalg``, ``fft``, complex dtypes in the array layer).
"""

from __future__ import annotations

import inspect
import math
import types

import numpy as np

from ..array import ops as _ops
from . import linalg
from ._compute import (
    all,
    any,
    argmax,
    argmin,
    clip,
    count_nonzero,
    cumulative_prod,
    cumulative_sum,
    diff,
    matmul,
    matrix_transpose,
    max,
    mean,
    min,
    prod,
    searchsorted,
    std,
    sum,
    tensordot,
    var,
    vecdot,
    where,
)
from ._creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from ._dtypes import __array_namespace_info__, astype, can_cast, finfo, iinfo, isdtype, result_type
from ._elementwise import conj
from ._gather import nonzero, take, take_along_axis
from ._manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    tile,
    unstack,
)
from ._sort import argsort, sort, unique_all, unique_counts, unique_inverse, unique_values

__array_api_version__ = "2024.12"

bool = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
float32, float64 = np.dtype(np.float32), np.dtype(np.float64)
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)

e, pi, inf, nan = math.e, math.pi, math.inf, math.nan
newaxis = None

# the elementwise functions: the standard's name -> kd.ops row
abs = _ops.abs
acos, acosh, asin, asinh, atan, atan2, atanh = (
    _ops.arccos,
    _ops.arccosh,
    _ops.arcsin,
    _ops.arcsinh,
    _ops.arctan,
    _ops.arctan2,
    _ops.arctanh,
)
add, subtract, multiply, divide, floor_divide, remainder = (
    _ops.add,
    _ops.subtract,
    _ops.multiply,
    _ops.divide,
    _ops.floor_divide,
    _ops.remainder,
)
bitwise_and, bitwise_or, bitwise_xor, bitwise_invert = _ops.bitwise_and, _ops.bitwise_or, _ops.bitwise_xor, _ops.invert
bitwise_left_shift, bitwise_right_shift = _ops.left_shift, _ops.right_shift
ceil, floor, round, trunc, sign, signbit = _ops.ceil, _ops.floor, _ops.round, _ops.trunc, _ops.sign, _ops.signbit
copysign, hypot, nextafter, logaddexp = _ops.copysign, _ops.hypot, _ops.nextafter, _ops.logaddexp
cos, cosh, sin, sinh, tan, tanh = _ops.cos, _ops.cosh, _ops.sin, _ops.sinh, _ops.tan, _ops.tanh
exp, expm1, log, log1p, log2, log10 = _ops.exp, _ops.expm1, _ops.log, _ops.log1p, _ops.log2, _ops.log10
equal, not_equal, less, less_equal, greater, greater_equal = (
    _ops.equal,
    _ops.not_equal,
    _ops.less,
    _ops.less_equal,
    _ops.greater,
    _ops.greater_equal,
)
isfinite, isinf, isnan = _ops.isfinite, _ops.isinf, _ops.isnan
real, imag = _ops.real, _ops.imag
logical_and, logical_or, logical_xor, logical_not = (
    _ops.logical_and,
    _ops.logical_or,
    _ops.logical_xor,
    _ops.logical_not,
)
maximum, minimum, negative, positive, pow = _ops.maximum, _ops.minimum, _ops.negative, _ops.positive, _ops.power
reciprocal, sqrt, square = _ops.reciprocal, _ops.sqrt, _ops.square

__all__ = [
    "__array_namespace_info__",
    "abs",
    "acos",
    "acosh",
    "add",
    "all",
    "any",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "asarray",
    "asin",
    "asinh",
    "astype",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bool",
    "broadcast_arrays",
    "broadcast_to",
    "can_cast",
    "ceil",
    "clip",
    "complex128",
    "complex64",
    "concat",
    "conj",
    "copysign",
    "cos",
    "cosh",
    "count_nonzero",
    "cumulative_prod",
    "cumulative_sum",
    "diff",
    "divide",
    "e",
    "empty",
    "empty_like",
    "equal",
    "exp",
    "expand_dims",
    "expm1",
    "eye",
    "finfo",
    "flip",
    "float32",
    "float64",
    "floor",
    "floor_divide",
    "from_dlpack",
    "full",
    "full_like",
    "greater",
    "greater_equal",
    "hypot",
    "iinfo",
    "imag",
    "inf",
    "int16",
    "int32",
    "int64",
    "int8",
    "isdtype",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "linalg",
    "linspace",
    "log",
    "log10",
    "log1p",
    "log2",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "matrix_transpose",
    "max",
    "maximum",
    "mean",
    "meshgrid",
    "min",
    "minimum",
    "moveaxis",
    "multiply",
    "nan",
    "negative",
    "newaxis",
    "nextafter",
    "nonzero",
    "not_equal",
    "ones",
    "ones_like",
    "permute_dims",
    "pi",
    "positive",
    "pow",
    "prod",
    "real",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "result_type",
    "roll",
    "round",
    "searchsorted",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "sort",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "subtract",
    "sum",
    "take",
    "take_along_axis",
    "tan",
    "tanh",
    "tensordot",
    "tile",
    "tril",
    "triu",
    "trunc",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unstack",
    "var",
    "vecdot",
    "where",
    "zeros",
    "zeros_like",
]

_STANDARD = "https://data-apis.org/array-api/2024.12/API_specification/generated/array_api.{name}.html"


def _complete_docstrings(functions: list[types.FunctionType], prefix: str) -> None:
    """Functions that follow the standard's signature to the letter name the parameters their
    docstring does not explain, with the standard's page that defines them (``help(xp.sum)``)."""
    for func in functions:
        doc = inspect.cleandoc(func.__doc__ or "")
        params = [
            p for p in inspect.signature(func).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        missing = [p.name for p in params if p.name not in doc]
        if doc and not missing:
            continue
        page = _STANDARD.format(name=prefix + func.__name__)
        lines = [doc or f"The Array API standard's ``{prefix}{func.__name__}`` on kerneldsl's arrays."]
        lines += ["", f"As the standard defines it: {page}"]
        if missing:
            lines += ["", "Parameters", "----------"]
            lines += [f"{name}\n    As the standard's ``{func.__name__}`` defines it." for name in missing]
        func.__doc__ = "\n".join(lines)


_complete_docstrings([v for v in map(globals().get, __all__) if isinstance(v, types.FunctionType)], "")
_complete_docstrings([v for v in map(vars(linalg).get, linalg.__all__) if isinstance(v, types.FunctionType)], "linalg.")
