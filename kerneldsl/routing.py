"""Calls whose arguments live on a remote GPU worker: how the local entry points recognise them.

A remote handle (``kerneldsl.distributed.RemoteArray``) carries ``kd_route``; an entry point that
meets one on its miss path hands the whole call to it. Nothing here imports the remote plane, so
``import kerneldsl`` stays free of Dask, and warm local calls never look.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any


def is_remote(value: Any) -> bool:
    return hasattr(type(value), "kd_route")


def find_remote(args: Iterable[Any], kwargs: Mapping[str, Any] | None = None) -> Any:
    """The first remote handle among the arguments, or None."""
    for a in args:
        if is_remote(a):
            return a
    for a in (kwargs or {}).values():
        if is_remote(a):
            return a
    return None


def route(handle: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``fn(*args, **kwargs)`` where ``handle`` lives; the handle's plane decides how."""
    return handle.kd_route(fn, args, kwargs)


def public(module: str, name: str) -> Any:
    """``module.name``: how library callables pickle, so a worker uses its own copy (and its plans)."""
    return getattr(importlib.import_module(module), name)
