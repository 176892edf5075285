"""kerneldsl.distributed against a real Dask cluster of worker processes on this machine: two
workers ("gpu-0", "gpu-1") pinned to GPUs that need not exist, with the driver double installed
(``worker_double.UseDriverDouble``) and kernels compiled ahead of time for ``KERNELDSL_ARCH``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import kerneldsl as kd  # noqa: E402
from kerneldsl.errors import (  # noqa: E402
    AliasingError,
    Backpressure,
    CallCancelledError,
    InsecureClusterWarning,
    RemoteArrayLostError,
    SessionPoisonedError,
    ShippingError,
    WorkerLostError,
    WrongWorkerError,
)

TESTS = Path(__file__).parent
PROFILES = {"fast": {"options": ["--use_fast_math"], "gpus": [1]}}


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def scale(y: kd.InOut["T", "n"], a: kd.Scalar["T"]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {a};"


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def axpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] += {a} * {x}[i];"


def _worker_env(mp: pytest.MonkeyPatch) -> None:
    """What the worker processes inherit: this directory on their path, and an arch to compile for."""
    mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    mp.setenv("KERNELDSL_ARCH", "sm_90")


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    from worker_double import UseDriverDouble

    with pytest.MonkeyPatch.context() as mp:
        _worker_env(mp)
        with kd.distributed.LocalGPUCluster(gpus=[0, 1], profiles=PROFILES, memory_limit=0) as cluster:
            with distributed.Client(cluster) as c:
                c.register_plugin(UseDriverDouble())
                yield c


@pytest.fixture(scope="module")
def gpus(client: Any) -> Any:
    return kd.distributed.attach(client)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Path]:
    """A file that ``worker_double.when_open`` calls wait for: the test creates it when it is done
    checking what holds while they run (and so does the teardown, for a test that failed first)."""
    path = tmp_path / "gate"
    yield path
    path.touch()


def _launches(gpus: Any, worker: str) -> int:
    from worker_double import launches

    return int(gpus.submit(launches, worker=worker).result())


def test_an_array_sent_to_a_worker_comes_back_equal(gpus: Any) -> None:
    host = np.arange(10, dtype=np.float32)
    ra = gpus.to_device(host, worker="gpu-0")
    assert (ra.worker, ra.shape, ra.dtype) == ("gpu-0", (10,), np.float32)
    np.testing.assert_array_equal(ra.to_host(), host)


def test_each_worker_opens_its_own_session_on_its_pinned_gpu(gpus: Any) -> None:
    info = gpus.info()
    assert {w: (i["visible_devices"], i["session_device"], i["error"]) for w, i in info.items()} == {
        "gpu-0": ("0", 0, None),
        "gpu-1": ("1", 0, None),
    }
    assert info["gpu-0"]["pid"] != info["gpu-1"]["pid"]
    assert all(i["pci_bus_id"] for i in info.values())


def test_a_kernel_called_with_remote_arrays_launches_on_their_worker(gpus: Any) -> None:
    before = _launches(gpus, "gpu-1")
    ra = gpus.to_device(np.ones(300, np.float32), worker="gpu-1")
    call = scale(ra, np.float32(2))
    assert isinstance(call, kd.distributed.RemoteFuture) and call.result() is None
    assert _launches(gpus, "gpu-1") == before + 1
    np.testing.assert_array_equal(ra.to_host(), np.full(300, 2, np.float32))


def test_ops_and_fused_functions_return_remote_arrays_on_the_same_worker(gpus: Any) -> None:
    @kd.fuse
    def axpb(x: Any, y: Any) -> Any:
        return kd.ops.add(kd.ops.multiply(x, 2.0), y)

    x = gpus.to_device(np.ones(64, np.float32), worker="gpu-0")
    y = kd.ops.add(x, x)
    z = axpb(y, x)
    s = kd.ops.sum(z)
    assert [type(r).__name__ for r in (y, z, s)] == ["RemoteArray"] * 3
    assert {r.worker for r in (y, z, s)} == {"gpu-0"}
    assert (z.shape, z.dtype, s.shape) == ((64,), np.float32, ())


def test_calls_on_remote_arrays_return_before_the_worker_runs_them(gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    x = gpus.to_device(np.ones(4, np.float32), worker="gpu-0")
    busy = gpus.submit(when_open, str(gate), None, worker="gpu-0")  # the worker runs calls in order
    y = kd.ops.add(kd.ops.multiply(x, 2.0), x)
    assert not y.done()
    gate.touch()
    busy.result()
    assert y.shape == (4,)


def test_arrays_on_different_workers_are_an_error_naming_both(gpus: Any) -> None:
    a = gpus.to_device(np.ones(4, np.float32), worker="gpu-0")
    b = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    with pytest.raises(WrongWorkerError, match="gpu-0.*gpu-1") as info:
        kd.ops.add(a, b)
    assert len(info.value.workers) == 2


def test_a_call_on_the_result_of_a_failed_call_raises_its_error(gpus: Any) -> None:
    a = gpus.to_device(np.ones((2, 3), np.float32), worker="gpu-0")
    b = gpus.to_device(np.ones((4, 5), np.float32), worker="gpu-0")
    bad = kd.ops.add(a, b)  # shapes that do not broadcast: fails on the worker
    after = kd.ops.multiply(bad, 2.0)
    with pytest.raises(ValueError, match="broadcast"):
        after.to_host()
    with pytest.raises(ValueError, match="broadcast"):
        bad.to_host()


def test_a_failed_launch_whose_future_was_dropped_raises_at_the_next_use_of_what_it_writes(gpus: Any) -> None:
    x = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    axpy(x, x, np.float32(1))  # y and x overlap: refused on the worker, as it would be here
    with pytest.raises(AliasingError, match="overlaps"):
        x.to_host()
    np.testing.assert_array_equal(x.to_host(), np.arange(4, dtype=np.float32))  # raised once; data as it was


def test_a_failed_launch_whose_error_its_future_gave_is_not_raised_again(gpus: Any) -> None:
    x = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    with pytest.raises(AliasingError):
        axpy(x, x, np.float32(1)).result()
    np.testing.assert_array_equal(x.to_host(), np.arange(4, dtype=np.float32))


def test_a_failed_launch_raises_in_the_next_call_on_what_it_writes_and_that_call_does_not_run(gpus: Any) -> None:
    x = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    axpy(x, x, np.float32(1))
    scale(x, np.float32(2))  # fails with axpy's error, so x stays as it was
    with pytest.raises(AliasingError):
        x.to_host()
    np.testing.assert_array_equal(x.to_host(), np.arange(4, dtype=np.float32))


def test_the_worker_forgets_a_failed_launch_once_its_future_is_dropped_here(client: Any, gpus: Any) -> None:
    import gc

    from worker_double import failed_records

    def records() -> int:
        gc.collect()
        gpus.submit(lambda: None, worker="gpu-0").result()  # the next call carries the drops
        return int(client.run(failed_records, workers=[gpus.incarnation("gpu-0").address]).popitem()[1])

    before = records()
    x = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    call = axpy(x, x, np.float32(1))
    assert isinstance(call.exception(), AliasingError)
    assert records() == before + 1
    del call
    assert records() == before


def test_a_failed_call_into_out_raises_at_the_next_use_of_out(gpus: Any) -> None:
    a = gpus.to_device(np.ones((2, 3), np.float32), worker="gpu-0")
    b = gpus.to_device(np.ones((4, 5), np.float32), worker="gpu-0")
    out = gpus.to_device(np.zeros((2, 3), np.float32), worker="gpu-0")
    kd.ops.add(a, b, out=out)  # shapes that do not broadcast: fails on the worker; its handle is dropped
    with pytest.raises(ValueError, match="broadcast"):
        out.to_host()
    np.testing.assert_array_equal(a.to_host(), np.ones((2, 3), np.float32))  # only what it writes carries it


def test_to_worker_copies_an_array_to_another_worker(gpus: Any) -> None:
    a = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    b = a.to_worker("gpu-1")
    assert b.worker == "gpu-1"
    np.testing.assert_array_equal(b.to_host(), np.arange(4, dtype=np.float32))


def test_submit_runs_a_function_whose_device_arrays_stay_remote(gpus: Any) -> None:
    a = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    kept, n = gpus.submit(lambda x: (x, x.size), a).result()
    assert (type(kept).__name__, kept.worker, n) == ("RemoteArray", "gpu-0", 4)
    np.testing.assert_array_equal(kept.to_host(), np.arange(4, dtype=np.float32))


def test_a_kernel_whose_body_cannot_be_pickled_is_a_shipping_error(gpus: Any) -> None:
    lock = threading.Lock()

    @kd.kernel()
    def locked(y: kd.InOut["T", "n"]) -> str:
        with lock:
            return ""

    ra = gpus.to_device(np.ones(4, np.float32), worker="gpu-0")
    with pytest.raises(ShippingError, match="locked"):
        locked(ra)


def test_a_profile_names_its_workers_and_adds_its_compile_options(gpus: Any) -> None:
    import pickle

    assert gpus.workers("fast") == ["gpu-1"]
    assert gpus.to_device(np.ones(4, np.float32), profile="fast").worker == "gpu-1"
    _, blob = gpus._shipping(scale, "fast")
    assert pickle.loads(blob).options == ("--use_fast_math",)


def test_past_max_in_flight_a_non_blocking_call_raises_backpressure(client: Any, gate: Path) -> None:
    from worker_double import when_open

    narrow = kd.distributed.GPUs(client, max_in_flight=1)
    slow = narrow.submit(when_open, str(gate), "slow", worker="gpu-0")
    with pytest.raises(Backpressure, match="gpu-0"):
        narrow.submit(lambda: "next", worker="gpu-0", block=False)
    gate.touch()
    assert narrow.submit(lambda: "next", worker="gpu-0").result() == "next"  # waits for a slot, then runs
    assert slow.result() == "slow"


def test_a_result_that_times_out_leaves_the_call_running(gpus: Any, gate: Path) -> None:
    from worker_double import when_open

    slow = gpus.submit(when_open, str(gate), "slow", worker="gpu-0")
    with pytest.raises(TimeoutError):
        slow.result(timeout=0.01)
    gate.touch()
    assert slow.result() == "slow"


def test_a_cancelled_call_does_not_run_and_the_worker_stays_usable(client: Any, gpus: Any, gate: Path) -> None:
    from worker_double import cancelled_calls, when_open

    slow = gpus.submit(when_open, str(gate), "slow", worker="gpu-0")
    queued = gpus.submit(lambda: "queued", worker="gpu-0")
    queued.cancel()
    address = gpus.incarnation("gpu-0").address
    deadline = time.monotonic() + 60
    while not client.run(cancelled_calls, workers=[address])[address] and time.monotonic() < deadline:
        time.sleep(0.01)  # the cancel travels on its own connection: wait until it arrived
    gate.touch()
    with pytest.raises(CallCancelledError):
        queued.result()
    assert slow.result() == "slow"
    assert gpus.submit(lambda: "after", worker="gpu-0").result() == "after"


def test_a_killed_worker_loses_its_calls_and_arrays_and_comes_back(gpus: Any) -> None:
    from worker_double import exit_process

    kept = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    kept.to_host()
    with pytest.raises(WorkerLostError):
        gpus.submit(exit_process, worker="gpu-1").result(timeout=30)
    with pytest.raises(RemoteArrayLostError, match="gpu-1"):
        kept.to_host()
    fresh = gpus.to_device(np.arange(3, dtype=np.float32), worker="gpu-1")
    np.testing.assert_array_equal(fresh.to_host(), np.arange(3, dtype=np.float32))


def test_launches_after_a_restart_run_on_the_new_worker_before_their_array_is_read(gpus: Any) -> None:
    from worker_double import exit_process

    kept = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    with pytest.raises(WorkerLostError):
        gpus.submit(exit_process, worker="gpu-1").result(timeout=30)
    with pytest.raises(RemoteArrayLostError):
        kept.to_host()
    fresh = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-1")
    scale(fresh, np.float32(2))  # futures dropped, as a local launch's None would be
    scale(fresh, np.float32(3))
    np.testing.assert_array_equal(fresh.to_host(), 6 * np.arange(4, dtype=np.float32))
    assert _launches(gpus, "gpu-1") == 2  # both ran in the new process


def _restarted(client: Any, name: str, before: int) -> None:
    """Wait until worker ``name`` runs again, in a process other than ``before``, with its plugin set up."""
    from kerneldsl.distributed.worker import worker_info

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = {i["worker"]: i["pid"] for i in client.run(worker_info, on_error="ignore").values()}
        if pids.get(name, before) != before:
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {name} did not restart")


def test_a_worker_restarted_while_idle_takes_the_next_call(client: Any, gpus: Any) -> None:
    kept = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    kept.to_host()
    client.restart_workers(["gpu-1"])
    fresh = gpus.to_device(np.arange(3, dtype=np.float32), worker="gpu-1")  # no WorkerLostError first
    np.testing.assert_array_equal(fresh.to_host(), np.arange(3, dtype=np.float32))
    with pytest.raises(RemoteArrayLostError, match="gpu-1"):
        kept.to_host()


def test_a_worker_killed_while_idle_takes_the_next_call_once_it_is_back(client: Any, gpus: Any) -> None:
    from worker_double import exit_process

    kept = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    kept.to_host()
    address = gpus.incarnation("gpu-1").address
    before = gpus.info()["gpu-1"]["pid"]
    client.run(exit_process, workers=[address], on_error="ignore")  # dies as it runs
    _restarted(client, "gpu-1", before)
    assert gpus.submit(lambda: "new", worker="gpu-1").result(timeout=30) == "new"
    with pytest.raises(RemoteArrayLostError):
        kept.to_host()


def test_a_restarting_worker_does_not_hold_up_calls_to_the_others(client: Any) -> None:
    from kerneldsl.errors import NoWorkerError

    waiting = kd.distributed.GPUs(client, restart_timeout=10)
    failed: list[BaseException] = []

    def wait_for_a_worker_that_is_not_back() -> None:
        try:
            waiting.incarnation("gpu-9")
        except NoWorkerError as exc:
            failed.append(exc)

    waiter = threading.Thread(target=wait_for_a_worker_that_is_not_back)
    waiter.start()
    while waiter.is_alive() and not ("gpu-9" in waiting._starting and waiting._starting["gpu-9"].locked()):
        time.sleep(0.01)
    ra = waiting.to_device(np.ones(4, np.float32), worker="gpu-0")  # starts gpu-0's actor meanwhile
    np.testing.assert_array_equal(ra.to_host(), np.ones(4, np.float32))
    assert waiter.is_alive()  # still waiting for gpu-9
    waiter.join()
    assert len(failed) == 1


def test_a_worker_on_a_fixed_port_is_recognised_as_new_when_it_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from worker_double import UseDriverDouble, exit_process

    _worker_env(monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        options = {"worker_port": s.getsockname()[1]}
    with kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0, worker_options=options) as cluster:
        with distributed.Client(cluster) as client:
            client.register_plugin(UseDriverDouble())
            fixed = kd.distributed.attach(client, restart_timeout=30)
            kept = fixed.to_device(np.ones(4, np.float32), worker="gpu-0")
            address = kept._inc.address
            with pytest.raises(WorkerLostError):
                fixed.submit(exit_process, worker="gpu-0").result(timeout=30)
            fresh = fixed.to_device(np.arange(3, dtype=np.float32), worker="gpu-0")
            np.testing.assert_array_equal(fresh.to_host(), np.arange(3, dtype=np.float32))
            assert fresh._inc.address == address and fresh._inc is not kept._inc
            with pytest.raises(RemoteArrayLostError):
                kept.to_host()


def test_a_sticky_cuda_error_poisons_one_worker_which_restarts(gpus: Any) -> None:
    from worker_double import make_sticky

    ra = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    gpus.submit(make_sticky, worker="gpu-1").result()
    with pytest.raises(SessionPoisonedError, match="gpu-1"):
        scale(ra, np.float32(2)).result(timeout=30)
    assert ra.lost
    again = gpus.to_device(np.ones(4, np.float32), worker="gpu-1")
    assert scale(again, np.float32(2)).result(timeout=30) is None
    assert gpus.info()["gpu-0"]["error"] is None


def test_a_second_client_attaching_leaves_the_first_ones_arrays_alone(client: Any, gpus: Any) -> None:
    ours = gpus.to_device(np.arange(4, dtype=np.float32), worker="gpu-0")
    ours.to_host()
    with distributed.Client(client.scheduler.address, security=client.security) as other:
        kd.distributed.attach(other)
    np.testing.assert_array_equal(ours.to_host(), np.arange(4, dtype=np.float32))


def test_a_client_that_disconnects_leaves_no_arrays_on_the_workers(client: Any, gpus: Any) -> None:
    with distributed.Client(client.scheduler.address, security=client.security) as other:
        theirs = kd.distributed.attach(other)
        theirs.to_device(np.ones(1000, np.float32), worker="gpu-0").to_host()
        key = theirs.incarnation("gpu-0").key
        assert gpus.info()["gpu-0"]["arrays"][key] == 1
    deadline = time.monotonic() + 30
    while key in gpus.info()["gpu-0"]["arrays"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert key not in gpus.info()["gpu-0"]["arrays"]


def test_a_remote_array_dropped_here_is_freed_there(gpus: Any) -> None:
    import gc

    def flush() -> int:
        gc.collect()
        gpus.submit(lambda: None, worker="gpu-0").result()  # the next call carries the drops
        return int(gpus.info()["gpu-0"]["arrays"][gpus.incarnation("gpu-0").key])

    before = flush()
    held = gpus.to_device(np.ones(4, np.float32), worker="gpu-0")
    held.to_host()
    assert flush() == before + 1
    del held
    assert flush() == before


def test_blas_with_remote_arrays_runs_on_their_worker(gpus: Any) -> None:
    x = gpus.to_device(np.ones(8, np.float32), worker="gpu-1")
    result = kd.blas.dot(x, x)
    assert (type(result).__name__, result.worker) == ("RemoteArray", "gpu-1")
    assert type(kd.blas.gemm(x, x)).__name__ == "RemoteArray"


def test_import_kerneldsl_does_not_import_dask() -> None:
    import subprocess
    import sys

    code = "import sys, kerneldsl as kd; kd.ops; print('distributed' in sys.modules, 'dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def _identity(client: Any) -> dict[str, Any]:
    """The scheduler's identity, workers included, as this call got it (``Client.scheduler_info``
    returns the client's cache, which its periodic refresh may replace with one without workers)."""
    identity: dict[str, Any] = client.sync(client.scheduler.identity, n_workers=-1)
    return identity


