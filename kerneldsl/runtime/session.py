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

import collections
import contextlib
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import numpy as np

from .. import logs
from ..errors import (
    CheckConfigError,
    ClosedError,
    CudaError,
    ForkedProcessError,
    SessionCloseError,
    SessionPoisonedError,
    StickyCudaError,
)
from . import driver, graph, memory, module, pinned, session_launch, shapes, staging, teardown
from . import session_registry as registry
from .checks import NO_CHECKS, Checks, environment_checks, output_for, parse_checks, require_address_sanitizer
from .context import Activation, Context
from .device import Device
from .handle import Handle, OwnedHandles, check_same_session
from .pool import FastAllocation, MemoryInfo, MemoryPool, resolve_pool_limit
from .selection import CPU, DEVICE_ENV, DeviceSpec, resolve_device
from .session_registry import open_sessions, reset_device
from .stream import Event, Stream, StreamOrder
from .vendor import VendorHandles

__all__ = [
    "Handle",
    "Session",
    "check_same_session",
    "default_session",
    "open_sessions",
    "reset_device",
    "session_of",
]

log = logs.get("runtime.session")

OPEN, CLOSING, CLOSED = "open", "closing", "closed"

_Vendor = TypeVar("_Vendor")  # a library handle type (see Session.vendor_handle)

if TYPE_CHECKING:  # PEP 696: a bare ``Session`` makes the runtime's own buffers
    from typing_extensions import Self
    from typing_extensions import TypeVar as DefaultTypeVar

    ArrayT = DefaultTypeVar("ArrayT", bound=memory.DeviceBuffer, covariant=True, default=memory.DeviceBuffer)
else:
    ArrayT = TypeVar("ArrayT", bound=memory.DeviceBuffer, covariant=True)


