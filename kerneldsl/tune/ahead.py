"""Tuning ahead of time: the ``tune_for=`` declarations ``kerneldsl tune MODULE`` runs.

An entry is a dict giving every shape symbol's extent and every dtype variable's type (scalars
optional: their default, else 1), from which the arguments are made on the device (inputs
random floats or zero integers, outputs zero); or a function returning a call's arguments, for
kernels whose inputs must mean something (indices, sorted data).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import DeclarationError
from ..jit.signature import ArrayParam, Extent, ScalarParam, Signature
from ..jit.signature.spelling import NO_DEFAULT
from ..jit.specialize import computed_extent

TuneFor = Mapping[str, Any] | Callable[[], tuple[Any, ...]]


def checked_tune_for(sig: Signature, entries: Sequence[TuneFor]) -> tuple[TuneFor, ...]:
    """Each entry checked now: a dict naming every symbol and dtype variable (and nothing else
    than those and scalar parameters), or a callable."""
    if isinstance(entries, (Mapping, str)) or callable(entries):
        raise DeclarationError(sig.name, None, "tune_for is a list of dicts (or functions returning arguments)")
    scalars = {p.name for p in sig.runtime_params if isinstance(p, ScalarParam)}
    for entry in entries:
        if callable(entry):
            continue
        if not isinstance(entry, Mapping):
            raise DeclarationError(sig.name, None, f"tune_for entry {entry!r} is neither a dict nor a function")
        missing = [n for n in (*sig.symbols, *sig.dtype_vars) if n not in entry]
        unknown = [n for n in entry if n not in sig.symbols and n not in sig.dtype_vars and n not in scalars]
        if missing or unknown:
            problem = (
                f"lacks {missing}" if missing else f"names {unknown}, which are no symbols, dtype variables or scalars"
            )
            raise DeclarationError(sig.name, None, f"tune_for entry {dict(entry)!r} {problem}")
        for var in sig.dtype_vars:
            try:
                dtypes.element_type(entry[var])
            except KeyError as exc:
                raise DeclarationError(sig.name, var, f"tune_for: {exc.args[0]}") from None
        for symbol in sig.symbols:
            if type(entry[symbol]) is not int or entry[symbol] < 0:
                raise DeclarationError(sig.name, symbol, f"tune_for extent must be an int >= 0, got {entry[symbol]!r}")
    return tuple(entries)


def tune_arguments(sig: Signature, entry: TuneFor, session: Any) -> tuple[Any, ...]:
    """The arguments of one ``tune_for`` entry, as arrays on ``session``."""
    if callable(entry):
        return tuple(entry())
    rng = np.random.default_rng(0)
    args: list[Any] = []
    for p in sig.runtime_params:
        if isinstance(p, ArrayParam):
            dtype = dtypes.element_type(entry[p.dtype] if p.dtype in sig.dtype_vars else p.dtype).numpy
            shape = tuple(_allocated_extent(sig, entry, p.name, axis, d) for axis, d in enumerate(p.shape))
            host = np.zeros(shape, dtype)
            if p.direction != "out" and dtype.kind == "f":
                host = rng.standard_normal(shape).astype(dtype)
            args.append(session.to_device(host))
        elif isinstance(p, ScalarParam):
            args.append(entry.get(p.name, 1 if p.default is NO_DEFAULT else p.default))
    return tuple(args)


def _allocated_extent(sig: Signature, entry: Mapping[str, Any], param: str, axis: int, extent: Extent) -> int:
    """An extent of an array ``tune_arguments`` allocates: fixed, the entry's symbol, or computed
    (``kd.cdiv(n, 256)``) from the entry's symbols and the int constants' defaults."""
    if isinstance(extent, int):
        return extent
    if isinstance(extent, str):
        return int(entry[extent])
    values = {c.name: c.default for c in sig.consts if c.type is int and c.has_default}
    values.update({s: int(entry[s]) for s in sig.symbols})
    missing = sorted(extent.symbols() - values.keys())
    if missing:
        raise DeclarationError(
            sig.name,
            param,
            f"tune_for cannot size axis {axis} ({extent!r}): constant {missing[0]!r} has no default; "
            "give the entry as a function returning the arguments",
        )
    return computed_extent(sig, param, axis, extent, values)
