"""The annotations a kernel signature is written with: ``kd.In``, ``kd.Out``, ``kd.InOut``,
``kd.Scalar`` and ``kd.Const``; at run time they build the ``*Annotation`` records
``parse_signature`` reads, and for type checkers they are generic classes with the attributes
the body function sees."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar


def spelled(value: Any) -> Any:
    """The plain spelling of a checked-spelling object: a TypeVar or NewType becomes its name,
    ``Literal[k]`` becomes ``k``, ``Annotated[int, e]`` (a computed extent, ``kd.cdiv(n, 256)``,
    where a type checker needs a type) becomes ``e``; anything else is returned as it is (and
    checked later)."""
    if isinstance(value, (TypeVar, typing.NewType)):
        return value.__name__
    if typing.get_origin(value) is Literal and len(typing.get_args(value)) == 1:
        return typing.get_args(value)[0]
    if typing.get_origin(value) is typing.Annotated and typing.get_args(value)[0] is int:
        metadata = typing.get_args(value)[1:]
        return metadata[0] if len(metadata) == 1 else value
    return value


@dataclass(frozen=True)
class ArrayAnnotation:
    direction: str
    dtype: Any
    shape: Any
    strided: bool = False  # kerneldsl's own kernels: takes strided views (strides passed separately)


@dataclass(frozen=True)
class ScalarAnnotation:
    dtype: Any


NO_DEFAULT = object()  # a constant or scalar declared without a default


@dataclass(frozen=True)
class ConstAnnotation:
    type: Any
    default: Any = NO_DEFAULT


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

    import numpy as np
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
    ANNOTATION_CLASSES: tuple[type, ...]
else:

    class In(_ArrayDirection):
        """An array the kernel reads: ``kd.In[T, n]`` (``kd.In["T", "n"]``)."""

        direction = "in"

    class Out(_ArrayDirection):
        """An array the kernel writes: ``kd.Out[T, m, n]`` (``kd.Out["T", ("m", "n")]``); an extent
        may be computed from symbols bound elsewhere, ``kd.Out[T, kd.cdiv(n, 256)]`` (checked
        spelling ``Annotated[int, kd.cdiv(n, 256)]``), and every call is checked against it."""

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

    ANNOTATION_CLASSES = (_ArrayDirection, Scalar, Const)
