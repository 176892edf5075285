"""``parse_signature``: a decorated function into a frozen ``Signature`` of parameters and
launch dimensions, every invalid declaration rejected at decoration time, naming the parameter
at fault."""

from __future__ import annotations

import dataclasses
import inspect
import keyword
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import BindingError, DeclarationError
from ...runtime.limits import MAX_BLOCK, MAX_BLOCK_THREADS, MAX_CLUSTER_BLOCKS, MAX_GRID
from .dims import Dim, Expr, as_expr, plain_identifier
from .spelling import ANNOTATION_CLASSES, NO_DEFAULT, ArrayAnnotation, ConstAnnotation, ScalarAnnotation

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what C's long long holds
# The longest name a declaration takes (kernel, parameter, constant, shape symbol, dtype variable):
# every one reaches the generated source, and NVRTC corrupts its heap and aborts the process on a
# kernel name near 100,000 characters. 1024 is what C++ asks compilers to tell apart (Annex B).
MAX_IDENTIFIER_LENGTH = 1024

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

CONST_TYPES: dict[type, str] = {bool: "bool", int: "long long", float: "double"}


Extent = int | str | Expr  # fixed, a shape symbol (which binds it), or computed from symbols and constants


@dataclass(frozen=True)
class ArrayParam:
    name: str
    direction: str
    dtype: str  # a type name from dtypes.ELEMENT_TYPES, or a dtype variable
    shape: tuple[Extent, ...]
    strided: bool = False  # accepts strided views; otherwise a strided view is a StridedArrayError

    @property
    def writes(self) -> bool:
        return self.direction != "in"


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: str
    default: Any = NO_DEFAULT  # taken when a call leaves the scalar out


@dataclass(frozen=True)
class ConstParam:
    name: str
    type: type
    default: Any = NO_DEFAULT

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


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
    cooperative: bool = False  # launched co-resident (cuLaunchKernelEx, cooperative attribute)
    cluster: tuple[Expr, ...] = ()  # thread-block cluster dimensions (sm_90+); () for none

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
            elif isinstance(p, ScalarParam) and p.default is not NO_DEFAULT:
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
    *,
    cooperative: bool = False,
    cluster: Dim | tuple[Dim, ...] | None = None,
) -> Signature:
    name = _kernel_name(func)
    params = _mark_strided(name, tuple(_parse_param(name, p) for p in _parameters(func)), strided)
    symbols = _collect_symbols(name, params)
    _check_names(name, params, symbols)
    consts = {p.name: p for p in params if isinstance(p, ConstParam)}
    _check_computed_extents(name, params, symbols, consts)
    launch = {
        "grid": _launch_dims(name, "grid", grid),
        "block": _launch_dims(name, "block", block),
        "shared": (_launch_dim(name, "shared", shared),),
        "cluster": () if cluster is None else _cluster_dims(name, cluster),
    }
    if type(cooperative) is not bool:
        raise DeclarationError(name, None, f"cooperative must be True or False, got {cooperative!r}")
    for what, dims in launch.items():  # cluster= reads symbols and constants as grid= does
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
        cooperative=cooperative,
        cluster=launch["cluster"],
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
        return _short_enough(plain_identifier(name, "the function's __name__"), "the function's __name__")
    except TypeError as exc:
        raise DeclarationError(_shown(name) if isinstance(name, str) else repr(name), None, str(exc)) from None


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


def check_constant_launch_limits(sig: Signature) -> None:
    """What no device launches, refused where a declaration says it in integers: a grid or block
    axis past its limit, a block of no threads, or block axes whose product alone is past the
    threads a block holds (an axis computed at the call is at least 1 in any launch that runs,
    so integer axes over the limit doom every launch). ``@kd.kernel`` checks its declaration;
    an autotune configuration past a limit is skipped when it is measured, as one that fails to
    launch is."""
    kernel, grid, block = sig.name, sig.grid, sig.block
    for what, dims, limits in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        for axis, d, limit in zip("xyz", dims, limits):
            if d.op == "int" and not 0 <= d.args[0] <= limit:
                raise DeclarationError(kernel, None, f"{what}.{axis} = {d.args[0]} is outside 0..{limit}")
    fixed = [d.args[0] for d in block if d.op == "int"]
    threads = 1
    for extent in fixed:
        threads *= extent
    if not 0 < threads <= MAX_BLOCK_THREADS:
        shown = ", ".join(repr(d) for d in block)
        raise DeclarationError(
            kernel,
            None,
            f"block ({shown}) has {'at least ' if len(fixed) < len(block) else ''}{threads} threads; "
            f"a block holds 1..{MAX_BLOCK_THREADS} (and at most {MAX_BLOCK} along x, y, z)",
        )


