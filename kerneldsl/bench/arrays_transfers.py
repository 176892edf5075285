"""The ``transfers`` section of ``kerneldsl bench arrays`` (issue 22), GPU required: numpy ->
device (``kd.asarray``) and device -> numpy (``to_host()``) alone, 1k to 64M float32, against
PyTorch's ``from_numpy(x).cuda()`` and ``.cpu()``; at 1M elements and up also kerneldsl's two ways
of moving the bytes, pageable memory copied directly and the pinned pipeline
(``runtime.pinned_pipeline``), each forced, whose ratios say where ``UPLOAD_MIN_BYTES`` and
``DOWNLOAD_MIN_BYTES`` belong.

Every copy is blocking (each library's call returns with the bytes moved); medians of the
contenders taking turns every repetition; results checked against the source first.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench import ops_bench
from kerneldsl.runtime import pinned_pipeline

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26)
COMPARE_FROM = 1 << 20  # elements: direct against pipelined from here


@contextmanager
def _pipeline_from(nbytes: int) -> Iterator[None]:
    """Transfers of ``nbytes`` and up take the pinned pipeline while the block runs."""
    saved = pinned_pipeline.UPLOAD_MIN_BYTES, pinned_pipeline.DOWNLOAD_MIN_BYTES
    pinned_pipeline.UPLOAD_MIN_BYTES = pinned_pipeline.DOWNLOAD_MIN_BYTES = nbytes
    try:
        yield
    finally:
        pinned_pipeline.UPLOAD_MIN_BYTES, pinned_pipeline.DOWNLOAD_MIN_BYTES = saved


def _medians(calls: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: sorted(v)[len(v) // 2] for name, v in samples.items()}


def bench_transfers(args: argparse.Namespace) -> dict[str, float]:
    import torch

    s = kd.default_session()
    results: dict[str, float] = {}
    for n in SIZES:
        x = np.random.default_rng(n).random(n, dtype=np.float32)
        a, t = kd.asarray(x, session=s), torch.from_numpy(x).cuda()
        ops_bench._check(f"kd upload n={n}", a.to_host(), x)
        ops_bench._check(f"torch upload n={n}", t.cpu().numpy(), x)
        uploads: dict[str, Callable[[], Any]] = {
            "kerneldsl": functools.partial(kd.asarray, x, session=s),
            "torch": functools.partial(_torch_upload, torch, x),
        }
        downloads: dict[str, Callable[[], Any]] = {"kerneldsl": a.to_host, "torch": t.cpu}
        if n >= COMPARE_FROM:
            for way, threshold in (("direct", 1 << 62), ("pipelined", 0)):
                uploads[f"kerneldsl {way}"] = functools.partial(_forced, threshold, kd.asarray, x, session=s)
                downloads[f"kerneldsl {way}"] = functools.partial(_forced, threshold, a.to_host)
        reps = args.reps * 10 if n <= 1 << 20 else max(5, args.reps // 2)
        mib = x.nbytes / (1 << 20)
        for what, calls in (("upload", uploads), ("download", downloads)):
            times = _medians(calls, reps)
            for name, call in calls.items():  # the calls timed, checked after timing
                _check_moved(f"{name} {what} n={n} after timing", call(), x)
            for name, seconds in times.items():
                results[f"{name} {what} n={n} (µs)"] = seconds * 1e6
            results[f"kerneldsl / torch {what} throughput n={n} (target >= 1.0)"] = times["torch"] / times["kerneldsl"]
            if n >= COMPARE_FROM:
                results[f"pipelined / direct {what} throughput n={n} ({mib:g} MiB)"] = (
                    times["kerneldsl direct"] / times["kerneldsl pipelined"]
                )
        del a, t
    return results


def _check_moved(what: str, moved: Any, x: np.ndarray) -> None:
    """The bytes a transfer returned (a device array or tensor for an upload, a numpy array for a
    download) against the source."""
    if hasattr(moved, "to_host"):
        moved = moved.to_host()
    elif hasattr(moved, "cpu"):
        moved = moved.cpu().numpy()
    ops_bench._check(what, np.asarray(moved), x)


def _torch_upload(torch: Any, x: np.ndarray) -> Any:
    return torch.from_numpy(x).cuda()


def _forced(threshold: int, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with _pipeline_from(threshold):
        return call(*args, **kwargs)
