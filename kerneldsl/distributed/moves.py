"""Worker-to-worker moves: ``RemoteArray.to_worker`` without the data passing through the client.

The client sends two ordinary calls at once, each in its worker's call order: ``export`` on the
source (after every earlier call there, so after the work that writes the array) and ``receive``
on the destination (before every later call there, so the calls that use the new array wait for
it). The destination asks the source's actor for the export (``exported``: it waits there until
the export ran), copies it into a new array of its own and tells the source to free it
(``release``). Between workers of one host (same kernel and PID namespace) the export is a CUDA
IPC handle and the bytes move GPU to GPU (``kerneldsl.runtime.ipc``); otherwise the export is
the array on the source's host, fetched by the destination over Dask's comms (TCP or TLS, or UCX
with ``distributed-ucxpy``): the data crosses the network once, not twice.

A source lost before the destination confirmed the copy (``release`` must reach it: an IPC
mapping is only known complete once the exporter outlived the copy) fails the new array with
``WorkerLostError``; so does a destination lost during it. Every wait is bounded by ``timeout``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..array.ndarray import DeviceArray, as_array
from ..errors import DistributedError, WorkerLostError
from ..runtime.ipc import IpcExport, copy_from_export
from ..runtime.session import default_session
from .exports import publish
from .worker import GPUSessionPlugin, plugin, upload

if TYPE_CHECKING:
    from .dispatcher import Dispatcher
    from .handles import RemoteArray
    from .incarnation import Incarnation

MOVE_TIMEOUT_S = 300.0  # the longest a destination waits for its source (queued work included)
VIAS = ("auto", "ipc", "comms", "client")
_SILENT_S = 5.0  # past the timeout, how long a destination waits for a source that does not answer


def _on_loop(gpu: GPUSessionPlugin, coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, gpu.loop.asyncio_loop).result()


def export(array: DeviceArray, tid: str, via: str) -> None:
    """On the source's GPU thread: make move ``tid``'s export of ``array`` (a view is made
    contiguous first) and publish it for the destination."""
    gpu = plugin()
    held: IpcExport | None = None
    try:
        if via == "ipc":
            source = array if array.is_contiguous else array.copy()
            held = IpcExport(array.session, source)
            reply: tuple[Any, ...] = ("ipc", held.handle, held.nbytes, tuple(array.shape), array.dtype.str)
        else:
            reply = ("host", array.to_host())
    except Exception as exc:
        _on_loop(gpu, publish(tid, ("error", f"{type(exc).__name__}: {exc}"), None))
        raise
    if not _on_loop(gpu, publish(tid, reply, held)) and held is not None:
        held.close()


def _ask(gpu: GPUSessionPlugin, source: tuple[str, str, str], function: str, args: list[Any], timeout: float) -> Any:
    """Call the source actor's ``function`` from this worker; a source that is gone (or silent past
    ``timeout``) is a ``WorkerLostError``."""
    name, address, actor = source

    async def call() -> Any:
        rpc = gpu.worker.rpc(address)
        call = rpc.actor_execute(function=function, actor=actor, args=args, kwargs={})
        return await asyncio.wait_for(call, timeout + _SILENT_S)  # the source's own timeout answers first

    try:
        reply = _on_loop(gpu, call())
    except Exception as exc:
        raise WorkerLostError(
            f"worker {name} ({address}) was lost while {gpu.worker_name} copied from it: {type(exc).__name__}: {exc}"
        ) from None
    if reply["status"] != "OK":
        error = reply["exception"]
        raise DistributedError(f"worker {name} did not hand over the copy: {type(error).__name__}: {error}")
    return reply["result"]


def receive(tid: str, name: str, address: str, actor: str, timeout: float) -> DeviceArray:
    """On the destination's GPU thread: move ``tid`` into a new array here (C-contiguous)."""
    gpu = plugin()
    source = (name, address, actor)
    reply = _ask(gpu, source, "exported", [tid, timeout], timeout)
    if reply[0] == "error":
        raise DistributedError(f"the copy from worker {name} failed there: {reply[1]}")
    if reply[0] == "host":  # the bytes are here: the source may go now
        moved = upload(np.asarray(reply[1]))
        with contextlib.suppress(DistributedError):
            _ask(gpu, source, "release", [tid, None], timeout)
        return moved
    _, handle, nbytes, shape, dtype = reply
    session = default_session(0)
    moved = as_array(session.empty(tuple(shape), np.dtype(dtype)))
    try:
        if handle is not None:
            copy_from_export(session, moved, handle, nbytes)
        _ask(gpu, source, "release", [tid, None], timeout)  # the exporter outlived the copy
    except BaseException:
        moved.close()
        raise
    return moved


def same_worker_copy(array: DeviceArray) -> DeviceArray:
    return array.copy()


# --- the client's half -------------------------------------------------------------------------------

_hosts: weakref.WeakKeyDictionary[Incarnation, str] = weakref.WeakKeyDictionary()


def _host_of(gpus: Dispatcher, inc: Incarnation, timeout: float) -> str:
    found = _hosts.get(inc)
    if found is None:
        asked = gpus._on_actor(inc, "identity", [])
        try:
            reply = asked.result(timeout)
        except Exception as exc:
            raise WorkerLostError(f"worker {inc.name} ({inc.address}) was lost: {type(exc).__name__}: {exc}") from None
        # a worker that cannot say (not kerneldsl's actor) shares no IPC with anyone
        found = _hosts[inc] = str(reply["result"]) if reply["status"] == "OK" else f"unknown/{inc.key}"
    return found


def move(gpus: Dispatcher, array: RemoteArray, worker: str, via: str, timeout: float) -> RemoteArray:
    """``array`` copied to ``worker``: ``via="auto"`` takes CUDA IPC between workers of one host
    and Dask's comms otherwise; ``"ipc"``, ``"comms"`` or ``"client"`` (through this process)
    force one."""
    if via not in VIAS:
        raise ValueError(f"via must be one of {VIAS}, got {via!r}")
    array.check()
    if via == "client":
        return gpus.to_device(array.to_host(timeout), worker=worker, profile=array.profile)
    src = array._inc
    dst = gpus.incarnation(gpus._pick(worker, None))
    if dst is src:
        return gpus._send(src, same_worker_copy, (array,), {}, array.profile, True, array=True)  # type: ignore[return-value]
    if via == "auto":
        via = "ipc" if _host_of(gpus, src, timeout) == _host_of(gpus, dst, timeout) else "comms"
    tid = uuid.uuid4().hex
    exporting = gpus._send(src, export, (array, tid, via), {}, None, True, array=False)
    moved = cast(
        "RemoteArray",
        gpus._send(dst, receive, (tid, src.name, src.address, src.key, timeout), {}, None, True, array=True),
    )
    moved.profile = array.profile

    released: list[bool] = []

    def failed(f: concurrent.futures.Future[Any]) -> None:
        """A failed export (the destination waits for it) or copy (the source holds it): free it
        there, once; a copy that succeeded was released by the destination."""
        if not released and (f.cancelled() or f.exception() is not None):
            released.append(True)
            _release(
                gpus, src, tid, "cancelled" if f.cancelled() else f"{type(f.exception()).__name__}: {f.exception()}"
            )

    exporting._future.add_done_callback(failed)
    moved._future.add_done_callback(failed)
    return moved


def _release(gpus: Dispatcher, inc: Incarnation, tid: str, why: str) -> None:
    """Tell the source to free move ``tid``'s export (nothing to do if it is gone)."""
    if inc.gone() is None:
        gpus._on_actor(inc, "release", [tid, why])
