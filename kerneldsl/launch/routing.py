"""Calls whose arguments live on a remote GPU worker: how the local entry points recognise them.

A remote handle (``kerneldsl.distributed.RemoteArray``) carries ``kd_route``; an entry point that
meets one on its miss path hands the whole call to it. Nothing here imports the remote plane, so
``import kerneldsl`` stays free of Dask, and warm local calls never look.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


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


class RemoteArguments(Exception):
    """Raised by a library's argument check on meeting a remote handle; ``routed`` catches it."""

    def __init__(self, handle: Any) -> None:
        super().__init__("remote arguments")
        self.handle = handle


def routed(fn: _F) -> _F:
    """Let ``fn`` (whose argument checks raise ``RemoteArguments``) run where remote arguments live.

    Costs a local call nothing but entering a ``try``; only the failed check routes.
    """

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RemoteArguments as remote:
            return route(remote.handle, call, args, kwargs)

    return call  # type: ignore[return-value]