def _cluster_dims(kernel: str, value: Dim | tuple[Dim, ...]) -> tuple[Expr, ...]:
    """A cluster's dimensions, padded to three; one given as integers must hold 1..8 blocks, the
    portable cluster size (a computed one is checked at the launch)."""
    dims = _launch_dims(kernel, "cluster", value)
    dims += (Expr("int", (1,)),) * (3 - len(dims))
    if all(d.op == "int" for d in dims):
        sizes = [d.args[0] for d in dims]
        if min(sizes) < 1 or sizes[0] * sizes[1] * sizes[2] > MAX_CLUSTER_BLOCKS:
            raise DeclarationError(
                kernel, None, f"cluster {tuple(sizes)} must hold 1..{MAX_CLUSTER_BLOCKS} blocks (the portable size)"
            )
    return dims


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
    if isinstance(ann, type) and issubclass(ann, ANNOTATION_CLASSES):
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
        return NO_DEFAULT
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


def _shape(kernel: str, param: str, shape: Any) -> tuple[Extent, ...]:
    if shape is None:
        raise DeclarationError(kernel, param, "array needs a shape: kd.In[dtype, 'n'] or kd.In[dtype, ('m', 'n')]")
    dims = shape if isinstance(shape, tuple) else (shape,)
    return tuple(_extent(kernel, param, d) for d in dims)


def _extent(kernel: str, param: str, extent: Any) -> Extent:
    """A shape entry: a symbol, a fixed extent, or an expression (``kd.cdiv(n, 256)``), which
    ``kd.sym(n)`` and constant-only expressions reduce to a symbol or a fixed extent."""
    if isinstance(extent, Expr):
        if extent.op == "sym":
            extent = extent.args[0]
        elif not extent.symbols():
            try:
                extent = extent.evaluate({})
            except ZeroDivisionError:
                raise DeclarationError(kernel, param, f"extent {extent!r} divides by zero") from None
        else:
            return extent
    if isinstance(extent, str):
        return _identifier(kernel, param, extent, "shape symbol")
    return _fixed_extent(kernel, param, extent)


def _fixed_extent(kernel: str, param: str, extent: Any) -> int:
    if isinstance(extent, bool) or not isinstance(extent, int):
        raise DeclarationError(
            kernel,
            param,
            f"shape entries are symbols or ints, or expressions of symbols such as kd.cdiv(n, 256), not {extent!r}",
        )
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
    if default is NO_DEFAULT:
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


def _check_computed_extents(
    kernel: str, params: tuple[Param, ...], symbols: dict[str, tuple[str, int]], consts: dict[str, ConstParam]
) -> None:
    """An extent computed by an expression is checked against the call, never read from it: each
    of its names must be a symbol some array's plain extent binds, or an int constant."""
    for p in params:
        if not isinstance(p, ArrayParam):
            continue
        for axis, d in enumerate(p.shape):
            if not isinstance(d, Expr):
                continue
            unbound = sorted(d.symbols() - set(symbols) - set(consts))
            if unbound:
                raise DeclarationError(
                    kernel,
                    p.name,
                    f"axis {axis} is {d!r}, but no array's shape has {unbound[0]!r} as a plain extent to bind it "
                    "(a computed extent is checked against the symbols, never solved for them)",
                )
            _check_launch_consts(kernel, f"the extent of {p.name!r} axis {axis}", d, consts)


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
        return _short_enough(plain_identifier(value, what), what)
    except TypeError as exc:
        raise DeclarationError(kernel, _shown(param), str(exc)) from None


def _short_enough(name: str, what: str) -> str:
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise TypeError(
            f"{what} {_shown(name)!r} is {len(name)} characters long; names are at most {MAX_IDENTIFIER_LENGTH}"
        )
    return name


def _shown(name: str) -> str:
    """``name`` as an error message shows it: a name past the length limit by its start."""
    return name if len(name) <= MAX_IDENTIFIER_LENGTH else f"{name[:32]}..."


def _check_identifier(kernel: str, param: str, name: str) -> None:
    if name in RESERVED_NAMES or keyword.iskeyword(name) or name.startswith(("kd_", "__")):
        raise DeclarationError(kernel, param, f"name {name!r} clashes with a CUDA/C++ keyword or a reserved name")
