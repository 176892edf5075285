"""The worker side: a plugin that keeps one warm Session per worker process, and the actor each
client talks to.

The plugin opens the process's default session at setup (the worker's GPU is device 0: its
``CUDA_VISIBLE_DEVICES`` names one GPU) and closes it at teardown, so kernels, modules, the
cuBLAS handle and device arrays stay loaded between calls. Each client gets one ``GPUActor`` per
worker: it holds that client's arrays, runs its calls in the order the client made them (each
call carries a sequence number, since Dask may deliver concurrent messages out of order) on the
worker's one GPU thread, and loses everything when the client goes (Dask releases the actor).

A call that fails leaves its error on the arrays it was to write (a kernel's written parameters,
any call's ``out=``) until the next call that uses one of them raises it, or the client says it
saw the error: a kernel launch's ``RemoteFuture`` is often dropped, and its error must not be.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import pickle
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from distributed.diagnostics.plugin import WorkerPlugin

from ..array.ndarray import DeviceArray, as_array
from ..errors import (
    BindingError,
    CallCancelledError,
    DistributedError,
    DriverNotFoundError,
    NoDeviceError,
    RemoteArrayLostError,
    SessionPoisonedError,
    ShippingError,
    StickyCudaError,
)
from ..jit.signature import ArrayParam
from ..launch.dispatch import Kernel
from ..runtime.driver import pci_bus_id
from ..runtime.session import Session, default_session
from . import exports

PLUGIN_NAME = "kerneldsl-gpu-session"
POISONED_EXIT_CODE = 75  # the nanny restarts a worker process that exits
_EXIT_DELAY_S = 0.5  # time for the reply that names the poisoning to reach the caller


class Ref(NamedTuple):
    """A remote array as a call's argument: the key of a device array in the actor's store (an int, or "int.index" for a
    tuple's element)."""

    key: Any


class GPUSessionPlugin(WorkerPlugin):
    """Opens the worker's warm Session at setup and closes it at teardown.

    Without a GPU the session is the CPU device's (``KERNELDSL_DEVICE`` as the client set it, or
    the default); with neither the worker still starts: calls that need a device raise the
    driver's error, calls that only compile (``KERNELDSL_ARCH``) work.
    """

    name = PLUGIN_NAME
    idempotent = True  # a second client's attach() must not close the sessions the first one uses

    def __init__(self) -> None:
        self.session: Session | None = None
        self.error: BaseException | None = None
        self.worker_name = ""

    def setup(self, worker: Any) -> None:
        global _installed
        _installed = self
        self.worker_name = str(worker.name)
        self.worker = worker  # its connection pool reaches other workers (moves between them)
        self.loop = worker.loop
        self.exit_later = lambda: worker.loop.call_later(_EXIT_DELAY_S, os._exit, POISONED_EXIT_CODE)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="kerneldsl-gpu")
        self.actors: weakref.WeakSet[GPUActor] = weakref.WeakSet()
        try:
            self.session = default_session()  # the worker's GPU, else the CPU device
        except (DriverNotFoundError, NoDeviceError) as exc:
            self.error = exc

    def teardown(self, worker: Any) -> None:
        self.thread.shutdown(wait=True)
        if self.session is not None and not self.session.poisoned:
            self.session.close()

    def poisoned(self) -> None:
        """A sticky CUDA error broke this process's context: exit, and the nanny starts a fresh one."""
        self.loop.add_callback(self.exit_later)

    def collect(self) -> None:
        """Give memory that released arrays held back to the driver."""
        if self.session is not None and self.session.usable:
            self.session.trim()

    def info(self) -> dict[str, Any]:
        """What this worker runs on: its name, process, visible GPU, its session's device (and that
        device's PCI bus id, the same in every process), live arrays."""
        s = self.session
        return {
            "worker": self.worker_name,
            "pid": os.getpid(),
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "session_device": None if s is None else s.device,
            "pci_bus_id": None if s is None or s.gpu.host else pci_bus_id(s.gpu.ordinal),
            "context": None if s is None else s.context_address,
            "ipc_host": exports.host_identity(),  # equal on two workers: moves between them take CUDA IPC
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
            "live_arrays": sum(len(a.store) for a in list(self.actors)),
        }


