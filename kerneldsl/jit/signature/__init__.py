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

An extent may also be computed from symbols bound elsewhere and int constants,
``kd.Out[kd.float32, kd.cdiv(n, 256)]`` (one partial per block): it binds nothing, a call's
array is checked against it, and the body sees it as an ``index_t`` expression. Its checked
spelling is ``Annotated[int, kd.cdiv(n, 256)]``, as a type checker takes no call in a type.

Where each part lives: ``spelling`` (the annotations and their checker types), ``dims`` (launch
dimensions: ``Expr``, ``cdiv``, ``dmin``, ``dmax``, ``sym``), ``parse`` (``parse_signature``,
``Signature`` and its parameters); this module re-exports them.
"""

from __future__ import annotations

from .dims import Dim, Expr, as_expr, cdiv, dmax, dmin, extent_c_text, plain_identifier, plain_int, sym
from .parse import (
    CONST_TYPES,
    INT64_MAX,
    INT64_MIN,
    RESERVED_NAMES,
    ArrayParam,
    ConstParam,
    Extent,
    Param,
    ScalarParam,
    Signature,
    check_constant_launch_limits,
    const_value,
    parse_signature,
)
from .spelling import ArrayAnnotation, Const, ConstAnnotation, In, InOut, Out, Scalar, ScalarAnnotation, spelled

__all__ = [
    "CONST_TYPES",
    "INT64_MAX",
    "INT64_MIN",
    "RESERVED_NAMES",
    "ArrayAnnotation",
    "ArrayParam",
    "Const",
    "ConstAnnotation",
    "ConstParam",
    "Dim",
    "Expr",
    "Extent",
    "In",
    "InOut",
    "Out",
    "Param",
    "Scalar",
    "ScalarAnnotation",
    "ScalarParam",
    "Signature",
    "as_expr",
    "cdiv",
    "check_constant_launch_limits",
    "const_value",
    "dmax",
    "dmin",
    "extent_c_text",
    "parse_signature",
    "plain_identifier",
    "plain_int",
    "spelled",
    "sym",
]
