"""``kd.ops``: NumPy-compatible array operations as generated, type-specialized kernels.

Every op works on DeviceArrays (device result, asynchronous on the session stream), on numpy
arrays (numpy result) and on foreign CUDA arrays (adopted zero-copy), takes ``out=``, and
inside ``@kd.fuse`` records itself into the fused kernel instead of running.

Elementwise ops are rows of ``TABLE``: operand names, the NumPy function whose dtype rule they
follow (``kerneldsl.promotion``) and one short C expression per dtype kind (``b`` bool, ``i``
signed, ``u`` unsigned, ``f`` float; ``kdT`` is the type the op computes in, ``kdU`` its
unsigned twin so that integer overflow wraps like NumPy's instead of being undefined).

Deviations from NumPy, all documented: integer ``power`` with a negative exponent gives 0 (or
+-1 for a base of +-1) where NumPy raises; float -> int ``astype`` of NaN / out-of-range values
is undefined in NumPy and saturates on the GPU; math functions (exp, log, sin, cos, tanh,
power) are CUDA's, within a few ulp of NumPy's; ``fma`` / ``axpy`` round twice (``a*b`` then
``+c``), exactly like NumPy's ``a * b + c``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from . import promotion
from .array.elementwise import ElementwiseFunction
from .array.program import kind
from .array.reduction import REDUCERS, Reduction
from .array.scan import cumprod, cumsum

if TYPE_CHECKING:
    from .array.operands import DeviceOperand, HostArray, HostOperand, RemoteOperand
    from .distributed.handles import RemoteArray
    from .runtime.memory import DeviceArray

_IPOW = (
    "[&]() -> kdT { if (b < 0) return (kdT)(a == 1 ? 1 : (a == (kdT)-1 ? ((b & 1) ? -1 : 1) : 0)); "
    "kdU r = 1, x = (kdU)a; for (kdT e = b; e > 0; e >>= 1) { if (e & 1) r = (kdU)(1u * r * x); "
    "x = (kdU)(1u * x * x); } return (kdT)r; }()"
)
# NumPy's floor division and remainder (npy_divmod): the remainder takes the divisor's sign, the
# quotient is floored; a zero integer divisor gives 0, as NumPy does (with a warning there).
_FLOORDIV_F = (
    "[&]() -> kdT { if (b == 0) return a / b; kdT m = fmod(a, b), d = (a - m) / b; "
    "if (m != 0 && ((b < 0) != (m < 0))) d -= 1; if (d == 0) return copysign((kdT)0, a / b); "
    "kdT f = floor(d); return d - f > (kdT)0.5 ? f + 1 : f; }()"
)
_REMAINDER_F = (
    "[&]() -> kdT { if (b == 0) return fmod(a, b); kdT m = fmod(a, b); "
    "if (m != 0 && ((b < 0) != (m < 0))) m += b; return m != 0 ? m : copysign((kdT)0, b); }()"
)
_FLOORDIV_I = (
    "[&]() -> kdT { if (b == 0) return 0; kdT q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }()"
)
_REMAINDER_I = (
    "[&]() -> kdT { if (b == 0) return 0; kdT r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }()"
)
_CLIP = "[&]() -> kdT { kdT t = (a > lo || a != a) ? a : lo; return (t < hi || t != t) ? t : hi; }()"


def _axpy_dtype(a: Any, x: Any, y: Any) -> Any:
    return np.add(np.multiply(a, x), y)


# name: (operand names, dtype rule, {dtype kinds: C expression})
TABLE: dict[str, tuple[tuple[str, ...], Callable[..., Any], dict[str, str]]] = {
    "add": (("a", "b"), np.add, {"f": "a + b", "iu": "(kdT)(0u + (kdU)a + (kdU)b)", "b": "a || b"}),
    "subtract": (("a", "b"), np.subtract, {"f": "a - b", "iu": "(kdT)(0u + (kdU)a - (kdU)b)"}),
    "multiply": (("a", "b"), np.multiply, {"f": "a * b", "iu": "(kdT)(1u * (kdU)a * (kdU)b)", "b": "a && b"}),
    "divide": (("a", "b"), np.true_divide, {"f": "a / b"}),
    "floor_divide": (("a", "b"), np.floor_divide, {"f": _FLOORDIV_F, "i": _FLOORDIV_I, "u": "b == 0 ? (kdT)0 : a / b"}),
    "remainder": (("a", "b"), np.remainder, {"f": _REMAINDER_F, "i": _REMAINDER_I, "u": "b == 0 ? (kdT)0 : a % b"}),
    "negative": (("a",), np.negative, {"f": "-a", "iu": "(kdT)(0u - (kdU)a)"}),
    "abs": (("a",), np.absolute, {"f": "fabs(a)", "i": "a < 0 ? (kdT)(0u - (kdU)a) : a", "ub": "a"}),
    "square": (("a",), np.square, {"f": "a * a", "iu": "(kdT)(1u * (kdU)a * (kdU)a)", "b": "a"}),
    "minimum": (("a", "b"), np.minimum, {"fiub": "(a < b || a != a) ? a : b"}),
    "maximum": (("a", "b"), np.maximum, {"fiub": "(a > b || a != a) ? a : b"}),
    "power": (("a", "b"), np.power, {"f": "pow(a, b)", "iu": _IPOW}),
    "exp": (("a",), np.exp, {"f": "exp(a)"}),
    "log": (("a",), np.log, {"f": "log(a)"}),
    "sqrt": (("a",), np.sqrt, {"f": "sqrt(a)"}),
    "sin": (("a",), np.sin, {"f": "sin(a)"}),
    "cos": (("a",), np.cos, {"f": "cos(a)"}),
    "tanh": (("a",), np.tanh, {"f": "tanh(a)"}),
    "clip": (("a", "lo", "hi"), np.clip, {"fiub": _CLIP}),
    "where": (("c", "a", "b"), np.where, {"fiub": "c ? a : b"}),
    "axpy": (
        ("alpha", "x", "y"),
        _axpy_dtype,
        {"f": "alpha * x + y", "iu": "(kdT)(0u + 1u * (kdU)alpha * (kdU)x + (kdU)y)", "b": "(alpha && x) || y"},
    ),
    "less": (("a", "b"), np.less, {"fiub": "a < b"}),
    "less_equal": (("a", "b"), np.less_equal, {"fiub": "a <= b"}),
    "greater": (("a", "b"), np.greater, {"fiub": "a > b"}),
    "greater_equal": (("a", "b"), np.greater_equal, {"fiub": "a >= b"}),
    "equal": (("a", "b"), np.equal, {"fiub": "a == b"}),
    "not_equal": (("a", "b"), np.not_equal, {"fiub": "a != b"}),
    "fma": (
        ("a", "b", "c"),
        _axpy_dtype,
        {"f": "a * b + c", "iu": "(kdT)(0u + 1u * (kdU)a * (kdU)b + (kdU)c)", "b": "(a && b) || c"},
    ),
}


COMPARISONS = frozenset({"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"})


class Op(ElementwiseFunction):
    """One row of ``TABLE`` as a callable: ``op(*operands, out=None)``."""

    def __init__(self, name: str, params: tuple[str, ...], rule: Callable[..., Any], exprs: dict[str, str]) -> None:
        super().__init__()
        self.name = name
        self.__name__ = name
        self.params = params
        self.rule = rule
        self.exprs = exprs

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        result = promotion.result_dtype(self.rule, *operands)
        if self.name == "where":
            return result, (np.dtype(np.bool_), result, result)
        if self.name in COMPARISONS:  # compared in the operands' common dtype, as NumPy's loops do
            common = promotion.result_dtype(np.maximum, *operands)
            return result, (common,) * len(operands)
        return result, (result,) * len(operands)

    def expression(self, dtype: np.dtype) -> str:
        k = kind(dtype)
        for kinds, expr in self.exprs.items():
            if k in kinds:
                return expr
        raise TypeError(f"kd.ops.{self.name} does not support dtype {dtype}")

    def __repr__(self) -> str:
        return f"<kd.ops.{self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by name: the receiver uses its own ``kd.ops`` (and its compiled plans)."""
        return (_named, (self.name,))


