"""A kernel's resources on the driver double: function attributes, the occupancy computed from
them and the device's limits (an H200's, as the double reports them) beside the driver's own
answer, and the suggested block size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.launch.resources import DeviceLimits, Resources, SuggestedBlock, compute_occupancy
from kerneldsl.runtime.occupancy import FunctionAttributes

H200 = DeviceLimits(
    warp_size=32,
    threads_per_sm=2048,
    blocks_per_sm=32,
    registers_per_sm=65536,
    registers_per_block=65536,
    shared_per_sm=233472,
    shared_per_block_optin=232448,
    reserved_shared_per_block=1024,
    multiprocessors=132,
)


def attributes(registers: int = 32, shared: int = 0, max_threads: int = 1024) -> FunctionAttributes:
    return FunctionAttributes(registers, shared, max_threads, 0, 0, 90, 90, 48 * 1024)


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def scale(y: kd.InOut["float32", "n"], alpha: kd.Scalar["float32"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {alpha};"


@pytest.fixture(autouse=True)
def private_cache(isolated_cache: Path) -> Path:
    return isolated_cache


def test_a_light_kernel_is_limited_by_the_warps_an_sm_holds() -> None:
    occ = compute_occupancy(attributes(registers=16), H200, 256, 0)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limited_by, occ.fraction) == (8, 64, "warps", 1.0)


def test_small_blocks_are_limited_by_the_blocks_an_sm_holds() -> None:
    occ = compute_occupancy(attributes(registers=16), H200, 32, 0)
    assert (occ.blocks_per_sm, occ.limited_by) == (32, "blocks")


def test_registers_are_allocated_per_warp_in_units_of_256() -> None:
    occ = compute_occupancy(attributes(registers=64), H200, 256, 0)  # 2048 registers a warp: 32 warps
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limited_by) == (4, 32, "registers")
    rounded = compute_occupancy(attributes(registers=57), H200, 256, 0)  # 1824 -> 2048 a warp
    assert rounded.limits["registers"] == 4


def test_shared_memory_counts_the_static_and_dynamic_bytes_and_the_reserve() -> None:
    occ = compute_occupancy(attributes(shared=32 * 1024), H200, 128, 16 * 1024)
    assert (occ.blocks_per_sm, occ.limited_by) == (233472 // (48 * 1024 + 1024), "shared memory")


def test_a_block_larger_than_the_function_allows_has_no_occupancy() -> None:
    occ = compute_occupancy(attributes(max_threads=512), H200, 1024, 0)
    assert (occ.blocks_per_sm, occ.limited_by) == (0, "block size")


def test_more_shared_memory_than_a_block_may_have_has_no_occupancy() -> None:
    occ = compute_occupancy(attributes(shared=48 * 1024), H200, 128, 200 * 1024)
    assert (occ.blocks_per_sm, occ.limited_by) == (0, "shared memory")


def test_kernel_occupancy_uses_the_driver_attributes_and_reports_the_driver_answer(drv: Any) -> None:
    drv.func_values["NUM_REGS"] = 64
    drv.blocks_per_sm = 4
    y = kd.default_session().zeros(1000, np.float32)
    occ = scale.occupancy(y, 2.0)
    assert (occ.threads, occ.blocks_per_sm, occ.limited_by, occ.driver_blocks_per_sm) == (256, 4, "registers", 4)
    assert scale.occupancy(y, 2.0, block=1024).blocks_per_sm == 1


def test_suggest_block_is_the_drivers_answer(drv: Any) -> None:
    y = kd.default_session().zeros(1000, np.float32)
    assert scale.suggest_block(y, 2.0) == SuggestedBlock(block=512, min_grid=264)
    assert drv.count("cuOccupancyMaxPotentialBlockSize") == 1


def test_kernel_resources_are_the_function_attributes(drv: Any) -> None:
    drv.func_values.update(NUM_REGS=40, LOCAL_SIZE_BYTES=16, PTX_VERSION=90, BINARY_VERSION=90)
    y = kd.default_session().zeros(1000, np.float32)
    found = scale.resources(y, 2.0)
    assert (found.registers, found.local_bytes, found.ptx_version, found.binary_version) == (40, 16, 90, 90)


def test_a_build_asks_the_driver_once_per_session(drv: Any) -> None:
    build = scale.compile(arch="sm_90")
    first = build.resources()
    asked = drv.count("cuFuncGetAttribute")
    assert isinstance(first, Resources) and first.max_threads_per_block == 1024
    assert build.resources() is first and drv.count("cuFuncGetAttribute") == asked
