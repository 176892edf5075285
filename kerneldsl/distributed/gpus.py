"""The client side: ``GPUs``, one client's view of the warm GPU workers, and ``attach``.

Each call goes straight to the worker's ``GPUActor`` (a Dask actor call: no scheduler hop, about
a millisecond) carrying a sequence number, so the worker runs one client's calls in the order
they were made; the client waits only when it asks for a result. A worker process is an
``Incarnation``: when it dies its arrays die with it, and the next call starts a new actor on
the worker the nanny restarted under the same name. A process is known by its actor, not its
address (a worker with a fixed port comes back at the same one): Dask errs the actor's future
when it removes the process holding it, a message that reaches this client before the new
process registers, so a call made after a restart, idle or not, goes to the new process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import itertools
import pickle
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

import cloudpickle
from distributed import Client
from distributed.protocol.serialize import Serialize

from ..errors import (
    Backpressure,
    NoWorkerError,
    RemoteArrayLostError,
    SessionPoisonedError,
    ShippingError,
    WorkerLostError,
    WrongWorkerError,
)
from ..launch.dispatch import Kernel
from . import moves, parallel
from .handles import RemoteArray, RemoteFuture
from .incarnation import Incarnation
from .profiles import Profile, checked_profiles
from .worker import GPUActor, GPUSessionPlugin, Ref, download, upload, worker_info

_WAIT_STEP_S = 0.1
_WORKERS_TTL_S = 2.0


def _worker_identities(client: Client) -> list[tuple[str, dict[str, Any]]]:
    """Each live worker's address and identity, as the scheduler gives them to this call; not
    ``Client.scheduler_info``, whose periodic refresh may swap in an identity without workers
    between its fetch and its return."""
    if client.scheduler is None:
        raise NoWorkerError("the client is not connected to a scheduler")
    identity = client.sync(client.scheduler.identity, n_workers=-1)  # type: ignore[no-untyped-call]
    return list(identity["workers"].items())


class GPUs:
    """This client's warm GPU workers: ``to_device``, ``submit``, and the calls remote arrays route.

    ``max_in_flight`` bounds the calls one worker has in flight from this client: a call past it
    blocks until one finishes, or with ``block=False`` raises ``Backpressure``.
    """

    def __init__(
        self,
        client: Client,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        max_in_flight: int = 64,
        restart_timeout: float = 60.0,
    ) -> None:
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive int, got {max_in_flight!r}")
        self.client = client
        self.profiles: dict[str, Profile] = checked_profiles(profiles)
        self.max_in_flight = max_in_flight
        self.restart_timeout = restart_timeout
        self._loop: asyncio.AbstractEventLoop = client.loop.asyncio_loop  # type: ignore[union-attr]
        self._current: dict[str, Incarnation] = {}
        self._lock = threading.Lock()  # guards _starting
        self._starting: dict[str, threading.Lock] = {}  # per worker: one waits for its restart, not all
        self._shipped: dict[tuple[int, str | None], tuple[Any, bytes, bytes]] = {}
        self._keys = itertools.count()
        self._turn = itertools.count()
        self._known: tuple[float, dict[str, tuple[str, dict[str, float]]]] = (-_WORKERS_TTL_S, {})

    # --- workers ---------------------------------------------------------------------------------

    def _workers(self, fresh: bool = True) -> dict[str, tuple[str, dict[str, float]]]:
        """Live workers by name: address and resources (asked of the scheduler, or ``fresh=False``
        the last answer if it is under ``_WORKERS_TTL_S`` old: calls that name no worker)."""
        at, known = self._known
        if fresh or time.monotonic() - at > _WORKERS_TTL_S:
            known = {str(w["name"]): (a, dict(w.get("resources") or {})) for a, w in _worker_identities(self.client)}
            self._known = (time.monotonic(), known)
        return known

    def workers(self, profile: str | None = None, fresh: bool = True) -> list[str]:
        """Names of the live workers (of ``profile``: those carrying its Dask resource)."""
        resource = None if profile is None else self._profile(profile).resource
        return sorted(n for n, (_, res) in self._workers(fresh).items() if resource is None or resource in res)

    def info(self) -> dict[str, dict[str, Any]]:
        """Each worker's session: its process, visible GPU, session device and live arrays."""
        return {i["worker"]: i for i in self.client.run(worker_info).values()}

    def _profile(self, name: str) -> Profile:
        found = self.profiles.get(name)
        if found is None:
            raise NoWorkerError(f"no profile {name!r}; profiles: {sorted(self.profiles) or 'none'}")
        return found

    def _pick(self, worker: str | None, profile: str | None) -> str:
        if worker in self._current and profile is None:  # known here: wait for it if it restarts
            return worker
        names = self.workers(profile, fresh=worker is not None)
        if worker is not None:
            by_address = {address: n for n, (address, _) in self._workers(fresh=False).items()}
            name = by_address.get(worker, worker)
            if name not in names:
                raise NoWorkerError(f"no live worker {worker!r}" + (f" in profile {profile!r}" if profile else ""))
            return name
        if not names:
            raise NoWorkerError("no live GPU worker" + (f" carries profile {profile!r}" if profile else ""))
        return names[next(self._turn) % len(names)]

    def incarnation(self, name: str) -> Incarnation:
        """The live incarnation of worker ``name``: its actor, started on first use and again
        after the worker restarted (waiting up to ``restart_timeout`` for it to come back; calls
        to other workers do not wait with it)."""
        inc = self._current.get(name)
        if inc is not None and inc.gone() is None:
            return inc
        with self._lock:
            starting = self._starting.setdefault(name, threading.Lock())
        with starting:
            inc = self._current.get(name)
            if inc is not None and inc.gone() is None:
                return inc
            deadline = time.monotonic() + self.restart_timeout
            if inc is not None:
                self._until_removed(inc, deadline)
            address = self._wait_for(name, deadline)
            anchor = self.client.submit(
                GPUActor,
                actor=True,
                workers=[address],
                allow_other_workers=False,
                pure=False,
                key=f"kerneldsl-gpu-{uuid.uuid4().hex}",
            )
            anchor.result(timeout=max(deadline - time.monotonic(), _WAIT_STEP_S))
            if inc is not None:
                inc.anchor.release()
            new = self._current[name] = Incarnation(name, address, str(anchor.key), anchor, self.max_in_flight)
            return new

    def _until_removed(self, inc: Incarnation, deadline: float) -> None:
        """Wait until Dask has removed ``inc``'s process (its actor's future erred): from then on
        a worker under its name is a new process, whatever its address."""
        while inc.anchor.status == "finished":
            if time.monotonic() > deadline:
                raise NoWorkerError(f"worker {inc.name} did not come back within {self.restart_timeout} s ({inc.lost})")
            time.sleep(_WAIT_STEP_S)

    def _wait_for(self, name: str, deadline: float) -> str:
        while True:
            found = self._workers().get(name)
            if found is not None:
                return found[0]
            if time.monotonic() > deadline:
                raise NoWorkerError(f"worker {name} did not come back within {self.restart_timeout} s")
            time.sleep(_WAIT_STEP_S)

    def _lost(self, inc: Incarnation, why: str) -> None:
        """A call on ``inc`` failed: its arrays are lost. Its actor's future stays held until the
        next incarnation starts, to tell when Dask has removed the process."""
        if inc.lost is None:
            inc.lost = why

    # --- calls ---------------------------------------------------------------------------------

    def to_device(
        self, host: Any, worker: str | None = None, profile: str | None = None, block: bool = True
    ) -> RemoteArray:
        """Upload ``host`` (a numpy array) to a worker (by name or address; default: the next
        one of ``profile`` in turn); the array stays there until its handle is dropped."""
        inc = self.incarnation(self._pick(worker, profile))
        found = self._send(inc, upload, (host,), {}, profile, block, array=True)
        assert isinstance(found, RemoteArray)
        return found

    def submit(
        self,
        fn: Any,
        *args: Any,
        worker: str | None = None,
        profile: str | None = None,
        block: bool = True,
        **kwargs: Any,
    ) -> RemoteFuture:
        """Run ``fn(*args, **kwargs)`` on a worker with its warm session: remote arrays arrive as
        DeviceArrays, returned DeviceArrays stay there as RemoteArrays. Many launches, one round trip."""
        arrays = _remote_arrays(args, kwargs)
        if arrays:
            inc = self._owner(getattr(fn, "__name__", repr(fn)), arrays)
            if worker is not None and worker not in (inc.name, inc.address):
                raise WrongWorkerError(f"submit({worker=})", sorted({worker, inc.name}))
            profile = profile or arrays[0].profile
        else:
            inc = self.incarnation(self._pick(worker, profile))
        return self._send(inc, fn, args, kwargs, profile, block, array=False)

    # --- data-parallel helpers (kerneldsl.distributed.parallel) ----------------------------------

    def scatter(self, host: Any, axis: int = 0, workers: list[str] | None = None) -> list[RemoteArray]:
        """``host`` split along ``axis``, one shard per worker (default: all, by name)."""
        return parallel.scatter(self, host, axis, workers)

    def map(self, fn: Any, shards: list[RemoteArray], *args: Any, **kwargs: Any) -> list[RemoteArray]:
        """``fn(shard, *args, **kwargs)`` on each shard's worker; returned arrays stay there."""
        return parallel.map_shards(self, fn, shards, *args, **kwargs)

    def gather(self, parts: list[RemoteArray], axis: int = 0, worker: str | None = None) -> Any:
        """The parts joined along ``axis``: here as numpy, or on ``worker`` (moved device to device)."""
        return parallel.gather(self, parts, axis, worker)

    def reduce(self, parts: list[RemoteArray], worker: str | None = None, op: Any = None) -> RemoteArray:
        """The parts summed (or combined by ``op``) on ``worker``, moved there device to device."""
        return parallel.reduce(self, parts, worker, op)

    def route(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> RemoteFuture:
        """A kerneldsl callable met remote arrays: run it on their worker. A kernel launch gives a
        ``RemoteFuture`` (its arrays change in place there), anything else a ``RemoteArray``."""
        arrays = _remote_arrays(args, kwargs)
        inc = self._owner(getattr(fn, "__name__", repr(fn)), arrays)
        return self._send(inc, fn, args, kwargs, arrays[0].profile, True, array=not isinstance(fn, Kernel))

    def move(self, array: RemoteArray, worker: str, via: str, timeout: float | None) -> RemoteArray:
        """``array.to_worker(worker, via, timeout)`` (``moves``; ``timeout`` None: ``moves.MOVE_TIMEOUT_S``)."""
        return moves.move(self, array, worker, via, moves.MOVE_TIMEOUT_S if timeout is None else timeout)

    def _owner(self, what: str, arrays: list[RemoteArray]) -> Incarnation:
        owners = {id(a._inc): a._inc for a in arrays}
        if len(owners) > 1:
            raise WrongWorkerError(what, sorted(f"{i.name} ({i.address})" for i in owners.values()))
        for a in arrays:
            a.check()
        return arrays[0]._inc

    def download(self, array: RemoteArray, timeout: float | None) -> Any:
        return self._send(array._inc, download, (array,), {}, None, True, array=False).result(timeout)

    def cancel(self, inc: Incarnation, seq: int) -> None:
        self._on_actor(inc, "cancel", [seq])

    def _on_actor(self, inc: Incarnation, function: str, args: list[Any]) -> concurrent.futures.Future[Any]:
        """``function`` of ``inc``'s actor called with ``args``, outside the call order: its reply."""
        call = self.client.rpc(inc.address).actor_execute(function=function, actor=inc.key, args=args, kwargs={})
        return asyncio.run_coroutine_threadsafe(call, self._loop)

    def materialize(self, inc: Incarnation, described: tuple[Any, ...]) -> Any:
        """A worker's result description as this client's values: arrays as RemoteArrays."""
        kind = described[0]
        if kind == "array":
            done: concurrent.futures.Future[Any] = concurrent.futures.Future()
            done.set_result(described)
            return RemoteArray(self, inc, done, -1, described[3], None)
        if kind == "tuple":
            return tuple(self.materialize(inc, d) for d in described[1])
        return described[1]

    def _shipping(self, fn: Any, profile: str | None) -> tuple[bytes, bytes]:
        """``fn`` (with the profile's compile options, for a kernel) pickled once, and its token."""
        options = () if profile is None else self._profile(profile).options
        cache_key = (id(fn), profile if options else None)
        found = self._shipped.get(cache_key)
        if found is None or found[0] is not fn:
            shipped = fn
            if options and isinstance(fn, Kernel):
                shipped = Kernel(fn.body, fn.signature, (*fn.options, *options), fn.precompile)
            try:
                blob = cloudpickle.dumps(shipped)
            except Exception as exc:
                raise ShippingError(
                    f"cannot send {fn!r} to a worker: {type(exc).__name__}: {exc} (a kernel ships as its declaration: "
                    "its body function and everything it refers to must pickle)"
                ) from exc
            found = self._shipped[cache_key] = (fn, hashlib.blake2b(blob, digest_size=16).digest(), blob)
        return found[1], found[2]

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
        token, blob = self._shipping(fn, profile)
        key = next(self._keys)
        buffers: list[pickle.PickleBuffer] = []
        try:
            payload = cloudpickle.dumps(
                (_wire(args), {k: _wire_one(v) for k, v in kwargs.items()}, None if fn is download else key),
                protocol=5,
                buffer_callback=buffers.append,
            )
        except Exception as exc:
            raise ShippingError(
                f"cannot send the arguments of {fn!r} to a worker: {type(exc).__name__}: {exc}"
            ) from exc
        if not inc.slots.acquire(blocking=block):
            raise Backpressure(f"worker {inc.name} has {self.max_in_flight} calls in flight (max_in_flight)")
        lost_error = RemoteArrayLostError if _remote_arrays(args, kwargs) else WorkerLostError
        with inc.lock:
            seq = next(inc.seq)
            shipped = None if token in inc.known else blob
            inc.known.add(token)
            # plain msgpack but for the out-of-band buffers of large arguments (numpy arrays)
            wired = [_serialized(b) for b in buffers]
            parts = [seq, inc.take_dropped(), inc.take_seen(), token, shipped, payload, wired]
            future = asyncio.run_coroutine_threadsafe(self._call(inc, parts, lost_error), self._loop)
        future.add_done_callback(lambda _: inc.slots.release())
        if array:
            return RemoteArray(self, inc, future, seq, key, profile)
        handle = RemoteFuture(self, inc, future, seq)
        if fn is not download:
            _forget_when_dropped(handle, inc, key, future)
        return handle

    async def _call(self, inc: Incarnation, parts: list[Any], lost_error: type[WorkerLostError]) -> Any:
        try:
            reply = await self.client.rpc(inc.address).actor_execute(
                function="call", actor=inc.key, args=parts, kwargs={}
            )
        except Exception as exc:
            self._lost(inc, f"{type(exc).__name__}: {exc}")
            raise lost_error(f"worker {inc.name} ({inc.address}) was lost: {type(exc).__name__}: {exc}") from None
        if reply["status"] == "OK":
            return reply["result"]
        error = reply["exception"]
        if isinstance(error, SessionPoisonedError):
            self._lost(inc, "its CUDA session was poisoned")
        raise error

    def close(self) -> None:
        """Release this client's actors (and so every array it holds on the workers)."""
        for name, inc in list(self._current.items()):
            self._lost(inc, "closed by its client")
            inc.anchor.release()
            del self._current[name]


def _forget_when_dropped(
    handle: RemoteFuture, inc: Incarnation, key: Any, future: concurrent.futures.Future[Any]
) -> None:
    """Once ``handle`` is dropped here, the worker forgets the error its call kept under ``key``
    (a call that succeeded kept none: its drop costs the next call nothing). The finalizer holds
    the outcome, not the future: a delivered error's traceback refers to the handle."""
    succeeded: list[bool] = []
    future.add_done_callback(lambda f: succeeded.append(not f.cancelled() and f.exception() is None))
    weakref.finalize(handle, _forget, inc, key, succeeded)


def _forget(inc: Incarnation, key: Any, succeeded: list[bool]) -> None:
    if not (succeeded and succeeded[0]):
        inc.drop(key)


def _serialized(buffer: pickle.PickleBuffer) -> Any:
    return Serialize(buffer.raw())  # type: ignore[no-untyped-call]


def _wire_one(value: Any) -> Any:
    t = type(value)
    if t is RemoteArray:
        return Ref(value.key)
    if t is tuple or t is list:
        return t(_wire_one(v) for v in value)
    return value


def _wire(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_wire_one(v) for v in values)


def _remote_arrays(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[RemoteArray]:
    found: list[RemoteArray] = []
    for v in (*args, *kwargs.values()):
        if type(v) is RemoteArray:
            found.append(v)
        elif type(v) in (tuple, list):
            found.extend(x for x in v if type(x) is RemoteArray)
    return found


def attach(
    client: Client,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
    max_in_flight: int = 64,
    restart_timeout: float = 60.0,
) -> GPUs:
    """Install the warm-session plugin on every worker of ``client``'s cluster (and on each worker
    that joins or restarts later), and return this client's ``GPUs``. Profiles default to those
    of a ``LocalGPUCluster``; on other clusters start workers with ``--resources
    kerneldsl-profile-NAME=1``. ``profiles``: name -> ``{"options": [...]}`` (NVRTC options
    added to kernels run on that profile's workers); ``max_in_flight``: calls in flight per
    worker from this client before one more blocks (backpressure); ``restart_timeout``: seconds
    a call waits for a restarting worker before ``WorkerLostError``."""
    client.register_plugin(GPUSessionPlugin(), name=GPUSessionPlugin.name)
    if profiles is None:
        profiles = {name: p.spec for name, p in getattr(client.cluster, "profiles", {}).items()}
    return GPUs(client, profiles, max_in_flight, restart_timeout)
