"""kerneldsl.distributed on this machine's GPUs (GPU and ``kerneldsl[distributed]`` required).

- round trip: a no-op Dask task and a no-op call on a Dask actor (the engine's floors), a no-op
  ``gpus.submit`` and a warm remote kernel call on a resident array, each submit -> done.
- TLS: the warm remote kernel call on the default cluster (TLS, temporary certificate) vs one
  started with ``security=False`` (plain TCP), the two taking turns.
- pipelining: many small kernel calls one at a time (waiting for each) vs sent back to back
  with ``max_in_flight`` bounding what is in flight.
- worker-to-worker copies (64 MiB, 1 GiB): ``to_worker`` by CUDA IPC vs through the client vs
  torch (``x.to("cuda:1")``; with one GPU the two workers share it and torch's same-device copy).
- scaling: a batch of independent compute-bound calls on 1..N GPUs, each finished on the device.
- sharded sum: the sum of a large float32 array (``--sum-gib``) split over every GPU's worker,
  partials reduced on one, vs all of it on one GPU.
- cold start: a worker killed, then its replacement's process start to its first warm kernel
  call, the kernel's build already in the shared disk cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench import distributed_data as data
from kerneldsl.bench.report import Report, print_report, wall_median
from kerneldsl.errors import WorkerLostError
from kerneldsl.runtime import driver


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def _scale(y: kd.InOut["T", "n"], a: kd.Scalar["T"]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {a};"


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def _spin(y: kd.InOut["T", "n"], iters: kd.Scalar[kd.int32]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {{
        T v = {y}[i];
        for (int k = 0; k < {iters}; ++k) v = v * (T)0.999f + (T)0.001f;
        {y}[i] = v;
    }}"""


# called with remote arrays, a kernel returns a RemoteFuture (its checked type says None: a local launch)
scale: Any = _scale
spin: Any = _spin


class Noop:
    """The engine's floor: a Dask actor whose method does nothing."""

    def noop(self) -> None:
        return None


def noop() -> None:
    return None


