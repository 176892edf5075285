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
from .array.scan import Scan
from .array.scan import cumprod as cumprod
from .array.scan import cumsum as cumsum

if TYPE_CHECKING:
    from .array.ndarray import DeviceArray
    from .array.operands import DeviceOperand, HostArray, HostOperand, RemoteOperand
    from .distributed.handles import RemoteArray

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


def _same(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """Every operand is computed in the result's dtype."""
    return (result,) * len(operands)


def _compared(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """Operands compared in their common dtype, as NumPy's comparison loops do (the result is bool)."""
    return (promotion.result_dtype(np.maximum, *operands),) * len(operands)


def _condition_first(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """``where``: a bool condition, then two operands in the result's dtype."""
    return (np.dtype(np.bool_), result, result)


class Op(ElementwiseFunction):
    """One elementwise op as a callable, ``op(*operands, out=None)``: its operand names, the NumPy
    function whose dtype rule it follows, the operands' dtypes given the result's (``inputs``),
    and one C expression per set of dtype kinds. It takes the name it is bound to in this module."""

    def __init__(
        self,
        params: tuple[str, ...],
        rule: Callable[..., Any],
        exprs: dict[str, str],
        inputs: Callable[[np.dtype, Sequence[Any]], tuple[np.dtype, ...]] = _same,
    ) -> None:
        super().__init__()
        self.name = self.__name__ = ""  # named by _named_rows, below the rows
        self.params = params
        self.rule = rule
        self.exprs = exprs
        self.inputs = inputs

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        result = promotion.result_dtype(self.rule, *operands)
        return result, self.inputs(result, operands)

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


# -- the elementwise ops: one row each, named once (by the variable) -----------------------------------

add = Op(("a", "b"), np.add, {"f": "a + b", "iu": "(kdT)(0u + (kdU)a + (kdU)b)", "b": "a || b"})
subtract = Op(("a", "b"), np.subtract, {"f": "a - b", "iu": "(kdT)(0u + (kdU)a - (kdU)b)"})
multiply = Op(("a", "b"), np.multiply, {"f": "a * b", "iu": "(kdT)(1u * (kdU)a * (kdU)b)", "b": "a && b"})
divide = Op(("a", "b"), np.true_divide, {"f": "a / b"})
floor_divide = Op(("a", "b"), np.floor_divide, {"f": _FLOORDIV_F, "i": _FLOORDIV_I, "u": "b == 0 ? (kdT)0 : a / b"})
remainder = Op(("a", "b"), np.remainder, {"f": _REMAINDER_F, "i": _REMAINDER_I, "u": "b == 0 ? (kdT)0 : a % b"})
negative = Op(("a",), np.negative, {"f": "-a", "iu": "(kdT)(0u - (kdU)a)"})
abs = Op(("a",), np.absolute, {"f": "fabs(a)", "i": "a < 0 ? (kdT)(0u - (kdU)a) : a", "ub": "a"})
square = Op(("a",), np.square, {"f": "a * a", "iu": "(kdT)(1u * (kdU)a * (kdU)a)", "b": "a"})
minimum = Op(("a", "b"), np.minimum, {"fiub": "(a < b || a != a) ? a : b"})
maximum = Op(("a", "b"), np.maximum, {"fiub": "(a > b || a != a) ? a : b"})
power = Op(("a", "b"), np.power, {"f": "pow(a, b)", "iu": _IPOW})
exp = Op(("a",), np.exp, {"f": "exp(a)"})
log = Op(("a",), np.log, {"f": "log(a)"})
sqrt = Op(("a",), np.sqrt, {"f": "sqrt(a)"})
sin = Op(("a",), np.sin, {"f": "sin(a)"})
cos = Op(("a",), np.cos, {"f": "cos(a)"})
tanh = Op(("a",), np.tanh, {"f": "tanh(a)"})
clip = Op(("a", "lo", "hi"), np.clip, {"fiub": _CLIP})
where = Op(("c", "a", "b"), np.where, {"fiub": "c ? a : b"}, _condition_first)
axpy = Op(
    ("alpha", "x", "y"),
    _axpy_dtype,
    {"f": "alpha * x + y", "iu": "(kdT)(0u + 1u * (kdU)alpha * (kdU)x + (kdU)y)", "b": "(alpha && x) || y"},
)
less = Op(("a", "b"), np.less, {"fiub": "a < b"}, _compared)
less_equal = Op(("a", "b"), np.less_equal, {"fiub": "a <= b"}, _compared)
greater = Op(("a", "b"), np.greater, {"fiub": "a > b"}, _compared)
greater_equal = Op(("a", "b"), np.greater_equal, {"fiub": "a >= b"}, _compared)
equal = Op(("a", "b"), np.equal, {"fiub": "a == b"}, _compared)
not_equal = Op(("a", "b"), np.not_equal, {"fiub": "a != b"}, _compared)
fma = Op(
    ("a", "b", "c"),
    _axpy_dtype,
    {"f": "a * b + c", "iu": "(kdT)(0u + 1u * (kdU)a * (kdU)b + (kdU)c)", "b": "(a && b) || c"},
)


def _named_rows(namespace: dict[str, Any]) -> dict[str, Op]:
    """Name every Op after the variable it is defined as (before any alias is bound)."""
    rows = {name: value for name, value in namespace.items() if isinstance(value, Op)}
    for name, op in rows.items():
        op.name = op.__name__ = name
    return rows


TABLE: dict[str, Op] = _named_rows(globals())
ELEMENTWISE: dict[str, ElementwiseFunction] = dict(TABLE)
COMPARISONS = frozenset(name for name, op in TABLE.items() if op.inputs is _compared)

mod = remainder
true_divide = divide
absolute = abs


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
        return (_astype_op, (self.dtype,))


_astypes: dict[np.dtype, AsType] = {}


def _astype_op(dtype: Any) -> AsType:
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
    return _astype_op(dtype)(a, out=out)


def _named(name: str) -> Op:
    return TABLE[name]


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


# every op, reduction, scan and function defined above, by the name it is bound to
__all__ = [
    "TABLE",
    *sorted(
        name
        for name, value in globals().items()
        if not name.startswith("_")
        and (isinstance(value, (ElementwiseFunction, Reduction, Scan)) or getattr(value, "__module__", "") == __name__)
        and not isinstance(value, type)
    ),
]
