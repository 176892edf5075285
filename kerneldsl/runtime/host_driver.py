"""The CPU device's driver: the ``cu*`` calls kerneldsl.runtime makes, answered on the host.

A session on the CPU device holds an instance as its ``api``, so the unchanged Session, pools,
arrays, adapters, planners and C launch path run on it. The rules it keeps:

- memory, copies and graphs are ``host_work``'s: work runs when it is enqueued, in order, so a
  stream or event is always complete; events record the host's clock;
- modules are shared libraries compiled from the rendered source (``host_runtime.load_image``), a
  function is its exported descriptor's address, and launches go to the runtime library's
  ``kd_host_launch``, which the C launch path also calls through ``cuGetProcAddress``;
- a kernel fault (assert, trap, bad barrier) is a ``KernelFaultError`` naming the kernel, block,
  thread and line; it does not poison the session, as nothing outside the kernel's own writes broke.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

from cuda.bindings import driver as _bindings

from ..errors import KernelFaultError
from . import host_runtime
from .checks import check_error, not_shared, tls_symbols
from .host_work import INVALID_VALUE, SUCCESS, HostWork
from .selection import CPU_ARCH, gpu_plans

CUresult = _bindings.CUresult
INVALID_IMAGE = 200
INVALID_CONTEXT = 201
NOT_FOUND = 500
ARCH = (int(CPU_ARCH[3]), int(CPU_ARCH[4]))  # the compute capability it reports
DEVICE_NAME = b"kerneldsl CPU device"

_C_COPY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)


class LaunchAttribute(ctypes.Structure):
    """cuda.h's CUlaunchAttribute: a 4-byte id, padding to 8, a 64-byte value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class LaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig."""

    _fields_ = [
        ("dims", ctypes.c_uint * 7),  # grid x, y, z, block x, y, z, shared bytes
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("nattrs", ctypes.c_uint),
    ]


