"""What a torch operator is, read from a kerneldsl declaration: its parameters, its schema.

The declaration is the kernel's own signature, or for a ``@kd.fuse`` function (and a ``kd.ops``
function, through ``declare=``) the annotations of a Python function: its parameters are ``kd.In``
arrays and ``kd.Scalar`` numbers, its return annotation the ``kd.Out`` result (or a ``tuple`` of
them). Directions map to the schema as ``In`` -> ``Tensor``, ``InOut`` -> ``Tensor(a!)``
(mutated), ``Scalar`` -> ``float`` / ``int`` / ``bool`` / ``complex`` (``Scalar`` for a dtype
variable), ``Const`` -> a keyword-only ``int`` / ``float`` / ``bool``; ``Out`` arrays are not
arguments but the returned tensors. A shape symbol that only outputs name becomes a keyword-only
``SymInt`` argument, and a dtype variable that no input array binds a keyword-only ``ScalarType``.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..array.fusion import Fused
from ..dtypes import is_dtype_name
from ..errors import DeclarationError, TorchOpError
from ..jit.signature import ArrayParam, ConstParam, ScalarParam, Signature, parse_signature
from ..jit.signature.spelling import NO_DEFAULT, ArrayAnnotation
from ..launch.dispatch import Kernel

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# namespaces PyTorch owns: an operator there would shadow or clash with PyTorch's own
_RESERVED_NAMESPACES = frozenset({"aten", "prim", "prims", "torch", "c10", "_c10d_functional", "inductor"})
_ALIASES = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class OpDeclaration:
    """A declaration as a torch operator sees it.

    ``signature``: the kerneldsl parameters in declared order (a fused function's results as
    ``Out`` parameters after its arguments); ``positional``: the schema's positional arguments
    (arrays the op reads or mutates, and scalars); ``outputs``: the returned ``Out`` arrays;
    ``sizes`` / ``dtype_args``: the keyword-only symbols and dtype variables no input binds;
    ``consts``: the keyword-only constants; ``kind``: ``"kernel"`` (outputs are arguments of
    the call) or ``"fused"`` (outputs are results: ``out=``, or returned for a tuple).
    """

    op: str
    signature: Signature
    kind: str
    positional: tuple[ArrayParam | ScalarParam, ...]
    outputs: tuple[ArrayParam, ...]
    sizes: tuple[str, ...]
    dtype_args: tuple[str, ...]
    consts: tuple[ConstParam, ...]

    @property
    def inputs(self) -> tuple[ArrayParam, ...]:
        """The arrays passed in: ``In`` and ``InOut``."""
        return tuple(p for p in self.positional if isinstance(p, ArrayParam))

    @property
    def mutated(self) -> tuple[ArrayParam, ...]:
        return tuple(p for p in self.inputs if p.direction == "inout")

    @property
    def keyword_names(self) -> tuple[str, ...]:
        return (*self.sizes, *self.dtype_args, *(c.name for c in self.consts))

    def schema(self) -> str:
        """The operator's schema without its name: ``(Tensor x, Scalar alpha) -> Tensor``."""
        aliases = iter(_ALIASES)
        args = []
        for p, may_default in zip(self.positional, defaults_allowed(self.positional)):
            if isinstance(p, ArrayParam):
                args.append(f"Tensor({next(aliases)}!) {p.name}" if p.direction == "inout" else f"Tensor {p.name}")
            else:
                default = f"={_literal(p.default)}" if may_default and p.default is not NO_DEFAULT else ""
                args.append(f"{_scalar_schema_type(p.dtype)} {p.name}{default}")
        keywords = [f"SymInt {s}" for s in self.sizes] + [f"ScalarType {v}" for v in self.dtype_args]
        for c in self.consts:
            default = f"={_literal(c.default)}" if c.has_default else ""
            keywords.append(f"{c.type.__name__} {c.name}{default}")
        listed = ", ".join(args + (["*", *keywords] if keywords else []))
        returns = {0: "()", 1: "Tensor"}.get(len(self.outputs), f"({', '.join('Tensor' for _ in self.outputs)})")
        return f"({listed}) -> {returns}"


def defaults_allowed(params: tuple[ArrayParam | ScalarParam, ...]) -> list[bool]:
    """A positional default stays in the schema only when every later positional argument has
    one too (a schema, like Python, has no required argument after a default one)."""
    allowed, tail = [], True
    for p in reversed(params):
        tail = tail and isinstance(p, ScalarParam) and p.default is not NO_DEFAULT
        allowed.append(tail)
    return allowed[::-1]


def _literal(value: Any) -> str:
    return repr(value) if not isinstance(value, bool) else ("True" if value else "False")


def _scalar_schema_type(dtype: str) -> str:
    if not is_dtype_name(dtype):
        return "Scalar"  # a dtype variable: its type is the arrays' at the call
    if dtype == "bool":
        return "bool"
    if dtype.startswith(("int", "uint")):
        return "int"
    return "complex" if dtype.startswith("complex") else "float"


