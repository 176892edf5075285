"""A recording stand-in for ``cuda.bindings.driver`` so runtime state can be tested on CPU.

Implements the cu* calls kerneldsl.runtime makes, with the bindings' return convention
``(CUresult, *values)``. Device memory is emulated with bytearrays, pinned memory is real host
memory, so transfers round-trip. Every call is appended to ``calls``. Calls that need a current
context fail with CUDA_ERROR_INVALID_CONTEXT when none is pushed on the calling thread, which
is how the tests see that every operation activates the session.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import threading
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as _real

CUresult = _real.CUresult
NOT_READY = 600
INVALID_CONTEXT = 201
NOT_FOUND = 500
INVALID_IMAGE = 200

# Calls that are legal without a current context.
_CONTEXT_FREE = {
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxReset",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuGetErrorName",
    "cuPointerGetAttribute",
    "cuLaunchKernel",  # a CUfunction carries its context (checked on the H200 by the gpu tests)
    "cuLaunchKernelEx",
    "cuGetProcAddress",
}


_SHARED_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"


def _unmap(buf: Any) -> None:
    """Close a shared mapping; one still viewed (a numpy array over it) goes with its views."""
    if isinstance(buf, mmap.mmap):
        try:
            buf.close()
        except BufferError:
            pass


_C_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)


_C_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _CLaunchAttribute(ctypes.Structure):
    """cuda.h's CUlaunchAttribute: a 4-byte id, padding to 8, a 64-byte value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _CLaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig, as the C launch path hands it to cuLaunchKernelEx."""

    _fields_ = [
        ("dims", ctypes.c_uint * 7),  # grid x, y, z, block x, y, z, shared bytes
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_CLaunchAttribute)),
        ("nattrs", ctypes.c_uint),
    ]


