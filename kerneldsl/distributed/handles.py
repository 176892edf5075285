"""Remote handles: ``RemoteFuture`` for a call in flight, ``RemoteArray`` for a device array on a worker.

A handle names its worker incarnation (one process: a restarted worker is a new one) and the key
of its array in this client's store there. Calling a kerneldsl callable with remote arrays sends
the call to that worker (``kd_route``, found by ``kerneldsl.launch.routing``) and returns at once.
"""

from __future__ import annotations

import concurrent.futures
import weakref
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import CallCancelledError, RemoteArrayLostError

_UNSET = object()

if TYPE_CHECKING:
    from .incarnation import Incarnation


class Plane(Protocol):
    """The client's view of the workers (``gpus.GPUs``) as a handle uses it: the calls a handle
    cancels, routes, reads back or copies to another worker go through the client that made it."""

    def cancel(self, inc: Incarnation, seq: int) -> None: ...
    def materialize(self, inc: Incarnation, described: tuple[Any, ...]) -> Any: ...
    def route(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> RemoteFuture: ...
    def download(self, array: RemoteArray, timeout: float | None) -> Any: ...
    def move(self, array: RemoteArray, worker: str, via: str, timeout: float | None) -> RemoteArray: ...


class RemoteFuture:
    """A call running on a worker: ``result()`` waits for it (``timeout`` in seconds raises
    ``TimeoutError`` and leaves the call running), ``cancel()`` skips it if it has not started.

    Device arrays in the result come back as ``RemoteArray``s that stay on the worker. A failed
    call whose future is dropped (a kernel launch's, often) is not silent: the next call that
    uses an array it was to write, ``to_host()`` included, raises its error.
    """

    def __init__(self, gpus: Plane, inc: Incarnation, future: concurrent.futures.Future[Any], seq: int) -> None:
        self._gpus = gpus
        self._inc = inc
        self._future = future
        self._seq = seq
        self._value: Any = _UNSET

    @property
    def worker(self) -> str:
        """The name of the worker the call runs on."""
        return self._inc.name

    def done(self) -> bool:
        return self._future.done()

    def cancel(self) -> None:
        """Skip the call unless it already started; ``result()`` then raises ``CallCancelledError``."""
        if not self._future.done():
            self._gpus.cancel(self._inc, self._seq)

    def _described(self, timeout: float | None) -> Any:
        try:
            return self._future.result(timeout)
        except CallCancelledError:
            raise
        except concurrent.futures.CancelledError as exc:  # never sent
            raise CallCancelledError("the call was cancelled") from exc
        except Exception:
            if self._future.done():  # its error reached the user: the worker need not repeat it
                self._inc.seen(self._seq)
            raise

    def result(self, timeout: float | None = None) -> Any:
        """The call's value: arrays as ``RemoteArray`` handles (not copied back), everything else as is.
        Made once: each array key has one handle here, whose drop frees it there."""
        described = self._described(timeout)
        if self._value is _UNSET:
            self._value = self._gpus.materialize(self._inc, described)
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self._described(timeout)
        except TimeoutError:
            raise
        except BaseException as exc:
            return exc
        return None

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<RemoteFuture on {self.worker}: {state}>"


class RemoteArray(RemoteFuture):
    """A device array on one worker's GPU, owned by this client; freed there when dropped here.

    ``to_host()`` (or ``result()``) copies it back; ``shape`` and ``dtype`` wait for the call
    that makes it. Pass it to ``@kd.kernel``s, ``kd.ops``, ``@kd.fuse`` functions or
    ``gpus.submit`` and the call runs on its worker. ``to_worker(name)`` copies it to another.
    """

    def __init__(
        self,
        gpus: Plane,
        inc: Incarnation,
        future: concurrent.futures.Future[Any],
        seq: int,
        key: Any,
        profile: str | None,
    ) -> None:
        super().__init__(gpus, inc, future, seq)
        self.key = key
        self.profile = profile
        weakref.finalize(self, inc.drop, key)

    def kd_route(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> RemoteFuture:
        """Run a kerneldsl call whose arguments include this array on its worker (see ``kerneldsl.launch.routing``)."""
        return self._gpus.route(fn, args, kwargs)

    @property
    def lost(self) -> bool:
        """Whether its worker died or restarted (the data is gone)."""
        return self._inc.gone() is not None

    def check(self) -> None:
        """Raise ``RemoteArrayLostError`` when its worker is gone (the data with it)."""
        why = self._inc.gone()
        if why is not None:
            raise RemoteArrayLostError(
                f"remote array {self.key!r} was on worker {self._inc.name} ({self._inc.address}), "
                f"which is gone ({why}): its data is lost"
            )

    def _descriptor(self, timeout: float | None = None) -> tuple[Any, ...]:
        self.check()
        described: tuple[Any, ...] = self._described(timeout)
        if described[0] != "array":
            raise TypeError(f"the call on worker {self.worker} returned {type(described[1]).__name__}, not an array")
        return described

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._descriptor()[1])

    @property
    def dtype(self) -> np.dtype:
        dtype: np.dtype = np.dtype(self._descriptor()[2])
        return dtype

    def to_host(self, timeout: float | None = None) -> np.ndarray:
        """Copy the array back (waits for every call before it on its worker); the error of the
        call that was to make it, if that failed."""
        self._descriptor(timeout)
        return self._gpus.download(self, timeout)  # type: ignore[no-any-return]

    def result(self, timeout: float | None = None) -> Any:
        """The array copied back; a call that returned a scalar or other value gives that value."""
        if self._described(timeout)[0] == "array":
            return self.to_host(timeout)
        return super().result(timeout)

    def to_worker(self, worker: str, via: str = "auto", timeout: float | None = None) -> RemoteArray:
        """A C-contiguous copy on ``worker``, made after the calls before it on both workers and
        before the later ones: GPU to GPU through CUDA IPC between workers of one host, else
        fetched by ``worker`` from this array's worker over Dask's comms (``via="ipc"``,
        ``"comms"`` or ``"client"``, through this process, force one). A worker lost during the
        copy fails the new array with ``WorkerLostError``; waits are bounded by ``timeout``
        (default ``moves.MOVE_TIMEOUT_S``)."""
        return self._gpus.move(self, worker, via, timeout)

    def __repr__(self) -> str:
        return f"<RemoteArray {self.key!r} on {self.worker}{' (lost)' if self.lost else ''}>"
