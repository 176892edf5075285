"""The CPU device's work on memory: allocations, copies and sets, and CUDA graphs that record
them with launches and replay them (the base ``HostDriver`` builds on).

Memory is real host memory aligned to 256 bytes like ``cudaMalloc``; pinned memory is the same.
Its books (allocations, pools and the blocks they keep) are the runtime library's, which the C
launch path's allocations and frees use directly. Work runs when it is enqueued, except on a
stream being captured: there it is recorded, launch parameters by value, and replayed in order
at each ``cuGraphLaunch``; memory freed during a capture is freed with the graph, since a replay
may still use it.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as _bindings

from . import host_runtime

CUresult = _bindings.CUresult
_RESULTS: dict[int, Any] = {}  # code -> its CUresult, made once (every call of the driver returns one)
SUCCESS = 0
INVALID_VALUE = 1
OUT_OF_MEMORY = 2
NOT_SUPPORTED = 801


def _physical_memory() -> tuple[int, int]:
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


class HostWork:
    """The memory and graph calls of the CPU device's driver."""

    streams_always_complete = True  # work runs as it is enqueued: a synchronize waits for nothing

    def __init__(self) -> None:
        self._lib = host_runtime.runtime_library()
        self._lock = threading.RLock()
        self._handles = itertools.count(0x1000, 0x10)
        self.captures: dict[int, list[tuple[Any, ...]]] = {}  # capturing stream -> what it recorded
        self.graphs: dict[int, tuple[list[tuple[Any, ...]], list[int]]] = {}  # graph -> (work, memory it frees)
        self.tracking_unwritten = False  # a session's init check tracks buffers made by empty()

    @staticmethod
    def _r(code: int, *values: Any) -> tuple[Any, ...]:
        result = _RESULTS.get(code)
        if result is None:
            result = _RESULTS.setdefault(code, CUresult(code))
        return (result, *values)

    def _handle(self) -> int:
        with self._lock:
            return next(self._handles)

    def _snapshot(self, function: int, params: int) -> bytes:
        """A launch's parameter values, 8-byte slots as kerneldsl's adapters pack them."""
        count = host_runtime.nparams(function)
        if not count or not params:
            return b""
        pointers = (ctypes.c_void_p * count).from_address(params)
        return b"".join(ctypes.string_at(p or 0, 8) for p in pointers)

    # -- memory ---------------------------------------------------------------------------------

    def _allocate(self, n: int, pool: int = 0) -> int:
        """``n`` bytes (of ``pool``, reusing a block it keeps), or 0 when there are none."""
        out = ctypes.c_ulonglong()
        if n <= 0 or self._lib.kd_host_mem_alloc_v1(ctypes.byref(out), n, pool, None):
            return 0
        return out.value

    def _release(self, ptr: int) -> int:
        """Free ``ptr`` now (a pool's block too); INVALID_VALUE for memory this device did not allocate."""
        return int(self._lib.kd_host_mem_release_v1(ptr, 0))

    def allocated_bytes(self, ptr: int) -> int:
        """The size of the live allocation at ``ptr``; 0 when there is none."""
        return int(self._lib.kd_host_mem_size_v1(ptr))

    def kept_blocks(self, pool: Any, n: int) -> int:
        """How many freed blocks of ``n`` bytes ``pool`` keeps for its next allocations of that size."""
        return int(self._lib.kd_host_mem_kept_v1(int(pool), n))

    # -- the init check's record of what was written (see runtime.checks) -------------------------

    def track_unwritten(self, ptr: int, n: int) -> None:
        """``[ptr, ptr + n)`` was made by ``empty()`` in a session with the init check: a kernel's
        read of a byte nothing wrote since is reported."""
        if not self.tracking_unwritten:
            self.tracking_unwritten = True
            self._lib.kd_host_mem_track_unwritten_v1()
        self._lib.kd_host_check_fresh_v1(ptr, n)

    def note_written(self, ptr: int, n: int) -> None:
        """``[ptr, ptr + n)`` was written outside a checked kernel (a copy, a fill; an op that
        overwrites what it loads)."""
        if self.tracking_unwritten:
            self._lib.kd_host_check_written_v1(ptr, n)

    def _host_code_ran(self) -> None:
        """Host code that may have written any buffer ran (the host BLAS): nothing is tracked any more."""
        if self.tracking_unwritten:
            self._lib.kd_host_check_forget_v1(None)

    def cuMemPoolCreate(self, props: Any) -> tuple[Any, ...]:
        h = self._handle()
        self._lib.kd_host_mem_pool_create_v1(h)
        return self._r(SUCCESS, h)

    def cuMemPoolDestroy(self, pool: Any) -> tuple[Any, ...]:
        self._lib.kd_host_mem_pool_destroy_v1(int(pool))
        return self._r(SUCCESS)

    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuMemPoolGetAttribute(self, pool: Any, attr: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS, int(self._lib.kd_host_mem_pool_used_v1(int(pool))))

    def cuMemPoolTrimTo(self, pool: Any, keep: int) -> tuple[Any, ...]:
        self._lib.kd_host_mem_pool_trim_v1(int(pool), int(keep))
        return self._r(SUCCESS)

    def cuMemAllocFromPoolAsync(self, n: int, pool: Any, stream: Any) -> tuple[Any, ...]:
        ptr = self._allocate(int(n), int(pool))
        return self._r(SUCCESS if ptr else OUT_OF_MEMORY, ptr)

    def cuMemFreeAsync(self, ptr: Any, stream: Any) -> tuple[Any, ...]:
        """A pool's block stays with its pool; on a stream being captured, it is freed with the graph."""
        return self._r(int(self._lib.kd_host_mem_free_async_v1(int(ptr), int(stream or 0))))

    def cuMemAlloc(self, n: int) -> tuple[Any, ...]:
        ptr = self._allocate(int(n))
        return self._r(SUCCESS if ptr else OUT_OF_MEMORY, ptr)

    def cuMemFree(self, ptr: Any) -> tuple[Any, ...]:
        return self._r(self._release(int(ptr)))

    def cuMemHostAlloc(self, n: int, flags: int) -> tuple[Any, ...]:
        ptr = self._allocate(int(n))
        return self._r(SUCCESS if ptr else OUT_OF_MEMORY, ptr)

    def cuMemFreeHost(self, ptr: Any) -> tuple[Any, ...]:
        return self._r(self._release(int(ptr)))

    def cuMemGetInfo(self) -> tuple[Any, ...]:
        free, total = _physical_memory()
        return self._r(SUCCESS, free, total)

    def cuPointerGetAttribute(self, attr: Any, ptr: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS, 0)

    def cuIpcGetMemHandle(self, ptr: Any) -> tuple[Any, ...]:
        return self._r(NOT_SUPPORTED, None)

    def cuIpcOpenMemHandle(self, handle: Any, flags: int) -> tuple[Any, ...]:
        return self._r(NOT_SUPPORTED, 0)

    def cuIpcCloseMemHandle(self, ptr: Any) -> tuple[Any, ...]:
        return self._r(NOT_SUPPORTED)

    def enqueue(self, stream: Any, work: Callable[[], None]) -> None:
        """Run ``work``, a library's host computation on this device's memory (the host BLAS's),
        in ``stream``'s order: now, or at each replay when ``stream`` is being captured."""
        captured = self.captures.get(int(stream or 0))
        if captured is None:
            work()
            self._host_code_ran()
        else:
            captured.append(("call", work))

    def _copy(self, dst: int, src: int, n: int, stream: Any) -> int:
        work = self.captures.get(int(stream or 0))
        if work is not None:
            work.append(("copy", dst, src, n))
        elif n:
            ctypes.memmove(dst, src, n)
            if self.tracking_unwritten:
                self.note_written(dst, n)
        return SUCCESS

    def cuMemcpyHtoDAsync(self, dst: Any, src: Any, n: int, stream: Any) -> tuple[Any, ...]:
        return self._r(self._copy(int(dst), int(src), int(n), stream))

    def cuMemcpyDtoHAsync(self, dst: Any, src: Any, n: int, stream: Any) -> tuple[Any, ...]:
        return self._r(self._copy(int(dst), int(src), int(n), stream))

    def cuMemcpyDtoDAsync(self, dst: Any, src: Any, n: int, stream: Any) -> tuple[Any, ...]:
        return self._r(self._copy(int(dst), int(src), int(n), stream))

    def cuMemcpyHtoD(self, dst: Any, src: Any, n: int) -> tuple[Any, ...]:
        return self._r(self._copy(int(dst), int(src), int(n), 0))

    def cuMemcpyDtoH(self, dst: Any, src: Any, n: int) -> tuple[Any, ...]:
        return self._r(self._copy(int(dst), int(src), int(n), 0))

    def cuMemsetD8Async(self, ptr: Any, value: int, n: int, stream: Any) -> tuple[Any, ...]:
        work = self.captures.get(int(stream or 0))
        if work is not None:
            work.append(("set", int(ptr), int(value), int(n)))
        elif n:
            ctypes.memset(int(ptr), int(value), int(n))
            if self.tracking_unwritten:
                self.note_written(int(ptr), int(n))
        return self._r(SUCCESS)

    # -- graphs ---------------------------------------------------------------------------------

    def cuStreamBeginCapture(self, stream: Any, mode: Any) -> tuple[Any, ...]:
        with self._lock:
            self.captures[int(stream)] = []
        self._lib.kd_host_mem_capture_v1(int(stream), 1, None, 0)
        return self._r(SUCCESS)

    def cuStreamEndCapture(self, stream: Any) -> tuple[Any, ...]:
        count = self._lib.kd_host_mem_capture_v1(int(stream), 0, None, 0)
        blocks = (ctypes.c_ulonglong * max(1, count))()
        freed = list(blocks)[: self._lib.kd_host_mem_capture_v1(int(stream), 0, blocks, count)]
        with self._lock:
            work = self.captures.pop(int(stream), [])
            h = self._handle()
            self.graphs[h] = (work, freed)
        return self._r(SUCCESS, h)

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple[Any, ...]:
        h = self._handle()
        self.graphs[h] = (self.graphs[int(graph)][0], [])
        return self._r(SUCCESS, h)

    def cuGraphLaunch(self, exec_: Any, stream: Any) -> tuple[Any, ...]:
        for step in self.graphs[int(exec_)][0]:
            code = self._replay(step)
            if code:
                return self._r(code)
        return self._r(SUCCESS)

    def _replay(self, step: tuple[Any, ...]) -> int:
        kind = step[0]
        if kind == "copy":
            ctypes.memmove(step[1], step[2], step[3])
            self.note_written(step[1], step[3])
            return SUCCESS
        if kind == "set":
            ctypes.memset(step[1], step[2], step[3])
            self.note_written(step[1], step[3])
            return SUCCESS
        if kind == "call":
            step[1]()
            self._host_code_ran()
            return SUCCESS
        _, function, dims, values = step
        count = len(values) // 8
        storage = ctypes.create_string_buffer(values, max(8, len(values)))
        base = ctypes.addressof(storage)
        pointers = (ctypes.c_void_p * max(1, count))(*[base + 8 * i for i in range(count)])
        return int(self._lib.kd_host_launch(function, *dims, None, pointers if count else None, None))

    def cuGraphExecDestroy(self, exec_: Any) -> tuple[Any, ...]:
        self.graphs.pop(int(exec_), None)
        return self._r(SUCCESS)

    def cuGraphDestroy(self, graph: Any) -> tuple[Any, ...]:
        _, freed = self.graphs.pop(int(graph), ([], []))
        for ptr in freed:
            self._release(ptr)
        return self._r(SUCCESS)

    def _copy_from_c(self, dst: int, src: int, n: int, stream: int) -> int:
        return self._copy(dst, src, n, stream)
