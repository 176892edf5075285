"""kerneldsl.distributed on real GPUs: one H200 shared by two workers, and (with two GPUs) one
worker per GPU. Results match NumPy; each worker's session is its own; a killed worker is
replaced and the next call works."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import kerneldsl as kd  # noqa: E402
from kerneldsl.errors import RemoteArrayLostError, WorkerLostError  # noqa: E402
from kerneldsl.runtime import driver  # noqa: E402

pytestmark = pytest.mark.gpu


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def axpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] += {a} * {x}[i];"


def _gpu_count() -> int:
    return driver.device_count() if driver.driver_available() else 0


@pytest.fixture(scope="module", params=["shared", "two"])
def gpus(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``shared``: two workers on GPU 0; ``two``: one worker on each of GPUs 0 and 1."""
    if request.param == "two" and _gpu_count() < 2:
        pytest.skip("needs two GPUs")
    devices = [0, 0] if request.param == "shared" else [0, 1]
    tests = Path(__file__).parent
    with pytest.MonkeyPatch.context() as mp:  # the workers import this module's kernels by name
        mp.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")]))
        with kd.distributed.LocalGPUCluster(gpus=devices) as cluster, distributed.Client(cluster) as client:
            yield kd.distributed.attach(client)


def test_remote_kernel_ops_and_fused_results_match_numpy(gpus: Any) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random(1 << 16, dtype=np.float32), rng.random(1 << 16, dtype=np.float32)

    @kd.fuse
    def chain(a: Any, b: Any) -> Any:
        return kd.ops.sqrt(kd.ops.add(kd.ops.multiply(a, 2.0), b))

    for worker in gpus.workers():
        rx, ry = gpus.to_device(x, worker=worker), gpus.to_device(y, worker=worker)
        axpy(ry, rx, np.float32(3))
        np.testing.assert_allclose(ry.to_host(), y + 3 * x, rtol=1e-6)
        np.testing.assert_allclose(chain(rx, rx).to_host(), np.sqrt(3 * x), rtol=1e-6)
        np.testing.assert_allclose(kd.ops.sum(rx).result(), x.sum(dtype=np.float64), rtol=1e-4)


def test_each_worker_has_its_own_session_on_its_gpu(gpus: Any, request: pytest.FixtureRequest) -> None:
    info = gpus.info()
    assert all(i["error"] is None and i["session_device"] == 0 for i in info.values())
    assert len({i["pid"] for i in info.values()}) == len(info) == 2
    shared = request.node.callspec.params["gpus"] == "shared"
    assert sorted(i["visible_devices"] for i in info.values()) == (["0", "0"] if shared else ["0", "1"])
    assert len({i["pci_bus_id"] for i in info.values()}) == (1 if shared else 2)


def test_a_killed_worker_is_replaced_and_the_next_call_works(gpus: Any) -> None:
    worker = gpus.workers()[-1]
    before = gpus.info()[worker]["pid"]
    kept = gpus.to_device(np.ones(1024, np.float32), worker=worker)
    with pytest.raises(WorkerLostError):
        gpus.submit(os._exit, 1, worker=worker).result(timeout=60)
    with pytest.raises(RemoteArrayLostError):
        kept.to_host()
    fresh = gpus.to_device(np.arange(1024, dtype=np.float32), worker=worker)
    x = gpus.to_device(np.arange(1024, dtype=np.float32), worker=worker)
    axpy(fresh, x, np.float32(1))  # not axpy(fresh, fresh, ...): y and x may not overlap
    np.testing.assert_array_equal(fresh.to_host(), 2 * np.arange(1024, dtype=np.float32))
    assert gpus.info()[worker]["pid"] != before


def test_a_worker_restarted_while_idle_takes_the_next_call(gpus: Any) -> None:
    worker = gpus.workers()[-1]
    before = gpus.info()[worker]["pid"]
    kept = gpus.to_device(np.ones(1024, np.float32), worker=worker)
    kept.to_host()
    gpus.client.restart_workers([worker])
    fresh = gpus.to_device(np.arange(1024, dtype=np.float32), worker=worker)  # no WorkerLostError first
    x = gpus.to_device(np.arange(1024, dtype=np.float32), worker=worker)
    axpy(fresh, x, np.float32(1))
    np.testing.assert_array_equal(fresh.to_host(), 2 * np.arange(1024, dtype=np.float32))
    with pytest.raises(RemoteArrayLostError):
        kept.to_host()
    assert gpus.info()[worker]["pid"] != before


def test_a_stranger_without_the_clusters_certificate_is_refused(gpus: Any) -> None:
    address = gpus.client.cluster.scheduler_address
    assert address.startswith("tls://")
    with pytest.raises(OSError):  # Dask's CommClosedError: the TLS port drops a plain connection
        distributed.Client(address.replace("tls://", "tcp://"), timeout=10)
