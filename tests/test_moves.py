"""Worker-to-worker moves (``RemoteArray.to_worker``) and the data-parallel helpers, on a Dask
cluster of two worker processes with the driver double: its ``cuMemAlloc`` memory lives in shared
files, so one worker's ``cuIpcOpenMemHandle`` maps what the other exported, as CUDA IPC does."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import kerneldsl as kd  # noqa: E402
from kerneldsl.distributed import moves  # noqa: E402
from kerneldsl.errors import DistributedError, WorkerLostError  # noqa: E402
from kerneldsl.runtime.ipc import IpcExport, copy_from_export  # noqa: E402

TESTS = Path(__file__).parent


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def scale(y: kd.InOut["T", "n"], a: kd.Scalar["T"]) -> str:  # the worker double's driver really scales
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {a};"


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def axpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] += {a} * {x}[i];"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    from worker_double import UseDriverDouble

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
        mp.setenv("KERNELDSL_ARCH", "sm_90")
        with kd.distributed.LocalGPUCluster(gpus=[0, 1], memory_limit=0) as cluster:
            with distributed.Client(cluster) as c:
                c.register_plugin(UseDriverDouble())
                yield c


@pytest.fixture(scope="module")
def gpus(client: Any) -> Any:
    return kd.distributed.attach(client)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Path]:
    """A file ``worker_double.when_open`` calls wait for (made by the test, or at teardown)."""
    path = tmp_path / "gate"
    yield path
    path.touch()


def _ipc(gpus: Any, worker: str) -> dict[str, int]:
    from worker_double import ipc_state

    return dict(gpus.submit(ipc_state, worker=worker).result(timeout=30))


def _exports_freed(gpus: Any, worker: str) -> bool:
    """Whether ``worker`` comes to hold no exported copy within 20 s (a release frees it after
    its reply)."""
    deadline = time.monotonic() + 20
    while _ipc(gpus, worker)["held"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return _ipc(gpus, worker)["held"] == 0


# --- the runtime's IPC export and import, in one process ------------------------------------------


def test_an_ipc_export_maps_into_a_copy_that_equals_the_source(drv: Any) -> None:
    s = kd.Session()
    src = s.to_device(np.arange(1000, dtype=np.float64))
    made = IpcExport(s, src)
    out = s.empty((1000,), np.float64)
    assert made.handle is not None and len(made.handle) == 64
    copy_from_export(s, out, made.handle, made.nbytes)
    np.testing.assert_array_equal(out.to_host(), np.arange(1000, dtype=np.float64))
    assert (drv.count("cuIpcCloseMemHandle"), drv.opened) == (1, set())
    made.close()
    assert drv.shared == {}


def test_pool_memory_is_exported_through_a_cumemalloc_copy(drv: Any) -> None:
    s = kd.Session()
    src = s.to_device(np.ones(16, np.float32))
    IpcExport(s, src).close()
    assert drv.calls.index("cuMemAlloc") < drv.calls.index("cuMemcpyDtoDAsync") < drv.calls.index("cuIpcGetMemHandle")
    assert drv.cuIpcGetMemHandle(src.ptr)[0] != 0  # the pool's own memory is not exportable


def test_an_export_of_a_view_is_refused(drv: Any) -> None:
    s = kd.Session()
    src = s.to_device(np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        IpcExport(s, src[:, ::2])
    assert drv.count("cuMemAlloc") == 0


# --- a source's exports, one move at a time (kerneldsl.distributed.exports) ------------------------------


class _Held:
    closed = 0

    def close(self) -> None:
        _Held.closed += 1


def test_a_move_that_failed_before_its_export_ran_refuses_the_export_and_tells_the_destination() -> None:
    from kerneldsl.distributed import exports

    async def run() -> tuple[Any, bool]:
        await exports.release("t1", "the destination died")
        told = await exports.exported("t1", 1.0)  # a destination that is still waiting
        return told, await exports.publish("t1", ("ipc", b"h", 4, (1,), "<f4"), _Held())  # type: ignore[arg-type]

    told, kept = asyncio.run(run())
    assert (told, kept) == (("error", "the destination died"), False)
    assert "t1" not in exports._exports


def test_a_move_that_failed_after_its_export_ran_frees_the_export() -> None:
    from kerneldsl.distributed import exports

    async def run() -> None:
        assert await exports.publish("t2", ("ipc", b"h", 4, (1,), "<f4"), _Held())  # type: ignore[arg-type]
        await exports.release("t2", "the destination died")
        await asyncio.gather(*exports._freeing)

    before = _Held.closed
    asyncio.run(run())
    assert _Held.closed == before + 1


def test_the_destinations_release_forgets_the_move() -> None:
    from kerneldsl.distributed import exports

    async def run() -> Any:
        assert await exports.publish("t3", ("host", np.ones(2)), None)
        told = await exports.exported("t3", 1.0)
        await exports.release("t3", None)
        return told

    assert asyncio.run(run())[0] == "host" and "t3" not in exports._exports


# --- to_worker between worker processes ---------------------------------------------------------------


def test_to_worker_between_workers_of_one_host_moves_the_bytes_by_cuda_ipc(gpus: Any) -> None:
    before0, before1 = _ipc(gpus, "gpu-0"), _ipc(gpus, "gpu-1")
    host = np.random.default_rng(1).standard_normal((37, 11)).astype(np.float32)
    moved = gpus.to_device(host, worker="gpu-0").to_worker("gpu-1")
    assert moved.worker == "gpu-1"
    np.testing.assert_array_equal(moved.to_host(), host)
    after0, after1 = _ipc(gpus, "gpu-0"), _ipc(gpus, "gpu-1")
    assert after0["exports"] == before0["exports"] + 1 and after1["opens"] == before1["opens"] + 1
    assert after1["mapped"] == 0 and _exports_freed(gpus, "gpu-0")  # the mapping closed, the export freed


def test_to_worker_via_comms_fetches_the_host_copy_from_the_source(gpus: Any) -> None:
    before = _ipc(gpus, "gpu-0")["exports"]
    host = np.arange(100, dtype=np.int64)
    moved = gpus.to_device(host, worker="gpu-0").to_worker("gpu-1", via="comms")
    np.testing.assert_array_equal(moved.to_host(), host)
    assert _ipc(gpus, "gpu-0")["exports"] == before


def test_workers_on_different_hosts_are_moved_over_comms(gpus: Any) -> None:
    src = gpus.to_device(np.arange(8, dtype=np.float32), worker="gpu-0")
    src.to_host()
    before = _ipc(gpus, "gpu-0")["exports"]
    moves._hosts[gpus.incarnation("gpu-1")] = "elsewhere/boot/1"  # as if its worker ran on another machine
    try:
        moved = src.to_worker("gpu-1")
        np.testing.assert_array_equal(moved.to_host(), np.arange(8, dtype=np.float32))
    finally:
        del moves._hosts[gpus.incarnation("gpu-1")]
    assert _ipc(gpus, "gpu-0")["exports"] == before


def test_to_worker_via_the_client_round_trips_through_this_process(gpus: Any) -> None:
    moved = gpus.to_device(np.arange(5, dtype=np.float32), worker="gpu-0").to_worker("gpu-1", via="client")
    np.testing.assert_array_equal(moved.to_host(), np.arange(5, dtype=np.float32))


def test_an_unknown_route_is_a_value_error(gpus: Any) -> None:
    with pytest.raises(ValueError, match="via"):
        gpus.to_device(np.ones(2, np.float32), worker="gpu-0").to_worker("gpu-1", via="nvlink")


def test_to_worker_onto_the_same_worker_is_a_device_copy(gpus: Any) -> None:
    src = gpus.to_device(np.arange(6, dtype=np.float32), worker="gpu-0")
    moved = src.to_worker("gpu-0")
    scale(src, np.float32(2))
    assert moved.key != src.key
    np.testing.assert_array_equal(moved.to_host(), np.arange(6, dtype=np.float32))


def test_a_view_is_moved_as_a_contiguous_copy(gpus: Any) -> None:
    host = np.arange(48, dtype=np.float32).reshape(6, 8)
    view = gpus.submit(lambda a: a[1:, ::3], gpus.to_device(host, worker="gpu-0")).result()
    moved = view.to_worker("gpu-1")
    assert moved.shape == (5, 3)
    assert gpus.submit(lambda a: a.is_contiguous, moved).result() is True  # its values: the GPU tests


def test_empty_and_zero_dimensional_arrays_move(gpus: Any) -> None:
    for host in (np.zeros((0, 3), np.float32), np.array(2.5, np.float64)):
        moved = gpus.to_device(host, worker="gpu-0").to_worker("gpu-1")
        assert moved.shape == host.shape
        np.testing.assert_array_equal(moved.to_host(), host)


def test_a_move_copies_after_the_source_launches_queued_before_it(gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    src = gpus.to_device(np.ones(300, np.float32), worker="gpu-0")
    gpus.submit(when_open, str(gate), None, worker="gpu-0")  # the source is busy
    scale(src, np.float32(3))
    moved = src.to_worker("gpu-1")
    assert not moved.done()
    gate.touch()
    np.testing.assert_array_equal(moved.to_host(), np.full(300, 3, np.float32))


def test_a_move_waits_for_the_calls_before_it_on_the_destination(gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    src = gpus.to_device(np.arange(10, dtype=np.float32), worker="gpu-0")
    gpus.submit(when_open, str(gate), None, worker="gpu-1")
    moved = src.to_worker("gpu-1")
    gpus.submit(lambda: None, worker="gpu-0").result()  # the export has run on gpu-0
    assert not moved.done()
    gate.touch()
    np.testing.assert_array_equal(moved.to_host(), np.arange(10, dtype=np.float32))


def test_calls_on_the_destination_made_after_a_move_see_the_moved_array(gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    src = gpus.to_device(np.ones(300, np.float32), worker="gpu-0")
    gpus.submit(when_open, str(gate), None, worker="gpu-0")
    moved = src.to_worker("gpu-1")
    scale(moved, np.float32(5))  # on gpu-1, after the copy that is still waiting for gpu-0
    gate.touch()
    np.testing.assert_array_equal(moved.to_host(), np.full(300, 5, np.float32))


def test_a_move_past_its_timeout_fails_and_the_export_made_later_is_freed(gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    src = gpus.to_device(np.ones(16, np.float32), worker="gpu-0")
    gpus.submit(when_open, str(gate), None, worker="gpu-0")
    moved = src.to_worker("gpu-1", timeout=0.5)
    with pytest.raises(DistributedError, match="did not hand over the copy: TimeoutError"):
        moved.to_host(timeout=30)
    gate.touch()
    assert _exports_freed(gpus, "gpu-0")  # the export ran after the move had failed: not kept
    np.testing.assert_array_equal(src.to_worker("gpu-1").to_host(), np.ones(16, np.float32))


def test_a_move_of_an_array_whose_call_failed_fails_with_that_error(gpus: Any) -> None:
    x = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    axpy(x, x, np.float32(1))  # refused on gpu-0: x overlaps itself
    moved = x.to_worker("gpu-1", timeout=20)
    with pytest.raises(DistributedError, match="AliasingError"):
        moved.to_host(timeout=30)
    assert _exports_freed(gpus, "gpu-0")
    np.testing.assert_array_equal(x.to_host(), np.arange(4, dtype=np.float32))  # its error was given once


# --- scatter, map, gather, reduce -----------------------------------------------------------------


def doubled(a: Any) -> Any:
    scale(a, np.float32(2))
    return a


def test_scatter_splits_along_an_axis_one_shard_per_worker(gpus: Any) -> None:
    host = np.arange(30, dtype=np.float32).reshape(3, 10)
    shards = gpus.scatter(host, axis=1)
    assert [(s.worker, s.shape) for s in shards] == [("gpu-0", (3, 5)), ("gpu-1", (3, 5))]
    np.testing.assert_array_equal(np.concatenate([s.to_host() for s in shards], axis=1), host)


def test_map_runs_a_function_on_each_shard_where_it_lives(gpus: Any) -> None:
    host = np.arange(600, dtype=np.float32)
    shards = gpus.scatter(host)
    results = gpus.map(doubled, shards)
    assert [r.worker for r in results] == ["gpu-0", "gpu-1"]
    np.testing.assert_array_equal(gpus.gather(results), 2 * host)


def test_gather_on_a_worker_moves_the_shards_device_to_device(gpus: Any) -> None:
    host = np.arange(40, dtype=np.int32).reshape(8, 5)
    before = _ipc(gpus, "gpu-1")["opens"]
    joined = gpus.gather(gpus.scatter(host), worker="gpu-1")
    assert (joined.worker, joined.shape, joined.dtype) == ("gpu-1", (8, 5), np.int32)  # values: the GPU tests
    assert _ipc(gpus, "gpu-1")["opens"] == before + 1  # gpu-0's shard; gpu-1's own stayed in place


def test_reduce_combines_the_partials_on_one_worker_in_order(gpus: Any) -> None:
    parts = [gpus.to_device(np.full(4, i, np.float32), worker=w) for i, w in ((1, "gpu-0"), (2, "gpu-1"))]
    last = gpus.reduce(parts, worker="gpu-0", op=lambda a, b: b)
    assert last.worker == "gpu-0"
    np.testing.assert_array_equal(last.to_host(), np.full(4, 2, np.float32))


def test_reduce_sums_by_default_on_the_first_parts_worker(gpus: Any) -> None:
    parts = [gpus.to_device(np.ones((2, 3), np.float32), worker=w) for w in ("gpu-1", "gpu-0")]
    total = gpus.reduce(parts)
    assert (total.worker, total.shape, total.dtype) == ("gpu-1", (2, 3), np.float32)


def test_scatter_over_no_worker_is_an_error(gpus: Any) -> None:
    with pytest.raises(kd.errors.NoWorkerError):
        gpus.scatter(np.ones(4), workers=[])


def test_the_sharded_sum_bench_splits_into_equal_chunks_per_worker_under_2_31_elements() -> None:
    from kerneldsl.bench.distributed_data import sum_chunks

    for gib, workers in ((16, 1), (16, 2), (16, 8), (1, 3), (0.5, 1)):
        chunks, per_chunk = sum_chunks(gib, workers)
        assert chunks % workers == 0 and per_chunk <= 1 << 30
        assert chunks * per_chunk * 4 > 0.99 * gib * (1 << 30)


def test_the_distributed_bench_takes_the_copy_sizes_and_the_sums_size() -> None:
    import argparse

    from kerneldsl.bench import distributed_bench

    parser = argparse.ArgumentParser()
    distributed_bench.add_arguments(parser)
    args = parser.parse_args(["--copy-mib", "8,64", "--sum-gib", "2"])
    assert (args.copy_mib, args.sum_gib, args.gpus) == ("8,64", 2.0, "all")


# --- workers lost during a move (last: the workers restart) --------------------------------------------


def _kill(client: Any, gpus: Any, name: str) -> None:
    from worker_double import exit_process

    client.run(exit_process, workers=[gpus.incarnation(name).address], on_error="ignore")


def test_a_source_lost_during_a_move_fails_the_new_array_with_worker_lost(client: Any, gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    src = gpus.to_device(np.ones(300, np.float32), worker="gpu-0")
    gpus.submit(when_open, str(gate), None, worker="gpu-0")
    moved = src.to_worker("gpu-1", timeout=60)
    _kill(client, gpus, "gpu-0")
    with pytest.raises(WorkerLostError, match="gpu-0"):
        moved.to_host(timeout=30)
    assert _ipc(gpus, "gpu-1")["mapped"] == 0
    np.testing.assert_array_equal(gpus.to_device(np.ones(3), worker="gpu-1").to_host(), np.ones(3))


def test_a_destination_lost_during_a_move_fails_it_and_the_source_frees_its_export(
    client: Any, gpus: Any, gate: Path
) -> None:
    from worker_double import when_open

    src = gpus.to_device(np.ones(300, np.float32), worker="gpu-0")
    gpus.submit(when_open, str(gate), None, worker="gpu-0")
    moved = src.to_worker("gpu-1", timeout=60)
    _kill(client, gpus, "gpu-1")
    with pytest.raises(WorkerLostError, match="gpu-1"):
        moved.to_host(timeout=30)
    gate.touch()
    assert _exports_freed(gpus, "gpu-0")
    np.testing.assert_array_equal(src.to_host(), np.ones(300, np.float32))
