"""The race check's records of global memory at the edges of its fast paths: an access whose record
holds no write of the launch is recorded without the full check, reads several blocks share skip
the record's lock when nothing changes, and an access tries the array the last one hit first. Each
edge still reports what the full check reports, and correct kernels stay clean."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import RaceCheckError

cpu = pytest.mark.skipif(not kd.is_available("cpu"), reason="the CPU device needs a host C++ compiler")
SAME_LAUNCH = "in the same launch"


@kd.kernel(grid=2, block=64)
def swap_halves(y: kd.InOut[kd.float32, Literal[128]]) -> str:
    # Each block reads the half the other block writes.
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = y[i ^ 64];
    y[i] = v + 1.0f;
    """


@kd.kernel(grid=3, block=64)
def read_twice_then_write(y: kd.InOut[kd.float32, Literal[64]], seen: kd.Out[kd.float32, Literal[192]]) -> str:
    # Blocks 0 and 1 read every element of y, block 2 writes every one.
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x < 2) seen[i] = y[threadIdx.x];
    else y[threadIdx.x] = 1.0f;
    """


@kd.kernel(grid=4, block=64)
def shared_reads(out: kd.Out[kd.float32, Literal[256]], x: kd.In[kd.float32, Literal[256]]) -> str:
    # Every thread of every block reads its neighbours and x[0]; each writes its own element.
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = x[0] + x[i] + x[(i + 1) % 256] + x[(i + 255) % 256];
    """


@kd.kernel(grid=2, block=64)
def increment(y: kd.InOut[kd.float32, Literal[128]]) -> str:
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = y[i] + 1.0f;
    """


@kd.kernel(grid=2, block=64)
def across_blocks_wide(y: kd.Out[kd.float64, Literal[128]]) -> str:
    # 8-byte elements: two granules of the record each.
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.0;
    y[i ^ 64] += 1.0;
    """


@kd.kernel(grid=2, block=32, allow_alias=True)
def overlapping_views(
    y: kd.Out[kd.float32, Literal[32]], x: kd.In[kd.float32, Literal[32]], total: kd.Out[kd.float32, Literal[1]]
) -> str:
    # Block 0 writes y; block 1's first thread reads x from its end down, so its reads of the
    # part of x that is also y come after reads of the part that is x alone.
    return """
    if (blockIdx.x == 0) {
        y[threadIdx.x] = 1.0f;
    } else if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int j = 31; j >= 0; --j) sum += x[j];
        total[0] = sum;
    }
    """


@cpu
def test_a_write_to_what_another_block_read_is_a_race() -> None:
    with kd.Session(device="cpu", checks="races") as s:
        with pytest.raises(RaceCheckError) as found:
            swap_halves(s.to_device(np.zeros(128, np.float32)))
    assert SAME_LAUNCH in str(found.value)


@cpu
def test_a_write_to_what_two_other_blocks_read_is_a_race() -> None:
    with kd.Session(device="cpu", checks="races") as s:
        with pytest.raises(RaceCheckError) as found:
            read_twice_then_write(s.to_device(np.zeros(64, np.float32)), s.to_device(np.zeros(192, np.float32)))
    assert SAME_LAUNCH in str(found.value)


@cpu
def test_reads_many_blocks_and_threads_share_are_no_race() -> None:
    with kd.Session(device="cpu", checks="all") as s:
        x = np.arange(256, dtype=np.float32)
        out = s.to_device(np.zeros(256, np.float32))
        shared_reads(out, s.to_device(x))
        s.synchronize()
        np.testing.assert_array_equal(out.to_host(), x[0] + x + np.roll(x, -1) + np.roll(x, 1))


@cpu
def test_a_thread_updating_its_own_element_launch_after_launch_is_no_race() -> None:
    with kd.Session(device="cpu", checks="all") as s:
        y = s.to_device(np.zeros(128, np.float32))
        for _ in range(3):
            increment(y)
        s.synchronize()
        np.testing.assert_array_equal(y.to_host(), np.full(128, 3.0, np.float32))


@cpu
def test_a_race_between_blocks_on_8_byte_elements_is_reported() -> None:
    with kd.Session(device="cpu", checks="races") as s:
        with pytest.raises(RaceCheckError) as found:
            across_blocks_wide(s.to_device(np.zeros(128, np.float64)))
    assert SAME_LAUNCH in str(found.value)


@cpu
def test_a_race_through_overlapping_views_is_found_on_the_first_view() -> None:
    with kd.Session(device="cpu", checks="races") as s:
        a = s.to_device(np.zeros(64, np.float32))
        with pytest.raises(RaceCheckError) as found:
            overlapping_views(a[0:32], a[16:48], s.to_device(np.zeros(1, np.float32)))
    assert "writes 'y'[" in str(found.value) and SAME_LAUNCH in str(found.value)
