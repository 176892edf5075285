"""Sections of ``kerneldsl bench arrays`` for NumPy code run as written (issue 22), GPU required.

- cg: per-iteration time of the conjugate-gradient solver of ``examples/cg_solver.py`` (CuPy's
  spelling: ``A @ p`` a gemv, ``p @ Ap`` a dot whose 0-d result stays on the device, 0-d
  scalars broadcast into the vector ops) on a 4096x4096 SPD system, float32 and float64, against
  the same function on torch and CuPy tensors; each contender's solution is checked against NumPy.
- matmul: host cost of an allocating ``a @ b`` at 128² and 1024² float32 against torch's, each
  stream held by a spin kernel so only the enqueue is timed.
- roundtrip: numpy -> device -> ``x * 2`` -> numpy (``kd.asarray``, the operator, ``to_host()``)
  against torch ``from_numpy().cuda()`` -> ``* 2`` -> ``.cpu()``, 1k to 64M float32 elements.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import operator
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench import held_timing, ops_bench

CG_N = 4096
CG_ITERATIONS = 20
MATMUL_SIZES = (128, 1024)
ROUNDTRIP_SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26)


def _example() -> ModuleType:
    """``examples/cg_solver.py``, the solver the section times (the one users read)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "cg_solver.py"
    spec = importlib.util.spec_from_file_location("cg_solver", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _per_iteration(run: Callable[[], Any], sync: Callable[[], Any], reps: int) -> float:
    """Median seconds per CG iteration over ``reps`` runs of ``CG_ITERATIONS`` (one sync each)."""
    run()
    sync()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        sync()
        samples.append((time.perf_counter() - start) / CG_ITERATIONS)
    return sorted(samples)[len(samples) // 2]


def bench_cg(args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    for dtype in (np.float32, np.float64):
        results.update(_cg_times(np.dtype(dtype), max(3, args.reps // 3)))
    return results


def _cg_times(dtype: np.dtype, reps: int) -> dict[str, float]:
    """Per-iteration time of the three libraries on one system, each checked against NumPy."""
    import cupy as cp
    import torch

    cg = _example()
    a, b = cg.spd_system(CG_N, dtype)
    want = cg.cg(a.astype(np.float64), b.astype(np.float64), np.zeros(CG_N), CG_ITERATIONS)
    tol = dict(rtol=1e-3, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)
    syncs = {
        "kerneldsl": kd.default_session().synchronize,
        "torch": torch.cuda.synchronize,
        "CuPy": cp.cuda.get_current_stream().synchronize,
    }
    systems = {
        "kerneldsl": (kd.asarray(a), kd.asarray(b), kd.zeros(CG_N, dtype=dtype)),
        "torch": (
            torch.from_numpy(a).cuda(),
            torch.from_numpy(b).cuda(),
            torch.zeros(CG_N, dtype=torch.from_numpy(b).dtype, device="cuda"),
        ),
        "CuPy": (cp.asarray(a), cp.asarray(b), cp.zeros(CG_N, dtype)),
    }
    host = {"kerneldsl": lambda x: x.to_host(), "torch": lambda x: x.cpu().numpy(), "CuPy": cp.asnumpy}
    times = {}
    for who, (da, db, dx) in systems.items():
        ops_bench._check(f"{who} cg {dtype}", host[who](cg.cg(da, db, dx, CG_ITERATIONS)), want, **tol)
        times[who] = _per_iteration(lambda: cg.cg(da, db, dx, CG_ITERATIONS), syncs[who], reps)  # noqa: B023
    systems.clear()
    torch.cuda.empty_cache()
    results = {f"{who} {dtype.name} (µs per iteration)": t * 1e6 for who, t in times.items()}
    results[f"kerneldsl / torch {dtype.name} (target <= 1.0)"] = times["kerneldsl"] / times["torch"]
    results[f"kerneldsl / CuPy {dtype.name}"] = times["kerneldsl"] / times["CuPy"]
    return results


def bench_matmul(args: argparse.Namespace) -> dict[str, float]:
    import torch

    s = kd.default_session()
    spin_cycles = 4_000_000 + 400_000 * args.calls
    results: dict[str, float] = {}
    for n in MATMUL_SIZES:
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        da, db = kd.asarray(a), kd.asarray(b)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ops_bench._check(f"kd a @ b n={n}", (da @ db).to_host(), a @ b, rtol=1e-3, atol=1e-3)
        ops_bench._check(f"torch a @ b n={n}", (ta @ tb).cpu().numpy(), a @ b, rtol=1e-3, atol=1e-3)
        times = held_timing.interleaved_enqueue_costs(
            {
                "kerneldsl a @ b": (
                    lambda: held_timing.spin(spin_cycles),
                    functools.partial(operator.matmul, da, db),
                    s.synchronize,
                ),
                "torch a @ b": (
                    lambda: torch.cuda._sleep(spin_cycles),
                    functools.partial(operator.matmul, ta, tb),
                    torch.cuda.synchronize,
                ),
            },
            args.calls,
            args.reps,
        )
        results[f"kerneldsl a @ b n={n} (µs)"] = times["kerneldsl a @ b"] * 1e6
        results[f"torch a @ b n={n} (µs)"] = times["torch a @ b"] * 1e6
        results[f"kerneldsl / torch host cost n={n} (target <= 1.0)"] = times["kerneldsl a @ b"] / times["torch a @ b"]
    return results


def bench_roundtrip(args: argparse.Namespace) -> dict[str, float]:
    import torch

    results: dict[str, float] = {}
    for n in ROUNDTRIP_SIZES:
        x = np.random.default_rng(n).random(n, dtype=np.float32)

        def kd_call(x: np.ndarray = x) -> Any:
            return (kd.asarray(x) * 2).to_host()

        def torch_call(x: np.ndarray = x) -> Any:
            return (torch.from_numpy(x).cuda() * 2).cpu().numpy()

        ops_bench._check(f"kd roundtrip n={n}", kd_call(), x * 2)
        ops_bench._check(f"torch roundtrip n={n}", torch_call(), x * 2)
        reps = args.reps * 10 if n <= 1 << 20 else max(5, args.reps // 2)
        samples: dict[str, list[float]] = {"kerneldsl": [], "torch": []}
        for _ in range(reps):
            for who, call in (("kerneldsl", kd_call), ("torch", torch_call)):
                start = time.perf_counter()
                call()
                samples[who].append(time.perf_counter() - start)
        ops_bench._check(f"kd roundtrip n={n} after timing", kd_call(), x * 2)
        ops_bench._check(f"torch roundtrip n={n} after timing", torch_call(), x * 2)
        kd_t, torch_t = (sorted(v)[len(v) // 2] for v in samples.values())
        results[f"kerneldsl n={n} (µs)"] = kd_t * 1e6
        results[f"torch n={n} (µs)"] = torch_t * 1e6
        results[f"kerneldsl / torch throughput n={n} (target >= 1.0)"] = torch_t / kd_t
    return results
