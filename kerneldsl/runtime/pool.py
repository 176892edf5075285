"""A session's device memory: the driver's stream-ordered pool, and what the C path needs to use it.

Allocation costs microseconds, a free is ordered after the last use on its stream and never
synchronizes the device, and freed memory stays reserved for reuse (release threshold: all).
A request that does not fit trims the pool and tries once more.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from . import driver
from .driver import check
from .stream import StreamSession, always_complete

if TYPE_CHECKING:
    from .device import Device
    from .handle import Handle
    from .stream import Stream

__all__ = [
    "POOL_LIMIT_ENV",
    "SPIN_NS",
    "FastAllocation",
    "MemoryInfo",
    "MemoryPool",
    "PoolSession",
    "resolve_pool_limit",
]

POOL_LIMIT_ENV = "KERNELDSL_POOL_LIMIT"

# How long the C path may spin on cuStreamQuery, holding the session lock, for its host copy to
# finish (``host_copies``): a copy of pageable memory has (nearly) finished when the driver
# returns; one of pinned memory behind a long kernel is then waited for by the full path's
# interruptible wait, the lock free.
SPIN_NS = 200_000


class PoolSession(StreamSession, Protocol):
    """A session as its pool and the C path's allocation see it: a stream's, with its device, its
    context's address, the session stream's CUstream, its driver entry points and its pool."""

    @property
    def gpu(self) -> Device: ...

    @property
    def context_address(self) -> int: ...

    @property
    def raw_stream(self) -> Any: ...

    @property
    def pool(self) -> MemoryPool: ...

    def entry_point(self, name: str) -> int: ...


class MemoryInfo(NamedTuple):
    """``Session.memory_info()``: device-wide free and total, then this session's pool."""

    free: int
    total: int
    pool_reserved: int
    pool_used: int


def resolve_pool_limit(explicit: int | None) -> int | None:
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


class MemoryPool:
    """``session``'s pool on its device. Every method runs with the session activated."""

    __slots__ = ("handle", "_session")

    def __init__(self, session: PoolSession, limit: int | None) -> None:
        """Create the pool, holding at most ``limit`` bytes (None: the device's memory)."""
        d = session.api
        props = d.CUmemPoolProps()
        props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = session.gpu.ordinal
        if limit is not None:
            props.maxSize = limit
        pool = check("cuMemPoolCreate", d.cuMemPoolCreate(props))
        threshold = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        check("cuMemPoolSetAttribute", d.cuMemPoolSetAttribute(pool, threshold, d.cuuint64_t(2**64 - 1)))
        self.handle: Any = pool
        self._session = session

    def allocate(self, nbytes: int) -> int:
        """``nbytes`` from the pool, ordered on the session stream."""
        session = self._session
        d, stream = session.api, session.raw_stream
        result = d.cuMemAllocFromPoolAsync(nbytes, self.handle, stream)
        if result[0] == driver.ERROR_OUT_OF_MEMORY:
            self.trim()
            result = d.cuMemAllocFromPoolAsync(nbytes, self.handle, stream)
        return int(check("cuMemAllocFromPoolAsync", result, requested=nbytes))

    def free(self, ptr: Any) -> None:
        """Return ``ptr`` on the session stream, after the work queued so far on every stream of
        the session: memory used on another stream is never reused while that stream may still
        touch it. A closing session has synchronized; during a capture the free waits for the
        capture's end (inside it, it would become a graph node)."""
        session = self._session
        if session.captures:
            session.owned.defer("mem", ptr)
            return
        order = session.order
        if session.state == "open" and len(order.streams) > 1:
            for other in order.live():
                if other is not session.stream:
                    order.wait_for(session.raw_stream, other._cu)
        check("cuMemFreeAsync", session.api.cuMemFreeAsync(ptr, session.raw_stream))

    def trim(self) -> None:
        """Synchronize every stream (the driver releases freed memory only once it has seen the
        frees complete through a synchronizing call), then release all the pool does not use."""
        session = self._session
        d = session.api
        for stream in session.order.live():
            check("cuStreamSynchronize", d.cuStreamSynchronize(stream._cu))
        check("cuMemPoolTrimTo", d.cuMemPoolTrimTo(self.handle, 0))

    def info(self) -> MemoryInfo:
        """Device memory free and total, and what the pool reserved and lends to live arrays."""
        d = self._session.api
        attr = d.CUmemPool_attribute
        free, total = check("cuMemGetInfo", d.cuMemGetInfo())
        reserved = d.cuMemPoolGetAttribute(self.handle, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        used = d.cuMemPoolGetAttribute(self.handle, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
        reserved, used = check("cuMemPoolGetAttribute", reserved), check("cuMemPoolGetAttribute", used)
        return MemoryInfo(int(free), int(total), int(reserved), int(used))

    def destroy(self) -> None:
        """Last at close: the driver orders the frees queued before it ahead of the destruction."""
        check("cuMemPoolDestroy", self._session.api.cuMemPoolDestroy(self.handle))


class FastAllocation:
    """What the C launch path needs to allocate arrays from a session's pool itself; its
    ``Allocator`` reads these attributes once, when it is made.

    ``alloc``, ``free`` and ``current`` are the entry points of cuMemAllocFromPoolAsync,
    cuMemFreeAsync and cuCtxGetCurrent (0 when the driver has none); ``copy_to_device``,
    ``copy_to_host`` and ``stream_query`` those of cuMemcpyHtoDAsync, cuMemcpyDtoHAsync and
    cuStreamQuery for the host copies, which spin at most ``spin_ns`` (``SPIN_NS``); ``pool``, ``context`` and
    ``stream`` the addresses of the pool, the context and the session stream; ``lock``,
    ``handles``, ``dropped`` and ``streams`` the session lock, its handle registry, the finalizer
    (see ``handle.Handle._own``) and the streams a free waits for.

    The contract: C allocates only holding the lock (taken without waiting), with this context
    current on the calling thread and no capture active; it first frees the device memory
    finalizers queued, as ``OwnedHandles.drain`` would, and only while the session stream is the
    only stream (else frees must wait for the others); anything else, a driver error included, is
    left to ``DeviceBuffer``'s constructor (trim and retry, OutOfMemoryError).
    """

    __slots__ = (
        "alloc",
        "free",
        "current",
        "copy_to_device",
        "copy_to_host",
        "stream_query",
        "spin_ns",
        "pool",
        "context",
        "stream",
        "lock",
        "handles",
        "dropped",
        "streams",
    )

    def __init__(self, session: PoolSession) -> None:
        names = ("cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuCtxGetCurrent")
        self.alloc, self.free, self.current = (session.entry_point(name) for name in names)
        copies = ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuStreamQuery")
        self.copy_to_device, self.copy_to_host, self.stream_query = (session.entry_point(name) for name in copies)
        self.spin_ns = SPIN_NS
        self.pool = int(session.pool.handle)
        self.context = session.context_address
        self.stream = int(session.raw_stream)
        self.lock: threading.RLock = session.lock
        owned = session.owned
        self.handles: dict[int, tuple[weakref.ref[Handle], str, Any]] = owned.handles
        self.dropped: Callable[[weakref.ref[Handle]], None] = owned.dropped
        # The streams a free must wait for (C frees only where that is the session stream alone):
        # all of the session's, or the session stream alone where work completes as it is enqueued.
        self.streams: Collection[Stream] = (session.stream,) if always_complete(session) else session.order.streams
