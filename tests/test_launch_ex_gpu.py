"""Cooperative and cluster launches on the GPU: a grid-wide barrier (hand-written and
cooperative_groups' ``this_grid().sync()``) sees every block's write, a grid too large to be
co-resident is refused with a LaunchConfigError before the launch, and a cluster launch gives
each block the rank in its cluster that the grid position implies."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import HeadersNotAvailableError, LaunchConfigError

pytestmark = pytest.mark.gpu


@kd.kernel(grid="g", block=128, cooperative=True)
def barrier_neighbours(out: kd.Out[kd.int32, "g"], ids: kd.InOut[kd.int32, "g"], arrived: kd.InOut[kd.uint32, 1]):
    return f"""
    if (threadIdx.x == 0) {{
        volatile int* v = {ids};
        v[blockIdx.x] = blockIdx.x + 1;
        __threadfence();
        atomicAdd({arrived}, 1u);
        while (atomicAdd({arrived}, 0u) < gridDim.x) {{ }}
        __threadfence();
        {out}[blockIdx.x] = v[(blockIdx.x + 1) % gridDim.x];
    }}
    """


@kd.kernel(grid="g", block=128, cooperative=True)
def grid_sync_neighbours(out: kd.Out[kd.int32, "g"], ids: kd.InOut[kd.int32, "g"]):
    return f"""
    #include <cooperative_groups.h>
    if (threadIdx.x == 0) {ids}[blockIdx.x] = blockIdx.x + 1;
    cooperative_groups::this_grid().sync();
    if (threadIdx.x == 0) {out}[blockIdx.x] = {ids}[(blockIdx.x + 1) % gridDim.x];
    """


@kd.kernel(grid="g", block=1024, cooperative=True)
def wide_blocks(out: kd.Out[kd.int32, "g"]):
    return f"if (threadIdx.x == 0) {out}[blockIdx.x] = 1;"


@kd.kernel(grid="g", block=32, cluster=("c", 1, 1))
def cluster_ranks(rank: kd.Out[kd.uint32, "g"], size: kd.Out[kd.uint32, "g"], c: kd.Const[int] = 4):
    return f"""
    unsigned int r, n;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    if (threadIdx.x == 0) {{ {rank}[blockIdx.x] = r; {size}[blockIdx.x] = n; }}
    """


def _neighbours(g: int) -> list[int]:
    return [(b + 1) % g + 1 for b in range(g)]


def test_a_cooperative_grid_passes_a_hand_written_grid_barrier(device_session: kd.Session) -> None:
    g = 2 * device_session.gpu.multiprocessors
    out = device_session.zeros(g, np.int32)
    barrier_neighbours(out, device_session.zeros(g, np.int32), device_session.zeros(1, np.uint32))
    assert out.to_host().tolist() == _neighbours(g)


def test_a_cooperative_grid_passes_cooperative_groups_grid_sync(device_session: kd.Session) -> None:
    g = 2 * device_session.gpu.multiprocessors
    out = device_session.zeros(g, np.int32)
    try:
        grid_sync_neighbours(out, device_session.zeros(g, np.int32))
    except HeadersNotAvailableError as exc:
        pytest.skip(f"the headers extra is not installed: {exc}")
    assert out.to_host().tolist() == _neighbours(g)


def test_a_cooperative_grid_that_cannot_be_co_resident_is_refused(device_session: kd.Session) -> None:
    g = 64 * device_session.gpu.multiprocessors  # 64 blocks of 1024 threads fit on no SM
    with pytest.raises(LaunchConfigError, match="cannot be co-resident"):
        wide_blocks(device_session.zeros(g, np.int32))
    out = device_session.zeros(device_session.gpu.multiprocessors, np.int32)
    wide_blocks(out)  # one block per SM fits, and the session is fine after the refusal
    assert out.to_host().tolist() == [1] * device_session.gpu.multiprocessors


@pytest.mark.parametrize("c", [2, 4, 8])
def test_a_cluster_launch_ranks_blocks_within_their_cluster(device_session: kd.Session, c: int) -> None:
    g = 64
    rank, size = device_session.zeros(g, np.uint32), device_session.zeros(g, np.uint32)
    cluster_ranks(rank, size, c=c)
    assert rank.to_host().tolist() == [b % c for b in range(g)]
    assert size.to_host().tolist() == [c] * g


def test_a_grid_that_is_not_a_multiple_of_the_cluster_is_refused(device_session: kd.Session) -> None:
    with pytest.raises(LaunchConfigError, match="not a multiple of cluster.x = 4"):
        cluster_ranks(device_session.zeros(6, np.uint32), device_session.zeros(6, np.uint32))


def test_warm_cooperative_calls_launch_from_c_and_still_pass_the_barrier(device_session: kd.Session) -> None:
    sms = device_session.gpu.multiprocessors
    for g in (sms, 2 * sms, sms // 2, 2 * sms):
        out = device_session.zeros(g, np.int32)
        barrier_neighbours(out, device_session.zeros(g, np.int32), device_session.zeros(1, np.uint32))
        assert out.to_host().tolist() == _neighbours(g)
    assert barrier_neighbours._remembered_launches == 1


def test_a_warm_cooperative_grid_past_co_residency_is_still_refused(device_session: kd.Session) -> None:
    sms = device_session.gpu.multiprocessors
    wide_blocks(device_session.zeros(sms, np.int32))
    wide_blocks(device_session.zeros(sms, np.int32))
    with pytest.raises(LaunchConfigError, match="cannot be co-resident"):
        wide_blocks(device_session.zeros(64 * sms, np.int32))


def test_warm_cluster_calls_launch_from_c_with_their_cluster(device_session: kd.Session) -> None:
    for g in (64, 128, 64):
        rank, size = device_session.zeros(g, np.uint32), device_session.zeros(g, np.uint32)
        cluster_ranks(rank, size)  # the default c=4, positional: the C path takes it
        assert rank.to_host().tolist() == [b % 4 for b in range(g)]
        assert size.to_host().tolist() == [4] * g
    assert cluster_ranks._remembered_launches >= 1
