"""``kd.ops``: NumPy-compatible array operations as generated, type-specialized kernels.

Every op works on DeviceArrays (device result, asynchronous on the session stream), on numpy
arrays (numpy result) and on foreign CUDA arrays (adopted zero-copy), takes ``out=``, and
inside ``@kd.fuse`` records itself into the fused kernel instead of running.

Elementwise ops are rows of ``TABLE``: operand names, the NumPy function whose dtype rule they
follow (``kerneldsl.array.promotion``) and one short C expression per dtype kind (``b`` bool, ``i``
signed, ``u`` unsigned, ``f`` float; ``kdT`` is the type the op computes in, ``kdU`` its
unsigned twin so that integer overflow wraps like NumPy's instead of being undefined). Kind
``c`` is the expression used when an operand is complex (``kd_complex<R>``, the prelude's, with
the functions of ``templates/complex_math.cuh.j2``: ``kd_exp``, ``kd_abs``...); an op without one
refuses complex operands with ``ComplexUnsupportedError`` (ordering, floor/ceil/trunc/rint have
no complex meaning here; ``round`` rounds each part, as the Array API standard asks).

Deviations from NumPy, all documented: integer ``power`` with a negative exponent gives 0 (or
+-1 for a base of +-1) where NumPy raises; float -> int ``astype`` of NaN / out-of-range values
is undefined in NumPy and saturates on the GPU; float ``floor_divide`` with an infinite operand
is the quotient ``a / b`` (``inf // 2`` is inf, ``-1 // inf`` is -0.0: the Array API standard's
values) where NumPy gives NaN and -1.0; math functions (exp, log, sin, cos, tanh,
power) are CUDA's, within a few ulp of NumPy's (their complex forms give the special values the
Array API standard tabulates, C99 Annex G's, and finite values within a few ulp: the bounds are
in tests/test_complex_math.py); ``fma`` /
``axpy`` round twice (``a*b`` then ``+c``), exactly like NumPy's ``a * b + c``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ..errors import ComplexUnsupportedError, OperandDtypeError
from . import promotion
from .elementwise import ElementwiseFunction
from .program import kind
from .reduction import REDUCERS, Reduction
from .scan import Scan
from .scan import cumprod as cumprod
from .scan import cumsum as cumsum

if TYPE_CHECKING:
    from .ndarray import DeviceArray
    from .operands import DeviceOperand, HostArray, HostOperand, RemoteArrayT, RemoteOperand

_IPOW = (
    "[&]() -> kdT { if (b < 0) return (kdT)(a == 1 ? 1 : (a == (kdT)-1 ? ((b & 1) ? -1 : 1) : 0)); "
    "kdU r = 1, x = (kdU)a; for (kdT e = b; e > 0; e >>= 1) { if (e & 1) r = (kdU)(1u * r * x); "
    "x = (kdU)(1u * x * x); } return (kdT)r; }()"
)
# NumPy's floor division and remainder (npy_divmod): the remainder takes the divisor's sign, the
# quotient is floored; a zero integer divisor gives 0, as NumPy does (with a warning there). An
# infinite float operand gives the IEEE quotient a / b, as the Array API standard asks.
_FLOORDIV_F = (
    "[&]() -> kdT { if (b == 0 || kd_isinf(a) || kd_isinf(b)) return a / b; kdT m = fmod(a, b), d = (a - m) / b; "
    "if (m != 0 && ((b < 0) != (m < 0))) d -= 1; if (d == 0) return copysign((kdT)0, a / b); "
    "kdT f = floor(d); return d - f > (kdT)0.5 ? f + 1 : f; }()"
)
_REMAINDER_F = (
    "[&]() -> kdT { if (b == 0) return fmod(a, b); kdT m = fmod(a, b); "
    "if (m != 0 && ((b < 0) != (m < 0))) m += b; return m != 0 ? m : copysign((kdT)0, b); }()"
)
# Integers: the prelude's kd_floor_divide and kd_remainder.
_FLOORDIV_I = "kd_floor_divide<kdT, kdU>(a, b)"
_REMAINDER_I = "kd_remainder<kdT, kdU>(a, b)"
_CLIP = "kd_clip<kdT>(a, lo, hi)"
# NumPy's shifts (npy_lshift / npy_rshift): a count outside [0, bits) shifts everything out, so a
# right shift of a negative value gives -1; left shifts wrap through the unsigned twin.
_SHIFT_COUNT_OK = "(unsigned long long)b < sizeof(kdT) * 8"
_LSHIFT = f"{_SHIFT_COUNT_OK} ? (kdT)((kdU)a << b) : (kdT)0"
_RSHIFT_I = f"{_SHIFT_COUNT_OK} ? (kdT)(a >> b) : (kdT)(a < 0 ? -1 : 0)"
_RSHIFT_U = f"{_SHIFT_COUNT_OK} ? (kdT)(a >> b) : (kdT)0"
# NumPy's npy_logaddexp: equal operands (infinities included) give a + log(2); NaN propagates.
_LOGADDEXP = (
    "[&]() -> kdT { if (a == b) return a + (kdT)0.693147180559945309417232121458176568; kdT t = a - b; "
    "if (t > 0) return a + log1p(exp(-t)); if (t <= 0) return b + log1p(exp(t)); return t; }()"
)
_SIGN_F = "a > 0 ? (kdT)1 : (a < 0 ? (kdT)-1 : (a == 0 ? (kdT)0 : a))"  # NaN stays NaN, -0.0 gives 0.0


def _axpy_dtype(a: Any, x: Any, y: Any) -> Any:
    return np.add(np.multiply(a, x), y)


def _same(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """Every operand is computed in the result's dtype."""
    return (result,) * len(operands)


