"""kd.random side by side with PyTorch and CuPy in one process (GPU required).

- normal: ``kd.random.normal(2**28, dtype=float32)`` against ``torch.randn`` and
  ``cupy.random.standard_normal`` (each allocating its result), event-timed median; GB/s of
  output written and the throughput ratios (target: kd >= 0.9x each).
- uniform: the same for ``kd.random.uniform`` against ``torch.rand`` and ``cupy.random.random``.

The first values are checked against the sample mean and variance first (2^28 draws: mean
within 1e-3, variance within 1e-3 of the distribution's).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench.ops_bench import _cupy_timer, _gbps, _kd_timer, _torch_timer
from kerneldsl.bench.report import Report, Section, run_sections

N = 1 << 28
NBYTES = N * 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per measurement (median reported)")
    parser.add_argument("--only", choices=["normal", "uniform"], action="append", help="run only these sections")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


class _Host:
    """A host array where ``_check_moments`` reads a device array's ``to_host()``."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def to_host(self) -> np.ndarray:
        return self.values


def _check_moments(name: str, x: Any, mean: float, var: float) -> None:
    host = x.to_host().astype(np.float64)
    if abs(host.mean() - mean) > 1e-3 or abs(host.var() - var) > 1e-3:
        raise AssertionError(f"{name}: mean {host.mean():.5f}, variance {host.var():.5f}; want {mean}, {var}")


def _side_by_side(
    kd_draw: Any, torch_draw: Any, cupy_draw: Any, reps: int, moments: tuple[float, float]
) -> dict[str, float]:
    """Each library's draw timed, then one more draw of each checked for its mean and variance."""
    import cupy as cp
    import torch

    s = kd.default_session()
    ours = _kd_timer(s)(kd_draw, reps)
    torch_ms = _torch_timer(torch)(torch_draw, reps)
    cupy_ms = _cupy_timer(cp)(cupy_draw, reps)
    _check_moments("kd after timing", kd_draw(), *moments)
    _check_moments("torch", _Host(torch_draw().cpu().numpy()), *moments)
    _check_moments("cupy", _Host(cp.asnumpy(cupy_draw())), *moments)
    return {
        "kd (ms)": ours,
        "torch (ms)": torch_ms,
        "cupy (ms)": cupy_ms,
        "kd (GB/s written)": _gbps(NBYTES, ours),
        "kd throughput / torch (target >= 0.9)": torch_ms / ours,
        "kd throughput / cupy (target >= 0.9)": cupy_ms / ours,
    }


def bench_normal(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    _check_moments("kd.random.normal", kd.random.normal(N, seed=1), 0.0, 1.0)
    return _side_by_side(
        lambda: kd.random.normal(N, dtype=np.float32, seed=1),
        lambda: torch.randn(N, dtype=torch.float32, device="cuda"),
        lambda: cp.random.standard_normal(N, dtype=cp.float32),
        args.reps,
        (0.0, 1.0),
    )


def bench_uniform(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import torch

    _check_moments("kd.random.uniform", kd.random.uniform(N, seed=2), 0.5, 1 / 12)
    return _side_by_side(
        lambda: kd.random.uniform(N, dtype=np.float32, seed=2),
        lambda: torch.rand(N, dtype=torch.float32, device="cuda"),
        lambda: cp.random.random(N, dtype=cp.float32),
        args.reps,
        (0.5, 1 / 12),
    )


SECTIONS: dict[str, Section] = {
    "normal": ("normal 2^28 float32 (allocating)", bench_normal),
    "uniform": ("uniform 2^28 float32 (allocating)", bench_uniform),
}


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
