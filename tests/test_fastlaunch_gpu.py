"""The C launch path on a real GPU: the driver's entry point, results, refusals, threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_threads

import kerneldsl as kd
from kerneldsl.errors import LaunchConfigError
from kerneldsl.launch import fastpath

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")]


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def axpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"]):
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = (T)((float){y}[i] + (float){a} * (float){x}[i]);
    """


@kd.kernel(grid=1, block=kd.sym("threads"), shared=kd.sym("n") * 4)
def staged_sum(out: kd.Out[kd.float32, 1], x: kd.In[kd.float32, "n"], threads: kd.Const[int] = 32):
    return f"""
    extern __shared__ float stage[];
    for (index_t i = threadIdx.x; i < n; i += blockDim.x) stage[i] = {x}[i];
    __syncthreads();
    if (threadIdx.x == 0) {{ float s = 0; for (index_t i = 0; i < n; ++i) s += stage[i]; {out}[0] = s; }}
    """


def test_the_driver_offers_a_launch_entry_point() -> None:
    assert kd.default_session().entry_point("cuLaunchKernel") != 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
def test_warm_calls_launch_from_c_and_give_numpy_results(dtype: type) -> None:
    s = kd.default_session()
    rng = np.random.default_rng()
    y0, x = (rng.integers(-8, 8, 5000).astype(dtype) for _ in range(2))
    dy, dx = s.to_device(y0), s.to_device(x)
    for _ in range(10):
        axpy(dy, dx, dtype(2))
    assert any(b.c_entry.launch for b in axpy._bound.values() if b.session is s)
    assert axpy._remembered_launches >= 1
    np.testing.assert_array_equal(dy.to_host(), (y0 + 20 * x).astype(dtype))


def test_a_launch_past_a_limit_is_refused_before_the_driver_and_the_session_stays_usable() -> None:
    s = kd.default_session()
    out = s.zeros(1, np.float32)
    small = s.to_device(np.ones(256, np.float32))
    staged_sum(out, small)
    staged_sum(out, small)  # remembered: from now on the C path takes this specialization
    huge = s.to_device(np.ones(1 << 20, np.float32))  # 4 MiB of shared memory: refused
    with pytest.raises(LaunchConfigError, match="shared"):
        staged_sum(out, huge)
    staged_sum(out, small)
    assert out.to_host()[0] == 256


def test_a_thread_with_no_current_context_launches_from_c() -> None:
    from cuda.bindings import driver as cu

    s = kd.default_session()
    dy, dx = s.zeros(1000, np.float32), s.to_device(np.ones(1000, np.float32))
    axpy(dy, dx, np.float32(1))

    def worker(_: int) -> None:
        assert int(cu.cuCtxGetCurrent()[1]) == 0
        axpy(dy, dx, np.float32(1))

    in_threads(worker, count=1)
    np.testing.assert_array_equal(dy.to_host(), np.full(1000, 2, np.float32))


def test_four_threads_launching_from_c_lose_no_launch() -> None:
    s = kd.default_session()
    dy, dx = s.zeros(4096, np.float32), s.to_device(np.ones(4096, np.float32))
    axpy(dy, dx, np.float32(1))

    def worker(_: int) -> None:
        for _ in range(250):
            axpy(dy, dx, np.float32(1))

    in_threads(worker)
    np.testing.assert_array_equal(dy.to_host(), np.full(4096, 1001, np.float32))


def test_warm_calls_with_stream_launch_from_c_on_that_stream() -> None:
    s = kd.default_session()
    stream = s.create_stream()
    y0, x = np.arange(5000, dtype=np.float32), np.ones(5000, np.float32)
    dy, dx, out = s.to_device(y0), s.to_device(x), s.empty(5000, np.float32)
    remembered = axpy._remembered_launches
    for _ in range(10):
        axpy(dy, dx, np.float32(2), stream=stream)
        kd.ops.add(dy, dx, out=out, stream=stream)
    assert axpy._remembered_launches > remembered
    stream.synchronize()
    np.testing.assert_array_equal(dy.to_host(), y0 + 20)
    np.testing.assert_array_equal(out.to_host(), y0 + 21)


def test_an_op_allocating_its_result_on_a_stream_orders_it_after_the_session_stream() -> None:
    s = kd.default_session()
    stream = s.create_stream()
    x = s.to_device(np.arange(1 << 20, dtype=np.float32))
    results = [kd.ops.multiply(x, 2.0, stream=stream) for _ in range(20)]
    stream.synchronize()
    for r in results:
        np.testing.assert_array_equal(r.to_host(), 2 * np.arange(1 << 20, dtype=np.float32))


def test_a_chain_of_allocating_ops_runs_from_c_and_gives_numpys_results() -> None:
    s = kd.default_session()
    rng = np.random.default_rng()
    x, y = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    dx, dy = s.to_device(x), s.to_device(y)
    used = None
    for i in range(200):
        result = (dx + dy) * dx - dy  # every result allocated from C, the temporaries dropped
        if i == 10:
            s.synchronize()
            used = s.memory_info().pool_used
    assert kd.ops.add._remembered_launches >= 1 and kd.ops.multiply._remembered_launches >= 1
    np.testing.assert_array_equal(result.to_host(), (x + y) * x - y)
    s.synchronize()
    assert s.memory_info().pool_used <= used  # dropped results went back to the pool


def test_four_threads_allocating_from_c_each_get_their_own_results() -> None:
    s = kd.default_session()
    dx = s.to_device(np.arange(4096, dtype=np.float32))

    def worker(k: int) -> None:
        for _ in range(100):
            result = kd.ops.add(dx, dx)
        np.testing.assert_array_equal(result.to_host(), 2 * np.arange(4096, dtype=np.float32))

    in_threads(worker)


def test_the_driver_offers_the_entry_points_the_native_allocator_calls() -> None:
    assert kd.default_session().native_allocator().enabled


def test_arrays_made_in_c_hold_data_and_go_back_to_the_pool_when_dropped() -> None:
    s = kd.default_session()
    host = np.arange(1 << 18, dtype=np.float32)
    a = s.empty(host.shape, np.float32)
    a[...] = host
    np.testing.assert_array_equal(a.to_host(), host)
    s.synchronize()
    used = s.memory_info().pool_used
    for _ in range(1000):
        s.empty(host.shape, np.float32)  # made in C, dropped: each free done in C by the next one
    s.synchronize()
    assert s.memory_info().pool_used <= used + host.nbytes  # at most the last one's free still queued