def _compared(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """Operands compared in their common dtype, as NumPy's comparison loops do (the result is bool)."""
    return (promotion.result_dtype(np.maximum, *operands),) * len(operands)


def _own(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """Predicates: each operand is read in its own dtype (the result is bool)."""
    return tuple(promotion.supported(o if isinstance(o, np.dtype) else np.asarray(o).dtype) for o in operands)


def _parts(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """``abs``/``real``/``imag``: a complex operand is read as itself (the result is its parts'
    dtype), any other in the result's."""
    return tuple(dt if promotion.is_complex(dt) else result for dt in map(promotion.operand_dtype, operands))


def _condition_first(result: np.dtype, operands: Sequence[Any]) -> tuple[np.dtype, ...]:
    """``where``: a bool condition, then two operands in the result's dtype."""
    promotion.refuse_complex("kd.ops.where's condition", promotion.operand_dtype(operands[0]), why="pass z != 0")
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
        self.complex_form = any("c" in kinds for kinds in exprs)

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        if not self.complex_form:
            given = [promotion.operand_dtype(o) for o in operands if isinstance(o, (np.dtype, np.generic, complex))]
            promotion.refuse_complex(f"kd.ops.{self.name}", *given, why="it has no complex form in kerneldsl")
        try:
            result = promotion.result_dtype(self.rule, *operands)
        except TypeError as exc:
            described = ", ".join(str(o) if isinstance(o, np.dtype) else type(o).__name__ for o in operands)
            raise OperandDtypeError(f"kd.ops.{self.name} is not defined for operands ({described}): {exc}") from None
        return result, self.inputs(result, operands)

    def expression(self, dtype: np.dtype, loops: tuple[np.dtype, ...] = ()) -> str:
        """The row's expression for the result's kind, or its ``c`` one when an operand is complex."""
        k = "c" if any(promotion.is_complex(dt) for dt in (*loops, dtype)) else kind(dtype)
        for kinds, expr in self.exprs.items():
            if k in kinds:
                return expr
        raise ComplexUnsupportedError(f"kd.ops.{self.name} is not defined for {dtype} operands")

    def __repr__(self) -> str:
        return f"<kd.ops.{self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by name: the receiver uses its own ``kd.ops`` (and its compiled plans)."""
        return (_named, (self.name,))


# -- the elementwise ops: one row each, named once (by the variable) -----------------------------------

add = Op(("a", "b"), np.add, {"fc": "a + b", "iu": "(kdT)(0u + (kdU)a + (kdU)b)", "b": "a || b"})
subtract = Op(("a", "b"), np.subtract, {"fc": "a - b", "iu": "(kdT)(0u + (kdU)a - (kdU)b)"})
multiply = Op(("a", "b"), np.multiply, {"fc": "a * b", "iu": "(kdT)(1u * (kdU)a * (kdU)b)", "b": "a && b"})
divide = Op(("a", "b"), np.true_divide, {"fc": "a / b"})
floor_divide = Op(("a", "b"), np.floor_divide, {"f": _FLOORDIV_F, "iu": _FLOORDIV_I})
remainder = Op(("a", "b"), np.remainder, {"f": _REMAINDER_F, "iu": _REMAINDER_I})
negative = Op(("a",), np.negative, {"f": "kd_neg(a)", "c": "-a", "iu": "(kdT)(0u - (kdU)a)"})
abs = Op(
    ("a",), np.absolute, {"f": "fabs(a)", "i": "a < 0 ? (kdT)(0u - (kdU)a) : a", "ub": "a", "c": "kd_abs(a)"}, _parts
)
square = Op(("a",), np.square, {"fc": "a * a", "iu": "(kdT)(1u * (kdU)a * (kdU)a)", "b": "a"})
minimum = Op(("a", "b"), np.minimum, {"fiub": "(a < b || a != a) ? a : b"})
maximum = Op(("a", "b"), np.maximum, {"fiub": "(a > b || a != a) ? a : b"})
power = Op(("a", "b"), np.power, {"f": "pow(a, b)", "iu": _IPOW, "c": "kd_pow(a, b)"})
exp = Op(("a",), np.exp, {"f": "exp(a)", "c": "kd_exp(a)"})
log = Op(("a",), np.log, {"f": "log(a)", "c": "kd_log(a)"})
sqrt = Op(("a",), np.sqrt, {"f": "sqrt(a)", "c": "kd_sqrt(a)"})
sin = Op(("a",), np.sin, {"f": "sin(a)", "c": "kd_sin(a)"})
cos = Op(("a",), np.cos, {"f": "cos(a)", "c": "kd_cos(a)"})
tanh = Op(("a",), np.tanh, {"f": "tanh(a)", "c": "kd_tanh(a)"})
clip = Op(("a", "lo", "hi"), np.clip, {"fiub": _CLIP})
where = Op(("c", "a", "b"), np.where, {"fiubc": "c ? a : b"}, _condition_first)
axpy = Op(
    ("alpha", "x", "y"),
    _axpy_dtype,
    {"fc": "alpha * x + y", "iu": "(kdT)(0u + 1u * (kdU)alpha * (kdU)x + (kdU)y)", "b": "(alpha && x) || y"},
)
less = Op(("a", "b"), np.less, {"fiub": "a < b"}, _compared)
less_equal = Op(("a", "b"), np.less_equal, {"fiub": "a <= b"}, _compared)
greater = Op(("a", "b"), np.greater, {"fiub": "a > b"}, _compared)
greater_equal = Op(("a", "b"), np.greater_equal, {"fiub": "a >= b"}, _compared)
equal = Op(("a", "b"), np.equal, {"fiubc": "a == b"}, _compared)
not_equal = Op(("a", "b"), np.not_equal, {"fiubc": "a != b"}, _compared)
fma = Op(
    ("a", "b", "c"),
    _axpy_dtype,
    {"fc": "a * b + c", "iu": "(kdT)(0u + 1u * (kdU)a * (kdU)b + (kdU)c)", "b": "(a && b) || c"},
)

# NumPy's math beyond the arithmetic: float functions (integers promote as NumPy's loops do), then
# rounding, predicates, logic and bits; erf/erfc follow sin's dtype rule (NumPy has no erf ufunc).
log1p = Op(("a",), np.log1p, {"f": "log1p(a)", "c": "kd_log1p(a)"})
expm1 = Op(("a",), np.expm1, {"f": "expm1(a)", "c": "kd_expm1(a)"})
sinh = Op(("a",), np.sinh, {"f": "sinh(a)", "c": "kd_sinh(a)"})
cosh = Op(("a",), np.cosh, {"f": "cosh(a)", "c": "kd_cosh(a)"})
arcsinh = Op(("a",), np.arcsinh, {"f": "asinh(a)", "c": "kd_asinh(a)"})
arccosh = Op(("a",), np.arccosh, {"f": "acosh(a)", "c": "kd_acosh(a)"})
arctanh = Op(("a",), np.arctanh, {"f": "atanh(a)", "c": "kd_atanh(a)"})
arcsin = Op(("a",), np.arcsin, {"f": "asin(a)", "c": "kd_asin(a)"})
arccos = Op(("a",), np.arccos, {"f": "acos(a)", "c": "kd_acos(a)"})
arctan = Op(("a",), np.arctan, {"f": "atan(a)", "c": "kd_atan(a)"})
tan = Op(("a",), np.tan, {"f": "tan(a)", "c": "kd_tan(a)"})
log2 = Op(("a",), np.log2, {"f": "log2(a)", "c": "kd_log2(a)"})
log10 = Op(("a",), np.log10, {"f": "log10(a)", "c": "kd_log10(a)"})
logaddexp = Op(("a", "b"), np.logaddexp, {"f": _LOGADDEXP})
nextafter = Op(("a", "b"), np.nextafter, {"f": "nextafter(a, b)"})  # float16/bfloat16: float32's neighbour, rounded
erf = Op(("a",), np.sin, {"f": "erf(a)"})
erfc = Op(("a",), np.sin, {"f": "erfc(a)"})
arctan2 = Op(("a", "b"), np.arctan2, {"f": "atan2(a, b)"})
hypot = Op(("a", "b"), np.hypot, {"f": "hypot(a, b)"})
copysign = Op(("a", "b"), np.copysign, {"f": "copysign(a, b)"})
deg2rad = Op(("a",), np.deg2rad, {"f": "a * ((kdT)3.14159265358979323846 / (kdT)180)"})
rad2deg = Op(("a",), np.rad2deg, {"f": "a * ((kdT)180 / (kdT)3.14159265358979323846)"})
fmod = Op(
    ("a", "b"),
    np.fmod,
    {"f": "fmod(a, b)", "i": "(b == 0 || b == (kdT)-1) ? (kdT)0 : (kdT)(a % b)", "u": "b == 0 ? (kdT)0 : (kdT)(a % b)"},
)
fmax = Op(("a", "b"), np.fmax, {"fiub": "(a > b || b != b) ? a : b"})  # NaN ignored; equal: b, as NumPy's loops
fmin = Op(("a", "b"), np.fmin, {"fiub": "(a < b || b != b) ? a : b"})
reciprocal = Op(("a",), np.reciprocal, {"fc": "(kdT)1 / a", "iu": "a == 0 ? (kdT)0 : (kdT)(1 / a)"})
positive = Op(("a",), np.positive, {"fiuc": "a"})
sign = Op(("a",), np.sign, {"f": _SIGN_F, "i": "(kdT)((a > 0) - (a < 0))", "u": "(kdT)(a > 0)", "c": "kd_sign(a)"})
floor = Op(("a",), np.floor, {"f": "floor(a)", "iub": "a"})
ceil = Op(("a",), np.ceil, {"f": "ceil(a)", "iub": "a"})
trunc = Op(("a",), np.trunc, {"f": "trunc(a)", "iub": "a"})
rint = Op(("a",), np.rint, {"f": "rint(a)"})
round = Op(("a",), np.round, {"f": "rint(a)", "iu": "a", "c": "kdT(rint(a.re), rint(a.im))"})  # half to even, each part
isnan = Op(("a",), np.isnan, {"bc": "a != a"}, _own)
isinf = Op(("a",), np.isinf, {"bc": "kd_isinf(a)"}, _own)  # the prelude's, for every dtype
isfinite = Op(("a",), np.isfinite, {"bc": "kd_isfinite(a)"}, _own)
signbit = Op(("a",), np.signbit, {"b": "kd_signbit(a)"}, _own)
conj = Op(("a",), np.conjugate, {"fiub": "a", "c": "kd_conj(a)"})
real = Op(("a",), np.real, {"fiub": "a", "c": "a.re"}, _parts)
imag = Op(("a",), np.imag, {"fiub": "(kdT)0", "c": "a.im"}, _parts)
logical_and = Op(("a", "b"), np.logical_and, {"b": "a && b"})
logical_or = Op(("a", "b"), np.logical_or, {"b": "a || b"})
logical_xor = Op(("a", "b"), np.logical_xor, {"b": "a != b"})
logical_not = Op(("a",), np.logical_not, {"b": "!a"})
bitwise_and = Op(("a", "b"), np.bitwise_and, {"iub": "a & b"})
bitwise_or = Op(("a", "b"), np.bitwise_or, {"iub": "a | b"})
bitwise_xor = Op(("a", "b"), np.bitwise_xor, {"iub": "a ^ b"})
invert = Op(("a",), np.invert, {"iu": "(kdT)~a", "b": "!a"})
left_shift = Op(("a", "b"), np.left_shift, {"iu": _LSHIFT})
right_shift = Op(("a", "b"), np.right_shift, {"i": _RSHIFT_I, "u": _RSHIFT_U})


def _named_rows(namespace: dict[str, Any]) -> dict[str, Op]:
    """Name every Op after the variable it is defined as (before any alias is bound)."""
    rows = {name: value for name, value in namespace.items() if isinstance(value, Op)}
    for name, op in rows.items():
        op.name = op.__name__ = name
    return rows


#: Every elementwise op of this module by the name it is defined as (aliases such as ``absolute`` excluded).
TABLE: dict[str, Op] = _named_rows(globals())
ELEMENTWISE: dict[str, ElementwiseFunction] = dict(TABLE)
COMPARISONS = frozenset(name for name, op in TABLE.items() if op.inputs is _compared)

mod = remainder
true_divide = divide
absolute = abs
around = round
bitwise_not = bitwise_invert = invert
bitwise_left_shift = left_shift
bitwise_right_shift = right_shift
asin, acos, atan, atan2 = arcsin, arccos, arctan, arctan2
asinh, acosh, atanh = arcsinh, arccosh, arctanh
pow = power
conjugate = conj


class AsType(ElementwiseFunction):
    """Conversion to one dtype with NumPy's ``astype`` (unsafe casting) semantics."""

    params = ("a",)

    def __init__(self, dtype: np.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.name = f"astype_{dtype.name}"

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        (a,) = operands
        given = a if isinstance(a, np.dtype) else np.asarray(a).dtype
        if given == self.dtype:  # a copy (of a view, say)
            return self.dtype, (promotion.copyable(given),)
        return promotion.supported(self.dtype), (promotion.supported(given),)

    def expression(self, dtype: np.dtype, loops: tuple[np.dtype, ...] = ()) -> str:
        """NumPy's casts; from complex to real the imaginary part is dropped (``z != 0`` for bool)."""
        if loops and kind(loops[0]) == "b" and kind(dtype) in "fiu":
            return "(kdT)(int)a"  # (through int: the host compiler vectorizes that, not a bool's cast)
        if not loops or not promotion.is_complex(loops[0]) or promotion.is_complex(dtype):
            return "(kdT)a"
        return "(kdT)(a.re != 0 || a.im != 0)" if kind(dtype) == "b" else "(kdT)a.re"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_astype_op, (self.dtype,))


_astypes: dict[np.dtype, AsType] = {}


def _astype_op(dtype: Any) -> AsType:
    """The conversion to ``dtype``, one per dtype."""
    dt = promotion.copyable(dtype)
    op = _astypes.get(dt)
    if op is None:
        op = _astypes[dt] = AsType(dt)
    return op


@overload
def astype(a: HostOperand, dtype: Any, out: HostArray | None = None) -> HostArray: ...
@overload
def astype(a: RemoteOperand[RemoteArrayT], dtype: Any, out: RemoteArrayT | None = None) -> RemoteArrayT: ...
@overload
def astype(a: DeviceOperand, dtype: Any, out: DeviceArray | None = None) -> DeviceArray: ...
def astype(a: Any, dtype: Any, out: Any = None) -> Any:
    """``a`` converted to ``dtype`` (a new array, or written into ``out``), with NumPy's unsafe casting.

    Parameters
    ----------
    a : array_like
        A DeviceArray, numpy array or CUDA array.
    dtype : dtype
        The result's element type; complex to real drops the imaginary part.
    out : array, optional
        Written in place of a new result.

    Returns
    -------
    DeviceArray, numpy.ndarray or RemoteArray
        Of ``a``'s kind.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        print(kd.ops.astype(np.linspace(0, 3, 4), np.int32))
    """
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
def dot(  # type: ignore[overload-overlap]
    a: RemoteOperand[RemoteArrayT], b: RemoteOperand[RemoteArrayT], out: RemoteArrayT | None = None
) -> RemoteArrayT: ...
@overload
def dot(a: DeviceOperand, b: DeviceOperand, out: DeviceArray | None = None) -> DeviceArray: ...
def dot(a: Any, b: Any, out: Any = None) -> Any:
    """Inner product of two 1-D arrays (NumPy's dtype: int8 . int8 is int8, wrapping).

    Parameters
    ----------
    a, b : array_like
        1-D arrays of one length.
    out : array, optional
        A 0-d array written in place of a new result.

    Returns
    -------
    DeviceArray, numpy.ndarray or RemoteArray
        A 0-d array of the operands' kind.

    Raises
    ------
    ValueError
        An operand that is not 1-D, or lengths that differ.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        print(kd.ops.dot(np.arange(3.0), np.ones(3)))
    """
    for x in (a, b):
        if getattr(x, "ndim", len(getattr(x, "shape", ()))) != 1:
            raise ValueError(f"kd.ops.dot supports 1-D arrays only, got shape {getattr(x, 'shape', None)}")
    if a.shape != b.shape:
        raise ValueError(f"kd.ops.dot: shapes {a.shape} and {b.shape} not aligned")
    return _dot(a, b, out=out)


# -- docstrings: one template per kind of callable, filled from each row ----------------------------

_KINDS = {"b": "bool", "i": "signed integer", "u": "unsigned integer", "f": "floating-point", "c": "complex"}
_EXAMPLE_OPERANDS = {
    "f": "np.linspace(0.25, 0.75, 3)",
    "i": "np.arange(1, 4)",
    "u": "np.arange(1, 4, dtype=np.uint8)",
    "b": "np.array([True, False, True])",
}
_RETURNS = """DeviceArray, numpy.ndarray or RemoteArray
    Of the operands' kind: DeviceArrays (and CUDA arrays) give a DeviceArray, computed
    asynchronously on the session stream; numpy arrays give a numpy array; RemoteArrays a
    RemoteArray on their worker. Inside ``@kd.fuse`` the call is traced into the fused kernel."""
_EXAMPLE = """
Examples
--------
.. code-block:: python

    import numpy as np

    import kerneldsl as kd

    print(kd.ops.{name}({operands}))
"""
_OP_DOC = """NumPy's ``numpy.{rule}`` element by element, as one generated kernel (defined for {kinds} operands).

Parameters
----------
{params} : array_like
    DeviceArrays, numpy arrays, CUDA arrays (CuPy, PyTorch) or scalars, broadcast together as NumPy does.
out : array, optional
    Written in place of a new result: a DeviceArray for device operands, a numpy array for numpy ones.
stream : Stream, optional
    Launch on this stream of the operands' session instead of the session stream.

Returns
-------
{returns} The dtype is NumPy 2's for ``numpy.{rule}``.

Raises
------
kerneldsl.errors.OperandDtypeError
    Operand dtypes that ``numpy.{rule}`` has no loop for.
"""
_NO_COMPLEX = """kerneldsl.errors.ComplexUnsupportedError
    A complex operand: the op has no complex form here.
"""
_REDUCTIONS = {
    "sum": "The sum of the elements",
    "prod": "The product of the elements",
    "min": "The smallest element (NaN propagates, as in NumPy)",
    "max": "The largest element (NaN propagates, as in NumPy)",
    "mean": "The arithmetic mean of the elements",
    "argmax": "The index of the first largest element (``axis``: None or one int)",
    "argmin": "The index of the first smallest element (``axis``: None or one int)",
    "norm": "The Euclidean norm: the square root of the sum of squares",
}
_REDUCTION_DOC = """{what}, over ``axis``, as one deterministic kernel launch (the same bits run to run).

Parameters
----------
x : array_like
    A DeviceArray (or a strided view of one), numpy array or CUDA array.
axis : int or tuple of int, optional
    The axes reduced; None (the default) reduces all of them.
out : array, optional
    Written in place of a new result.
keepdims : bool
    Keep the reduced axes as extent 1, so the result broadcasts against ``x``.

Returns
-------
{returns} The dtype is NumPy's; float16 and bfloat16 accumulate in float32.
"""
_SCANS = {"cumsum": "The running sum", "cumprod": "The running product"}
_SCAN_DOC = """{what} of ``x`` along ``axis``, as NumPy's ``numpy.{name}``.

Parameters
----------
x : array_like
    A DeviceArray, numpy array or CUDA array.
axis : int, optional
    The axis scanned; None (the default) scans the flattened array.
out : array, optional
    Written in place of a new result.
exclusive : bool
    Give each position the fold of the values before it (the identity first) instead of up to it.

Returns
-------
{returns}
"""
_ARRAY = "np.arange(1.0, 7.0).reshape(2, 3)"


def _signature(*positional: str, **keywords: Any) -> inspect.Signature:
    P = inspect.Parameter
    return inspect.Signature(
        [P(n, P.POSITIONAL_ONLY) for n in positional] + [P(k, P.KEYWORD_ONLY, default=v) for k, v in keywords.items()]
    )


def _document(namespace: dict[str, Any]) -> None:
    """Give every op, reduction and scan its own docstring and call signature (``help(kd.ops.sin)``)."""
    for name, op in TABLE.items():
        kinds = sorted({k for key in op.exprs for k in key}, key="biufc".index)
        example = next(_EXAMPLE_OPERANDS[k] for k in "fiub" if k in kinds)
        operands = [_EXAMPLE_OPERANDS["b"] if p == "c" else example for p in op.params]
        rule = op.rule.__name__ if op.rule is not _axpy_dtype else "multiply`` then ``numpy.add"
        doc = _OP_DOC.format(
            rule=rule, kinds=", ".join(_KINDS[k] for k in kinds), params=", ".join(op.params), returns=_RETURNS
        )
        op.__doc__ = (
            doc + ("" if op.complex_form else _NO_COMPLEX) + _EXAMPLE.format(name=name, operands=", ".join(operands))
        )
        op.__signature__ = _signature(*op.params, out=None, stream=None)  # type: ignore[attr-defined]
    for name, what in _REDUCTIONS.items():
        reduction = namespace[name]
        reduction.__doc__ = _REDUCTION_DOC.format(what=what, returns=_RETURNS) + _EXAMPLE.format(
            name=name, operands=f"{_ARRAY}, axis=1"
        )
        reduction.__signature__ = _signature("x", axis=None, out=None, keepdims=False)
    for name, what in _SCANS.items():
        scan = namespace[name]
        scan.__doc__ = _SCAN_DOC.format(what=what, name=name, returns=_RETURNS) + _EXAMPLE.format(
            name=name, operands=f"{_ARRAY}, axis=1"
        )
        scan.__signature__ = _signature("x", axis=None, out=None, exclusive=False)


_document(globals())


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