def test_a_default_cluster_speaks_tls_on_localhost_and_its_client_holds_the_certificate(client: Any) -> None:
    cluster = client.cluster
    addresses = [cluster.scheduler_address, *_identity(client)["workers"]]
    assert all(a.startswith("tls://127.0.0.1:") for a in addresses)
    assert client.security is cluster.security and cluster.security.require_encryption


def _stranger_asks(address: str, security: Any = None) -> str:
    """What another local user gets for Dask's ``identity`` request at ``address`` (found in
    /proc/net/tcp): the peer's type, or the error that refused them."""
    import asyncio

    from distributed.comm import connect

    async def ask() -> str:
        args = {} if security is None else security.get_connection_args("client")
        try:
            comm = await connect(address, timeout=10, **args)
            await comm.write({"op": "identity"})
            return str((await comm.read())["type"])
        except OSError as exc:  # Dask's CommClosedError and FatalCommClosedError among them
            return type(exc).__name__

    return asyncio.run(ask())


def test_a_stranger_without_the_clusters_certificate_reaches_no_port(client: Any) -> None:
    from distributed.security import Security

    addresses = [client.cluster.scheduler_address, *_identity(client)["workers"]]
    plain = {_stranger_asks(a.replace("tls://", "tcp://")) for a in addresses}
    their_own_certificate = {_stranger_asks(a, Security.temporary()) for a in addresses}
    assert plain == {"CommClosedError"} and their_own_certificate == {"FatalCommClosedError"}
    assert {_stranger_asks(a, client.security) for a in addresses} == {"Scheduler", "Worker"}