def exit_process() -> None:
    os._exit(1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", default="all", help='"all" or comma-separated ordinals; repeat one to share it (0,0)')
    parser.add_argument("--reps", type=int, default=200, help="round trips per median")
    parser.add_argument("--calls", type=int, default=2000, help="small calls in the pipelining section")
    parser.add_argument("--batch", type=int, default=32, help="compute-bound calls in the scaling section")
    parser.add_argument(
        "--iters", type=int, default=200_000, help="inner iterations per thread of the compute-bound kernel"
    )
    parser.add_argument("--copy-mib", default="64,1024", help="sizes of the worker-to-worker copies, in MiB")
    parser.add_argument("--sum-gib", type=float, default=16.0, help="GiB of float32 in the sharded sum")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> Report:
    from distributed import Client

    from kerneldsl.distributed.cluster import worker_name

    gpus_arg: Any = "all" if args.gpus == "all" else [int(g) for g in args.gpus.split(",")]
    report: Report = {}
    with kd.distributed.LocalGPUCluster(gpus=gpus_arg) as cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
        gpus = kd.distributed.attach(client)
        names = gpus.workers()
        report["round trip (ms, median)"] = _round_trip(client, gpus, names[0], args.reps)
        report["TLS (warm remote kernel call, ms, median)"] = _tls_cost(gpus, names[0], cluster.devices[0], args.reps)
        report["pipelining (calls per second)"] = _pipelining(gpus, names[0], args.calls)
        by_gpu = [worker_name(cluster.devices.index(g)) for g in sorted(set(cluster.devices))]
        report["scaling (batch of compute-bound calls, 1..N GPUs)"] = data.scaling(
            gpus, by_gpu, args.batch, args.iters, spin
        )
        report[f"sharded sum over {len(by_gpu)} GPU(s) vs one"] = data.sharded_sum(gpus, by_gpu, args.sum_gib)
        report["cold start (s, warm disk cache)"] = _cold_start(gpus, names[-1])
    gpu_count = len(set(cluster.devices)) if args.gpus != "all" else driver.device_count()
    sizes = tuple(int(m) for m in args.copy_mib.split(","))
    report["worker-to-worker copy (gpu-0 -> gpu-1)"] = data.copy_bandwidth(gpu_count, sizes)
    print_report(report, args)
    return report


def _round_trip(client: Any, gpus: Any, worker: str, reps: int) -> dict[str, float]:
    actor = client.submit(Noop, actor=True, workers=[worker], pure=False).result()
    x = gpus.to_device(np.ones(1024, np.float32), worker=worker)
    scale(x, np.float32(1)).result()
    figures = {
        "no-op Dask task": wall_median(lambda: client.submit(noop, workers=[worker], pure=False).result(), reps // 4),
        "no-op Dask actor call": wall_median(lambda: actor.noop().result(), reps),
        "no-op gpus.submit": wall_median(lambda: gpus.submit(noop, worker=worker).result(), reps),
        "warm remote kernel call": wall_median(lambda: scale(x, np.float32(1)).result(), reps),
    }
    report = {k: v * 1e3 for k, v in figures.items()}
    report["kernel call / actor call"] = figures["warm remote kernel call"] / figures["no-op Dask actor call"]
    np.testing.assert_array_equal(x.to_host(), np.ones(1024, np.float32))
    return report


def _tls_cost(gpus: Any, worker: str, device: int, reps: int, rounds: int = 5) -> dict[str, float]:
    """The warm remote kernel call here (TLS) and on a plain-TCP cluster's worker on the same GPU,
    in ``rounds`` turns of ``reps // rounds`` calls each, so that both see the same machine."""
    from distributed import Client

    with kd.distributed.LocalGPUCluster(gpus=[device], security=False) as cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
        plain = kd.distributed.attach(client)
        calls = {"with TLS": _warm_call(gpus, worker), "without TLS": _warm_call(plain, plain.workers()[0])}
        medians: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(rounds):
            for name, call in calls.items():
                medians[name].append(wall_median(call, max(reps // rounds, 1)))
    report = {k: statistics.median(v) * 1e3 for k, v in medians.items()}
    report["TLS / plain"] = report["with TLS"] / report["without TLS"]
    return report


def _warm_call(gpus: Any, worker: str) -> Callable[[], Any]:
    x = gpus.to_device(np.ones(1024, np.float32), worker=worker)
    scale(x, np.float32(1)).result()  # built, loaded and its actor started
    return lambda: scale(x, np.float32(1)).result()


def _pipelining(gpus: Any, worker: str, calls: int) -> dict[str, float]:
    x = gpus.to_device(np.ones(1024, np.float32), worker=worker)
    start = time.perf_counter()
    for _ in range(calls):
        scale(x, np.float32(1)).result()
    one_at_a_time = calls / (time.perf_counter() - start)
    start = time.perf_counter()
    pending = [scale(x, np.float32(1)) for _ in range(calls)]
    for p in pending:
        p.result()
    pipelined = calls / (time.perf_counter() - start)
    return {
        "one at a time": one_at_a_time,
        f"pipelined (max_in_flight={gpus.max_in_flight})": pipelined,
        "speedup": pipelined / one_at_a_time,
    }


def _cold_start(gpus: Any, worker: str) -> dict[str, float]:
    host = np.ones(1024, np.float32)
    scale(gpus.to_device(host, worker=worker), np.float32(1)).result()  # the build is in the disk cache
    start = time.perf_counter()
    try:
        gpus.submit(exit_process, worker=worker).result()
    except WorkerLostError:
        pass
    killed = time.perf_counter()
    scale(gpus.to_device(host, worker=worker), np.float32(1)).result()
    return {"kill to first warm call": time.perf_counter() - start, "of which noticing the kill": killed - start}
