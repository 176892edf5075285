"""A session's launches: ``Session.launch`` (the warm path every generated adapter calls) and
what it needs, written as functions of the session and bound in the class body (``launch =
session_launch.launch``), so a launch costs what a method costs and the Session class stays
about its state. Launch validation reads the limits once defined in ``limits``."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LaunchConfigError, StickyCudaError
from . import driver, occupancy
from .driver import check
from .limits import (
    DEFAULT_SHARED_LIMIT,
    MAX_BLOCK,
    MAX_BLOCK_THREADS,
    MAX_CLUSTER_BLOCKS,
    MAX_GRID,
)
from .stream import Stream, StreamSession, check_stream

if TYPE_CHECKING:
    from .context import Activation
    from .device import Device


class LaunchingSession(StreamSession, Protocol):
    """A Session as its launch methods, defined here, read it: a stream's, with its device, the
    session stream's CUstream, and the Session's own launch state (its two activations, the queue
    the warm path tests, and what it has asked the driver once: entry points, shared-memory opt-ins)."""

    @property
    def gpu(self) -> Device: ...

    @property
    def raw_stream(self) -> Any: ...

    @property
    def _activation(self) -> Activation: ...

    @property
    def _raw_activation(self) -> Activation: ...

    @property
    def _deferred(self) -> collections.deque[tuple[str, Any]]: ...

    @property
    def _entry_points(self) -> dict[str, int]: ...

    @property
    def _shared_granted(self) -> dict[int, int]: ...


def check_launch_dims(grid: Any, block: Any, shared: Any, kernel: str | None = None) -> bool:
    """Whether a launch of ``grid`` x ``block`` with ``shared`` bytes has threads to run (False for
    an empty grid); LaunchConfigError naming the dimension and its limit (and ``kernel``) for one
    no device runs. Needs no device, so ``Kernel.inspect`` refuses exactly what a call would (a
    device's own shared-memory limit is checked at the launch)."""
    dims = [(f"grid.{a}", v, limit) for a, v, limit in zip("xyz", grid, MAX_GRID)]
    dims += [(f"block.{a}", v, limit) for a, v, limit in zip("xyz", block, MAX_BLOCK)]
    for name, value, limit in dims:
        if type(value) is not int or not 0 <= value <= limit:
            raise LaunchConfigError(f"{name} = {value!r} is outside 0..{limit}", kernel)
    if type(shared) is not int or shared < 0:
        message = f"shared = {shared!r} must be a non-negative int (bytes of dynamic shared memory)"
        raise LaunchConfigError(message, kernel)
    if 0 in grid:
        return False
    threads = block[0] * block[1] * block[2]
    if not 0 < threads <= MAX_BLOCK_THREADS:
        message = f"block {tuple(block)} has {threads} threads; a block holds 1..{MAX_BLOCK_THREADS}"
        raise LaunchConfigError(message, kernel)
    return True


def launch(
    self: LaunchingSession,
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
    Callers check ``stream`` (``check_stream``) before they pack ``params``; here, after the
    packing, a ``stream`` that is not a Stream itself is refused without reading it.
    """
    with self.lock:
        if not self.usable:
            self.raise_unusable()
        gx, gy, gz = grid
        bx, by, bz = block
        all_ints = type(gx) is int and type(gy) is int and type(gz) is int and type(shared) is int
        all_ints = all_ints and type(bx) is int and type(by) is int and type(bz) is int
        if not (
            all_ints
            and 0 < gx <= MAX_GRID[0]
            and 0 < gy <= MAX_GRID[1]
            and 0 < gz <= MAX_GRID[2]
            and 0 < bx * by * bz <= MAX_BLOCK_THREADS
            and bx <= MAX_BLOCK[0]
            and by <= MAX_BLOCK[1]
            and bz <= MAX_BLOCK[2]
            and 0 <= shared <= DEFAULT_SHARED_LIMIT
        ) and not unusual_launch(self, function, grid, block, shared):
            return
        if stream is None:
            h = self.raw_stream
        elif type(stream) is Stream and stream.session is self and not stream._closed:
            h = stream._cu
        else:
            check_stream(stream, self)
        if self._deferred:
            with self._activation:  # entering an activation frees what finalizers queued
                pass
        err = self.api.cuLaunchKernel(
            function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, h, params, 0
        )[0]
        if err == driver.ERROR_INVALID_CONTEXT:
            with self._raw_activation:
                err = self.api.cuLaunchKernel(
                    function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, h, params, 0
                )[0]
        if err:
            launch_failed(self, err)


def launch_ex(
    self: LaunchingSession,
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared: int,
    stream: Stream | None,
    params: int,
    cooperative: bool,
    cluster: tuple[int, ...],
) -> None:
    """A launch with ``cuLaunchKernelEx`` attributes: ``cooperative`` (every block co-resident,
    refused with LaunchConfigError when the occupancy says the grid does not fit) and ``cluster``
    (thread-block cluster dimensions; () for none). Off the warm path: it checks the device and
    builds the launch configuration on every call, as a kernel needing either does enough work
    per launch that a microsecond does not show."""
    with self.lock:
        if not self.usable:
            self.raise_unusable()
        if not unusual_launch(self, function, grid, block, shared):
            return
        if stream is None:
            h = self.raw_stream
        elif type(stream) is Stream and stream.session is self and not stream._closed:
            h = stream._cu
        else:
            check_stream(stream, self)
        if cluster:
            check_cluster(self, grid, cluster)
            check_cluster_fits(self, function, grid, block, shared, cluster)
        if cooperative:
            check_co_resident(self, function, grid, block, shared)
        if self._deferred:
            with self._activation:
                pass
        config = launch_config(self.api, grid, block, shared, h, cooperative, cluster)
        err = self.api.cuLaunchKernelEx(config, function, params, 0)[0]
        if err == driver.ERROR_INVALID_CONTEXT:
            with self._raw_activation:
                err = self.api.cuLaunchKernelEx(config, function, params, 0)[0]
        if err:
            launch_failed(self, err)


def check_cluster(self: LaunchingSession, grid: tuple[int, ...], cluster: tuple[int, ...]) -> None:
    """LaunchConfigError unless ``cluster`` holds 1..8 blocks and divides ``grid`` axis by axis
    (a build for a device without clusters, before sm_90, is refused when it is planned)."""
    blocks = 1
    for axis, g, c in zip("xyz", grid, cluster):
        if type(c) is not int or c < 1:
            raise LaunchConfigError(f"cluster.{axis} = {c!r} must be a positive int")
        if g % c:
            raise LaunchConfigError(f"grid.{axis} = {g} is not a multiple of cluster.{axis} = {c}")
        blocks *= c
    if blocks > MAX_CLUSTER_BLOCKS:
        raise LaunchConfigError(
            f"cluster {tuple(cluster)} has {blocks} blocks; a portable cluster holds at most {MAX_CLUSTER_BLOCKS}"
        )


def check_cluster_fits(
    self: LaunchingSession,
    function: Any,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    shared: int,
    cluster: tuple[int, ...],
) -> None:
    """LaunchConfigError when the device cannot schedule a cluster of this many blocks of this
    kernel at this block size and shared memory (``cuOccupancyMaxPotentialClusterSize``)."""
    d = self.api
    config = launch_config(d, grid, block, shared, self.raw_stream, False, ())
    with self._raw_activation:
        most = int(check("cuOccupancyMaxPotentialClusterSize", d.cuOccupancyMaxPotentialClusterSize(function, config)))
    blocks = cluster[0] * cluster[1] * cluster[2]
    if blocks > most:
        threads = block[0] * block[1] * block[2]
        raise LaunchConfigError(
            f"cluster {tuple(cluster)} has {blocks} blocks; device {self.device} schedules clusters of at most "
            f"{most} blocks of this kernel at {threads} threads and {shared} bytes of shared memory"
        )


def co_resident_blocks(self: LaunchingSession, function: Any, threads: int, shared: int) -> int:
    """How many blocks of ``function`` (``threads`` each, ``shared`` bytes of dynamic shared
    memory) the device holds at once: blocks per SM by the occupancy API, times the SMs."""
    return occupancy.active_blocks(self, function, threads, shared) * self.gpu.multiprocessors


def check_co_resident(
    self: LaunchingSession, function: Any, grid: tuple[int, ...], block: tuple[int, ...], shared: int
) -> None:
    """LaunchConfigError unless all of ``grid``'s blocks can be resident at once, as a cooperative
    launch needs (blocks per SM at this block size and shared memory, times the SM count)."""
    threads = block[0] * block[1] * block[2]
    fits = co_resident_blocks(self, function, threads, shared)
    per_sm = fits // self.gpu.multiprocessors
    blocks = grid[0] * grid[1] * grid[2]
    if blocks > fits:
        raise LaunchConfigError(
            f"a cooperative launch of {blocks} blocks of {threads} threads ({shared} bytes of shared memory) "
            f"cannot be co-resident: device {self.device} holds {per_sm} such block(s) per SM x "
            f"{self.gpu.multiprocessors} SMs = {fits}"
        )


def launch_config(
    d: Any,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    shared: int,
    stream: Any,
    cooperative: bool,
    cluster: tuple[int, ...],
) -> Any:
    """The ``CUlaunchConfig`` of one extended launch, with its cooperative and cluster attributes."""
    config = d.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared
    config.hStream = stream
    attributes = []
    if cooperative:
        a = d.CUlaunchAttribute()
        a.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        a.value.cooperative = 1
        attributes.append(a)
    if cluster:
        a = d.CUlaunchAttribute()
        a.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cluster
        attributes.append(a)
    config.attrs = attributes
    config.numAttrs = len(attributes)
    return config


def unusual_launch(self: LaunchingSession, function: Any, grid: Any, block: Any, shared: Any) -> bool:
    """The slow path of a launch outside what cuLaunchKernel takes without an opt-in
    (``limits``): False for an empty grid (nothing to launch), True once dynamic shared
    memory above 48 KiB is allowed for ``function``; LaunchConfigError for anything the
    device cannot run."""
    if not check_launch_dims(grid, block, shared):
        return False
    if shared > DEFAULT_SHARED_LIMIT:
        allow_dynamic_shared(self, function, shared)
    return True


def allow_dynamic_shared(self: LaunchingSession, function: Any, nbytes: int) -> None:
    """Opt ``function`` in to ``nbytes`` of dynamic shared memory (above 48 KiB CUDA asks for it)."""
    key = int(function)
    if self._shared_granted.get(key, 0) >= nbytes:
        return
    d = self.api
    with self._raw_activation:
        optin = self.gpu.max_shared_per_block_optin
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


def entry_point(self: LaunchingSession, name: str) -> int:
    """Address of driver function ``name`` for the C launch path; 0 when there is none."""
    address = self._entry_points.get(name)
    if address is None:
        with self._activation:
            address = self._entry_points[name] = driver.entry_point(name, self.api)
    return address


def launch_failed(self: LaunchingSession, err: int) -> None:
    """Raise for a failed launch; a sticky error poisons the session first. On the CPU device a
    kernel fault is the host driver's ``KernelFaultError``, which leaves the session usable."""
    if self.gpu.host:
        raise self.api.launch_failure(int(err))
    exc = driver.error("cuLaunchKernel", err, launch=True)
    if isinstance(exc, StickyCudaError):
        self.poison(exc)
    raise exc