def split_name(qualname: Any) -> tuple[str, str]:
    """``"ns::name"`` as ``(ns, name)``, each a plain identifier outside PyTorch's namespaces."""
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise TorchOpError(str(qualname), None, "an operator name is 'namespace::name' (for example 'mylib::saxpy')")
    namespace, name = qualname.split("::")
    for part, what in ((namespace, "namespace"), (name, "name")):
        if not _NAME.fullmatch(part):
            raise TorchOpError(qualname, None, f"{what} {part!r} must be an identifier (letters, digits, '_')")
    if namespace in _RESERVED_NAMESPACES:
        raise TorchOpError(qualname, None, f"namespace {namespace!r} belongs to PyTorch; choose your own")
    return namespace, name


def read_declaration(qualname: str, target: Any, declare: Callable[..., Any] | None) -> OpDeclaration:
    """The declaration of ``target``: a kernel's signature, else the annotations of ``declare``
    (or of the function a ``@kd.fuse`` object wraps)."""
    if isinstance(target, Kernel):
        if declare is not None:
            raise TorchOpError(
                qualname, "declare", "a @kd.kernel declares itself: declare= is for fused functions and ops"
            )
        return _from_signature(qualname, target.signature, "kernel")
    if declare is None:
        if not isinstance(target, Fused):
            raise TorchOpError(
                qualname,
                None,
                f"{type(target).__name__} {getattr(target, '__name__', target)!r} is not a @kd.kernel or @kd.fuse "
                "function: pass declare=, a function whose annotations declare it (kd.In/kd.Scalar parameters, "
                "a kd.Out return annotation)",
            )
        declare = target.func
    return _from_signature(qualname, _function_signature(qualname, declare), "fused")


def _function_signature(qualname: str, func: Callable[..., Any]) -> Signature:
    """A fused function's declaration as a kernel signature: its parameters, then its results as
    ``Out`` parameters named ``out`` (``out0``, ``out1``, ... for a tuple)."""
    try:
        found = inspect.signature(func, eval_str=True)
    except Exception as exc:  # a name the function's module cannot resolve
        raise TorchOpError(qualname, None, f"its annotations cannot be evaluated: {exc}") from None
    returned = found.return_annotation
    results = typing.get_args(returned) if typing.get_origin(returned) is tuple else (returned,)
    if not results or not all(isinstance(r, ArrayAnnotation) and r.direction == "out" for r in results):
        raise TorchOpError(
            qualname, None, f"the return annotation must be kd.Out[...] or a tuple of them, not {returned!r}"
        )
    names = ["out"] if len(results) == 1 else [f"out{i}" for i in range(len(results))]
    params = list(found.parameters.values())
    for p in params:
        if isinstance(p.annotation, ArrayAnnotation) and p.annotation.direction != "in":
            raise TorchOpError(
                qualname,
                p.name,
                "a fused function's parameters are kd.In arrays and kd.Scalar numbers: its results "
                "are declared by its return annotation",
            )
        if p.name in names:
            raise TorchOpError(qualname, p.name, "the name is the one its result takes: rename the parameter")
    # keyword-only: they follow the function's parameters, which may end in defaults
    outs = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=r) for n, r in zip(names, results)]
    stub = _Declared(getattr(func, "__name__", "declared"), found.replace(parameters=[*params, *outs]))
    try:
        return parse_signature(stub, 1, 1)
    except DeclarationError as exc:
        raise TorchOpError(qualname, exc.param, str(exc).split(": ", 1)[-1]) from None


class _Declared:
    """A function's name and signature, standing for it where parse_signature reads them."""

    def __init__(self, name: str, signature: inspect.Signature) -> None:
        self.__name__ = name
        self.__signature__ = signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a declaration is never called")


def _from_signature(qualname: str, sig: Signature, kind: str) -> OpDeclaration:
    positional = tuple(
        p
        for p in sig.runtime_params
        if isinstance(p, ScalarParam) or (isinstance(p, ArrayParam) and p.direction != "out")
    )
    outputs = tuple(p for p in sig.arrays if p.direction == "out")
    consts = sig.consts
    if kind == "fused" and consts:
        raise TorchOpError(qualname, consts[0].name, "a fused function takes no kd.Const parameters")
    inputs = [p for p in positional if isinstance(p, ArrayParam)]
    if not inputs:
        raise TorchOpError(
            qualname,
            None,
            "an operator needs an array argument (In or InOut): torch picks the kernel and the device by its tensors",
        )
    bound_symbols = {d for p in inputs for d in p.shape if isinstance(d, str)}
    sizes = tuple(dict.fromkeys(d for p in outputs for d in p.shape if isinstance(d, str) and d not in bound_symbols))
    bound_types = {p.dtype for p in inputs}
    dtype_args = tuple(
        dict.fromkeys(p.dtype for p in outputs if not is_dtype_name(p.dtype) and p.dtype not in bound_types)
    )
    for s in sig.scalars:
        if not is_dtype_name(s.dtype) and s.dtype not in bound_types and s.dtype not in dtype_args:
            raise TorchOpError(
                qualname, s.name, f"its dtype variable {s.dtype!r} is bound by no array: a torch Scalar has no dtype"
            )
    return OpDeclaration(qualname, sig, kind, positional, outputs, sizes, dtype_args, consts)