class AsType(ElementwiseFunction):
    """Conversion to one dtype with NumPy's ``astype`` (unsafe casting) semantics."""

    params = ("a",)

    def __init__(self, dtype: np.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.name = f"astype_{dtype.name}"

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        (a,) = operands
        return self.dtype, (promotion.supported(a if isinstance(a, np.dtype) else np.asarray(a).dtype),)

    def expression(self, dtype: np.dtype) -> str:
        return "(kdT)a"

    def __reduce__(self) -> tuple[Any, ...]:
        return (astype_op, (self.dtype,))


_astypes: dict[np.dtype, AsType] = {}


def astype_op(dtype: Any) -> AsType:
    """The conversion to ``dtype``, one per dtype."""
    dt = promotion.supported(dtype)
    op = _astypes.get(dt)
    if op is None:
        op = _astypes[dt] = AsType(dt)
    return op


@overload
def astype(a: HostOperand, dtype: Any, out: HostArray | None = None) -> HostArray: ...
@overload
def astype(a: RemoteOperand, dtype: Any, out: RemoteArray | None = None) -> RemoteArray: ...
@overload
def astype(a: DeviceOperand, dtype: Any, out: DeviceArray | None = None) -> DeviceArray: ...
def astype(a: Any, dtype: Any, out: Any = None) -> Any:
    """``a`` converted to ``dtype`` (a new array, or written into ``out``)."""
    return astype_op(dtype)(a, out=out)


def _named(name: str) -> Op:
    op: Op = globals()[name]
    return op


def _op(name: str) -> Op:
    params, rule, exprs = TABLE[name]
    return Op(name, params, rule, exprs)


add = _op("add")
subtract = _op("subtract")
multiply = _op("multiply")
divide = _op("divide")
floor_divide = _op("floor_divide")
remainder = _op("remainder")
mod = remainder
true_divide = divide
negative = _op("negative")
abs = _op("abs")
absolute = abs
square = _op("square")
minimum = _op("minimum")
maximum = _op("maximum")
power = _op("power")
exp = _op("exp")
log = _op("log")
sqrt = _op("sqrt")
sin = _op("sin")
cos = _op("cos")
tanh = _op("tanh")
clip = _op("clip")
where = _op("where")
axpy = _op("axpy")
fma = _op("fma")
less = _op("less")
less_equal = _op("less_equal")
greater = _op("greater")
greater_equal = _op("greater_equal")
equal = _op("equal")
not_equal = _op("not_equal")

sum = Reduction(REDUCERS["sum"], home=__name__)
prod = Reduction(REDUCERS["prod"], home=__name__)
min = Reduction(REDUCERS["min"], home=__name__)
max = Reduction(REDUCERS["max"], home=__name__)
mean = Reduction(REDUCERS["mean"], home=__name__)
argmax = Reduction(REDUCERS["argmax"], home=__name__)
argmin = Reduction(REDUCERS["argmin"], home=__name__)
norm = Reduction(REDUCERS["norm"], home=__name__)
_dot = Reduction(REDUCERS["dot"], map=multiply, operands=2, home=__name__)


@overload
def dot(a: HostOperand, b: HostOperand, out: HostArray | None = None) -> HostArray: ...  # type: ignore[overload-overlap]
@overload
def dot(a: RemoteOperand, b: RemoteOperand, out: RemoteArray | None = None) -> RemoteArray: ...  # type: ignore[overload-overlap]
@overload
def dot(a: DeviceOperand, b: DeviceOperand, out: DeviceArray | None = None) -> DeviceArray: ...
def dot(a: Any, b: Any, out: Any = None) -> Any:
    """Inner product of two 1-D arrays (NumPy's dtype: int8 . int8 is int8, wrapping)."""
    for x in (a, b):
        if getattr(x, "ndim", len(getattr(x, "shape", ()))) != 1:
            raise ValueError(f"kd.ops.dot supports 1-D arrays only, got shape {getattr(x, 'shape', None)}")
    if a.shape != b.shape:
        raise ValueError(f"kd.ops.dot: shapes {a.shape} and {b.shape} not aligned")
    return _dot(a, b, out=out)


ELEMENTWISE: dict[str, ElementwiseFunction] = {name: globals()[name] for name in TABLE}

__all__ = [
    "TABLE",
    "abs",
    "absolute",
    "add",
    "argmax",
    "argmin",
    "astype",
    "axpy",
    "clip",
    "cos",
    "cumprod",
    "cumsum",
    "divide",
    "dot",
    "equal",
    "exp",
    "floor_divide",
    "fma",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "log",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mod",
    "multiply",
    "negative",
    "norm",
    "not_equal",
    "power",
    "prod",
    "remainder",
    "sin",
    "sqrt",
    "square",
    "subtract",
    "sum",
    "tanh",
    "true_divide",
    "where",
]
