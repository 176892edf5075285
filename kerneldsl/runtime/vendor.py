"""Library handles a session holds for other layers (cuBLAS, ...), made on first use.

The session knows them only by key and protocol: ``release()`` destroys the library handle (close
calls it with the context current, before any other handle is freed, collecting what it
raises); ``abandon()`` forgets it without calling the library (forked child, poisoned context).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from .context import DriverSession

__all__ = ["VendorHandles"]

_Vendor = TypeVar("_Vendor")  # a library handle type
_Session = TypeVar("_Session", bound="DriverSession")  # the session ``create`` is handed


class VendorHandles(Generic[_Session]):
    """``session``'s library handles, by key."""

    __slots__ = ("_handles", "_session")

    def __init__(self, session: _Session) -> None:
        self._handles: dict[str, Any] = {}
        self._session = session

    def get(self, key: str, create: Callable[[_Session], _Vendor]) -> _Vendor:
        """See ``Session.vendor_handle``."""
        handle: _Vendor | None = self._handles.get(key)
        if handle is None:
            session = self._session
            with session.activated():
                handle = self._handles.get(key)
                if handle is None:
                    handle = self._handles[key] = create(session)
        return handle

    def forget(self, key: str) -> None:
        """Drop the handle of ``key`` unreleased (whoever holds it frees it); the next ``get`` makes another."""
        self._handles.pop(key, None)

    def release_all(self, errors: list[BaseException]) -> None:
        """Destroy every library handle (session activated); failures into ``errors``."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            try:
                handle.release()
            except Exception as exc:
                errors.append(exc)

    def abandon_all(self) -> None:
        """Forget every library handle without calling its library."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle.abandon()
