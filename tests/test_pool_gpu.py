"""The stream-ordered pool and the numpy path's pinned staging on a real GPU. Run with ``-m gpu``.

Already covered in test_runtime_gpu.py: dropping an array while a long kernel runs returns at once,
four threads allocating and freeing at once, an impossible request raising OutOfMemoryError.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_threads

import kerneldsl as kd
from kerneldsl.runtime import Session
from kerneldsl.runtime.staging import STAGE_LIMIT

pytestmark = pytest.mark.gpu


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def scale_add(y: kd.InOut["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"]):
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {a} * {x}[i] + {y}[i];
    """


@kd.kernel(grid=1, block=1)
def spin(cycles: kd.Scalar[kd.int64]):
    return "long long start = clock64(); while (clock64() - start < cycles) { }"


SECOND = 2_000_000_000  # clock64 cycles, about a second on an H200


# -- the pool -------------------------------------------------------------------------------------


def test_a_graph_that_allocates_its_temporaries_replays_every_time() -> None:
    with Session(0) as s:
        x = s.to_device(np.arange(1024, dtype=np.float32))
        out = s.to_device(np.full(1024, np.nan, np.float32))
        kd.ops.multiply(kd.ops.add(x, 1.0), 2.0, out=out)  # compiled and loaded before the capture
        s.synchronize()
        with s.capture() as g:
            t = kd.ops.add(x, 1.0)  # an allocation node: the graph allocates t at each replay
            kd.ops.multiply(t, 2.0, out=out)
        for _ in range(3):
            out.copy_from_host(np.zeros(1024, np.float32))
            g.replay()
            np.testing.assert_array_equal(out.to_host(), 2 * (np.arange(1024, dtype=np.float32) + 1))
        del t
        g.close()


def test_memory_used_on_another_stream_is_not_reused_before_that_stream_is_done() -> None:
    with Session(0) as s:
        other = s.create_stream()
        a, ones = s.to_device(np.ones(1 << 20, np.float32)), s.to_device(np.ones(1 << 20, np.float32))
        spin(int(0.3 * SECOND), stream=other)
        scale_add(a, ones, np.float32(1.0), stream=other)  # still running when a is freed below
        a.close()  # the free waits for `other`: documented in Session._free_device
        b = s.empty(1 << 20, np.float32)  # may reuse a's memory, only after `other` is done
        b.copy_from_host(np.full(1 << 20, 7, np.float32))
        s.synchronize()
        assert (b.to_host() == 7).all()


def test_a_request_that_fits_only_after_a_trim_succeeds() -> None:
    with Session(0) as s:
        free = s.memory_info().free
        first = s.empty(int(free * 0.55), np.uint8)
        first.close()
        s.synchronize()
        assert s.memory_info().pool_reserved >= int(free * 0.55)  # kept by the pool, unused
        second = s.empty(int(free * 0.6), np.uint8)  # does not fit beside it: trim, retry
        second.fill_zero()
        s.synchronize()
        assert s.memory_info().pool_used >= int(free * 0.6)


# -- numpy calls through pinned staging ---------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 1024, STAGE_LIMIT // 12, STAGE_LIMIT // 4])
def test_numpy_calls_staged_or_direct_match_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    want = 3 * x + y
    scale_add(y, x, np.float32(3))
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_a_strided_numpy_input_is_staged_in_c_order() -> None:
    x = np.arange(2048, dtype=np.float32)[::2]
    y = np.zeros(1024, np.float32)
    scale_add(y, x, np.float32(1))
    np.testing.assert_array_equal(y, x)


def test_four_threads_make_numpy_calls_at_once() -> None:
    def work(k: int) -> None:
        for n in (1, 1000, 100_000):
            y = np.full(n, k, np.float32)
            scale_add(y, np.ones(n, np.float32), np.float32(2))
            assert (y == k + 2).all()

    in_threads(work)