class Session(Generic[ArrayT]):
    """Owns device ``device``'s primary context, a default stream, and every object made here.

    Use as a context manager, or call ``close()``; open sessions are closed at exit. Generic, for type checkers,
    in the array type its factories make: the runtime cannot name the array layer's ``DeviceArray``
    (``kd.Session`` is ``Session[DeviceArray]``, see ``array.sessions``)."""

    def __init__(
        self, device: DeviceSpec | None = None, pool_limit: int | None = None, checks: str | None = None
    ) -> None:
        """``device``: a GPU ordinal or ``"cpu"`` (the CPU device); None picks as ``selection.resolve_device``
        says. ``pool_limit``: the most bytes this session's memory pool may hold (default:
        ``$KERNELDSL_POOL_LIMIT``, else no cap but the device's memory). ``checks``: checked execution on
        the CPU device (``"all"``, ``"bounds,races"``; default ``$KERNELDSL_CHECKS``; see ``runtime.checks``)."""
        limit = resolve_pool_limit(pool_limit)
        self.device: DeviceSpec = resolve_device(device)
        host = self.device == CPU
        self.api: Any = (d := _bindings_of(host))  # the driver bindings this session's handles belong to
        self.pid = os.getpid()
        self.generation = registry.generation
        self.session_id = next(registry.ids)
        self.lock = threading.RLock()
        self.owned: OwnedHandles = OwnedHandles(self)
        self.order: StreamOrder = StreamOrder(self)
        self._deferred = self.owned.deferred  # what the launch path reads
        self.modules: list[module.Module] = []  # loaded, kept until close (or Module.close)
        self.captures: list[graph.Graph] = []  # graphs being captured now (see graph.capture)
        self.vendors = VendorHandles(self)  # library handles (cuBLAS, ...): see vendor_handle()
        self.staging = staging.StagingPool(self)
        self._poison: StickyCudaError | None = None
        self._forked = False
        self._state = OPEN
        wanted = session_checks(checks, host)
        self.gpu: Device = Device(d, 0 if host else int(self.device), host, output_for(wanted), wanted.empty_buffers)
        self.context = Context(d, self.gpu)
        self.context_address: int = self.context.address
        deferred, drain = self.owned.deferred, self.owned.drain
        self._activation = Activation(self, self.context, deferred, drain, checked=True)
        self._raw_activation = Activation(self, self.context, deferred, drain, checked=False)
        self.usable = True  # open, not forked, not poisoned: the one flag the launch paths read
        self._entry_points: dict[str, int] = {}
        self._allocator: Any = None  # the C path's (see native_allocator)
        self._templates: dict[Any, memory.DeviceBuffer] = {}  # what it copies, by shape and dtype as spelled
        self._shared_granted: dict[int, int] = {}  # function address -> dynamic shared bytes allowed
        try:
            with self._raw_activation:
                self.pool: MemoryPool = MemoryPool(self, limit)
            self.stream: Stream = Stream(self)
        except BaseException:
            self.usable, self._state = False, CLOSED
            d.cuDevicePrimaryCtxRelease(self.gpu.handle)
            raise
        self.raw_stream: Any = self.stream._cu  # the session stream's CUstream
        registry.add(self)
        log.debug("opened session %d on device %s", self.session_id, self.device)

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
        """True while a CUDA graph is being captured; work enqueued now is recorded, not run."""
        return bool(self.captures)

    @property
    def poisoned(self) -> bool:
        return self._poison is not None

    @property
    def forked(self) -> bool:
        return self._forked

    def fast_path_watch(self) -> tuple[collections.deque[tuple[str, Any]], list[graph.Graph]]:
        """The two containers the C launch path watches (the release queue of finalizers and the
        active captures): while either is non-empty, calls take the Python path."""
        return self._deferred, self.captures

    def fast_allocation(self) -> FastAllocation:
        """What the C launch path needs to allocate arrays from the pool itself (see FastAllocation)."""
        return FastAllocation(self)

    def native_allocator(self) -> Any:
        """The C path's allocator of this session, made on first use; None when the C path is off."""
        allocator = self._allocator
        if allocator is None:
            make = memory.native_allocator_type
            if make is None:
                return None
            allocator = self._allocator = make(self)
        return allocator

    def template(self, shape: Any, dtype: Any) -> memory.DeviceBuffer:
        """``memory.array_type.template(self, shape, dtype)``, made once per spelling of shape and dtype."""
        try:
            return self._templates[(type(shape), shape, dtype)]
        except KeyError:
            if len(self._templates) >= shapes.MAX_LAYOUTS:
                self._templates.clear()
            made = self._templates[(type(shape), shape, dtype)] = memory.array_type.template(self, shape, dtype)
            return made

    def raise_unusable(self) -> None:
        """Raise why this session refuses work: forked, poisoned (from the sticky error), or closed."""
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

    def poison(self, exc: StickyCudaError) -> None:
        """Keep ``exc``, the first sticky error, and refuse every later call with it."""
        if self._poison is None:
            self._poison = exc
            self.usable = False
            registry.mark_poisoned(self.device)
            log.debug("session %d poisoned by %s", self.session_id, exc)

    def _after_fork(self) -> None:
        """In a forked child: refuse all work, never call the driver, fresh lock."""
        self._forked = True
        self.usable = False
        self.lock = threading.RLock()

    def activated(self) -> Activation:
        """``with session.activated():`` run driver calls with this context current (and locked)."""
        return self._activation

    def activated_unchecked(self) -> Activation:
        """``activated()`` for close and recovery: a closing, forked or poisoned session is not
        refused, and what finalizers queued is not freed on entry."""
        return self._raw_activation

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        flags = " poisoned" if self.poisoned else " forked" if self._forked else ""
        return f"<Session {self.session_id} device={self.device} {self._state}{flags}>"

    # -- launch hot path (session_launch.py: the same functions, bound as methods) -------------

    launch = session_launch.launch
    launch_ex = session_launch.launch_ex  # cooperative and cluster launches (cuLaunchKernelEx)
    co_resident_blocks = session_launch.co_resident_blocks
    launch_failed = session_launch.launch_failed  # the C path's launches raise through it
    entry_point = session_launch.entry_point

    # -- memory and synchronization -------------------------------------------------------------

    def allocate(self, nbytes: int) -> int:
        """``nbytes`` of device memory from the pool, ordered on the session stream (session
        activated); a request that does not fit trims the pool and tries once more."""
        return self.pool.allocate(nbytes)

    def trim(self) -> None:
        """Return the pool's unused memory to the device (after the work queued so far)."""
        with self._activation:
            self.pool.trim()

    def memory_info(self) -> MemoryInfo:
        """Device memory free and total (cuMemGetInfo), and what this session's pool holds:
        reserved from the device, and in use by live arrays (bytes)."""
        with self._activation:
            return self.pool.info()

    def keep_alive(self, obj: Any, stream: Stream | None = None) -> None:
        """Hold ``obj`` until a sync proves the work queued so far finished.

        ``stream=None``: released only by ``Session.synchronize``; else also by syncing that stream. Objects
        registered during a graph capture also live as long as the graph."""
        self.order.keep_alive(obj, stream)

    def synchronize(self, timeout: float | None = None) -> bool:
        """Wait (interruptibly, Ctrl-C works) for all streams of the session; False on timeout."""
        return self.order.wait(None, timeout)

    # -- factories -------------------------------------------------------------------------------

    def empty(self, shape: Any, dtype: Any = np.float32) -> ArrayT:
        """A new array of ``shape`` and ``dtype`` from the session's pool, not initialised (session stream)."""
        return cast(ArrayT, memory.empty(self, shape, dtype))

    def zeros(self, shape: Any, dtype: Any = np.float32) -> ArrayT:
        """A new array of ``shape`` and ``dtype`` from the session's pool, zeroed on the session stream."""
        return cast(ArrayT, memory.zeros(self, shape, dtype))

    def empty_like(self, a: Any) -> ArrayT:
        """``empty`` with the shape and dtype of ``a`` (any array)."""
        return cast(ArrayT, memory.empty(self, a.shape, a.dtype))

    def zeros_like(self, a: Any) -> ArrayT:
        """``zeros`` with the shape and dtype of ``a`` (any array)."""
        return cast(ArrayT, memory.zeros(self, a.shape, a.dtype))

    def to_device(self, host: Any) -> ArrayT:
        """A device copy of ``host`` (anything ``np.asarray`` takes), after the queued work; returns once copied."""
        return cast(ArrayT, memory.to_device(self, host))

    def copy(self, a: memory.DeviceBuffer) -> ArrayT:
        return cast(ArrayT, memory.copy(self, a))

    def pinned_empty(self, shape: Any, dtype: Any = np.float32) -> pinned.PinnedArray:
        return pinned.pinned_empty(self, shape, dtype)

    def create_stream(self) -> Stream:
        """A new stream: pass it as ``stream=``; order it after the session stream with ``wait(event)``."""
        return Stream(self)

    def create_event(self, timing: bool = True) -> Event:
        """A new event to ``record()`` on a stream, ``wait`` on, ``synchronize()`` or time (``elapsed_since``)."""
        return Event(self, timing)

    def load_module(self, cubin: bytes) -> module.Module:
        """Load a cubin; it stays loaded until the session closes (or ``Module.close()``)."""
        return module.Module(self, cubin)

    def capture(self, stream: Stream | None = None) -> contextlib.AbstractContextManager[graph.Graph]:
        """``with s.capture() as g: ...`` records the work on ``stream``; then ``g.replay()``.

        Allocate, upload and synchronize before the block: inside it only launches and device-to-device work
        may be enqueued (CUDA refuses the rest during capture)."""
        return graph.capture(self, stream)

    def vendor_handle(self, key: str, create: Callable[[Session], _Vendor]) -> _Vendor:
        """The library handle registered as ``key`` (e.g. ``"cublas"``), made by ``create(self)`` on first use.

        ``create`` runs with the session activated. The object it returns must have ``release()`` (destroy the
        library handle; close() calls it with the context current, before any other handle is freed, collecting
        what it raises) and ``abandon()`` (forget it without calling the library: forked child, poisoned context)."""
        return self.vendors.get(key, create)

    # -- close -------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Refuse new work, wait for queued work, free everything, release the context.

        Idempotent. Failures are collected and raised once as SessionCloseError after the session is closed. A
        poisoned session (or one whose work did not finish within ``timeout`` seconds) leaks its memory instead of
        freeing into a broken context; a forked child only forgets its handles."""
        errors: list[BaseException] = []
        with self.lock:
            if self._state == CLOSED:
                return
            self._state, self.usable = CLOSING, False
            if self._forked:
                teardown.abandon(self)
                release_ctx = False
            else:
                finished = self._poison is None and teardown.finish_work(self, timeout, errors)
                if finished and self._poison is None:
                    teardown.free_all(self, errors)
                else:
                    teardown.abandon(self)
                # after a timeout work may still run in the context: leave it to process exit
                release_ctx = finished or self._poison is not None
            if release_ctx:
                try:
                    self.context.release()
                except CudaError as exc:
                    if self._poison is None:  # a dead context may refuse; that is already known
                        errors.append(exc)
            self._state = CLOSED
            self.order.inflight.clear()
            self.modules.clear()
        registry.remove(self, errors)
        log.debug("closed session %d (%d error(s))", self.session_id, len(errors))
        if errors:
            raise SessionCloseError(errors) from errors[0]


def session_checks(spec: str | None, host: bool) -> Checks:
    """The checks a session runs: ``spec``, else ``$KERNELDSL_CHECKS``; only the CPU device runs
    them (a GPU session asked for checks is refused; the variable alone leaves GPUs alone)."""
    if spec is None:
        return environment_checks() if host else NO_CHECKS
    checks = parse_checks(spec)
    if checks and not host:
        raise CheckConfigError(
            f"checks={spec!r}: checked execution runs on the CPU device; open kd.Session(device='cpu', checks=...)"
        )
    if "address" in checks.names:
        require_address_sanitizer()
    return checks


def _bindings_of(host: bool) -> Any:
    """The driver a session talks to: the CUDA driver, or the CPU device's host driver (whose
    runtime library loads with the first CPU session)."""
    if host:
        from .host_driver import host_api

        return host_api()
    return driver.ensure_init()


_defaults: dict[Any, Session] = {}  # default_session's, by device (and by the environment's choice)
_defaults_lock = threading.Lock()


def session_of(handle: Handle) -> Session:
    """The Session that owns ``handle``: the runtime's handles know it by the protocol of what they
    read (``SessionCore`` and its kin), as they sit beneath the session; it is always a Session."""
    return cast(Session, handle.session)


def default_session(device: DeviceSpec | None = None) -> Session:
    """This process's shared session for ``device`` (None: the one ``resolve_device`` picks while
    ``$KERNELDSL_DEVICE`` holds its present value), created on first use (again after close). A
    warm call is one dict lookup: the device is resolved only when the session is made."""
    key: Any = device if device is not None else (None, os.environ.get(DEVICE_ENV))
    s = _defaults.get(key)
    if s is None or s.state != OPEN:
        with _defaults_lock:
            s = _defaults.get(key)
            if s is None or s.state != OPEN:
                resolved = resolve_device(device)
                s = _defaults.get(resolved)
                if s is None or s.state != OPEN:
                    s = _defaults[resolved] = Session(resolved)
                _defaults[key] = s
    return s


def forget_default_sessions() -> None:
    """Make ``default_session`` create its sessions anew from here on; those it made stay open for
    whoever holds them. For a driver swapped in (``driver.use_driver``, tests): a default session
    belongs to the driver it was made with."""
    with _defaults_lock:
        _defaults.clear()


def _forget_defaults_in_child() -> None:
    """In a forked child the parent's default sessions are forked ones: make new ones; fresh lock."""
    global _defaults_lock
    _defaults_lock = threading.Lock()
    forget_default_sessions()


os.register_at_fork(after_in_child=_forget_defaults_in_child)
