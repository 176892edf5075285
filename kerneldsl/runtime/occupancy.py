"""What the driver says about a loaded kernel's resources: its function attributes, how many of
its blocks an SM holds (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) and the block size it
suggests (``cuOccupancyMaxPotentialBlockSize``). Off the launch path: asked by ``kd`` users and
the autotuner, never per launch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .driver import check

if TYPE_CHECKING:
    from .context import DriverSession

__all__ = ["FunctionAttributes", "active_blocks", "function_attributes", "potential_block"]


class FunctionAttributes(NamedTuple):
    """Static resource use of a kernel, as the driver reports it (``cuFuncGetAttribute``)."""

    registers: int
    shared_bytes: int  # static shared memory
    max_threads: int  # the most threads a block of this function may have (registers limit it)
    local_bytes: int  # per thread: spills and local arrays
    const_bytes: int
    ptx_version: int  # major * 10 + minor of the PTX it was compiled from
    binary_version: int  # major * 10 + minor of the binary's arch
    max_dynamic_shared_bytes: int  # dynamic shared memory a launch may ask for without opting in further


_ATTRIBUTES = (
    "NUM_REGS",
    "SHARED_SIZE_BYTES",
    "MAX_THREADS_PER_BLOCK",
    "LOCAL_SIZE_BYTES",
    "CONST_SIZE_BYTES",
    "PTX_VERSION",
    "BINARY_VERSION",
    "MAX_DYNAMIC_SHARED_SIZE_BYTES",
)


def function_attributes(session: DriverSession, function: Any) -> FunctionAttributes:
    """Every attribute of ``FunctionAttributes`` for CUfunction ``function`` of ``session``."""
    d = session.api
    a = d.CUfunction_attribute
    with session.activated():
        values = [
            int(check("cuFuncGetAttribute", d.cuFuncGetAttribute(getattr(a, f"CU_FUNC_ATTRIBUTE_{name}"), function)))
            for name in _ATTRIBUTES
        ]
    return FunctionAttributes(*values)


def active_blocks(session: DriverSession, function: Any, threads: int, shared: int) -> int:
    """Blocks of ``threads`` threads with ``shared`` bytes of dynamic shared memory one SM holds at once."""
    d = session.api
    with session.activated():
        return int(
            check(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                d.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, threads, shared),
            )
        )


def potential_block(session: DriverSession, function: Any, shared: int, limit: int) -> tuple[int, int]:
    """``(block size, minimum grid size)`` the driver suggests for the highest occupancy with a
    constant ``shared`` bytes of dynamic shared memory, blocks of at most ``limit`` threads (0: any)."""
    d = session.api
    with session.activated():
        grid, block = check(
            "cuOccupancyMaxPotentialBlockSize", d.cuOccupancyMaxPotentialBlockSize(function, None, shared, limit)
        )
    return int(block), int(grid)
