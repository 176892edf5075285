"""Binding: call arguments (or explicit bindings) -> the ``Specialization`` they select.

A specialization fixes everything code generation depends on: concrete element types,
constant values, index width, 16-byte alignment of each array, specialized shape extents and
the target arch. Arguments are described by ``ArgInfo`` so that numpy arrays, device arrays and
foreign arrays all bind the same way.
"""

from __future__ import annotations

import operator
import struct
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes
from ..dtypes import INT32_MAX, ElementType
from ..errors import BindingError, ScalarConversionError, ShapeMismatchError, StridedArrayError
from .signature import INT64_MAX, ArrayParam, ConstParam, Expr, ScalarParam, Signature, const_value


@dataclass(frozen=True)
class ArgInfo:
    """What binding needs to know of one array argument."""

    dtype: np.dtype
    shape: tuple[int, ...]
    aligned16: bool


@dataclass(frozen=True)
class Specialization:
    """One concrete instance of a signature; hashable, and the input of code generation."""

    signature: Signature
    param_types: tuple[tuple[str, str], ...]  # (param name, element type name) for arrays and scalars
    type_vars: tuple[tuple[str, str], ...]  # (dtype variable, element type name)
    consts: tuple[tuple[str, Any], ...] = field(compare=False)  # compared through const_key
    index_bits: int
    aligned: tuple[tuple[str, bool], ...]  # per array parameter
    fixed_symbols: tuple[tuple[str, int], ...]  # shape symbols specialized to their extent
    arch: str
    const_key: tuple[tuple[str, Any], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "const_key", const_key(self.consts))

    def __repr__(self) -> str:
        return f"<Specialization {self.describe()}>"

    def element_type(self, param: str) -> ElementType:
        return dtypes.ELEMENT_TYPES[dict(self.param_types)[param]]

    def describe(self) -> str:
        types = ", ".join(f"{v}={t}" for v, t in self.type_vars) or "no dtype variables"
        consts = ", ".join(f"{n}={v!r}" for n, v in self.consts)
        return f"{self.signature.name}[{types}{', ' + consts if consts else ''}; {self.index_bits}-bit; {self.arch}]"


