"""Calls whose arguments live on a remote GPU worker: how the local entry points recognise them.

A remote handle (``kerneldsl.distributed.RemoteArray``) carries ``kd_route``; an entry point that
meets one on its miss path hands the whole call to it. Nothing here imports the remote plane, so
``import kerneldsl`` stays free of Dask, and warm local calls never look; the entry points' types
name the handle by ``RemoteHandle``, the face they use, as the remote plane sits above them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])
_Call_co = TypeVar("_Call_co", bound="RemoteCall", covariant=True)


class RemoteCall(Protocol):
    """A call in flight on a remote worker (``kd.distributed.RemoteFuture``), as an entry point
    whose arguments it cannot tell apart (a kernel's launch keywords) types what it gives."""

    @property
    def worker(self) -> str: ...
    def done(self) -> bool: ...
    def cancel(self) -> None: ...
    def result(self, timeout: float | None = None) -> Any: ...
    def exception(self, timeout: float | None = None) -> BaseException | None: ...


class RemoteHandle(Protocol[_Call_co]):
    """A value on a remote GPU worker (``kd.distributed.RemoteArray``) as the local entry points
    meet it: a call with one among its arguments is handed to it whole, and gives what its plane
    gives for a call in flight (``_Call_co``: ``kd.distributed.RemoteFuture``). A call that makes
    arrays gives a handle of the operands' own type: its overloads take ``RemoteHandle`` through
    a bound type variable."""

    def kd_route(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call_co: ...


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
