"""Key material compared in words, for ``DiskCache.explain``, and the shape of its bindings,
which ``cache list`` shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from ..errors import CacheError
from .keys import canonical

_SHORT_VALUE = 40  # longest repr that explain() quotes


class _Absent:
    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()
_QUOTABLE = (str, int, float, bool, type(None), _Absent)


def _differing(stored: Mapping[str, object], wanted: Mapping[str, object]) -> list[str]:
    names = sorted(set(stored) | set(wanted))
    return [
        name
        for name in names
        if name not in stored or name not in wanted or canonical(stored[name]) != canonical(wanted[name])
    ]


def differences(stored: Mapping[str, object], wanted: Mapping[str, object]) -> list[str]:
    """What differs, in words: each binding by name (``constant TILE: 128 -> 256``), then every
    other component of the key material, which a binding may have changed too (source, abi)."""
    named = _binding_differences(stored.get("bindings"), wanted.get("bindings"))
    headers = _header_differences(stored.get("headers"), wanted.get("headers"))
    others = [
        _describe(name, stored.get(name, _ABSENT), wanted.get(name, _ABSENT))
        for name in _differing(stored, wanted)
        if not (name == "bindings" and named) and not (name == "headers" and headers)
    ]
    return named + headers + others


def _header_differences(stored: object, wanted: object) -> list[str]:
    """``header 0:tile.cuh changed``, ``CUDA headers nvidia-cuda-cccl 13.0 -> ...``; nothing
    unless both sides carry headers of the shape ``build.key_material`` writes."""
    if not _well_formed_headers(stored) or not _well_formed_headers(wanted):
        return []
    found = []
    if stored["system"] != wanted["system"]:
        found.append(f"CUDA headers {stored['system'] or 'none'} -> {wanted['system'] or 'none'}")
    old, new = stored["user"], wanted["user"]
    for name in sorted(set(old) | set(new)):
        if name not in old:
            found.append(f"header {name} added")
        elif name not in new:
            found.append(f"header {name} no longer included")
        elif old[name] != new[name]:
            found.append(f"header {name} changed")
    return found


def _well_formed_headers(headers: object) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(headers, dict)
        and headers.keys() == {"system", "user"}
        and (headers["system"] is None or type(headers["system"]) is str)
        and isinstance(headers["user"], dict)
        and all(type(k) is str and type(v) is str for k, v in headers["user"].items())
    )


_BINDING_LABELS = {  # field -> how explain() names one of its bindings
    "dtypes": "dtype {}:",
    "constants": "constant {}:",
    "extents": "extent {}:",
    "aligned": "16-byte aligned {}:",
}


def _binding_differences(stored: object, wanted: object) -> list[str]:
    """``dtype T: float32 -> float64``, ``index width 32 -> 64``...; nothing unless both sides
    carry well-formed bindings."""
    try:
        check_bindings(stored)
        check_bindings(wanted)
    except CacheError:
        return []
    if not isinstance(stored, dict) or not isinstance(wanted, dict):
        return []
    found = []
    for field, label in _BINDING_LABELS.items():
        old, new = stored[field], wanted[field]
        for name in sorted(set(old) | set(new)):
            if name not in old or name not in new or old[name] != new[name]:
                before, after = (_binding_text(side.get(name, _ABSENT)) for side in (old, new))
                found.append(f"{label.format(name)} {before} -> {after}")
    if stored["index_bits"] != wanted["index_bits"]:
        found.append(f"index width {stored['index_bits']} -> {wanted['index_bits']}")
    return found


def _binding_text(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


_BINDING_TYPES: dict[str, type] = {"dtypes": str, "constants": str, "extents": int, "aligned": bool}
BINDING_TEXT_LIMIT = 80  # longest dtype name or constant repr the bindings hold


def check_bindings(bindings: object) -> None:
    """Refuse (``CacheError``) key material ``bindings`` of the wrong shape: a kernel's dtype
    variables, constants (as their repr), specialized extents, array alignment and index width,
    which ``cache list`` shows and ``explain`` names. None: material without bindings."""
    if bindings is None:
        return
    if not isinstance(bindings, dict) or bindings.keys() != {*_BINDING_TYPES, "index_bits"}:
        raise CacheError("bindings have the wrong fields")
    if bindings["index_bits"] not in (32, 64) or type(bindings["index_bits"]) is not int:
        raise CacheError(f"index width {bindings['index_bits']!r} is neither 32 nor 64")
    for field, kind in _BINDING_TYPES.items():
        table = bindings[field]
        if not isinstance(table, dict):
            raise CacheError(f"bindings field {field} is not a table")
        for name, value in table.items():
            if not name.isidentifier() or type(value) is not kind:
                raise CacheError(f"binding {name!r} in {field} is not a name with a {kind.__name__}")
            if isinstance(value, str) and not 0 < len(value) <= BINDING_TEXT_LIMIT:
                raise CacheError(f"binding {name!r} in {field} is empty or too long")
            if type(value) is int and not 0 <= value < 2**63:
                raise CacheError(f"extent {name!r} is out of range")


def _describe(name: str, old: object, new: object) -> str:
    """``name (old -> new)`` for short scalars; just the name for sources, option lists..."""
    shown = [repr(value) for value in (old, new) if isinstance(value, _QUOTABLE)]
    if len(shown) == 2 and max(map(len, shown)) <= _SHORT_VALUE:
        return f"{name} ({shown[0]} -> {shown[1]})"
    return name
