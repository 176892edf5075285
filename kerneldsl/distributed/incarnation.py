"""One worker process as a client sees it (``Incarnation``): a worker the nanny restarts under
the same name is a new incarnation, and the arrays of the old one are gone with it. Remote
handles name their incarnation; ``gpus.GPUs`` makes one per worker process it calls.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any


class Incarnation:
    """One worker process as this client sees it: its actor, the numbering of calls sent to it,
    the bound on calls in flight, and what the next call tells it: the array keys dropped here,
    and the calls whose error reached the user here (the arrays they were to write need not
    repeat it)."""

    def __init__(self, name: str, address: str, key: str, anchor: Any, max_in_flight: int) -> None:
        self.name = name
        self.address = address
        self.key = key
        self.anchor = anchor  # the Dask future that keeps the actor alive
        self.seq = itertools.count()
        self.slots = threading.BoundedSemaphore(max_in_flight)
        self.lost: str | None = None
        self.known: set[bytes] = set()  # callables this actor has unpickled
        self.lock = threading.Lock()
        self._dropped: list[Any] = []
        self._seen: set[int] = set()

    def gone(self) -> str | None:
        """Why this process is no longer usable (a call on it failed, or Dask removed it and so
        erred its actor's future: it died or restarted, even while idle), or None. A read of the
        future's state here: no round trip."""
        if self.lost is None and self.anchor.status != "finished":
            self.lost = "its worker process ended"
        return self.lost

    def drop(self, key: Any) -> None:
        """A remote array was garbage-collected here: the next call frees it there."""
        self._dropped.append(key)

    def take_dropped(self) -> list[Any]:
        taken, self._dropped = self._dropped, []
        return taken

    def seen(self, seq: int) -> None:
        """The error of call ``seq`` reached the user: later uses of its arrays need not raise it."""
        self._seen.add(seq)

    def take_seen(self) -> list[int]:
        taken, self._seen = self._seen, set()
        return sorted(taken)
