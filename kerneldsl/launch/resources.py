"""A kernel's resources in plain sight: the driver's function attributes of a build, and the
occupancy a launch of it gets (active blocks and warps per SM, and which resource limits them).

The occupancy is computed from the attributes and the device's limits, as CUDA's occupancy
calculator does (registers are allocated per warp in units of 256 across four sub-partitions,
shared memory per block with the driver's reserve, in 128-byte units), and is reported beside
the driver's own ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` answer so a difference shows.
``kernel.occupancy(*args, block=...)``, ``kernel.suggest_block(*args)`` and
``kernel.resources(*args)`` come from ``KernelResources``, a base of ``Kernel``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..errors import BindingError
from ..jit.attributes import Resources
from ..runtime import occupancy as driver_occupancy
from ..runtime.occupancy import FunctionAttributes
from .bound import dim3, resolved_launch_dims

if TYPE_CHECKING:
    from ..jit.signature import Signature
    from .bound import BoundLaunch

__all__ = ["DeviceLimits", "KernelResources", "Occupancy", "SuggestedBlock", "compute_occupancy"]

_REGISTER_UNIT = 256  # registers are allocated to a warp in these units
_SUB_PARTITIONS = 4  # an SM's register file is split between four schedulers
_SHARED_UNIT = 128  # shared memory is allocated to a block in these units
_LIMIT_ORDER = ("warps", "blocks", "registers", "shared memory", "block size")  # named first on a tie


@dataclass(frozen=True)
class DeviceLimits:
    """What an SM of one device holds, from ``cuDeviceGetAttribute``."""

    warp_size: int
    threads_per_sm: int
    blocks_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    shared_per_sm: int
    shared_per_block_optin: int
    reserved_shared_per_block: int
    multiprocessors: int

    @classmethod
    def of(cls, session: Any) -> DeviceLimits:
        gpu = session.gpu
        return cls(
            warp_size=gpu.attribute("WARP_SIZE"),
            threads_per_sm=gpu.attribute("MAX_THREADS_PER_MULTIPROCESSOR"),
            blocks_per_sm=gpu.attribute("MAX_BLOCKS_PER_MULTIPROCESSOR"),
            registers_per_sm=gpu.attribute("MAX_REGISTERS_PER_MULTIPROCESSOR"),
            registers_per_block=gpu.attribute("MAX_REGISTERS_PER_BLOCK"),
            shared_per_sm=gpu.attribute("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            shared_per_block_optin=gpu.max_shared_per_block_optin,
            reserved_shared_per_block=gpu.attribute("RESERVED_SHARED_MEMORY_PER_BLOCK"),
            multiprocessors=gpu.multiprocessors,
        )


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of ``threads`` threads with ``shared`` bytes of dynamic shared memory an SM
    holds at once (``blocks_per_sm``, as computed here), the warps they make, what each resource
    alone would allow (``limits``: blocks per SM) and which one binds (``limited_by``);
    ``driver_blocks_per_sm`` is the driver's own answer."""

    threads: int
    shared: int
    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    limited_by: str  # "block size", "warps", "blocks", "registers" or "shared memory"
    limits: dict[str, int]
    driver_blocks_per_sm: int | None = None

    @property
    def fraction(self) -> float:
        """Active warps over the most an SM holds (0.0 to 1.0)."""
        return self.warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0

    def __str__(self) -> str:
        return (
            f"{self.blocks_per_sm} block(s) of {self.threads} threads per SM, {self.warps_per_sm}/"
            f"{self.max_warps_per_sm} warps ({self.fraction:.0%}), limited by {self.limited_by}"
        )


@dataclass(frozen=True)
class SuggestedBlock:
    """``cuOccupancyMaxPotentialBlockSize``'s answer: the block size with the highest occupancy and
    the smallest grid that reaches it on every SM."""

    block: int
    min_grid: int


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def compute_occupancy(attrs: FunctionAttributes, limits: DeviceLimits, threads: int, shared: int) -> Occupancy:
    """The occupancy of a launch of ``threads`` threads per block and ``shared`` dynamic bytes."""
    warps = math.ceil(threads / limits.warp_size)
    max_warps = limits.threads_per_sm // limits.warp_size
    allowed = {
        "block size": 0 if not 0 < threads <= attrs.max_threads else limits.blocks_per_sm,
        "warps": max_warps // warps if warps else 0,
        "blocks": limits.blocks_per_sm,
        "registers": _register_limit(attrs.registers, warps, limits),
        "shared memory": _shared_limit(attrs.shared_bytes + shared, limits),
    }
    blocks = min(allowed.values())
    limited = next(name for name in _LIMIT_ORDER if allowed[name] == blocks)
    return Occupancy(threads, shared, blocks, blocks * warps, max_warps, limited, allowed)


