"""The tuning key: what of a call's arguments selects its tuned configuration.

``key=`` names shape symbols (the extent), dtype variables (the element type) and scalar
parameters (the value), or holds functions of the call's arguments (a bucketing function such as
``lambda x, n: n.bit_length()``). Declared once, a key becomes a getter per part, so a warm call
computes a small tuple and looks it up; its JSON form names a tuning record on disk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..errors import BindingError, DeclarationError
from ..jit.signature import ArrayParam, ScalarParam, Signature
from ..jit.signature.spelling import spelled

KeyPart = str | TypeVar | Callable[..., Any]  # a name (or the NewType / TypeVar spelling it), or a function
_JSON_SCALARS = (str, int, float, bool, type(None))


class TuningKey:
    """A declared key: ``raw(args)`` for the in-process lookup, ``describe(raw)`` for records."""

    def __init__(self, sig: Signature, parts: Sequence[KeyPart] | None) -> None:
        if parts is None:
            parts = (*sig.dtype_vars, *sig.symbols)
        if isinstance(parts, (str, TypeVar)) or callable(parts):
            parts = (parts,)
        self.kernel = sig.name
        self.names: list[str] = []
        self._kinds: list[str] = []
        getters = [self._getter(sig, p) for p in parts]
        self._getters = tuple(getters)
        self.raw: Callable[[tuple[Any, ...]], Any]  # one part: its value; more: their tuple
        if len(getters) == 1:
            self.raw = getters[0]
        elif len(getters) == 2:
            first, second = getters
            self.raw = lambda args: (first(args), second(args))
        elif len(getters) == 3:
            first, second, third = getters
            self.raw = lambda args: (first(args), second(args), third(args))
        else:
            self.raw = lambda args: tuple([g(args) for g in getters])

    def _getter(self, sig: Signature, part: KeyPart) -> Callable[[tuple[Any, ...]], Any]:
        index = {p.name: i for i, p in enumerate(sig.runtime_params)}
        part = spelled(part)
        if callable(part):
            self.names.append(getattr(part, "__qualname__", repr(part)))
            self._kinds.append("function")
            return lambda args: _hashable(part(*args))
        if not isinstance(part, str):
            raise DeclarationError(sig.name, None, f"autotune key parts are names or functions, got {part!r}")
        self.names.append(part)
        if part in sig.symbols:
            param, axis = sig.symbols[part]
            i = index[param]
            self._kinds.append("extent")
            return lambda args: args[i].shape[axis]
        if part in sig.dtype_vars:
            first = next(p for p in sig.runtime_params if isinstance(p, (ArrayParam, ScalarParam)) and p.dtype == part)
            i = index[first.name]
            if isinstance(first, ArrayParam):
                self._kinds.append("dtype")
                return lambda args: args[i].dtype
            self._kinds.append("scalar type")
            return lambda args: type(args[i])
        if any(isinstance(p, ScalarParam) and p.name == part for p in sig.runtime_params):
            i = index[part]
            self._kinds.append("value")
            return lambda args: args[i]
        raise DeclarationError(
            sig.name,
            None,
            f"autotune key names {part!r}, which is no shape symbol ({sorted(sig.symbols)}), dtype variable "
            f"({list(sig.dtype_vars)}) or scalar parameter; a function of the arguments buckets calls",
        )

    @property
    def tag_only(self) -> bool:
        """Whether the key is made of dtypes alone, which the C launch path's guards tell apart."""
        return all(kind in ("dtype", "scalar type") for kind in self._kinds)

    @property
    def c_checkable(self) -> bool:
        """Whether the C launch path can tell keys apart: dtypes (its guards) and extents (a check
        pinning each one in the winner's entry), no values or functions of the arguments."""
        return all(kind in ("dtype", "scalar type", "extent") for kind in self._kinds)

    def extents(self, raw: Any) -> dict[str, int]:
        """The shape symbols of a call's key and their values: what its C entry pins."""
        parts = (raw,) if len(self._getters) == 1 else raw
        return {n: int(v) for n, kind, v in zip(self.names, self._kinds, parts) if kind == "extent"}

    def values(self, raw: Any) -> list[Any]:
        """The key of a call as JSON values, in declaration order (dtypes by name)."""
        parts = (raw,) if len(self._getters) == 1 else raw
        return [self._json(name, kind, v) for name, kind, v in zip(self.names, self._kinds, parts)]

    def _json(self, name: str, kind: str, value: Any) -> Any:
        if kind == "dtype":
            return str(np.dtype(value)) if isinstance(value, np.dtype) else str(value)
        if kind == "scalar type":
            return value.__name__
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, tuple):
            value = list(value)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise BindingError(
                self.kernel,
                None,
                f"autotune key {name} gave {value!r}: a key is numbers, strings, bools or lists of them",
            ) from None
        if isinstance(value, list) and not all(isinstance(v, _JSON_SCALARS) for v in value):
            raise BindingError(self.kernel, None, f"autotune key {name} gave {value!r}: nested lists are not keys")
        return value

    def describe(self, values: list[Any]) -> str:
        """``n=1024, T=float32``."""
        return ", ".join(f"{n}={v}" for n, v in zip(self.names, values)) or "no key"


def _hashable(value: Any) -> Any:
    """A bucketing function's list result as a tuple, so it can key a dict."""
    return tuple(value) if isinstance(value, list) else value
