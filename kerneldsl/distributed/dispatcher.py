"""The client as its helpers use it (``Dispatcher``): the face of ``gpus.GPUs`` that the
worker-to-worker moves (``moves``) and the data-parallel helpers (``parallel``) are handed.

The helpers compose the client's calls: they pick a worker, find the one that owns some arrays,
send a call there or ask a worker's actor a question. Naming that face here, below the client,
keeps them from importing the class that calls them.
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .handles import RemoteArray, RemoteFuture
    from .incarnation import Incarnation


class Dispatcher(Protocol):
    """What ``moves`` and ``parallel`` call on the client: its public calls, and the package's
    own (underscored: not the user's) that choose a worker and send a call to it."""

    def workers(self, profile: str | None = None, fresh: bool = True) -> list[str]: ...

    def to_device(
        self, host: Any, worker: str | None = None, profile: str | None = None, block: bool = True
    ) -> RemoteArray: ...

    def incarnation(self, name: str) -> Incarnation: ...

    def _pick(self, worker: str | None, profile: str | None) -> str:
        """The name of the worker ``worker`` names (a name or an address), or the next of ``profile``."""

    def _owner(self, what: str, arrays: list[RemoteArray]) -> Incarnation:
        """The one live incarnation that holds every one of ``arrays`` (``what`` names the call)."""

    def _send(
        self,
        inc: Incarnation,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        profile: str | None,
        block: bool,
        array: bool,
    ) -> RemoteFuture:
        """``fn(*args, **kwargs)`` sent to ``inc`` in its call order (a RemoteArray if ``array``)."""

    def _on_actor(self, inc: Incarnation, function: str, args: list[Any]) -> concurrent.futures.Future[Any]:
        """``function`` of ``inc``'s actor called with ``args``, outside the call order: its reply."""
