"""Declarations: the annotations a kernel signature is written with, and their validation.

``kd.In[dtype, *shape]``, ``kd.Out[...]``, ``kd.InOut[...]``, ``kd.Scalar[dtype]`` and
``kd.Const[type]`` annotate the parameters of a decorated function. ``parse_signature`` turns
the function into a frozen ``Signature`` and rejects every invalid declaration at decoration
time, naming the parameter at fault.

Two spellings mean the same declaration. The checked one, which mypy and pyright accept:
dtype variables are ``typing.TypeVar``s, shape symbols ``typing.NewType(name, int)``s, fixed
extents ``Literal[k]``, dtypes numpy scalar types (``kd.float32``) and a constant's default a
Python default (``TILE: kd.Const[int] = 16``); for checkers the annotations are generic classes
with the attributes the body function sees (``x.strides``, ``x.ctype``). The string one:
``kd.In["T", ("m", "n")]``, ``kd.Const[int, 16]``.
"""

from __future__ import annotations

import dataclasses
import inspect
import keyword
import operator
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

import numpy as np

from . import dtypes
from .errors import BindingError, DeclarationError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # ASCII; always used with fullmatch
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what C's long long holds

# C++ keywords, CUDA built-ins and names kerneldsl's generated code defines itself.
RESERVED_NAMES = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t
    char8_t class compl concept const const_cast consteval constexpr constinit continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not
    not_eq nullptr operator or or_eq private protected public register reinterpret_cast requires
    return short signed sizeof static static_assert static_cast struct switch template this
    thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor xor_eq
    threadIdx blockIdx blockDim gridDim warpSize __global__ __device__ __host__ __shared__
    __constant__ __restrict__ __syncthreads main
    index_t kd_half kd_bfloat16
    """.split()
)

# What a launch dimension may be written with; a shape symbol declared ``n = NewType("n", int)``
# is, to a type checker, a callable from int.
Dim = Union[int, str, "Expr", TypeVar, Callable[[int], int]]


def spelled(value: Any) -> Any:
    """The plain spelling of a checked-spelling object: a TypeVar or NewType becomes its name,
    ``Literal[k]`` becomes ``k``; anything else is returned as it is (and checked later)."""
    if isinstance(value, (TypeVar, typing.NewType)):
        return value.__name__
    if typing.get_origin(value) is Literal and len(typing.get_args(value)) == 1:
        return typing.get_args(value)[0]
    return value


# --- launch-dimension expressions ---------------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    """A small integer expression over shape symbols and constants, for grid/block/shared."""

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

    def symbols(self) -> set[str]:
        if self.op == "sym":
            return {self.args[0]}
        if self.op == "int":
            return set()
        return set().union(*(a.symbols() for a in self.args))

    def evaluate(self, values: dict[str, int]) -> int:
        """Value of the expression; used for defaults that code generation folds in."""
        if self.op == "int":
            return int(self.args[0])
        if self.op == "sym":
            return int(values[self.args[0]])
        a, b = (x.evaluate(values) for x in self.args)
        return _EVALUATORS[self.op](a, b)


_EVALUATORS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}


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
    """A shape symbol or constant, for arithmetic in launch dimensions: ``kd.sym(n) * 2``."""
    return as_expr(name) if not isinstance(name, str) else Expr("sym", (name,))


def cdiv(a: Dim, b: Dim) -> Expr:
    """Ceiling division, the usual grid size: ``grid=kd.cdiv("n", 256)``."""
    return Expr("cdiv", (as_expr(a), as_expr(b)))


def dmin(a: Dim, b: Dim) -> Expr:
    return Expr("min", (as_expr(a), as_expr(b)))


def dmax(a: Dim, b: Dim) -> Expr:
    return Expr("max", (as_expr(a), as_expr(b)))


# --- annotations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayAnnotation:
    direction: str
    dtype: Any
    shape: Any
    strided: bool = False  # kerneldsl's own kernels: takes strided views (strides passed separately)


@dataclass(frozen=True)
class ScalarAnnotation:
    dtype: Any


_NO_DEFAULT = object()


@dataclass(frozen=True)
class ConstAnnotation:
    type: Any
    default: Any = _NO_DEFAULT


class _ArrayDirection:
    direction = ""

    def __class_getitem__(cls, item: Any) -> ArrayAnnotation:
        """``[dtype]``, ``[dtype, shape]`` (a symbol, an extent or a tuple) or ``[dtype, *dims]``."""
        items = item if isinstance(item, tuple) else (item,)
        dtype, dims = spelled(items[0]), items[1:]
        if not dims:
            shape: Any = None
        elif len(dims) == 1 and not isinstance(dims[0], tuple):
            shape = spelled(dims[0])
        else:
            shape = tuple(spelled(d) for d in (dims[0] if len(dims) == 1 else dims))
        return ArrayAnnotation(cls.direction, dtype, shape)


if TYPE_CHECKING:
    from typing import Annotated, Protocol

    from typing_extensions import TypeVarTuple, Unpack

    _DT_co = TypeVar("_DT_co", covariant=True)  # protocols: a dtype variable constrains nothing
    _C = TypeVar("_C")
    _Shape = TypeVarTuple("_Shape")

    # For checkers, a parameter's annotation is both what a call passes and what the body sees:
    # a protocol an argument satisfies (arrays: anything with a ``shape``, such as numpy arrays,
    # DeviceArrays, RemoteArrays and CUDA Array Interface objects; scalars: anything with
    # ``__float__``, numbers and numpy scalars) on a plain base class that carries the proxy's
    # attributes. Protocol members come from protocol bases only, so arguments need not have the
    # proxy's attributes, and the body still sees them (mypy and pyright agree on both).

    class _ArrayProxyAttributes:
        """What the body function sees of an array parameter (``codegen.ArrayProxy``)."""

        name: str
        direction: str
        dtype: np.dtype[Any]
        ctype: str
        ndim: int
        strides: tuple[str, ...]
        aligned16: bool

    class _ArrayArgument(_ArrayProxyAttributes, Protocol[_DT_co, Unpack[_Shape]]):  # type: ignore[misc]
        @property
        def shape(self) -> tuple[Any, ...]: ...  # the proxy's: the symbols' C names

    class In(_ArrayArgument[_DT_co, Unpack[_Shape]], Protocol): ...

    class Out(_ArrayArgument[_DT_co, Unpack[_Shape]], Protocol): ...

    class InOut(_ArrayArgument[_DT_co, Unpack[_Shape]], Protocol): ...

    class _ScalarProxyAttributes:
        """What the body function sees of a scalar parameter (``codegen.ScalarProxy``)."""

        name: str
        dtype: np.dtype[Any]
        ctype: str

    class Scalar(_ScalarProxyAttributes, Protocol[_DT_co]):  # type: ignore[misc]
        def __float__(self) -> float: ...

    Const = Annotated[_C, "kd.Const"]  # the body function gets the constant's value itself
    _ANNOTATION_CLASSES: tuple[type, ...]
else:

    class In(_ArrayDirection):
        """An array the kernel reads: ``kd.In[T, n]`` (``kd.In["T", "n"]``)."""

        direction = "in"

    class Out(_ArrayDirection):
        """An array the kernel writes: ``kd.Out[T, m, n]`` (``kd.Out["T", ("m", "n")]``)."""

        direction = "out"

    class InOut(_ArrayDirection):
        """An array the kernel reads and writes."""

        direction = "inout"

    class Scalar:
        """A scalar passed by value: ``kd.Scalar[T]`` or ``kd.Scalar[kd.float32]``."""

        def __class_getitem__(cls, item: Any) -> ScalarAnnotation:
            return ScalarAnnotation(spelled(item))

    class Const:
        """A compile-time constant: ``kd.Const[int]`` (a default as the parameter's default), or
        ``kd.Const[int, 256]``."""

        def __class_getitem__(cls, item: Any) -> ConstAnnotation:
            if isinstance(item, tuple):
                if len(item) != 2:
                    raise TypeError("kd.Const takes [type] or [type, default]")
                return ConstAnnotation(item[0], item[1])
            return ConstAnnotation(item)

    _ANNOTATION_CLASSES = (_ArrayDirection, Scalar, Const)


CONST_TYPES: dict[type, str] = {bool: "bool", int: "long long", float: "double"}


# --- the parsed signature --------------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayParam:
    name: str
    direction: str
    dtype: str  # a type name from dtypes.ELEMENT_TYPES, or a dtype variable
    shape: tuple[int | str, ...]
    strided: bool = False  # accepts strided views; otherwise a strided view is a StridedArrayError

    @property
    def writes(self) -> bool:
        return self.direction != "in"


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: str
    default: Any = _NO_DEFAULT  # taken when a call leaves the scalar out


@dataclass(frozen=True)
class ConstParam:
    name: str
    type: type
    default: Any = _NO_DEFAULT

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


Param = ArrayParam | ScalarParam | ConstParam


@dataclass(frozen=True, eq=False)
class Signature:
    """Everything a declaration says, validated; shared by every specialization of a kernel."""

    name: str
    params: tuple[Param, ...]
    grid: tuple[Expr, ...]
    block: tuple[Expr, ...]
    shared: Expr
    specialize: tuple[str, ...] = ()
    allow_alias: bool = False
    symbols: dict[str, tuple[str, int]] = field(default_factory=dict)  # symbol -> first (param, axis)

    @cached_property
    def arrays(self) -> tuple[ArrayParam, ...]:
        return tuple(p for p in self.params if isinstance(p, ArrayParam))

    @cached_property
    def scalars(self) -> tuple[ScalarParam, ...]:
        return tuple(p for p in self.params if isinstance(p, ScalarParam))

    @cached_property
    def consts(self) -> tuple[ConstParam, ...]:
        return tuple(p for p in self.params if isinstance(p, ConstParam))

    @cached_property
    def runtime_params(self) -> tuple[Param, ...]:
        """Parameters passed positionally at call time (arrays and scalars, in order)."""
        return tuple(p for p in self.params if not isinstance(p, ConstParam))

    def place_arguments(
        self, args: tuple[Any, ...], keywords: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A call's arrays and scalars in parameter order (from positions, then keywords, then
        scalar defaults) and the keywords left over, which name constants; BindingError naming
        the parameter for one given twice or missing."""
        runtime = self.runtime_params
        if len(args) > len(runtime):
            raise BindingError(self.name, None, f"takes {len(runtime)} argument(s), got {len(args)}")
        placed = list(args)
        rest = dict(keywords)
        for p in runtime[len(args) :]:
            if p.name in rest:
                placed.append(rest.pop(p.name))
            elif isinstance(p, ScalarParam) and p.default is not _NO_DEFAULT:
                placed.append(p.default)
            else:
                raise BindingError(self.name, p.name, "is missing (pass it by position or by name)")
        for p in runtime[: len(args)]:
            if p.name in rest:
                raise BindingError(self.name, p.name, "is given by position and by name")
        return tuple(placed), rest

    @cached_property
    def dtype_vars(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for p in self.params:
            if isinstance(p, (ArrayParam, ScalarParam)) and not dtypes.is_dtype_name(p.dtype):
                seen.setdefault(p.dtype)
        return tuple(seen)


def parse_signature(
    func: Callable[..., Any],
    grid: Dim | tuple[Dim, ...],
    block: Dim | tuple[Dim, ...],
    shared: Dim = 0,
    specialize: tuple[str, ...] = (),
    allow_alias: bool = False,
    strided: tuple[str, ...] = (),
) -> Signature:
    name = _kernel_name(func)
    params = _mark_strided(name, tuple(_parse_param(name, p) for p in _parameters(func)), strided)
    symbols = _collect_symbols(name, params)
    _check_names(name, params, symbols)
    consts = {p.name: p for p in params if isinstance(p, ConstParam)}
    launch = {
        "grid": _launch_dims(name, "grid", grid),
        "block": _launch_dims(name, "block", block),
        "shared": (_launch_dim(name, "shared", shared),),
    }
    for what, dims in launch.items():
        for dim in dims:
            undefined = dim.symbols() - set(symbols) - set(consts)
            if undefined:
                raise DeclarationError(
                    name, None, f"{what} uses {sorted(undefined)!r}, which no shape or constant defines"
                )
            _check_launch_consts(name, what, dim, consts)
    specialized = tuple(_specialized_symbol(name, s, symbols) for s in specialize)
    return Signature(
        name=name,
        params=params,
        grid=launch["grid"],
        block=launch["block"],
        shared=launch["shared"][0],
        specialize=specialized,
        allow_alias=allow_alias,
        symbols=symbols,
    )


def _mark_strided(kernel: str, params: tuple[Param, ...], strided: tuple[str, ...]) -> tuple[Param, ...]:
    """The array parameters named in ``strided=`` take views of any strides: the body indexes
    them through ``x.strides`` (runtime element strides) instead of the C-contiguous constants."""
    arrays = {p.name for p in params if isinstance(p, ArrayParam)}
    for n in strided:
        if n not in arrays:
            raise DeclarationError(kernel, str(n), "strided= names array parameters only")
    return tuple(
        dataclasses.replace(p, strided=True) if isinstance(p, ArrayParam) and p.name in strided else p for p in params
    )


def _kernel_name(func: Callable[..., Any]) -> str:
    """The function's name, which names the CUDA entry point, the adapter and ``#line`` directives."""
    name = getattr(func, "__name__", None)
    try:
        return plain_identifier(name, "the function's __name__")
    except TypeError as exc:
        raise DeclarationError(str.__str__(name) if isinstance(name, str) else repr(name), None, str(exc)) from None


def _check_launch_consts(kernel: str, what: str, dim: Expr, consts: dict[str, ConstParam]) -> None:
    """Launch dimensions are integers: a float (or bool) constant there would reach the launch as is."""
    for c in sorted(dim.symbols() & set(consts)):
        if consts[c].type is not int:
            raise DeclarationError(
                kernel,
                c,
                f"{what} uses constant {c!r} of type {consts[c].type.__name__}; launch dimensions "
                "take int constants only",
            )


def _specialized_symbol(kernel: str, name: Any, symbols: dict[str, tuple[str, int]]) -> str:
    if not isinstance(name, str) or name not in symbols:
        raise DeclarationError(kernel, None, f"specialize names {name!r}, which is not a shape symbol")
    return str.__str__(name)


def _parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    """The function's parameters with annotations evaluated (``from __future__ import annotations``)."""
    try:
        return list(inspect.signature(func, eval_str=True).parameters.values())
    except Exception:  # a name only the enclosing function knows: report it per parameter below
        return list(inspect.signature(func).parameters.values())


def _launch_dims(kernel: str, what: str, value: Dim | tuple[Dim, ...]) -> tuple[Expr, ...]:
    dims = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(dims) <= 3:
        raise DeclarationError(kernel, None, f"{what} needs 1, 2 or 3 dimensions, got {len(dims)}")
    return tuple(_launch_dim(kernel, what, d) for d in dims)


def _launch_dim(kernel: str, what: str, value: Dim) -> Expr:
    try:
        return as_expr(value)
    except TypeError as exc:
        raise DeclarationError(kernel, None, f"{what}: {exc}") from None


def _parse_param(kernel: str, p: inspect.Parameter) -> Param:
    if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY, p.KEYWORD_ONLY):
        raise DeclarationError(kernel, p.name, "*args and **kwargs cannot be kernel parameters")
    name = _identifier(kernel, p.name, p.name, "parameter name")
    ann = p.annotation
    if isinstance(ann, ArrayAnnotation):
        if p.default is not inspect.Parameter.empty:
            raise DeclarationError(kernel, p.name, "an array parameter cannot have a default")
        return ArrayParam(
            name,
            ann.direction,
            _dtype_spelling(kernel, name, ann.dtype),
            _shape(kernel, name, ann.shape),
            ann.strided,
        )
    if isinstance(ann, ScalarAnnotation):
        return ScalarParam(name, _dtype_spelling(kernel, name, ann.dtype), _scalar_default(kernel, name, p.default))
    if isinstance(ann, ConstAnnotation):
        return _const_param(kernel, name, p.default, ann)
    if isinstance(ann, type) and issubclass(ann, _ANNOTATION_CLASSES):
        raise DeclarationError(kernel, p.name, f"{ann.__name__} needs its type: {ann.__name__}[...]")
    if ann is inspect.Parameter.empty:
        raise DeclarationError(kernel, p.name, "has no annotation; use kd.In/Out/InOut/Scalar/Const")
    if isinstance(ann, str):
        raise DeclarationError(
            kernel,
            p.name,
            f"annotation {ann!r} is a string that cannot be evaluated in the function's module "
            "(with 'from __future__ import annotations', declare kernels with module-level names only)",
        )
    raise DeclarationError(kernel, p.name, f"annotation {ann!r} is not kd.In/Out/InOut/Scalar/Const")


def _scalar_default(kernel: str, param: str, default: Any) -> Any:
    """A scalar's default, used when a call leaves it out: a plain bool, int or float."""
    if default is inspect.Parameter.empty:
        return _NO_DEFAULT
    if not isinstance(default, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise DeclarationError(kernel, param, f"a scalar's default must be a number, not {default!r}")
    return default.item() if isinstance(default, np.generic) else default


def _dtype_spelling(kernel: str, param: str, spec: Any) -> str:
    """A supported type name, or a dtype variable (an identifier that names no type)."""
    if isinstance(spec, ArrayAnnotation):
        raise DeclarationError(kernel, param, "a direction (In/Out/InOut) cannot be used as a dtype")
    if isinstance(spec, str) and not dtypes.is_dtype_name(spec):
        var = _identifier(kernel, param, spec, "dtype variable")
        if _looks_like_type_name(var):  # "float128", "complex64", "half": a type, not a variable
            raise DeclarationError(kernel, param, dtypes._unknown(var))
        return var
    try:
        return dtypes.element_type(spec).name
    except KeyError as exc:
        raise DeclarationError(kernel, param, str(exc.args[0])) from None


_TYPE_LIKE = re.compile(r"(u?int|float|bfloat|complex)[0-9]+_?")


def _looks_like_type_name(name: str) -> bool:
    """A numpy type name (``half``, ``complex64``) or a sized type spelling: never a dtype variable."""
    return bool(_TYPE_LIKE.fullmatch(name)) or (len(name) > 1 and name in np.sctypeDict)


def _shape(kernel: str, param: str, shape: Any) -> tuple[int | str, ...]:
    if shape is None:
        raise DeclarationError(kernel, param, "array needs a shape: kd.In[dtype, 'n'] or kd.In[dtype, ('m', 'n')]")
    dims = shape if isinstance(shape, tuple) else (shape,)
    return tuple(
        _identifier(kernel, param, d, "shape symbol") if isinstance(d, str) else _fixed_extent(kernel, param, d)
        for d in dims
    )


def _fixed_extent(kernel: str, param: str, extent: Any) -> int:
    if isinstance(extent, bool) or not isinstance(extent, int):
        raise DeclarationError(kernel, param, f"shape entries are symbols or ints, not {extent!r}")
    value = operator.index(extent)
    if value < 0:
        raise DeclarationError(kernel, param, f"fixed extent {value} is negative")
    if value > INT64_MAX:
        raise DeclarationError(kernel, param, f"fixed extent {value} is beyond 2**63 - 1, the int64 range")
    return value


def _const_param(kernel: str, name: str, default: Any, ann: ConstAnnotation) -> ConstParam:
    if isinstance(ann.type, (ScalarAnnotation, ArrayAnnotation)):
        raise DeclarationError(kernel, name, "a constant takes a Python type (int, float, bool), not a direction")
    if ann.type not in CONST_TYPES:
        raise DeclarationError(kernel, name, f"constant type must be int, float or bool, not {ann.type!r}")
    if default is inspect.Parameter.empty:
        default = ann.default
    if default is _NO_DEFAULT:
        return ConstParam(name, ann.type)
    try:  # the rules binding applies to a passed value (bool is no int, an int is a float)
        return ConstParam(name, ann.type, const_value(ann.type, default))
    except TypeError:
        raise DeclarationError(kernel, name, f"default {default!r} is not of type {ann.type.__name__}") from None
    except ValueError as exc:
        raise DeclarationError(kernel, name, f"default {exc}") from None


def const_value(type_: type, value: Any) -> bool | int | float:
    """``value`` as the exact bool, int or float a constant of ``type_`` holds, so that the C literal
    and the adapter agree: TypeError for a value of another kind, ValueError for one C cannot hold."""
    if isinstance(value, np.generic):
        value = value.item()
    if type_ is bool and isinstance(value, bool):
        return value
    if type_ is int and isinstance(value, int) and not isinstance(value, bool):
        return _int64(value)
    if type_ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{int(value)} is too large for a double") from None
    raise TypeError(f"must be {type_.__name__}, got {value!r}")


def _int64(value: int) -> int:
    plain = operator.index(value)
    if not INT64_MIN <= plain <= INT64_MAX:
        raise ValueError(f"{plain} is outside the range of a long long, [-2**63, 2**63 - 1]")
    return plain


def _collect_symbols(kernel: str, params: tuple[Param, ...]) -> dict[str, tuple[str, int]]:
    symbols: dict[str, tuple[str, int]] = {}
    for p in params:
        if isinstance(p, ArrayParam):
            for axis, d in enumerate(p.shape):
                if isinstance(d, str):
                    symbols.setdefault(d, (p.name, axis))
    return symbols


def _check_names(kernel: str, params: tuple[Param, ...], symbols: dict[str, tuple[str, int]]) -> None:
    seen: set[str] = set()
    dtype_vars = {
        p.dtype for p in params if isinstance(p, (ArrayParam, ScalarParam)) and not dtypes.is_dtype_name(p.dtype)
    }
    for p in params:
        _check_identifier(kernel, p.name, p.name)
        if p.name in seen:
            raise DeclarationError(kernel, p.name, "duplicate parameter name")
        seen.add(p.name)
        if p.name in symbols:
            raise DeclarationError(kernel, p.name, "name is also used as a shape symbol")
        if p.name in dtype_vars:
            raise DeclarationError(kernel, p.name, "name is also used as a dtype variable")
    for s, (owner, _) in symbols.items():
        _check_identifier(kernel, owner, s)
        if s in dtype_vars:
            raise DeclarationError(kernel, owner, f"shape symbol {s!r} is also a dtype variable")
    for p in params:
        if isinstance(p, (ArrayParam, ScalarParam)) and p.dtype in dtype_vars:
            _check_identifier(kernel, p.name, p.dtype)
    generated = {
        f"{a.name}_stride{i}": a.name for a in params if isinstance(a, ArrayParam) for i in range(len(a.shape))
    }
    for name in [p.name for p in params] + list(symbols) + list(dtype_vars):
        if name in generated:
            raise DeclarationError(
                kernel, name, f"name is the generated stride of array {generated[name]!r}: rename it"
            )


def _identifier(kernel: str, param: str, value: Any, what: str) -> str:
    try:
        return plain_identifier(value, what)
    except TypeError as exc:
        raise DeclarationError(kernel, param, str(exc)) from None


def _check_identifier(kernel: str, param: str, name: str) -> None:
    if name in RESERVED_NAMES or keyword.iskeyword(name) or name.startswith(("kd_", "__")):
        raise DeclarationError(kernel, param, f"name {name!r} clashes with a CUDA/C++ keyword or a reserved name")