def plan_multiprocessors() -> int:
    """The SM count the CPU device reports, which grid planners size for: one an OS worker (fewer,
    fatter blocks suit the host), or the H200's 132 with ``KERNELDSL_CPU_PLAN=gpu``."""
    if gpu_plans():
        return 132
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class HostDriver(HostWork):
    """``cuda.bindings.driver`` for the CPU device: one instance per process (``host_api``)."""

    def __init__(self) -> None:
        super().__init__()
        self.modules: dict[int, ctypes.CDLL] = {}
        self.event_times: dict[int, int] = {}  # event -> perf_counter_ns at its last record
        self.function_values: dict[tuple[int, int], int] = {}
        self._c_entries: dict[bytes, Any] = {}
        self.checked_images: dict[int, bytes] = {}  # checked modules' images by load address (reports' lines)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("cu") and name != "cuuint64_t":
            raise AttributeError(f"the CPU device's driver has no {name}")
        return getattr(_bindings, name)  # enums and handle types

    # -- init, device, contexts ------------------------------------------------------------------

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return self._r(SUCCESS, 13000)

    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return self._r(SUCCESS, 1)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return self._r(SUCCESS if ordinal == 0 else 101, 0)

    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS, DEVICE_NAME)

    def cuDeviceGetPCIBusId(self, length: int, dev: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS, b"cpu")

    def cuDeviceGetAttribute(self, attr: Any, dev: Any) -> tuple[Any, ...]:
        a = _bindings.CUdevice_attribute
        values = {
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: ARCH[0],
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: ARCH[1],
            a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: plan_multiprocessors(),
            a.CU_DEVICE_ATTRIBUTE_WARP_SIZE: 32,
            a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
            a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: 2048,
            a.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: 32,
            a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: 65536,
            a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: 65536,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 233472,
            a.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: 1024,
        }
        return self._r(SUCCESS, values.get(attr, 0))

    def cuGetErrorName(self, code: Any) -> tuple[Any, ...]:
        try:
            return self._r(SUCCESS, CUresult(int(code)).name.encode())
        except ValueError:
            return self._r(INVALID_VALUE, None)

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS, 0xC000)

    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuDevicePrimaryCtxReset(self, dev: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    # Each thread's stack of current contexts is the runtime library's, which the C launch path reads too.

    def cuCtxPushCurrent(self, ctx: Any) -> tuple[Any, ...]:
        self._lib.kd_host_ctx_push_v1(int(ctx))
        return self._r(SUCCESS)

    def cuCtxPopCurrent(self) -> tuple[Any, ...]:
        return self._r(SUCCESS, self._lib.kd_host_ctx_pop_v1() or 0)

    def cuCtxGetCurrent(self) -> tuple[Any, ...]:
        current = ctypes.c_void_p()
        self._lib.kd_host_ctx_get_current_v1(ctypes.byref(current))
        return self._r(SUCCESS, current.value or 0)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        self._lib.kd_host_ctx_set_current_v1(int(ctx))
        return self._r(SUCCESS)

    # -- streams and events: work is done when it is enqueued ----------------------------------

    def cuStreamCreate(self, flags: int) -> tuple[Any, ...]:
        return self._r(SUCCESS, self._handle())

    def cuStreamDestroy(self, stream: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuStreamQuery(self, stream: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuEventCreate(self, flags: int) -> tuple[Any, ...]:
        h = self._handle()
        self.event_times[h] = time.perf_counter_ns()
        return self._r(SUCCESS, h)

    def cuEventRecord(self, event: Any, stream: Any) -> tuple[Any, ...]:
        self.event_times[int(event)] = time.perf_counter_ns()
        return self._r(SUCCESS)

    def cuEventQuery(self, event: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuEventSynchronize(self, event: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS)

    def cuEventDestroy(self, event: Any) -> tuple[Any, ...]:
        self.event_times.pop(int(event), None)
        return self._r(SUCCESS)

    def cuEventElapsedTime(self, start: Any, end: Any) -> tuple[Any, ...]:
        elapsed = self.event_times[int(end)] - self.event_times[int(start)]
        return self._r(SUCCESS, elapsed / 1e6)

    # -- modules and launches ------------------------------------------------------------------

    def cuModuleLoadData(self, image: Any) -> tuple[Any, ...]:
        try:
            module = host_runtime.load_image(bytes(image))
        except OSError:
            return self._r(INVALID_IMAGE, 0)
        h = self._handle()
        with self._lock:
            self.modules[h] = module
            base = host_runtime.checked_module_base(module)
            if base:
                self.checked_images[base] = bytes(image)
                for offset, size in not_shared(tls_symbols(bytes(image))):
                    self._lib.kd_host_check_ignore_v1(base, offset, size)
        return self._r(SUCCESS, h)

    def cuModuleGetFunction(self, module: Any, name: bytes) -> tuple[Any, ...]:
        lib = self.modules.get(int(module))
        address = host_runtime.descriptor(lib, bytes(name).decode()) if lib is not None else 0
        if not address:
            return self._r(NOT_FOUND, None)
        return self._r(SUCCESS, _bindings.CUfunction(address))

    def cuModuleUnload(self, module: Any) -> tuple[Any, ...]:
        """Forgets the module but keeps its code mapped: a replayed graph or another thread's
        launch may still run it, and unloading TLS-holding libraries is not worth the risk."""
        with self._lock:
            self.modules.pop(int(module), None)
        return self._r(SUCCESS)

    def cuFuncGetAttribute(self, attr: Any, fn: Any) -> tuple[Any, ...]:
        name = _bindings.CUfunction_attribute(attr).name.removeprefix("CU_FUNC_ATTRIBUTE_")
        value = self.function_values.get((int(fn), int(attr)))
        if value is None:
            value = {"NUM_REGS": 32, "MAX_THREADS_PER_BLOCK": 1024, "PTX_VERSION": 90, "BINARY_VERSION": 90}.get(
                name, 49152 if name == "MAX_DYNAMIC_SHARED_SIZE_BYTES" else 0
            )
        return self._r(SUCCESS, value)

    def cuFuncSetAttribute(self, fn: Any, attr: Any, value: int) -> tuple[Any, ...]:
        self.function_values[(int(fn), int(attr))] = int(value)
        return self._r(SUCCESS)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, f: Any, block_size: int, shared: int) -> tuple[Any, ...]:
        return self._r(SUCCESS, max(1, 2048 // max(1, int(block_size))))

    def cuOccupancyMaxPotentialBlockSize(self, f: Any, to_shared: Any, shared: int, limit: int) -> tuple[Any, ...]:
        block = min(1024, int(limit) or 1024)
        return self._r(SUCCESS, plan_multiprocessors() * max(1, 2048 // block), block)

    def cuOccupancyMaxPotentialClusterSize(self, f: Any, config: Any) -> tuple[Any, ...]:
        return self._r(SUCCESS, 8)

    def cuLaunchKernel(
        self,
        f: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: Any,
        params: Any,
        extra: Any,
    ) -> tuple[Any, ...]:
        work = self.captures.get(int(stream or 0))
        if work is not None:
            work.append(("launch", int(f), (gx, gy, gz, bx, by, bz, shared), self._snapshot(int(f), int(params or 0))))
            return self._r(SUCCESS)
        code = self._lib.kd_host_launch(int(f), gx, gy, gz, bx, by, bz, shared, None, int(params or 0) or None, None)
        return self._r(code)

    def cuLaunchKernelEx(self, config: Any, f: Any, params: Any, extra: Any) -> tuple[Any, ...]:
        attributes = (LaunchAttribute * max(1, int(config.numAttrs)))()
        ids = _bindings.CUlaunchAttributeID
        for slot, a in zip(attributes, config.attrs[: config.numAttrs]):
            slot.id = int(a.id)
            if a.id == ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
                slot.value[0] = int(a.value.cooperative)
            elif a.id == ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                dim = a.value.clusterDim
                slot.value[0], slot.value[1], slot.value[2] = dim.x, dim.y, dim.z
        c = LaunchConfig()
        dims = (config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.blockDimY)
        c.dims[:] = [*dims, config.blockDimZ, config.sharedMemBytes]
        c.attrs = attributes
        c.nattrs = int(config.numAttrs)
        code = self._lib.kd_host_launch_ex(ctypes.addressof(c), int(f), int(params or 0) or None, None)
        return self._r(code)

    def launch_failure(self, code: int, api: str = "cuLaunchKernel") -> KernelFaultError:
        """The error for a failed host launch, with the runtime's account of what went wrong."""
        try:
            name = CUresult(code).name
        except ValueError:
            name = f"CUDA_ERROR_{code}"
        detail = host_runtime.last_error(self._lib) or "the CPU device's runtime refused the launch"
        return check_error(code, name, api, detail, self.checked_images)

    def cuGetProcAddress(self, symbol: bytes, version: int, flags: Any) -> tuple[Any, ...]:
        """The runtime library's own entries for the launches, the pool (whose books it keeps), the
        current context and stream queries; copies as C callbacks into this driver."""
        native = {
            b"cuLaunchKernel": "kd_host_launch",
            b"cuLaunchKernelEx": "kd_host_launch_ex",
            b"cuMemAllocFromPoolAsync": "kd_host_mem_alloc_v1",
            b"cuMemFreeAsync": "kd_host_mem_free_async_v1",
            b"cuCtxGetCurrent": "kd_host_ctx_get_current_v1",
            b"cuStreamQuery": "kd_host_stream_query_v1",
        }
        name = bytes(symbol)
        if name in native:
            return self._r(SUCCESS, ctypes.cast(getattr(self._lib, native[name]), ctypes.c_void_p).value, 0)
        if not self._c_entries:
            self._c_entries.update(
                {
                    b"cuMemcpyHtoDAsync": _C_COPY(self._copy_from_c),
                    b"cuMemcpyDtoHAsync": _C_COPY(self._copy_from_c),
                }
            )
        entry = self._c_entries.get(name)
        if entry is None:
            return self._r(SUCCESS, 0, 0)
        return self._r(SUCCESS, ctypes.cast(entry, ctypes.c_void_p).value, 0)


_instance: HostDriver | None = None
_instance_lock = threading.Lock()


def host_api() -> HostDriver:
    """The process's CPU-device driver, made on first use (which compiles or loads the runtime)."""
    global _instance
    if _instance is None:
        with _instance_lock:
            if _instance is None:
                _instance = HostDriver()
    return _instance