def _http_status(port: int) -> int | None:
    """The status of a plain-HTTP ``GET /health`` at ``127.0.0.1:port``, or None when nothing
    there answers HTTP (a TLS port drops the request)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def _listening_ports(pid: int) -> set[int]:
    import psutil

    connections = psutil.Process(pid).net_connections("tcp")
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}


def test_a_default_cluster_answers_plain_http_on_no_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask serves HTTP routes (``/info/logs``, ``/info/call-stacks``, ``/json``) on every
    scheduler and worker unless told not to: no port the cluster opens, here or in its worker,
    may answer them, and none is announced."""
    _worker_env(monkeypatch)
    before = _listening_ports(os.getpid())
    with kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0) as cluster, distributed.Client(cluster) as c:
        (worker,) = c.run(os.getpid).values()
        ports = (_listening_ports(os.getpid()) - before) | _listening_ports(worker)
        assert len(ports) >= 3  # the TLS ports of the scheduler, the nanny and the worker
        assert {port: _http_status(port) for port in ports} == dict.fromkeys(ports)
        info = _identity(c)
        assert [info["services"], *(w["services"] for w in info["workers"].values())] == [{}, {}]


def test_a_cluster_started_with_dashboard_true_serves_plain_http_on_localhost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _worker_env(monkeypatch)
    with kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0, dashboard=True) as cluster:
        with distributed.Client(cluster) as c:
            info = _identity(c)
            ports = [info["services"]["dashboard"], *(w["services"]["dashboard"] for w in info["workers"].values())]
            assert [_http_status(port) for port in ports] == [200, 200]


