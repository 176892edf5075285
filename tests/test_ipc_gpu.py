"""Worker-to-worker moves on a real GPU: two workers sharing GPU 0, so ``to_worker`` takes the
same-device CUDA IPC path. Moved arrays match NumPy for several dtypes and shapes, moves are
ordered after the kernels before them on both workers, and a worker killed during a move fails
the new array with ``WorkerLostError`` instead of hanging."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import kerneldsl as kd  # noqa: E402
from kerneldsl.distributed import exports, moves  # noqa: E402
from kerneldsl.errors import WorkerLostError  # noqa: E402

pytestmark = pytest.mark.gpu


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def late_fill(y: kd.Out["T", "n"], v: kd.Scalar["T"], iters: kd.Scalar[kd.int32]) -> str:
    """Writes ``v`` everywhere, each thread after ``iters`` dependent steps (tens of ms in all)."""
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {{
        float acc = 0.5f;
        for (int k = 0; k < {iters}; ++k) acc = acc * 0.999f + 0.001f;
        {y}[i] = {v} + (T)(acc < -1.0f ? 1.0f : 0.0f);
    }}"""


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def scale(y: kd.InOut["T", "n"], a: kd.Scalar["T"]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {a};"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, Any]]:
    tests = Path(__file__).parent
    with pytest.MonkeyPatch.context() as mp:  # the workers import this module's kernels by name
        mp.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")]))
        with kd.distributed.LocalGPUCluster(gpus=[0, 0]) as c, distributed.Client(c) as client:
            yield client, kd.distributed.attach(client)


@pytest.fixture
def gpus(cluster: tuple[Any, Any]) -> Any:
    return cluster[1]


def _random(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _held_exports() -> int:
    """Run on a worker: exports of moves still allocated there."""
    return sum(e.held is not None for e in exports._exports.values())


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((1 << 20) + 3, np.float32),
        ((33, 65), np.float64),
        ((2, 3, 5), np.int8),
        ((1000,), np.float16),
        ((7, 9), np.int64),
        ((129,), np.bool_),
        ((0, 4), np.float32),
        ((), np.float64),
    ],
)
def test_to_worker_between_workers_sharing_a_gpu_matches_numpy(gpus: Any, shape: Any, dtype: Any) -> None:
    shape = shape if isinstance(shape, tuple) else (shape,)
    host = _random(shape, dtype, seed=len(shape))
    moved = gpus.to_device(host, worker="gpu-0").to_worker("gpu-1")
    assert (moved.worker, moved.shape, moved.dtype) == ("gpu-1", host.shape, host.dtype)
    np.testing.assert_array_equal(moved.to_host(), host)
    assert moves._hosts[gpus.incarnation("gpu-0")] == moves._hosts[gpus.incarnation("gpu-1")]  # the IPC path


def test_a_view_is_moved_as_a_contiguous_copy_of_its_elements(gpus: Any) -> None:
    host = _random((64, 48), np.float32, seed=3)
    view = gpus.submit(lambda a: a[3:, ::5].T, gpus.to_device(host, worker="gpu-0")).result()
    moved = view.to_worker("gpu-1")
    assert gpus.submit(lambda a: a.is_contiguous, moved).result() is True
    np.testing.assert_array_equal(moved.to_host(), host[3:, ::5].T)


def test_a_move_copies_what_a_kernel_launched_just_before_it_wrote(gpus: Any) -> None:
    n = 1 << 24
    src = gpus.to_device(np.zeros(n, np.float32), worker="gpu-0")
    late_fill(src, np.float32(7), np.int32(20000))  # still running when the export's copy is queued
    moved = src.to_worker("gpu-1")
    scale(moved, np.float32(2))  # on gpu-1, after the move
    out = moved.to_host()
    assert out.min() == out.max() == np.float32(14)


def test_the_source_frees_its_export_once_the_move_is_done(gpus: Any) -> None:
    gpus.to_device(np.ones(1 << 20, np.float32), worker="gpu-0").to_worker("gpu-1").to_host()
    deadline = time.monotonic() + 10
    while gpus.submit(_held_exports, worker="gpu-0").result() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gpus.submit(_held_exports, worker="gpu-0").result() == 0


def test_gather_and_reduce_on_a_worker_match_numpy(gpus: Any) -> None:
    host = _random((1001, 7), np.float32, seed=5)
    shards = gpus.scatter(host)
    np.testing.assert_array_equal(gpus.gather(shards, worker="gpu-1").to_host(), host)
    partials = gpus.map(lambda a: kd.ops.sum(a, axis=0), shards)
    total = gpus.reduce(partials, worker="gpu-0")
    np.testing.assert_allclose(total.to_host(), host.sum(axis=0, dtype=np.float64), rtol=1e-4, atol=1e-3)


# --- workers killed during a move (last: they restart) ------------------------------------------------


def _kill(client: Any, gpus: Any, name: str) -> None:
    client.run(os._exit, 1, workers=[gpus.incarnation(name).address], on_error="ignore")


def test_a_source_killed_during_a_large_move_fails_it_with_worker_lost(cluster: tuple[Any, Any]) -> None:
    client, gpus = cluster
    src = gpus.submit(lambda: kd.full((1 << 28,), 1.5, np.float32), worker="gpu-0").result()  # 1 GiB
    late_fill(src, np.float32(2), np.int32(200000))  # keeps gpu-0 busy for the export's copy
    moved = src.to_worker("gpu-1", timeout=60)
    time.sleep(0.2)
    _kill(client, gpus, "gpu-0")
    start = time.monotonic()
    with pytest.raises(WorkerLostError):
        moved.to_host(timeout=30)
    assert time.monotonic() - start < 30
    np.testing.assert_array_equal(gpus.to_device(np.ones(3), worker="gpu-1").to_host(), np.ones(3))


def test_a_destination_killed_during_a_move_fails_it_and_the_source_frees_its_export(
    cluster: tuple[Any, Any],
) -> None:
    client, gpus = cluster
    src = gpus.submit(lambda: kd.full((1 << 26,), 1.5, np.float32), worker="gpu-0").result()
    late_fill(src, np.float32(2), np.int32(200000))
    moved = src.to_worker("gpu-1", timeout=60)
    _kill(client, gpus, "gpu-1")
    with pytest.raises(WorkerLostError):
        moved.to_host(timeout=30)
    deadline = time.monotonic() + 20
    while gpus.submit(_held_exports, worker="gpu-0").result(timeout=30) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gpus.submit(_held_exports, worker="gpu-0").result() == 0
    assert src.to_host()[:4].tolist() == [2.0] * 4