def const_key(consts: Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    """Constants as compared for reuse. By ``==``, -0.0 would reuse 0.0's build and a NaN no
    build at all, so floats (and numpy scalars) compare by their bits."""
    return tuple((name, _value_key(value)) for name, value in consts)


def _value_key(value: Any) -> Any:
    if isinstance(value, float):
        return (float, struct.pack("<d", value))
    if isinstance(value, np.generic):
        return (type(value), value.tobytes())
    return (type(value), value)  # True == 1, but a bool constant is another specialization than an int


def describe_array(value: Any) -> ArgInfo | None:
    """ArgInfo of anything array-like kerneldsl accepts, or None for a non-array.

    Host (numpy) arrays are copied into fresh, aligned device memory before launch, so only a
    device pointer's own alignment matters.
    """
    if isinstance(value, np.ndarray):
        return ArgInfo(value.dtype, value.shape, True)
    ptr = getattr(value, "ptr", None)
    if ptr is not None and hasattr(value, "shape") and hasattr(value, "dtype"):
        return ArgInfo(np.dtype(value.dtype), tuple(operator.index(d) for d in value.shape), ptr % 16 == 0)
    return None


def bind(
    sig: Signature,
    args: tuple[Any, ...],
    consts: Mapping[str, Any],
    arch: str,
) -> Specialization:
    """Bind positional runtime arguments and constants; raise a BindingError naming the parameter."""
    runtime = sig.runtime_params
    if len(args) != len(runtime):
        expected = ", ".join(p.name for p in runtime)
        raise BindingError(sig.name, None, f"takes {len(runtime)} argument(s) ({expected}), got {len(args)}")
    type_vars: dict[str, ElementType] = {}
    param_types: dict[str, ElementType] = {}
    aligned: dict[str, bool] = {}
    extents: dict[str, int] = {}
    for p, value in zip(runtime, args):
        if isinstance(p, ArrayParam):
            info = _array_info(sig, p, value)
            element = _element_type_of(sig, p.name, info.dtype)
            param_types[p.name] = _unify_dtype(sig, p.name, p.dtype, element, type_vars)
            aligned[p.name] = info.aligned16
            _unify_shape(sig, p, info.shape, extents)
    for p, value in zip(runtime, args):
        if isinstance(p, ScalarParam):
            param_types[p.name] = _bind_scalar(sig, p, value, type_vars)
    bound_consts = bind_consts(sig, consts)
    check_computed_extents(sig, args, extents, bound_consts)
    return Specialization(
        signature=sig,
        param_types=tuple((n, et.name) for n, et in param_types.items()),
        type_vars=tuple((v, type_vars[v].name) for v in sig.dtype_vars),
        consts=bound_consts,
        index_bits=index_bits(args),
        aligned=tuple(aligned.items()),
        fixed_symbols=tuple((s, _fixed_extent(sig, s, extents[s])) for s in sig.specialize),
        arch=arch,
    )


def bind_declared(
    sig: Signature,
    type_bindings: Mapping[str, Any],
    consts: Mapping[str, Any],
    arch: str,
    index_width: int = 32,
) -> Specialization:
    """A specialization from explicit dtype-variable bindings, for ahead-of-time compilation."""
    missing = [v for v in sig.dtype_vars if v not in type_bindings]
    if missing:
        raise BindingError(
            sig.name, None, f"ahead-of-time compile needs dtype variable(s) {missing} (e.g. T=np.float32)"
        )
    if sig.specialize:
        raise BindingError(sig.name, None, f"specialized symbols {list(sig.specialize)} need real arguments to compile")
    if index_width not in (32, 64):
        raise BindingError(sig.name, None, f"index_width must be 32 or 64, not {index_width!r}")
    type_vars = {}
    for var in sig.dtype_vars:
        try:
            type_vars[var] = dtypes.element_type(type_bindings[var])
        except KeyError as exc:
            raise BindingError(sig.name, None, f"dtype variable {var}: {exc.args[0]}") from None
    param_types = {
        p.name: type_vars[p.dtype] if p.dtype in type_vars else dtypes.ELEMENT_TYPES[p.dtype]
        for p in sig.runtime_params
        if isinstance(p, (ArrayParam, ScalarParam))
    }
    return Specialization(
        signature=sig,
        param_types=tuple((n, et.name) for n, et in param_types.items()),
        type_vars=tuple((v, type_vars[v].name) for v in sig.dtype_vars),
        consts=bind_consts(sig, consts),
        index_bits=index_width,
        aligned=tuple((a.name, True) for a in sig.arrays),
        fixed_symbols=(),
        arch=arch,
    )


def _element_type_of(sig: Signature, param: str, dtype: np.dtype) -> ElementType:
    try:
        return dtypes.element_type(dtype)
    except KeyError as exc:
        raise BindingError(sig.name, param, str(exc.args[0])) from None


def bind_consts(sig: Signature, given: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    declared = {c.name: c for c in sig.consts}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise BindingError(sig.name, unknown[0], f"is not a constant of this kernel (constants: {sorted(declared)})")
    return tuple((c.name, _const_value(sig, c, given)) for c in sig.consts)


def _const_value(sig: Signature, c: ConstParam, given: Mapping[str, Any]) -> Any:
    if c.name in given:
        value = given[c.name]
    elif c.has_default:
        value = c.default
    else:
        raise BindingError(sig.name, c.name, f"constant has no value; pass {c.name}=... (a {c.type.__name__})")
    try:
        return const_value(c.type, value)
    except (TypeError, ValueError) as exc:
        raise BindingError(sig.name, c.name, f"constant {exc}") from None


def _fixed_extent(sig: Signature, symbol: str, extent: int) -> int:
    """A specialized extent becomes a C constant: it must fit int64 like any other."""
    if extent > INT64_MAX:
        param, axis = sig.symbols[symbol]
        raise BindingError(sig.name, param, f"axis {axis} ({symbol}) is {extent}, beyond 2**63 - 1, the int64 range")
    return extent


def index_bits(args: tuple[Any, ...]) -> int:
    """32 when every array's element count (and so every extent) fits in int32, else 64."""
    for value in args:
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple) and (getattr(value, "size", 0) > INT32_MAX or any(d > INT32_MAX for d in shape)):
            return 64
    return 32


def _array_info(sig: Signature, p: ArrayParam, value: Any) -> ArgInfo:
    info = describe_array(value)
    if info is None:
        raise BindingError(sig.name, p.name, f"expected an array ({p.direction}), got {type(value).__name__}")
    if len(info.shape) != len(p.shape):
        raise ShapeMismatchError(
            sig.name, p.name, f"expected {len(p.shape)} dimension(s) {p.shape}, got shape {info.shape}"
        )
    if not p.strided and not getattr(value, "is_contiguous", True):
        raise StridedArrayError(
            sig.name,
            p.name,
            f"is a strided view (shape {info.shape}, strides {value.strides}) and the kernel indexes it as "
            "C-contiguous: pass a contiguous copy (x.copy())",
        )
    return info


def _unify_dtype(
    sig: Signature, param: str, declared: str, actual: ElementType, type_vars: dict[str, ElementType]
) -> ElementType:
    if dtypes.is_dtype_name(declared):
        if actual.name != declared:
            raise BindingError(sig.name, param, f"expected dtype {declared}, got {actual.name}")
        return actual
    bound = type_vars.setdefault(declared, actual)
    if bound is not actual:
        raise BindingError(
            sig.name, param, f"dtype variable {declared} is {bound.name} from an earlier argument, got {actual.name}"
        )
    return actual


def _unify_shape(sig: Signature, p: ArrayParam, shape: tuple[int, ...], extents: dict[str, int]) -> None:
    for axis, (declared, actual) in enumerate(zip(p.shape, shape)):
        if isinstance(declared, Expr):  # checked once every symbol is bound: check_computed_extents
            continue
        if isinstance(declared, int):
            if actual != declared:
                raise ShapeMismatchError(sig.name, p.name, f"axis {axis} must be {declared}, got {actual}")
            continue
        bound = extents.setdefault(declared, actual)
        if bound != actual:
            first, first_axis = sig.symbols[declared]
            raise ShapeMismatchError(
                sig.name,
                p.name,
                f"axis {axis} is {actual} but symbol {declared!r} is {bound} from {first!r} axis {first_axis}",
            )


def computed_extent(sig: Signature, param: str, axis: int, extent: Expr, values: Mapping[str, int]) -> int:
    """``extent`` (an array's computed extent) from the bound symbols and int constants in
    ``values``; BindingError when it divides by zero."""
    try:
        return extent.evaluate(dict(values))
    except ZeroDivisionError:
        raise BindingError(sig.name, param, f"axis {axis} is {extent!r}, which divides by zero here") from None


def check_computed_extents(
    sig: Signature, args: tuple[Any, ...], extents: Mapping[str, int], consts: tuple[tuple[str, Any], ...]
) -> None:
    """Every computed extent (``kd.Out[T, kd.cdiv(n, 256)]``) equals the passed array's extent:
    a ShapeMismatchError naming the parameter, the expression, its value and the extent passed."""
    values = {**{n: v for n, v in consts if type(v) is int}, **extents}
    for p, value in zip(sig.runtime_params, args):
        if not isinstance(p, ArrayParam):
            continue
        for axis, declared in enumerate(p.shape):
            if isinstance(declared, Expr):
                expected = computed_extent(sig, p.name, axis, declared, values)
                actual = int(value.shape[axis])
                if actual != expected:
                    raise ShapeMismatchError(
                        sig.name, p.name, f"axis {axis} must be {declared!r} = {expected}, got {actual}"
                    )


def _bind_scalar(sig: Signature, p: ScalarParam, value: Any, type_vars: dict[str, ElementType]) -> ElementType:
    if describe_array(value) is not None:
        raise BindingError(sig.name, p.name, f"expected a scalar, got an array of type {type(value).__name__}")
    if dtypes.is_dtype_name(p.dtype):
        et = dtypes.ELEMENT_TYPES[p.dtype]
        _check_scalar_kind(sig, p.name, et, value)
        return et
    if p.dtype in type_vars:
        et = type_vars[p.dtype]
        _check_scalar_kind(sig, p.name, et, value)
        return et
    try:
        et = dtypes.scalar_element_type(value)
    except KeyError as exc:
        raise BindingError(sig.name, p.name, str(exc.args[0])) from None
    type_vars[p.dtype] = et
    return et


def _check_scalar_kind(sig: Signature, param: str, et: ElementType, value: Any) -> None:
    """Refuse values that would silently change meaning (a float for an int, anything non-numeric,
    a numpy scalar that the declared type cannot hold exactly: see ``check_scalar_value``)."""
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        pass
    elif isinstance(value, (float, np.floating)) and et.kind in "fc":
        pass
    elif isinstance(value, np.generic) and et.kind in "fc" and _is_float_scalar(value):
        pass  # ml_dtypes scalars (bfloat16) are np.generic but not np.floating
    elif isinstance(value, (complex, np.complexfloating)) and et.kind == "c":
        pass
    elif isinstance(value, (complex, np.complexfloating)):
        given = _type_name(value)
        message = f"expected a {et.name} scalar, got {given} {value}: a complex for a real is refused, pass z.real"
        raise ScalarConversionError(sig.name, param, et.name, given, message)
    elif isinstance(value, (float, np.generic)):
        given = _type_name(value)
        message = f"expected a {et.name} scalar, got {given} {value}: a float for an integer is refused, pass int(x)"
        raise ScalarConversionError(sig.name, param, et.name, given, message)
    else:
        raise BindingError(sig.name, param, f"expected a {et.name} scalar, got {value!r}")
    if isinstance(value, np.generic) and not _casts_safely(type(value), et.name):
        check_scalar_value(sig.name, param, et, value)


ScalarCheck = tuple[int, str, ElementType]  # (argument index, parameter, declared type)


def scalar_checks(sig: Signature, spec: Specialization, args: tuple[Any, ...]) -> tuple[ScalarCheck, ...]:
    """The scalar arguments whose values every call with these argument types must check, as
    ``(argument index, parameter, declared type)``: numpy scalars of a type numpy does not cast
    safely to the declared one (an ``np.float64`` for a float32). Decided once per dispatch
    (the types are part of it), so calls with exact types check nothing."""
    return tuple(
        (i, p.name, et)
        for i, (p, value) in enumerate(zip(sig.runtime_params, args))
        if isinstance(p, ScalarParam)
        and isinstance(value, np.generic)
        and not _casts_safely(type(value), (et := spec.element_type(p.name)).name)
    )


def check_scalar_value(kernel: str, param: str, et: ElementType, value: np.generic) -> None:
    """ScalarConversionError unless numpy scalar ``value`` converted to ``et`` converts back to
    itself (a NaN stays a NaN): ``np.float64(0.1)`` for a float32 would round, ``np.int64(300)``
    for an int8 would wrap. Python ints and floats are not checked: they convert as in C."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        converted = np.array(value).astype(et.numpy)
        back = converted.astype(value.dtype)
    if back == value or (value != value and converted != converted):
        return
    given = _type_name(value)
    raise ScalarConversionError(
        kernel,
        param,
        et.name,
        given,
        f"{given} {value} would be {converted.item()!r} as the declared {et.name}: pass np.{et.name}(x), "
        "or a Python number (a float rounds to nearest, an int must fit)",
    )


_safe_casts: dict[tuple[type, str], bool] = {}


def _casts_safely(given: type, declared: str) -> bool:
    """Whether numpy casts every value of scalar type ``given`` exactly to element type ``declared``."""
    safe = _safe_casts.get((given, declared))
    if safe is None:
        try:
            safe = bool(np.can_cast(given, dtypes.ELEMENT_TYPES[declared].numpy, "safe"))
        except TypeError:  # a type numpy cannot cast (ml_dtypes' bfloat16 to some): check by value
            safe = False
        _safe_casts[(given, declared)] = safe
    return safe


def _type_name(value: Any) -> str:
    return value.dtype.name if isinstance(value, np.generic) else type(value).__name__


def _is_float_scalar(value: np.generic) -> bool:
    try:
        return dtypes.element_type(value.dtype).kind == "f"
    except KeyError:
        return False
