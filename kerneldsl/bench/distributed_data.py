"""The many-GPU sections of ``kerneldsl bench distributed`` (issue 26): worker-to-worker copies,
scaling of a compute-bound batch over 1..N GPUs, and a sharded sum against one GPU.

Targets (printed next to the figures): a worker-to-worker copy >= 0.8x PyTorch's one-process
``x.to("cuda:1")`` at 1 GiB (with one GPU there is no peer copy: the reference is then torch's
same-device ``y.copy_(x)``, and the figure says so) and >= 10x the through-the-client path; a batch
on N GPUs >= 0.95*N times one GPU; the sharded sum on N GPUs >= 0.9*N times one GPU.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kerneldsl as kd

MiB = 1 << 20
_CHUNK_ELEMENTS = 1 << 30  # the sum's arrays stay under 2**31 elements (4 GiB of float32)


def filled(n: int, value: float) -> Any:
    """Run on a worker: ``n`` float32 of ``value`` made there (no upload)."""
    return kd.full((n,), value, np.float32)


def synchronize() -> None:
    kd.default_session(0).synchronize()


def _timed(run: Callable[[], object], reps: int, warm: bool = True) -> float:
    if warm:
        run()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def copy_bandwidth(gpu_count: int, sizes_mib: tuple[int, ...] = (64, 1024)) -> dict[str, float]:
    """``to_worker`` between two workers (on GPUs 0 and 1, or both on GPU 0 with one GPU) against
    the through-the-client path and torch's copy, in GB/s (bytes copied / wall time)."""
    from distributed import Client

    peer = gpu_count >= 2
    report: dict[str, float] = {}
    with kd.distributed.LocalGPUCluster(gpus=[0, 1] if peer else [0, 0]) as cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
        gpus = kd.distributed.attach(client)
        for mib in sizes_mib:
            nbytes = mib * MiB
            src = gpus.submit(filled, nbytes // 4, 1.5, worker="gpu-0").result()
            first = src.to_worker("gpu-1")
            check = first.to_host() if mib <= 64 else None
            if check is not None and not np.all(check == np.float32(1.5)):
                raise AssertionError("to_worker moved wrong bytes")
            del first, check

            def ipc(src: Any = src) -> None:
                src.to_worker("gpu-1").shape  # noqa: B018 (waits until the copy is done there)

            def through_client(src: Any = src) -> None:
                src.to_worker("gpu-1", via="client").shape  # noqa: B018

            ipc_s = _timed(ipc, 10 if mib <= 64 else 5)
            client_s = _timed(through_client, 3 if mib <= 64 else 1, warm=mib <= 64)
            torch_s = _torch_copy(nbytes, peer)
            label = f"{mib} MiB"
            report[f"{label} to_worker, CUDA IPC (GB/s)"] = nbytes / ipc_s / 1e9
            report[f"{label} through the client (GB/s)"] = nbytes / client_s / 1e9
            report[f"{label} IPC / client (target >= 10 at 1 GiB)"] = client_s / ipc_s
            if torch_s is not None:
                what = 'x.to("cuda:1")' if peer else "y.copy_(x), same GPU: no peer copy here"
                report[f"{label} torch {what} (GB/s)"] = nbytes / torch_s / 1e9
                report[f"{label} IPC / torch (target >= 0.8 at 1 GiB{'' if peer else ', peer only'})"] = torch_s / ipc_s
            del src
    if not peer:
        print("(one GPU: two workers share GPU 0, so the copies are same-device IPC; torch's reference is y.copy_(x))")
    return report


def _torch_copy(nbytes: int, peer: bool) -> float | None:
    try:
        import torch
    except ImportError:
        print("(torch is not installed: no torch reference for the copies)")
        return None
    seconds = _torch_timed(torch, nbytes, peer)
    torch.cuda.empty_cache()
    return seconds


def _torch_timed(torch: Any, nbytes: int, peer: bool) -> float:
    x = torch.full((nbytes // 4,), 1.5, dtype=torch.float32, device="cuda:0")
    y = torch.empty_like(x)

    def copy() -> None:
        if peer:
            x.to("cuda:1")
            torch.cuda.synchronize("cuda:1")
        else:
            y.copy_(x)
        torch.cuda.synchronize("cuda:0")

    return _timed(copy, 10)


def scaling(gpus: Any, workers: list[str], batch: int, iters: int, spin: Any) -> dict[str, float]:
    """A batch of ``batch`` compute-bound calls on the first n of ``workers`` (one per GPU), n = 1..N."""
    host = np.full(1 << 20, 0.5, np.float32)
    arrays = {w: gpus.to_device(host, worker=w) for w in workers}

    def batch_on(targets: list[str]) -> float:
        start = time.perf_counter()
        calls = [spin(arrays[targets[k % len(targets)]], np.int32(iters)) for k in range(batch)]
        for c in calls:
            c.result()
        for w in targets:
            gpus.submit(synchronize, worker=w).result()
        return time.perf_counter() - start

    batch_on(workers)  # compile (or load) and warm all
    one = statistics.median(batch_on(workers[:1]) for _ in range(3))
    report = {"1 GPU (s)": one}
    for n in range(2, len(workers) + 1):
        t = statistics.median(batch_on(workers[:n]) for _ in range(3))
        report[f"{n} GPUs (s)"] = t
        report[f"{n} GPUs speedup (target >= {0.95 * n:.2f})"] = one / t
    if len(workers) == 1:
        print("(one GPU: the scaling section has nothing to compare; N = 2, 4, 8 need that many GPUs)")
    return report


def sum_chunks(total_gib: float, workers: int) -> tuple[int, int]:
    """How the sharded sum splits ``total_gib`` GiB of float32: a multiple of ``workers`` chunks of
    equal length, each under 2**31 elements."""
    elements = int(total_gib * (1 << 30)) // 4
    chunks = workers * math.ceil(max(math.ceil(elements / _CHUNK_ELEMENTS), 1) / workers)
    return chunks, elements // chunks


def sharded_sum(gpus: Any, workers: list[str], total_gib: float) -> dict[str, float]:
    """The sum of ``total_gib`` GiB of float32 split over ``workers`` (per-worker sums, then
    ``gpus.reduce`` of the partials on the first worker, device to device) against all of it on one
    GPU; the same chunks (under 2**31 elements each) in both."""
    n = len(workers)
    chunks, per_chunk = sum_chunks(total_gib, n)

    def made(on: list[str]) -> list[Any]:
        return [gpus.submit(filled, per_chunk, 1.0, worker=on[k % len(on)]).result() for k in range(chunks)]

    def total(parts: list[Any]) -> float:
        return float(gpus.reduce([kd.ops.sum(p) for p in parts], worker=workers[0]).result())

    sharded = made(workers)
    one = sharded if n == 1 else made(workers[:1])
    expected = float(per_chunk * chunks)
    for parts in (sharded, one):
        if not math.isclose(total(parts), expected, rel_tol=1e-3):
            raise AssertionError("the sharded sum is wrong")
    t_one = _timed(lambda: total(one), 3, warm=False)
    t_sharded = t_one if n == 1 else _timed(lambda: total(sharded), 3, warm=False)
    gib = per_chunk * chunks * 4 / (1 << 30)
    report = {f"one GPU, {gib:.1f} GiB (ms)": t_one * 1e3, f"{n} GPUs (ms)": t_sharded * 1e3}
    report[f"speedup (target >= {0.9 * n:.2f})"] = t_one / t_sharded
    if n == 1:
        print("(one GPU: the sharded sum runs on the one worker; N = 2, 4, 8 need that many GPUs)")
    return report