def test_a_dashboard_address_without_dashboard_true_is_refused() -> None:
    with pytest.raises(ValueError, match="dashboard=True"):
        kd.distributed.LocalGPUCluster(gpus=[0], dashboard_address="127.0.0.1:8787")


def test_security_is_a_flag_or_a_dask_security_object() -> None:
    with pytest.raises(TypeError, match="security must be"):
        kd.distributed.LocalGPUCluster(gpus=[0], security="tls")  # type: ignore[arg-type]


def test_a_cluster_with_security_false_runs_any_local_users_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    _worker_env(monkeypatch)
    with pytest.warns(InsecureClusterWarning):
        cluster = kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0, security=False)
    with cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        with distributed.Client(cluster.scheduler_address) as stranger:
            assert list(stranger.run(getpass.getuser).values()) == [getpass.getuser()]


def test_a_cluster_with_security_false_warns_at_the_call_that_any_local_user_can_run_code_as_you(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _worker_env(monkeypatch)
    with pytest.warns(InsecureClusterWarning, match="any user of this machine can connect and run code") as caught:
        kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0, security=False).close()
    assert [w.filename for w in caught] == [__file__]


def test_a_cluster_with_tls_warns_nothing() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureClusterWarning)
        kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0).close()


def test_starting_a_cluster_writes_no_dask_info_lines_to_stderr(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "start.py"
    script.write_text(
        "import distributed, kerneldsl as kd\n"
        "if __name__ == '__main__':\n"
        "    with kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0) as cluster:\n"
        "        with distributed.Client(cluster) as c:\n"
        "            kd.distributed.attach(c)\n"
        "            print(len(c.run(lambda: None)))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]
    assert [line for line in done.stderr.splitlines() if " - INFO - " in line] == []


def test_dask_logging_is_left_as_configured_when_told(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "start.py"
    script.write_text(
        "import distributed, kerneldsl as kd\n"
        "if __name__ == '__main__':\n"
        "    with kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0, silence_logs=False):\n"
        "        pass\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "distributed.scheduler - INFO - " in done.stderr


def test_a_worker_restarting_when_dask_gives_up_on_lost_workers_keeps_its_nanny(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SpecCluster closes the nanny of a worker the scheduler removed if, ``lost-worker-timeout``
    later, no worker of its name is registered: with the timeout at 0 every restart is caught so
    (on the module cluster, a restart 15 s after another was, and that worker never came back)."""
    import dask
    from worker_double import exit_process

    _worker_env(monkeypatch)
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "0s"}):
        with kd.distributed.LocalGPUCluster(gpus=[0], memory_limit=0) as cluster, distributed.Client(cluster) as c:
            restarting = kd.distributed.attach(c, restart_timeout=60)
            with pytest.raises(WorkerLostError):
                restarting.submit(exit_process, worker="gpu-0").result(timeout=30)
            assert restarting.submit(lambda: "back", worker="gpu-0").result(timeout=60) == "back"
            assert list(cluster.workers) == ["gpu-0"]