def plugin() -> GPUSessionPlugin:
    """This worker process's plugin (from any thread: the GPU thread has no Dask worker context)."""
    if _installed is None:
        raise DistributedError("kerneldsl's worker plugin is not installed here: call kd.distributed.attach(client)")
    return _installed


_installed: GPUSessionPlugin | None = None


def worker_info(dask_worker: Any) -> dict[str, Any]:
    """``client.run(worker_info)``: each worker's ``GPUSessionPlugin.info()``, and how many arrays
    each client's actor holds there (``arrays``: actor key -> count)."""
    found: GPUSessionPlugin = dask_worker.plugins[PLUGIN_NAME]
    actors = dask_worker.state.actors.items()
    return {**found.info(), "arrays": {str(k): len(a.store) for k, a in actors if isinstance(a, GPUActor)}}


def _release(store: dict[Any, Any], gpu: GPUSessionPlugin) -> None:
    store.clear()
    with contextlib.suppress(RuntimeError):  # after teardown, closing the session frees it all
        gpu.thread.submit(gpu.collect)


class GPUActor:
    """One client's handle on one worker: its arrays, its callables, its call order."""

    def __init__(self) -> None:
        self._gpu = plugin()
        self.store: dict[Any, Any] = {}
        self._failed: dict[Any, BaseException] = {}
        self._unreported: dict[Any, tuple[int, BaseException]] = {}  # array key -> (call, its error)
        self._callables: dict[bytes, Callable[..., Any]] = {}
        self._cancelled: set[int] = set()
        self._next = 0
        self._turn: asyncio.Condition | None = None
        self._gpu.actors.add(self)
        weakref.finalize(self, _release, self.store, self._gpu)

    async def call(
        self,
        seq: int,
        drop: list[Any],
        seen: list[int],
        token: bytes,
        blob: bytes | None,
        payload: bytes,
        buffers: list[Any],
    ) -> Any:
        """Run call ``seq`` once every earlier call of this client has been handed to the GPU thread
        (``drop``: array keys the client let go; ``seen``: failed calls whose error it delivered)."""
        turn = self._turn = self._turn or asyncio.Condition()
        async with turn:
            await turn.wait_for(lambda: self._next == seq)
            self._next += 1
            turn.notify_all()
            work = asyncio.get_running_loop().run_in_executor(
                self._gpu.thread, self._run, seq, drop, seen, token, blob, payload, buffers
            )
        return await work

    async def cancel(self, seq: int) -> None:
        """Skip call ``seq`` if it has not started (one that runs already finishes)."""
        self._cancelled.add(seq)

    async def identity(self) -> str:
        """Which processes can open this one's CUDA IPC handles (``exports.host_identity``): asked
        out of call order, so a busy worker answers at once. A worker on the CPU device shares
        none (its moves take Dask's comms)."""
        if self._gpu.session is not None and self._gpu.session.gpu.host:
            return f"{exports.host_identity()}/cpu/{os.getpid()}"
        return exports.host_identity()

    async def exported(self, tid: str, timeout: float) -> Any:
        """A destination asks for move ``tid``'s export (``kerneldsl.distributed.moves``)."""
        return await exports.exported(tid, timeout)

    async def release(self, tid: str, why: str | None) -> None:
        """Free move ``tid``'s export: its destination is done, or the move failed (``why``)."""
        await exports.release(tid, why)

    def _run(
        self,
        seq: int,
        drop: list[Any],
        seen: list[int],
        token: bytes,
        blob: bytes | None,
        payload: bytes,
        buffers: list[Any],
    ) -> Any:
        for key in drop:
            self.store.pop(key, None)
            self._failed.pop(key, None)
            self._unreported.pop(key, None)
        if seen:
            told = set(seen)
            self._unreported = {k: v for k, v in self._unreported.items() if v[0] not in told}
        fn = self._callable(token, blob)
        try:
            args, kwargs, out = pickle.loads(payload, buffers=buffers)
        except Exception as exc:
            raise ShippingError(
                f"worker {self._gpu.worker_name} could not unpickle the call's arguments: {exc}"
            ) from exc
        try:
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                raise CallCancelledError(f"call {seq} was cancelled before it ran")
            try:
                result = fn(*self._resolve(args), **{k: self._resolve_one(v) for k, v in kwargs.items()})
            except (StickyCudaError, SessionPoisonedError) as exc:
                raise self._poisoned(exc) from exc
        except Exception as exc:
            if out is not None:
                self._failed[out] = exc
            if not isinstance(exc, CallCancelledError):  # a skipped call was to write nothing
                for key in written(fn, args, kwargs):
                    self._unreported[key] = (seq, exc)
            raise _sendable(exc) from None
        return self._keep(result, out)

    def _callable(self, token: bytes, blob: bytes | None) -> Callable[..., Any]:
        fn = self._callables.get(token)
        if fn is None:
            if blob is None:
                raise ShippingError(f"worker {self._gpu.worker_name} was sent a callable it has not seen")
            try:
                fn = self._callables[token] = pickle.loads(blob)
            except Exception as exc:
                raise ShippingError(
                    f"worker {self._gpu.worker_name} could not unpickle the callable ({type(exc).__name__}: {exc}): "
                    "its module must be importable there"
                ) from exc
        return fn

    def _poisoned(self, exc: BaseException) -> SessionPoisonedError:
        self._gpu.poisoned()
        return SessionPoisonedError(
            f"worker {self._gpu.worker_name}: a sticky CUDA error broke its context ({exc}); "
            "it restarts itself, and every array it held is lost"
        )

    def _resolve(self, values: Any) -> list[Any]:
        return [self._resolve_one(v) for v in values]

    def _resolve_one(self, value: Any) -> Any:
        t = type(value)
        if t is Ref:
            earlier = self._unreported.pop(value.key, None)
            if earlier is not None:  # a call that was to write it failed, and no one was told yet
                raise earlier[1]
            found = self.store.get(value.key)
            if found is None:
                failed = self._failed.get(value.key)
                if failed is not None:  # as Dask does for a task whose input erred: its error
                    raise failed
                raise RemoteArrayLostError(f"worker {self._gpu.worker_name} holds no array {value.key!r}")
            return found
        if t is tuple or t is list:
            return t(self._resolve(value))
        return value

    def _keep(self, result: Any, key: Any) -> Any:
        """Device arrays stay here, under ``key`` (a tuple's under ``"key.i"``); the client gets
        their shape and dtype, and every other value as it is."""
        if type(result) is DeviceArray:
            self.store[key] = result
            return ("array", result.shape, result.dtype.str, key)
        if isinstance(result, (tuple, list)):
            return ("tuple", [self._keep(r, f"{key}.{i}") for i, r in enumerate(result)])
        return ("value", result)


