"""Timing one configuration safely: on scratch copies of what the kernel writes (or the user's
arrays and their ``restore=`` hook), with CUDA events on the session stream, after a warm-up.

Every launch made here is counted (``benchmark_launches``): a process that finds its tunings on
disk makes none, which a test checks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..jit.signature import ArrayParam, Signature
from ..runtime.memory import ARRAY_TYPES

if TYPE_CHECKING:
    from ..launch.dispatch import Kernel

ROUNDS = 3  # timed rounds per configuration; the fastest round's mean is its time
MAX_REPS = 1000

_count_lock = threading.Lock()
_launches = 0


def benchmark_launches() -> int:
    """How many launches tuning has made in this process (warm-ups and timed ones)."""
    return _launches


def _counted(n: int) -> None:
    global _launches
    with _count_lock:
        _launches += n


@contextlib.contextmanager
def scratch(sig: Signature, session: Any, args: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """Arguments a benchmark may write, made once for every configuration of a tuning: device
    copies of numpy arrays, fresh copies of written DeviceArrays (``Out`` ones left
    uninitialised), read-only DeviceArrays as they are; freed at the end."""
    made: list[Any] = []
    placed: list[Any] = []
    try:
        for p, a in zip(sig.runtime_params, args):
            if isinstance(p, ArrayParam) and isinstance(a, np.ndarray):
                copy = session.to_device(np.ascontiguousarray(a))
            elif isinstance(p, ArrayParam) and type(a) in ARRAY_TYPES and p.writes:
                copy = session.empty_like(a) if p.direction == "out" else session.copy(a)
            else:
                placed.append(a)
                continue
            made.append(copy)
            placed.append(copy)
        yield tuple(placed)
    finally:
        for m in made:
            m.close()


def time_launches(
    variant: Kernel[Any], session: Any, args: tuple[Any, ...], consts: dict[str, Any], warmup: int, rep_ms: float
) -> float:
    """Milliseconds per launch of ``variant`` on ``args``: ``warmup`` launches and one waited for
    (a launch failure raises here), one timed to size the rounds, then ``ROUNDS`` rounds of
    launches filling about ``rep_ms`` each; the fastest round's mean."""
    start, end = session.create_event(), session.create_event()
    try:
        for _ in range(max(warmup, 1)):
            variant(*args, **consts)
        _counted(max(warmup, 1))
        session.synchronize()
        start.record()
        variant(*args, **consts)
        end.record()
        _counted(1)
        end.synchronize()
        estimate = max(end.elapsed_since(start), 1e-4)
        reps = max(1, min(MAX_REPS, int(rep_ms / estimate)))
        best = float("inf")
        for _ in range(ROUNDS):
            start.record()
            for _ in range(reps):
                variant(*args, **consts)
            end.record()
            _counted(reps)
            end.synchronize()
            best = min(best, end.elapsed_since(start) / reps)
        return best
    finally:
        start.close()
        end.close()
