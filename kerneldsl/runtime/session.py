"""The Session: one device's retained primary context and everything allocated in it.

Failure model:

- every public operation runs inside ``session.activated()``: it takes the session lock,
  refuses closed / forked / poisoned sessions, pushes the context and pops it afterwards, so
  the caller's thread-local CUDA state is restored and never trusted;
- finalizers only queue raw handles; the queue drains at the next activation and at close;
- a sticky error poisons the session: the first one is kept and every later call raises
  SessionPoisonedError from it; ``close()`` then leaks instead of freeing into a dead context;
- a forked child never touches the driver through its parent's sessions.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .. import logs
from ..errors import (
    ClosedError,
    CudaError,
    DeviceInUseError,
    ForkedProcessError,
    LaunchConfigError,
    SessionCloseError,
    SessionPoisonedError,
    StickyCudaError,
    WrongSessionError,
)
from . import driver, graph, memory, module, staging
from .driver import check
from .handle import Handle, check_same_session
from .stream import Event, Stream, record_sync_event, wait_event

__all__ = ["Handle", "Session", "check_same_session", "default_session"]

log = logs.get("runtime.session")

OPEN, CLOSING, CLOSED = "open", "closing", "closed"

# Close releases live handles kind by kind in this order (after draining the deferred queue).
RELEASE_ORDER = ("event", "graph", "mem", "host", "module", "stream")

# Launch limits of every CUDA device kerneldsl supports (compute capability 7.0 and newer).
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_BLOCK_THREADS = 1024
DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory above this needs a per-function opt-in

_EXIT_CLOSE_TIMEOUT_S = 5.0

_Vendor = TypeVar("_Vendor")  # a library handle type (see Session.vendor_handle)

_ids = itertools.count(1)
_generation = 0  # bumped in a forked child: handles from before the fork are from generation - 1
_open: dict[int, Session] = {}  # strong: an open session lives until close() or exit
_defaults: dict[int, Session] = {}
_registry_lock = threading.Lock()
_poisoned_devices: set[int] = set()  # devices whose primary context a sticky error corrupted
_defaults_lock = threading.Lock()


def check_launch_dims(grid: Any, block: Any, shared: Any) -> bool:
    """Whether a launch of ``grid`` x ``block`` with ``shared`` bytes has threads to run (False for
    an empty grid); LaunchConfigError naming the dimension and its limit for one no device runs.
    Needs no device, so ``Kernel.inspect`` refuses exactly what a call would (a device's own
    shared-memory limit is checked at the launch)."""
    dims = [(f"grid.{a}", v, limit) for a, v, limit in zip("xyz", grid, MAX_GRID)]
    dims += [(f"block.{a}", v, limit) for a, v, limit in zip("xyz", block, MAX_BLOCK)]
    for name, value, limit in dims:
        if type(value) is not int or not 0 <= value <= limit:
            raise LaunchConfigError(f"{name} = {value!r} is outside 0..{limit}")
    if type(shared) is not int or shared < 0:
        raise LaunchConfigError(f"shared = {shared!r} must be a non-negative int (bytes of dynamic shared memory)")
    if 0 in grid:
        return False
    threads = block[0] * block[1] * block[2]
    if not 0 < threads <= MAX_BLOCK_THREADS:
        raise LaunchConfigError(f"block {tuple(block)} has {threads} threads; a block holds 1..{MAX_BLOCK_THREADS}")
    return True


def _release_graph(d: Any, raw: tuple[Any, Any]) -> tuple[Any, ...]:
    result: tuple[Any, ...] = d.cuGraphExecDestroy(raw[0])
    return result if result[0] else d.cuGraphDestroy(raw[1])


_RELEASERS: dict[str, tuple[str, Any]] = {
    "mem": ("cuMemFreeAsync", lambda d, raw: d.cuMemFree(raw)),  # Session._release frees into the pool
    "host": ("cuMemFreeHost", lambda d, raw: d.cuMemFreeHost(raw)),
    "event": ("cuEventDestroy", lambda d, raw: d.cuEventDestroy(raw)),
    "stream": ("cuStreamDestroy", lambda d, raw: d.cuStreamDestroy(raw)),
    "module": ("cuModuleUnload", lambda d, raw: d.cuModuleUnload(raw)),
    "graph": ("cuGraphExecDestroy", _release_graph),
}


class _Activation:
    """``with``-able: lock, (check), make the context current; restore and unlock on exit.

    One instance per session and mode is reused by every call; whether this entry pushed is
    kept on the session's ``_pushed`` stack (only the lock holder touches it). The thread's
    current context is read every time, never trusted from an earlier call: when it already is
    ours nothing is pushed; when the thread has none, ours is made current and left so (what
    the CUDA runtime, CuPy and PyTorch do), so later calls cost one query; a different context
    is pushed over and restored on exit.
    """

    __slots__ = ("_session", "_checked")

    def __init__(self, session: Session, checked: bool) -> None:
        self._session = session
        self._checked = checked

    def __enter__(self) -> Session:
        s = self._session
        s._lock.acquire()
        try:
            if self._checked and not s.usable:
                s._raise_unusable()
            s._pushed.append(s._make_current())
        except BaseException:
            s._lock.release()
            raise
        if self._checked and s._deferred:
            try:
                s._drain_deferred()
            except BaseException:
                self.__exit__(*sys.exc_info())
                raise
        return s

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        s = self._session
        try:
            if s._pushed.pop():
                s._d.cuCtxPopCurrent()
        finally:
            s._lock.release()
        if typ is not None and issubclass(typ, StickyCudaError):
            s._poison_with(exc)


class Session:
    """Owns device ``device``'s primary context, a default stream, and every object made here.

    Use as a context manager, or call ``close()``; open sessions are closed at exit.
    """

    def __init__(self, device: int = 0, pool_limit: int | None = None) -> None:
        """``pool_limit``: the most bytes this session's memory pool may hold (default:
        ``$KERNELDSL_POOL_LIMIT``, else no cap but the device's memory)."""
        limit = _pool_limit(pool_limit)
        d = driver.ensure_init()
        self._d = d
        self.device = device
        self.pid = os.getpid()
        self.generation = _generation
        self.session_id = next(_ids)
        self._lock = threading.RLock()
        self._deferred: collections.deque[tuple[str, Any]] = collections.deque()
        # what handles own, by id of their weak reference (see handle.Handle._own)
        self._handles: dict[int, tuple[weakref.ref[Handle], str, Any]] = {}
        self._streams: weakref.WeakSet[Stream] = weakref.WeakSet()
        self._modules: list[module.Module] = []
        self._inflight: list[tuple[int, Stream | None, Any]] = []
        self._seq = itertools.count()
        self._captures: list[graph.Graph] = []
        self._vendor: dict[str, Any] = {}  # library handles (cuBLAS, ...): see vendor_handle()
        self._staging = staging.StagingPool(self)
        self._poison: StickyCudaError | None = None
        self._forked = False
        self._state = OPEN
        self._activation = _Activation(self, checked=True)
        self._raw_activation = _Activation(self, checked=False)
        self._dev = driver.device(device)
        try:
            self._ctx = check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(self._dev))
        except StickyCudaError as exc:
            raise SessionPoisonedError(
                f"device {device} cannot be used again in this process after {exc.name}: the driver keeps a sticky "
                "error past the reset of the primary context (seen on the H200 with driver 580): restart the process"
            ) from exc
        self.context_address = int(self._ctx)
        self._pushed: list[bool] = []
        self.usable = True  # open, not forked, not poisoned: the one flag the launch paths read
        self._entry_points: dict[str, int] = {}
        self._allocator: Any = None  # the C path's (see native_allocator)
        self._templates: dict[Any, memory.DeviceArray] = {}  # what it copies, by shape and dtype as spelled
        self._shared_granted: dict[int, int] = {}  # function address -> dynamic shared bytes allowed
        try:
            with self._raw_activation:
                self._pool = self._create_pool(limit)
            self.stream = Stream(self)
        except BaseException:
            self.usable, self._state = False, CLOSED
            d.cuDevicePrimaryCtxRelease(self._dev)
            raise
        self._stream_cu = self.stream._cu
        with _registry_lock:
            _open[self.session_id] = self
        log.debug("opened session %d on device %d", self.session_id, device)

    # -- state -------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """'open', 'closing' or 'closed' (poisoned and forked sessions stay 'open' until closed)."""
        return self._state

    @property
    def closed(self) -> bool:
        return self._state == CLOSED

    @property
    def capturing(self) -> bool:
        """Whether a CUDA graph is being captured: work enqueued now is recorded, not run."""
        return bool(self._captures)

    def fast_path_watch(self) -> tuple[collections.deque[tuple[str, Any]], list[graph.Graph]]:
        """The two containers the C launch path watches (the release queue of finalizers and the
        active captures): while either is non-empty, calls take the Python path."""
        return self._deferred, self._captures

    def fast_allocation(self) -> tuple[int, int, int, int, int, int, Any, Any, Any, Any]:
        """What the C launch path needs to allocate arrays from the pool itself: the entry
        points of cuMemAllocFromPoolAsync, cuMemFreeAsync and cuCtxGetCurrent (0 when the driver
        has none), the pool, the context's address, the session stream, the session lock, the
        handle registry, the finalizer (see ``handle.Handle._own``) and the set of streams.

        Its contract: it allocates only holding the lock (taken without waiting), with this
        context current on the calling thread and no capture active; it first frees the device
        memory finalizers queued, as ``_drain_deferred`` would, and only while the session stream
        is the only stream (else frees must wait for the others); anything else, a driver error
        included, is left to ``DeviceArray``'s constructor (trim and retry, OutOfMemoryError)."""
        names = ("cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuCtxGetCurrent")
        alloc, free, current = (self.entry_point(name) for name in names)
        return (
            alloc,
            free,
            current,
            int(self._pool),
            self.context_address,
            int(self._stream_cu),
            self._lock,
            self._handles,
            self._handle_dropped,
            self._streams,
        )

    def native_allocator(self) -> Any:
        """The C path's allocator of this session (see ``fast_allocation``), made on first use;
        None when the C path is off."""
        allocator = self._allocator
        if allocator is None:
            make = memory.native_allocator_type
            if make is None:
                return None
            allocator = self._allocator = make(self)
        return allocator

    def template(self, shape: Any, dtype: Any) -> memory.DeviceArray:
        """``DeviceArray.template(self, shape, dtype)``, made once per spelling of shape and dtype."""
        try:
            return self._templates[(type(shape), shape, dtype)]
        except KeyError:
            if len(self._templates) >= memory.MAX_LAYOUTS:
                self._templates.clear()
            made = self._templates[(type(shape), shape, dtype)] = memory.DeviceArray.template(self, shape, dtype)
            return made

    @property
    def poisoned(self) -> bool:
        return self._poison is not None

    @property
    def forked(self) -> bool:
        return self._forked

    def _raise_unusable(self) -> None:
        if self._forked:
            raise ForkedProcessError(
                f"session {self.session_id} (device {self.device}) was created in process {self.pid}; "
                f"this is forked child {os.getpid()}: CUDA state does not survive fork(). "
                "Create sessions in the child, or use the 'spawn' start method."
            )
        if self._poison is not None:
            raise SessionPoisonedError(
                f"session {self.session_id} (device {self.device}) is unusable after {self._poison.name} in "
                f"{self._poison.api}; the CUDA context is corrupted: close every session on device {self.device} "
                "(its primary context is then reset) or call kd.reset_device, then open a new Session; where the "
                "driver keeps the error for the whole process, restart the process"
            ) from self._poison
        raise ClosedError(f"session {self.session_id} (device {self.device}) is {self._state}")

    def _poison_with(self, exc: StickyCudaError) -> None:
        if self._poison is None:
            self._poison = exc
            self.usable = False
            with _registry_lock:
                _poisoned_devices.add(self.device)
            log.debug("session %d poisoned by %s", self.session_id, exc)

    def _make_current(self) -> bool:
        """Make our context current on this thread; True when it was pushed (pop it afterwards)."""
        d = self._d
        err, current = d.cuCtxGetCurrent()
        if err:
            raise driver.error("cuCtxGetCurrent", err)
        address = int(current) if current is not None else 0
        if address == self.context_address:
            return False
        if address == 0:
            err = d.cuCtxSetCurrent(self._ctx)[0]
            if err:
                raise driver.error("cuCtxSetCurrent", err)
            return False
        err = d.cuCtxPushCurrent(self._ctx)[0]
        if err:
            raise driver.error("cuCtxPushCurrent", err)
        return True

    def activated(self) -> _Activation:
        """``with session.activated():`` run driver calls with this context current (and locked)."""
        return self._activation

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        flags = " poisoned" if self.poisoned else " forked" if self._forked else ""
        return f"<Session {self.session_id} device={self.device} {self._state}{flags}>"

    # -- launch hot path -----------------------------------------------------------------------

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Stream | None,
        params: int,
    ) -> None:
        """cuLaunchKernel on ``stream`` (default: the session stream) with ``params`` the address
        of a ``void*[]`` kernel-parameter array. The warm path: attribute reads, no allocation.

        A CUfunction carries its context, so the launch needs no context switch; a driver that
        asks for a current context anyway (CUDA_ERROR_INVALID_CONTEXT) gets one, pushed and popped.
        An empty grid (zero-size arrays) is nothing to do: the call succeeds without a launch.
        """
        with self._lock:
            if not self.usable:
                self._raise_unusable()
            gx, gy, gz = grid
            bx, by, bz = block
            plain = type(gx) is int and type(gy) is int and type(gz) is int and type(shared) is int
            plain = plain and type(bx) is int and type(by) is int and type(bz) is int
            if not (
                plain
                and 0 < gx <= MAX_GRID[0]
                and 0 < gy <= MAX_GRID[1]
                and 0 < gz <= MAX_GRID[2]
                and 0 < bx * by * bz <= MAX_BLOCK_THREADS
                and bx <= MAX_BLOCK[0]
                and by <= MAX_BLOCK[1]
                and bz <= MAX_BLOCK[2]
                and 0 <= shared <= DEFAULT_SHARED_LIMIT
            ) and not self._unusual_launch(function, grid, block, shared):
                return
            if stream is None:
                h = self._stream_cu
            elif stream.session is self and not stream._closed:
                h = stream._cu
            else:
                self._bad_stream(stream)
            if self._deferred:
                with self._activation:  # entering an activation frees what finalizers queued
                    pass
            err = self._d.cuLaunchKernel(
                function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, h, params, 0
            )[0]
            if err == driver.ERROR_INVALID_CONTEXT:
                with self._raw_activation:
                    err = self._d.cuLaunchKernel(
                        function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, h, params, 0
                    )[0]
            if err:
                self._launch_failed(err)

    def _unusual_launch(self, function: Any, grid: Any, block: Any, shared: Any) -> bool:
        """The slow path of a launch outside the plain limits: False for an empty grid (nothing to
        launch), True once dynamic shared memory above 48 KiB is allowed for ``function``;
        LaunchConfigError for anything the device cannot run."""
        if not check_launch_dims(grid, block, shared):
            return False
        if shared > DEFAULT_SHARED_LIMIT:
            self._allow_dynamic_shared(function, shared)
        return True

    def _allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        """Opt ``function`` in to ``nbytes`` of dynamic shared memory (above 48 KiB CUDA asks for it)."""
        key = int(function)
        if self._shared_granted.get(key, 0) >= nbytes:
            return
        d = self._d
        with self._raw_activation:
            optin = int(
                check(
                    "cuDeviceGetAttribute",
                    d.cuDeviceGetAttribute(
                        d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self._dev
                    ),
                )
            )
            static = int(
                check(
                    "cuFuncGetAttribute",
                    d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
                )
            )
            if static + nbytes > optin:
                raise LaunchConfigError(
                    f"shared = {nbytes} bytes of dynamic shared memory (plus {static} static) exceeds the "
                    f"{optin} bytes a block may use on device {self.device}"
                )
            attribute = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check("cuFuncSetAttribute", d.cuFuncSetAttribute(function, attribute, nbytes))
        self._shared_granted[key] = nbytes

    def entry_point(self, name: str) -> int:
        """Address of driver function ``name`` for the C launch path; 0 when there is none."""
        address = self._entry_points.get(name)
        if address is None:
            with self._activation:
                address = self._entry_points[name] = driver.entry_point(name)
        return address

    def _bad_stream(self, stream: Stream) -> None:
        stream._check()
        raise WrongSessionError(
            f"stream of session {stream.session.session_id} used to launch in session {self.session_id}"
        )

    def _launch_failed(self, err: int) -> None:
        exc = driver.error("cuLaunchKernel", err, launch=True)
        if isinstance(exc, StickyCudaError):
            self._poison_with(exc)
        raise exc

    # -- deferred frees, keep-alive, synchronization -------------------------------------------

    def _handle_dropped(self, ref: weakref.ref[Handle]) -> None:
        """A handle's finalizer (a weak reference callback, any thread): queue what it still owns."""
        owned = self._handles.pop(id(ref), None)
        if owned is not None:
            self._deferred.append((owned[1], owned[2]))

    def _take_all(self) -> list[tuple[str, Any]]:
        """Close every handle and hand back what they owned, ``(kind, raw)`` (dead ones too)."""
        taken = []
        for key, (ref, kind, raw) in list(self._handles.items()):
            handle = ref()
            if handle is not None:
                raw = handle._take()
            elif self._handles.pop(key, None) is None:
                raw = None
            if raw is not None:
                taken.append((kind, raw))
        return taken

    def _release(self, kind: str, raw: Any) -> None:
        """Free one raw handle now (session activated); device memory goes back to the pool."""
        if kind == "mem":
            self._free_device(raw)
            return
        api, release = _RELEASERS[kind]
        check(api, release(self._d, raw))

    # -- the stream-ordered memory pool ----------------------------------------------------

    def _create_pool(self, limit: int | None) -> Any:
        """This session's memory pool on its device: allocations cost microseconds, frees never
        synchronize the device, and memory stays reserved for reuse (release threshold: all)."""
        d = self._d
        props = d.CUmemPoolProps()
        props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = self.device
        if limit is not None:
            props.maxSize = limit
        pool = check("cuMemPoolCreate", d.cuMemPoolCreate(props))
        threshold = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        check("cuMemPoolSetAttribute", d.cuMemPoolSetAttribute(pool, threshold, d.cuuint64_t(2**64 - 1)))
        return pool

    def allocate(self, nbytes: int) -> int:
        """``nbytes`` of device memory from the pool, ordered on the session stream (session
        activated); a request that does not fit trims the pool and tries once more."""
        d = self._d
        result = d.cuMemAllocFromPoolAsync(nbytes, self._pool, self._stream_cu)
        if result[0] == driver.ERROR_OUT_OF_MEMORY:
            self._trim_pool()
            result = d.cuMemAllocFromPoolAsync(nbytes, self._pool, self._stream_cu)
        return int(check("cuMemAllocFromPoolAsync", result, requested=nbytes))

    def _free_device(self, ptr: Any) -> None:
        """Return ``ptr`` to the pool on the session stream, after the work queued so far on every
        stream of the session (session activated): memory used on another stream is never
        reused while that stream may still touch it. A closing session has synchronized; during a
        capture the free waits for the capture's end (inside it, it would become a graph node)."""
        if self._captures:
            self._deferred.append(("mem", ptr))
            return
        if self._state == OPEN and len(self._streams) > 1:
            for other in self._live_streams():
                if other is not self.stream:
                    self._wait_for(self._stream_cu, other._cu)
        check("cuMemFreeAsync", self._d.cuMemFreeAsync(ptr, self._stream_cu))

    def trim(self) -> None:
        """Return the pool's unused memory to the device (after the work queued so far)."""
        with self._activation:
            self._trim_pool()

    def _trim_pool(self) -> None:
        """Synchronize every stream (the driver releases freed memory only once it has seen the
        frees complete through a synchronizing call), then release all the pool does not use."""
        d = self._d
        for stream in self._live_streams():
            check("cuStreamSynchronize", d.cuStreamSynchronize(stream._cu))
        check("cuMemPoolTrimTo", d.cuMemPoolTrimTo(self._pool, 0))

    def _drain_deferred(self, errors: list[BaseException] | None = None) -> None:
        """Free what finalizers queued. Non-sticky failures are logged (or collected by close)."""
        if self._captures:
            return
        queue = self._deferred
        while queue:
            try:
                kind, raw = queue.popleft()
            except IndexError:
                break
            try:
                self._release(kind, raw)
            except StickyCudaError as exc:
                self._poison_with(exc)
                raise
            except CudaError as exc:
                if errors is None:
                    log.warning("freeing a dropped %s handle failed: %s", kind, exc)
                else:
                    errors.append(exc)

    def keep_alive(self, obj: Any, stream: Stream | None = None) -> None:
        """Hold ``obj`` until a sync proves the work queued so far finished.

        ``stream=None``: released only by ``Session.synchronize``; else also by syncing that
        stream. Objects registered during a graph capture also live as long as the graph.
        """
        with self._lock:
            self._inflight.append((next(self._seq), stream, obj))
            for g in self._captures:
                g.keep_alive(obj)

    def _live_streams(self) -> list[Stream]:
        return [h for h in list(self._streams) if not h._closed]

    def _wait_streams(
        self, streams: list[Stream], timeout: float | None, *, session_wide: bool = True, checked: bool = True
    ) -> bool:
        """Wait for the work queued so far on ``streams``; then drop the keep-alives it covered
        (all of them if ``session_wide``, else those tagged with the one stream)."""
        activation = self._activation if checked else self._raw_activation
        with activation:
            seq = next(self._seq)
            events = [record_sync_event(self, s._cu) for s in streams]
        try:
            done = all(wait_event(self, ev, timeout, checked=checked) for ev in events)
        finally:
            self._deferred.extend(("event", ev) for ev in events)
        if done:
            self._release_inflight(seq, None if session_wide else streams[0])
        return done

    def _release_inflight(self, seq: int, only: Stream | None) -> None:
        with self._lock:
            self._inflight = [e for e in self._inflight if e[0] >= seq or (only is not None and e[1] is not only)]

    def synchronize(self, timeout: float | None = None) -> bool:
        """Wait (interruptibly, Ctrl-C works) for all streams of the session; False on timeout."""
        with self._activation:
            streams = self._live_streams()
        return self._wait_streams(streams, timeout)

    def _order_streams(self, waiter: Any, producer: Any) -> None:
        """Make stream ``waiter`` wait for the work queued so far on ``producer`` (raw handles;
        either may be foreign: 1 is the legacy default stream, 2 the per-thread one)."""
        with self._activation:
            self._wait_for(waiter, producer)

    def _wait_for(self, waiter: Any, producer: Any) -> None:
        """``_order_streams`` with the session already activated."""
        ev = record_sync_event(self, producer)
        try:
            check("cuStreamWaitEvent", self._d.cuStreamWaitEvent(waiter, ev, 0))
        finally:
            self._deferred.append(("event", ev))

    def memory_info(self) -> MemoryInfo:
        """Device memory free and total (cuMemGetInfo), and what this session's pool holds:
        reserved from the device, and in use by live arrays (bytes)."""
        d = self._d
        attr = d.CUmemPool_attribute
        with self._activation:
            free, total = check("cuMemGetInfo", d.cuMemGetInfo())
            reserved = d.cuMemPoolGetAttribute(self._pool, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
            used = d.cuMemPoolGetAttribute(self._pool, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
            reserved, used = check("cuMemPoolGetAttribute", reserved), check("cuMemPoolGetAttribute", used)
        return MemoryInfo(int(free), int(total), int(reserved), int(used))

    # -- factories -------------------------------------------------------------------------------

    def empty(self, shape: Any, dtype: Any = np.float32) -> memory.DeviceArray:
        return memory.empty(self, shape, dtype)

    def zeros(self, shape: Any, dtype: Any = np.float32) -> memory.DeviceArray:
        return memory.zeros(self, shape, dtype)

    def empty_like(self, a: Any) -> memory.DeviceArray:
        return memory.empty(self, a.shape, a.dtype)

    def zeros_like(self, a: Any) -> memory.DeviceArray:
        return memory.zeros(self, a.shape, a.dtype)

    def to_device(self, host: Any) -> memory.DeviceArray:
        return memory.to_device(self, host)

    def copy(self, a: memory.DeviceArray) -> memory.DeviceArray:
        return memory.copy(self, a)

    def pinned_empty(self, shape: Any, dtype: Any = np.float32) -> memory.PinnedArray:
        return memory.pinned_empty(self, shape, dtype)

    def host_staging(self, nbytes: int) -> staging.StagingBuffer | None:
        """Lend a pinned buffer of at least ``nbytes`` to stage one call's host transfers through
        (see ``runtime.staging``); None when the call should copy directly: too large, every
        buffer lent, or a graph being captured. Give it back with ``return_staging``."""
        if self._captures:
            return None
        return self._staging.acquire(nbytes)

    def return_staging(self, buf: staging.StagingBuffer, done: bool) -> None:
        """Take back a lent buffer; ``done``: its transfers finished (else it is kept alive, not reused)."""
        if done:
            self._staging.release(buf)
        else:
            self._staging.discard(buf)

    def create_stream(self) -> Stream:
        return Stream(self)

    def create_event(self, timing: bool = True) -> Event:
        return Event(self, timing)

    def load_module(self, cubin: bytes) -> module.Module:
        """Load a cubin; it stays loaded until the session closes (or ``Module.close()``)."""
        return module.Module(self, cubin)

    def capture(self, stream: Stream | None = None) -> contextlib.AbstractContextManager[graph.Graph]:
        """``with s.capture() as g: ...`` records the work on ``stream``; then ``g.replay()``.

        Allocate, upload and synchronize before the block: inside it only launches and
        device-to-device work may be enqueued (CUDA refuses the rest during capture).
        """
        return graph.capture(self, stream)

    def vendor_handle(self, key: str, create: Callable[[Session], _Vendor]) -> _Vendor:
        """The library handle registered as ``key`` (e.g. ``"cublas"``), made by ``create(self)`` on first use.

        ``create`` runs with the session activated. The object it returns must have
        ``release()`` (destroy the library handle; close() calls it with the context current,
        before any other handle is freed, collecting what it raises) and ``abandon()`` (forget
        it without calling the library: forked child, poisoned context).
        """
        handle: _Vendor | None = self._vendor.get(key)
        if handle is None:
            with self._activation:
                handle = self._vendor.get(key)
                if handle is None:
                    handle = self._vendor[key] = create(self)
        return handle

    # -- close -------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Refuse new work, wait for queued work, free everything, release the context.

        Idempotent. Failures are collected and raised once as SessionCloseError after the
        session is closed. A poisoned session (or one whose work did not finish within
        ``timeout`` seconds) leaks its memory instead of freeing into a broken context; a forked
        child only forgets its handles.
        """
        errors: list[BaseException] = []
        with self._lock:
            if self._state == CLOSED:
                return
            self._state, self.usable = CLOSING, False
            if self._forked:
                self._abandon()
                release_ctx = False
            else:
                finished = self._poison is None and self._finish_work(timeout, errors)
                if finished and self._poison is None:
                    self._free_all(errors)
                else:
                    self._abandon()
                # after a timeout work may still run in the context: leave it to process exit
                release_ctx = finished or self._poison is not None
            if release_ctx:
                try:
                    check("cuDevicePrimaryCtxRelease", self._d.cuDevicePrimaryCtxRelease(self._dev))
                except CudaError as exc:
                    if self._poison is None:  # a dead context may refuse; that is already known
                        errors.append(exc)
            self._state = CLOSED
            self._inflight.clear()
            self._modules.clear()
        with _registry_lock:
            _open.pop(self.session_id, None)
            last_after_poison = self.device in _poisoned_devices and not _sessions_on(self.device)
        if last_after_poison and not self._forked:
            _reset_primary_context(self.device, errors)
        log.debug("closed session %d (%d error(s))", self.session_id, len(errors))
        if errors:
            raise SessionCloseError(errors) from errors[0]

    def _finish_work(self, timeout: float | None, errors: list[BaseException]) -> bool:
        """Wait for every stream; False when the memory must leak (timeout or sticky error)."""
        try:
            if self._wait_streams(self._live_streams(), timeout, checked=False):
                return True
            errors.append(TimeoutError(f"work on session {self.session_id} did not finish within {timeout} s"))
        except StickyCudaError as exc:
            self._poison_with(exc)
            errors.append(exc)
        except CudaError as exc:
            errors.append(exc)
            return True
        return False

    def _free_all(self, errors: list[BaseException]) -> None:
        with self._raw_activation:
            self._captures.clear()
            self._drain_deferred(errors)
            vendor, self._vendor = self._vendor, {}
            for handle in vendor.values():  # library handles first: they may use buffers and streams
                try:
                    handle.release()
                except Exception as exc:
                    errors.append(exc)
            self._drain_deferred(errors)  # what the library handles dropped (their workspaces)
            owned = self._take_all()
            for kind in RELEASE_ORDER:
                for k, raw in owned:
                    if k != kind:
                        continue
                    try:
                        self._release(kind, raw)
                    except CudaError as exc:
                        errors.append(exc)
            try:  # last: the driver orders the frees above before the pool's destruction
                check("cuMemPoolDestroy", self._d.cuMemPoolDestroy(self._pool))
            except CudaError as exc:
                errors.append(exc)

    def _abandon(self) -> None:
        """Forget every handle without calling the driver (forked child, poisoned context)."""
        vendor, self._vendor = self._vendor, {}
        for handle in vendor.values():
            handle.abandon()
        self._take_all()
        self._deferred.clear()


class MemoryInfo(NamedTuple):
    """``Session.memory_info()``: device-wide free and total, then this session's pool."""

    free: int
    total: int
    pool_reserved: int
    pool_used: int


POOL_LIMIT_ENV = "KERNELDSL_POOL_LIMIT"


def _pool_limit(explicit: int | None) -> int | None:
    """The pool's cap in bytes: ``explicit``, else ``$KERNELDSL_POOL_LIMIT``, else none."""
    value: Any = explicit if explicit is not None else os.environ.get(POOL_LIMIT_ENV)
    if value is None:
        return None
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"pool_limit must be a number of bytes, not {value!r} (or ${POOL_LIMIT_ENV})") from None
    if limit <= 0:
        raise ValueError(f"pool_limit must be a positive number of bytes, not {limit}")
    return limit


def default_session(device: int = 0) -> Session:
    """This process's shared session for ``device``, created on first use (again after close)."""
    s = _defaults.get(device)
    if s is None or s._state != OPEN:
        with _defaults_lock:
            s = _defaults.get(device)
            if s is None or s._state != OPEN:
                s = _defaults[device] = Session(device)
    return s


def _sessions_on(device: int) -> list[Session]:
    """Open sessions of ``device`` (registry lock held)."""
    return [s for s in _open.values() if s.device == device]


def _reset_primary_context(device: int, errors: list[BaseException]) -> None:
    """Destroy ``device``'s primary context so the next Session retains a fresh one: the way back
    after a sticky error, taken only once no session of this process uses the device."""
    with _registry_lock:
        _poisoned_devices.discard(device)
    try:
        d = driver.ensure_init()
        check("cuDevicePrimaryCtxReset", d.cuDevicePrimaryCtxReset(driver.device(device)))
        log.info("reset the primary context of device %d after a sticky error", device)
    except CudaError as exc:
        errors.append(exc)


def reset_device(device: int = 0) -> None:
    """Reset ``device``'s primary context after a sticky error so that a new Session works in this
    process. Closes the poisoned sessions on it first; refuses (DeviceInUseError) while a session
    that has seen no error is open there: a healthy session is never reset behind its owner's
    back. Other libraries sharing the primary context (CuPy, PyTorch) lose their state on the
    device too, which the sticky error had already corrupted."""
    with _registry_lock:
        sessions = _sessions_on(device)
    healthy = [s.session_id for s in sessions if not s.poisoned]
    if healthy:
        raise DeviceInUseError(
            f"cannot reset device {device}: session(s) {healthy} are open and healthy; close them first"
        )
    errors: list[BaseException] = []
    for s in sessions:
        try:
            s.close()
        except SessionCloseError as exc:
            errors.extend(exc.errors)
    _reset_primary_context(device, errors)
    if errors:
        raise SessionCloseError(errors) from errors[0]


def open_sessions() -> list[Session]:
    """Sessions of this process that are not closed yet."""
    with _registry_lock:
        return list(_open.values())


def _after_fork_in_child() -> None:
    """Mark every inherited session forked; fresh locks (a parent thread may have held one)."""
    global _generation, _registry_lock, _defaults_lock
    _generation += 1
    _registry_lock = threading.Lock()
    _defaults_lock = threading.Lock()
    for s in _open.values():
        s._forked = True
        s.usable = False
        s._lock = threading.RLock()
    _open.clear()
    _defaults.clear()


def _close_all_at_exit() -> None:
    """Best effort at interpreter exit: bounded, silent, never raises."""
    for s in open_sessions():
        try:
            s.close(timeout=_EXIT_CLOSE_TIMEOUT_S)
        except BaseException:
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