def written(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The keys of the arrays a call was to write: a kernel's written parameters (every array
    it was given when the arguments do not fit its signature), and any callable's ``out``."""
    targets: list[Any] = []
    if isinstance(fn, Kernel):
        sig = fn.signature
        try:
            placed, _ = sig.place_arguments(tuple(args), dict(kwargs))
        except BindingError:
            targets.extend(args)
        else:
            targets.extend(a for a, p in zip(placed, sig.runtime_params) if isinstance(p, ArrayParam) and p.writes)
    else:
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
        except (TypeError, ValueError):  # no signature to read, or arguments that do not fit it
            bound = kwargs
        targets.append(bound.get("out"))
    return [r.key for r in _refs(targets)]


def _refs(values: Any) -> list[Ref]:
    found: list[Ref] = []
    for v in values:
        if type(v) is Ref:
            found.append(v)
        elif type(v) in (tuple, list):
            found.extend(_refs(v))
    return found


def _sendable(exc: Exception) -> Exception:
    """``exc`` if it pickles (to reach the client as itself), else a DistributedError that names it."""
    try:
        pickle.dumps(exc)
    except Exception:
        return DistributedError(f"{type(exc).__name__}: {exc}")
    return exc


def upload(host: Any) -> DeviceArray:
    """``to_device`` on the worker: into its warm session."""
    return as_array(default_session(0).to_device(host))


def download(array: DeviceArray) -> Any:
    return array.to_host()


def noop() -> None:
    """The round trip floor of the call path (``kerneldsl bench distributed``)."""