_C_LAUNCH_EX = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(_CLaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)
_C_POOL_ALLOC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
_C_FREE_ASYNC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p)
_C_COPY_TO_DEVICE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_C_COPY_TO_HOST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)
_C_STREAM_QUERY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class FakeDriver:
    def __init__(self, devices: int = 1, total_memory: int = 1 << 30) -> None:
        self.devices = devices
        self.total_memory = total_memory
        self.pools: dict[int, int] = {}  # memory pool -> its cap in bytes
        self.pool_cached: dict[int, int] = {}  # pool -> bytes freed into it and not yet trimmed
        self.pool_of: dict[int, int] = {}  # pointer -> the pool it came from
        self.calls: list[str] = []
        self.launches: list[tuple] = []
        self.fail: dict[str, list[int]] = {}  # api -> codes returned by its next calls
        self.sticky: int | None = None  # once set, every call but the context-free ones fails
        self.pending_queries = 0  # cuEventQuery answers NOT_READY this many times
        self.on_query: Callable[[], None] | None = None
        self.pushes = 0
        self.pops = 0
        self.primary_refs: dict[int, int] = {}
        self.mem: dict[int, bytearray] = {}
        self.shared: dict[int, str] = {}  # cuMemAlloc pointer -> the file backing it (IPC-exportable)
        self.opened: set[int] = set()  # pointers cuIpcOpenMemHandle mapped and not yet closed
        self.host: dict[int, Any] = {}
        self.streams: set[int] = set()
        self.events: set[int] = set()
        self.modules: set[int] = set()
        self.graphs: set[int] = set()
        self.instantiate_flags: list[int] = []
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._handles = itertools.count(0x1000, 0x10)
        self._next_ptr = 0x7F0000000000
        self.snapshot_slots = 0  # when set, each launch records that many parameter slots
        self.param_bytes: list[bytes] = []
        self.c_launches = 0  # launches that came through the C launch path
        self.c_allocs = 0  # pool allocations the C launch path made itself
        self.c_frees = 0  # queued frees the C launch path made itself
        self.c_copies = 0  # host copies the C path made itself (kd.asarray, to_host)
        self.function_attributes: dict[tuple[int, int], int] = {}  # set by cuFuncSetAttribute
        self._c_entries: dict[bytes, Any] = {}
        self.blocks_per_sm = 4  # what cuOccupancyMaxActiveBlocksPerMultiprocessor answers
        self.cluster_blocks = 8  # what cuOccupancyMaxPotentialClusterSize answers
        self.potential_block = (512, 264)  # what cuOccupancyMaxPotentialBlockSize answers: (block, min grid)
        # cuFuncGetAttribute's answers by attribute name (CU_FUNC_ATTRIBUTE_<name>); others are 0
        self.func_values: dict[str, int] = {"NUM_REGS": 32, "MAX_THREADS_PER_BLOCK": 1024}
        # with it set, cuEventElapsedTime answers the sum of launch_ms(launch) over the launches
        # made between the two events' records (a launch as in ``launches``); else 1.5 ms
        self.launch_ms: Callable[[tuple], float] | None = None
        self._event_marks: dict[int, int] = {}  # event -> len(launches) at its last record
        self.ex_launches: list[tuple] = []  # cuLaunchKernelEx: (f, grid, block, shared, stream, attributes)

    # -- plumbing ------------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("cu") and name != "cuuint64_t":
            raise AttributeError(f"FakeDriver does not implement {name}")
        return getattr(_real, name)  # enums and handle types

    def _stack(self) -> list[int]:
        if not hasattr(self._tls, "stack"):
            self._tls.stack = []
        return self._tls.stack

    def depth(self) -> int:
        return len(self._stack())

    def _enter(self, name: str) -> int:
        with self._lock:
            self.calls.append(name)
            if self.sticky is not None and name not in _CONTEXT_FREE:
                return self.sticky
            queue = self.fail.get(name)
            if queue:
                return queue.pop(0)
        if name not in _CONTEXT_FREE and not self._stack():
            return INVALID_CONTEXT
        return 0

    def _r(self, code: int, *values: Any) -> tuple:
        return (CUresult(code), *values)

    def _handle(self) -> int:
        with self._lock:
            return next(self._handles)

    def count(self, name: str) -> int:
        return self.calls.count(name)

    def fail_next(self, name: str, *codes: int) -> None:
        self.fail.setdefault(name, []).extend(codes)

    def _locate(self, ptr: int) -> tuple[bytearray, int]:
        with self._lock:
            items = list(self.mem.items())
        for base, buf in items:
            if base <= ptr < base + len(buf):
                return buf, ptr - base
        raise AssertionError(f"device pointer 0x{int(ptr):x} is not allocated")

    # -- init and devices ----------------------------------------------------------------------

    def cuInit(self, flags: int) -> tuple:
        return self._r(self._enter("cuInit"))

    def cuDriverGetVersion(self) -> tuple:
        return self._r(self._enter("cuDriverGetVersion"), 13000)

    def cuDeviceGetCount(self) -> tuple:
        return self._r(self._enter("cuDeviceGetCount"), self.devices)

    def cuDeviceGet(self, ordinal: int) -> tuple:
        return self._r(self._enter("cuDeviceGet"), ordinal)

    def cuDeviceGetName(self, length: int, dev: int) -> tuple:
        return self._r(self._enter("cuDeviceGetName"), b"Fake GPU")

    def cuDeviceGetPCIBusId(self, length: int, dev: int) -> tuple:
        return self._r(self._enter("cuDeviceGetPCIBusId"), f"0000:{0x1B + int(dev):02X}:00.0".encode())

    def cuDeviceGetAttribute(self, attr: Any, dev: int) -> tuple:
        a = _real.CUdevice_attribute
        values = {  # an H200's (sm_90): grids sized per SM are not empty, occupancy is the H200's
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
            a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
            a.CU_DEVICE_ATTRIBUTE_WARP_SIZE: 32,
            a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: 2048,
            a.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: 32,
            a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: 65536,
            a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: 65536,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 233472,
            a.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: 1024,
        }
        return self._r(self._enter("cuDeviceGetAttribute"), values.get(attr, 0))

    def cuGetErrorName(self, code: Any) -> tuple:
        self._enter("cuGetErrorName")
        return self._r(0, CUresult(int(code)).name.encode())

    # -- contexts ----------------------------------------------------------------------------

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple:
        code = self._enter("cuDevicePrimaryCtxRetain") or (self.sticky or 0)  # a sticky error outlives contexts
        if not code:
            with self._lock:
                self.primary_refs[dev] = self.primary_refs.get(dev, 0) + 1
        return self._r(code, 0xC000 + int(dev))

    def cuDevicePrimaryCtxReset(self, dev: int) -> tuple:
        """Like the driver's: the context and everything in it are destroyed; a sticky error is gone."""
        code = self._enter("cuDevicePrimaryCtxReset")
        if not code:
            self.sticky = None
        return self._r(code)

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple:
        code = self._enter("cuDevicePrimaryCtxRelease")
        if not code:
            with self._lock:
                self.primary_refs[dev] -= 1
        return self._r(code)

    def cuCtxPushCurrent(self, ctx: int) -> tuple:
        code = self._enter("cuCtxPushCurrent")
        if not code:
            self._stack().append(ctx)
            with self._lock:
                self.pushes += 1
        return self._r(code)

    def cuCtxGetCurrent(self) -> tuple:
        code = self._enter("cuCtxGetCurrent")
        stack = self._stack()
        return self._r(code, stack[-1] if stack else 0)

    def cuCtxSetCurrent(self, ctx: int) -> tuple:
        code = self._enter("cuCtxSetCurrent")
        if not code:
            stack = self._stack()
            if stack:
                stack[-1] = ctx
            else:
                stack.append(ctx)
        return self._r(code)

    def cuCtxPopCurrent(self) -> tuple:
        code = self._enter("cuCtxPopCurrent")
        stack = self._stack()
        assert stack, "cuCtxPopCurrent with an empty context stack"
        with self._lock:
            self.pops += 1
        return self._r(code, stack.pop())

    # -- streams and events ----------------------------------------------------------------------

    def cuStreamCreate(self, flags: int) -> tuple:
        code = self._enter("cuStreamCreate")
        h = 0 if code else self._handle()
        if h:
            self.streams.add(h)
        return self._r(code, h)

    def cuStreamSynchronize(self, stream: Any) -> tuple:
        return self._r(self._enter("cuStreamSynchronize"))

    def cuStreamDestroy(self, h: int) -> tuple:
        code = self._enter("cuStreamDestroy")
        if not code:
            self.streams.remove(h)
        return self._r(code)

    def cuStreamWaitEvent(self, stream: int, event: int, flags: int) -> tuple:
        return self._r(self._enter("cuStreamWaitEvent"))

    def cuEventCreate(self, flags: int) -> tuple:
        code = self._enter("cuEventCreate")
        h = 0 if code else self._handle()
        if h:
            self.events.add(h)
        return self._r(code, h)

    def cuEventRecord(self, event: int, stream: int) -> tuple:
        code = self._enter("cuEventRecord")
        if not code:
            self._event_marks[int(event)] = len(self.launches)
        return self._r(code)

    def cuEventQuery(self, event: int) -> tuple:
        code = self._enter("cuEventQuery")
        if self.on_query is not None:
            self.on_query()
        if not code and self.pending_queries > 0:
            with self._lock:
                self.pending_queries -= 1
            code = NOT_READY
        return self._r(code)

    def cuEventDestroy(self, event: int) -> tuple:
        code = self._enter("cuEventDestroy")
        if not code:
            self.events.remove(event)
        return self._r(code)

    def cuEventElapsedTime(self, start: int, end: int) -> tuple:
        code = self._enter("cuEventElapsedTime")
        if self.launch_ms is None:
            return self._r(code, 1.5)
        between = self.launches[self._event_marks[int(start)] : self._event_marks[int(end)]]
        return self._r(code, float(sum(self.launch_ms(launch) for launch in between)))

    # -- memory ----------------------------------------------------------------------------

    def _in_use(self) -> int:
        return sum(len(b) for b in self.mem.values())

    def cuMemPoolCreate(self, props: Any) -> tuple:
        code = self._enter("cuMemPoolCreate")
        h = 0 if code else self._handle()
        if h:
            self.pools[h] = int(props.maxSize) or self.total_memory
            self.pool_cached[h] = 0
        return self._r(code, h)

    def cuMemPoolDestroy(self, pool: int) -> tuple:
        code = self._enter("cuMemPoolDestroy")
        if not code:
            del self.pools[int(pool)], self.pool_cached[int(pool)]
        return self._r(code)

    def cuMemPoolSetAttribute(self, pool: int, attr: Any, value: Any) -> tuple:
        return self._r(self._enter("cuMemPoolSetAttribute"))

    def cuMemPoolGetAttribute(self, pool: int, attr: Any) -> tuple:
        code = self._enter("cuMemPoolGetAttribute")
        used = self._in_use()
        reserved = _real.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
        return self._r(code, used + self.pool_cached[int(pool)] if attr == reserved else used)

    def cuMemPoolTrimTo(self, pool: int, keep: int) -> tuple:
        code = self._enter("cuMemPoolTrimTo")
        if not code:
            self.pool_cached[int(pool)] = 0
        return self._r(code)

    def cuMemAllocFromPoolAsync(self, n: int, pool: int, stream: Any) -> tuple:
        """Like the driver's pool: freed bytes stay reserved (``pool_cached``) until trimmed, and
        an allocation fails when the device or the pool's cap has no room for it."""
        code = self._enter("cuMemAllocFromPoolAsync")
        assert n > 0, "an allocation of 0 bytes"
        if code:
            return self._r(code, 0)
        pool = int(pool)
        with self._lock:
            held = sum(len(self.mem[p]) for p, q in self.pool_of.items() if q == pool) + self.pool_cached[pool]
            if self.pool_cached[pool] >= n:
                self.pool_cached[pool] -= n
            elif not code and (
                self._in_use() + sum(self.pool_cached.values()) + n > self.total_memory or held + n > self.pools[pool]
            ):
                code = 2
            if code:
                return self._r(code, 0)
            ptr = self._next_ptr
            self._next_ptr += (n + 0xFFF) & ~0xFFF
            self.mem[ptr] = bytearray(n)
            self.pool_of[ptr] = pool
        return self._r(0, ptr)

    def cuMemFreeAsync(self, ptr: int, stream: Any) -> tuple:
        code = self._enter("cuMemFreeAsync")
        if not code:
            with self._lock:
                self.pool_cached[self.pool_of.pop(int(ptr))] += len(self.mem.pop(int(ptr)))
        return self._r(code)

    def cuMemAlloc(self, n: int) -> tuple:
        """Legacy device memory, backed by a shared file (``/dev/shm``) so that another process's
        double can map it by the handle ``cuIpcGetMemHandle`` gives (CUDA IPC across processes)."""
        code = self._enter("cuMemAlloc")
        if code:
            return self._r(code, 0)
        with self._lock:
            if self._in_use() + sum(self.pool_cached.values()) + n > self.total_memory:
                return self._r(2, 0)
            ptr = self._next_ptr
            self._next_ptr += (n + 0xFFF) & ~0xFFF
            path = f"{_SHARED_DIR}/kd-fake-{os.getpid()}-{ptr:x}"
            with open(path, "w+b") as f:
                f.truncate(n)
                self.mem[ptr] = mmap.mmap(f.fileno(), n)  # type: ignore[assignment]
            self.shared[ptr] = path
        return self._r(0, ptr)

    def cuMemFree(self, ptr: int) -> tuple:
        code = self._enter("cuMemFree")
        if not code:
            with self._lock:
                _unmap(self.mem.pop(int(ptr)))
                os.unlink(self.shared.pop(int(ptr)))
        return self._r(code)

    def cuIpcGetMemHandle(self, ptr: int) -> tuple:
        code = self._enter("cuIpcGetMemHandle")
        path = self.shared.get(int(ptr))
        if not code and path is None:
            code = 1  # INVALID_VALUE: not a cuMemAlloc base pointer (pool memory is not exportable)
        handle = _real.CUipcMemHandle()
        if not code:
            ctypes.memmove(handle.getPtr(), path.encode().ljust(64, b"\0"), 64)  # type: ignore[union-attr]
        return self._r(code, handle)

    def cuIpcOpenMemHandle(self, handle: Any, flags: int) -> tuple:
        code = self._enter("cuIpcOpenMemHandle")
        path = ctypes.string_at(handle.getPtr(), 64).rstrip(b"\0").decode()
        if code or not os.path.exists(path):
            return self._r(code or 400, 0)  # INVALID_HANDLE: its exporter freed it
        with self._lock, open(path, "r+b") as f:
            ptr = self._next_ptr
            size = os.fstat(f.fileno()).st_size
            self._next_ptr += (size + 0xFFF) & ~0xFFF
            self.mem[ptr] = mmap.mmap(f.fileno(), size)  # type: ignore[assignment]
            self.opened.add(ptr)
        return self._r(0, ptr)

    def cuIpcCloseMemHandle(self, ptr: int) -> tuple:
        code = self._enter("cuIpcCloseMemHandle")
        if not code:
            with self._lock:
                self.opened.remove(int(ptr))
                _unmap(self.mem.pop(int(ptr)))
        return self._r(code)

    def cuMemGetInfo(self) -> tuple:
        code = self._enter("cuMemGetInfo")
        return self._r(code, self.total_memory - self._in_use(), self.total_memory)

    def cuMemHostAlloc(self, n: int, flags: int) -> tuple:
        code = self._enter("cuMemHostAlloc")
        if code:
            return self._r(code, 0)
        buf = (ctypes.c_char * n)()
        ptr = ctypes.addressof(buf)
        self.host[ptr] = buf
        return self._r(0, ptr)

    def cuMemFreeHost(self, ptr: int) -> tuple:
        code = self._enter("cuMemFreeHost")
        if not code:
            del self.host[int(ptr)]
        return self._r(code)

    def cuMemcpyHtoDAsync(self, dst: int, src: int, n: int, stream: int) -> tuple:
        code = self._enter("cuMemcpyHtoDAsync")
        if not code:
            buf, off = self._locate(dst)
            buf[off : off + n] = ctypes.string_at(src, n)
        return self._r(code)

    def cuMemcpyDtoHAsync(self, dst: int, src: int, n: int, stream: int) -> tuple:
        code = self._enter("cuMemcpyDtoHAsync")
        if not code:
            buf, off = self._locate(src)
            ctypes.memmove(dst, bytes(buf[off : off + n]), n)
        return self._r(code)

    def cuMemcpyDtoDAsync(self, dst: int, src: int, n: int, stream: int) -> tuple:
        code = self._enter("cuMemcpyDtoDAsync")
        if not code:
            sbuf, soff = self._locate(src)
            dbuf, doff = self._locate(dst)
            dbuf[doff : doff + n] = sbuf[soff : soff + n]
        return self._r(code)

    def cuMemsetD8Async(self, ptr: int, value: int, n: int, stream: int) -> tuple:
        code = self._enter("cuMemsetD8Async")
        if not code:
            buf, off = self._locate(ptr)
            buf[off : off + n] = bytes([value]) * n
        return self._r(code)

    def cuPointerGetAttribute(self, attr: Any, ptr: int) -> tuple:
        return self._r(self._enter("cuPointerGetAttribute"), 0)

    # -- modules and launches ----------------------------------------------------------------------

    def cuModuleLoadData(self, image: bytes) -> tuple:
        code = self._enter("cuModuleLoadData")
        if not code and bytes(image).startswith(b"BAD"):
            code = INVALID_IMAGE
        h = 0 if code else self._handle()
        if h:
            self.modules.add(h)
        return self._r(code, h)

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple:
        code = self._enter("cuModuleGetFunction")
        if not code and name == b"missing":
            code = NOT_FOUND
        return self._r(code, None if code else _real.CUfunction(self._handle()))  # like cuda.bindings

    def cuModuleUnload(self, module: int) -> tuple:
        code = self._enter("cuModuleUnload")
        if not code:
            self.modules.remove(module)
        return self._r(code)

    def cuFuncGetAttribute(self, attr: Any, fn: int) -> tuple:
        name = _real.CUfunction_attribute(attr).name.removeprefix("CU_FUNC_ATTRIBUTE_")
        return self._r(self._enter("cuFuncGetAttribute"), self.func_values.get(name, 0))

    def cuFuncSetAttribute(self, fn: Any, attr: Any, value: int) -> tuple:
        code = self._enter("cuFuncSetAttribute")
        if not code:
            self.function_attributes[(int(fn), int(attr))] = value
        return self._r(code)

    def cuLaunchKernel(
        self,
        f: int,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: int,
        params: int,
        extra: int,
    ) -> tuple:
        code = self._enter("cuLaunchKernel")
        if not code:
            with self._lock:
                self.launches.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, params))
                self._snapshot(params)
        return self._r(code)

    def cuLaunchKernelEx(self, config: Any, f: Any, params: int, extra: int) -> tuple:
        """Records the launch and its attributes by name: ``{"cooperative": 1, "cluster": (x, y, z)}``."""
        code = self._enter("cuLaunchKernelEx")
        if not code:
            ids = _real.CUlaunchAttributeID
            attributes: dict[str, Any] = {}
            for a in config.attrs[: config.numAttrs]:
                if a.id == ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
                    attributes["cooperative"] = a.value.cooperative
                elif a.id == ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                    dim = a.value.clusterDim
                    attributes["cluster"] = (dim.x, dim.y, dim.z)
            grid = (config.gridDimX, config.gridDimY, config.gridDimZ)
            block = (config.blockDimX, config.blockDimY, config.blockDimZ)
            with self._lock:
                stream = _real.CUstream(int(config.hStream))  # a copy: the config's memory goes with it
                self.ex_launches.append((f, grid, block, config.sharedMemBytes, stream, attributes))
                self._snapshot(params)
        return self._r(code)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, f: Any, block_size: int, shared: int) -> tuple:
        return self._r(self._enter("cuOccupancyMaxActiveBlocksPerMultiprocessor"), self.blocks_per_sm)

    def cuOccupancyMaxPotentialClusterSize(self, f: Any, config: Any) -> tuple:
        return self._r(self._enter("cuOccupancyMaxPotentialClusterSize"), self.cluster_blocks)

    def cuOccupancyMaxPotentialBlockSize(self, f: Any, to_shared: Any, shared: int, limit: int) -> tuple:
        block, grid = self.potential_block
        return self._r(self._enter("cuOccupancyMaxPotentialBlockSize"), grid, block)

    def _snapshot(self, params: int) -> None:
        """Copy ``snapshot_slots`` 8-byte parameter slots out of a launch's ``void*[]``."""
        if self.snapshot_slots and params:
            pointers = (ctypes.c_void_p * self.snapshot_slots).from_address(int(params))
            self.param_bytes.append(b"".join(ctypes.string_at(p, 8) for p in pointers))

    def cuGetProcAddress(self, symbol: bytes, version: int, flags: Any) -> tuple:
        """cuLaunchKernel, cuCtxGetCurrent, cuMemAllocFromPoolAsync, cuMemFreeAsync and the host
        copies' cuMemcpyHtoDAsync, cuMemcpyDtoHAsync and cuStreamQuery as C function pointers,
        called like the real ones by the C path (``c_entries_off`` hides them)."""
        code = self._enter("cuGetProcAddress")
        if not self._c_entries:
            self._c_entries[b"cuLaunchKernel"] = _C_LAUNCH(self._launch_from_c)
            self._c_entries[b"cuLaunchKernelEx"] = _C_LAUNCH_EX(self._launch_ex_from_c)
            self._c_entries[b"cuCtxGetCurrent"] = _C_CURRENT(self._current_from_c)
            self._c_entries[b"cuMemAllocFromPoolAsync"] = _C_POOL_ALLOC(self._alloc_from_c)
            self._c_entries[b"cuMemFreeAsync"] = _C_FREE_ASYNC(self._free_from_c)
            self._c_entries[b"cuMemcpyHtoDAsync"] = _C_COPY_TO_DEVICE(self._copy_to_device_from_c)
            self._c_entries[b"cuMemcpyDtoHAsync"] = _C_COPY_TO_HOST(self._copy_to_host_from_c)
            self._c_entries[b"cuStreamQuery"] = _C_STREAM_QUERY(self._stream_query_from_c)
        if code or symbol not in self._c_entries or symbol in self.c_entries_off:
            return self._r(code, 0, 0)
        return self._r(0, ctypes.cast(self._c_entries[symbol], ctypes.c_void_p).value, 0)

    c_entries_off: frozenset[bytes] = frozenset()

    def _alloc_from_c(self, out: int, n: int, pool: int, stream: int) -> int:
        result = self.cuMemAllocFromPoolAsync(n, pool, stream)
        if not result[0]:
            self.c_allocs += 1
            ctypes.c_uint64.from_address(out).value = result[1]
        return int(result[0])

    def _free_from_c(self, ptr: int, stream: int) -> int:
        code = int(self.cuMemFreeAsync(ptr, stream)[0])
        if not code:
            self.c_frees += 1
        return code

    def _copy_to_device_from_c(self, dst: int, src: int, n: int, stream: int) -> int:
        code = int(self.cuMemcpyHtoDAsync(dst, src, n, stream)[0])
        if not code:
            self.c_copies += 1
        return code

    def _copy_to_host_from_c(self, dst: int, src: int, n: int, stream: int) -> int:
        code = int(self.cuMemcpyDtoHAsync(dst, src, n, stream)[0])
        if not code:
            self.c_copies += 1
        return code

    def _stream_query_from_c(self, stream: int) -> int:
        """Done, unless a test holds the session's waits (``pending_queries``, ``on_query``): then
        not ready, so the C path leaves the wait to the Python path's event queries."""
        code = self._enter("cuStreamQuery")
        if not code and (self.pending_queries > 0 or self.on_query is not None):
            code = NOT_READY
        return code

    def _current_from_c(self, out: int) -> int:
        stack = self._stack()
        ctypes.c_void_p.from_address(out).value = int(stack[-1]) if stack else None
        return 0

    def _launch_from_c(
        self,
        f: int,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: int,
        params: int,
        extra: int,
    ) -> int:
        self.c_launches += 1
        return int(self.cuLaunchKernel(_real.CUfunction(f), gx, gy, gz, bx, by, bz, shared, stream, params, extra)[0])

    def _launch_ex_from_c(self, config: Any, f: int, params: int, extra: int) -> int:
        """Records a C path cuLaunchKernelEx like ``cuLaunchKernelEx`` does, counted in ``c_launches``."""
        code = self._enter("cuLaunchKernelEx")
        if code:
            return code
        c = config.contents
        ids = _real.CUlaunchAttributeID
        attributes: dict[str, Any] = {}
        for a in c.attrs[: c.nattrs]:
            if a.id == int(ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE):
                attributes["cooperative"] = a.value[0]
            elif a.id == int(ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION):
                attributes["cluster"] = tuple(a.value[:3])
        with self._lock:
            self.c_launches += 1
            grid, block = tuple(c.dims[:3]), tuple(c.dims[3:6])
            self.ex_launches.append((_real.CUfunction(f), grid, block, c.dims[6], c.stream, attributes))
            self._snapshot(params)
        return 0

    # -- graphs -----------------------------------------------------------------------------------

    def cuStreamBeginCapture(self, stream: int, mode: Any) -> tuple:
        return self._r(self._enter("cuStreamBeginCapture"))

    def cuStreamEndCapture(self, stream: int) -> tuple:
        code = self._enter("cuStreamEndCapture")
        h = 0 if code else self._handle()
        if h:
            self.graphs.add(h)
        return self._r(code, h)

    def cuGraphInstantiate(self, graph: int, flags: int) -> tuple:
        code = self._enter("cuGraphInstantiate")
        self.instantiate_flags.append(int(flags))
        h = 0 if code else self._handle()
        if h:
            self.graphs.add(h)
        return self._r(code, h)

    def cuGraphLaunch(self, exec_: int, stream: int) -> tuple:
        return self._r(self._enter("cuGraphLaunch"))

    def cuGraphExecDestroy(self, exec_: int) -> tuple:
        code = self._enter("cuGraphExecDestroy")
        if not code:
            self.graphs.remove(exec_)
        return self._r(code)

    def cuGraphDestroy(self, graph: int) -> tuple:
        code = self._enter("cuGraphDestroy")
        if not code:
            self.graphs.remove(graph)
        return self._r(code)