def _register_limit(registers: int, warps: int, limits: DeviceLimits) -> int:
    if registers == 0:
        return limits.blocks_per_sm
    per_warp = _round_up(registers * limits.warp_size, _REGISTER_UNIT)
    if per_warp * _round_up(warps, _SUB_PARTITIONS) > limits.registers_per_block:
        return 0  # the launch itself would be refused: too many registers for one block
    warps_per_partition = limits.registers_per_sm // _SUB_PARTITIONS // per_warp
    return warps_per_partition * _SUB_PARTITIONS // warps


def _shared_limit(nbytes: int, limits: DeviceLimits) -> int:
    if nbytes > limits.shared_per_block_optin:
        return 0
    per_block = _round_up(nbytes + limits.reserved_shared_per_block, _SHARED_UNIT)
    return limits.shared_per_sm // per_block if per_block else limits.blocks_per_sm


def launch_occupancy(bound: BoundLaunch, threads: int, shared: int) -> Occupancy:
    """The occupancy of ``bound``'s function at this block size, with the driver's answer beside it."""
    session = bound.session
    attrs = driver_occupancy.function_attributes(session, bound.function)
    computed = compute_occupancy(attrs, DeviceLimits.of(session), threads, shared)
    driver = driver_occupancy.active_blocks(session, bound.function, threads, shared) if threads else 0
    return Occupancy(**{**computed.__dict__, "driver_blocks_per_sm": driver})


class KernelResources:
    """``Kernel``'s resource questions about the build a call with given arguments would run."""

    __slots__ = ()

    def resources(self, *args: Any, **consts: Any) -> Resources:
        """The driver's attributes of the build these arguments select (registers, shared and
        local memory, max threads per block, PTX and binary versions)."""
        bound, _ = _bound(_kernel(self), args, consts)
        return Resources.of(driver_occupancy.function_attributes(bound.session, bound.function))

    def occupancy(self, *args: Any, block: Any = None, shared: int | None = None, **consts: Any) -> Occupancy:
        """Active blocks and warps per SM for a call with these arguments, at its declared block
        (or ``block=``) and shared memory (or ``shared=``), and the resource that limits them."""
        bound, placed = _bound(_kernel(self), args, consts)
        threads, dynamic = _block_of(_kernel(self), bound, placed, block, shared)
        return launch_occupancy(bound, threads, dynamic)

    def suggest_block(self, *args: Any, shared: int | None = None, limit: int = 0, **consts: Any) -> SuggestedBlock:
        """The driver's block size for the highest occupancy of the build these arguments select
        (``cuOccupancyMaxPotentialBlockSize``), with ``shared`` dynamic bytes (default: the
        declared ones) and blocks of at most ``limit`` threads (0: the function's limit)."""
        bound, placed = _bound(_kernel(self), args, consts)
        _, dynamic = _block_of(_kernel(self), bound, placed, None, shared)
        block, grid = driver_occupancy.potential_block(bound.session, bound.function, dynamic, limit)
        return SuggestedBlock(block, grid)


class _Lookups(Protocol):
    """What the resource questions ask of the ``Kernel`` they are a base of: its signature and
    the bound build a call's arguments select."""

    @property
    def signature(self) -> Signature: ...
    def lookup(self, args: tuple[Any, ...], consts: Mapping[str, Any]) -> tuple[BoundLaunch, bool] | None: ...
    def _adopt_foreign(self, args: tuple[Any, ...]) -> tuple[Any, ...]: ...


def _kernel(mixed: KernelResources) -> _Lookups:
    """``KernelResources`` is a base of ``Kernel`` only."""
    return cast("_Lookups", mixed)


def _bound(kernel: _Lookups, args: tuple[Any, ...], consts: dict[str, Any]) -> tuple[BoundLaunch, tuple[Any, ...]]:
    """The bound build a call with ``args`` would launch (bound and built on a miss), and the
    arguments in parameter order."""
    args, consts = kernel.signature.place_arguments(args, consts)
    found = kernel.lookup(args, consts)
    if found is None:
        args = kernel._adopt_foreign(args)
        found = kernel.lookup(args, consts)
    if found is None:
        raise BindingError(kernel.signature.name, None, "resources and occupancy are asked of local arrays only")
    return found[0], args


def _block_of(
    kernel: _Lookups, bound: BoundLaunch, args: tuple[Any, ...], block: Any, shared: int | None
) -> tuple[int, int]:
    """Threads per block and dynamic shared bytes of a launch with ``args`` (and the overrides)."""
    override = None if block is None else dim3(kernel.signature.name, "block", block)
    _, dims, dynamic = resolved_launch_dims(bound.build.specialization, args, None, override, shared)
    return dims[0] * dims[1] * dims[2], int(dynamic)
