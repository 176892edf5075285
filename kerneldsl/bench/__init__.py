"""Benchmarks of kerneldsl's own costs, run by ``kerneldsl bench NAME``.

``BENCHMARKS`` is the registry the CLI builds its ``bench`` subcommands from: a new benchmark
is one entry here, with its options, what it needs to run, and an entry point taking the
parsed arguments, printing its figures and returning them as a report (``--plot`` draws it).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import cast

from ..runtime import driver
from .report import Report


@dataclass(frozen=True)
class Benchmark:
    """One ``kerneldsl bench`` subcommand."""

    help: str
    module: str  # ``kerneldsl.bench.NAME``, imported only to run: the CLI starts without the baselines
    gpu: bool = False
    modules: Mapping[str, str] = field(default_factory=dict)  # import name -> what to call it
    install: str = ""  # the command that installs ``modules``

    def unmet(self, name: str) -> str | None:
        """One line saying what this machine lacks to run the benchmark, or None when it has it all.

        Checked before running: a baseline imported halfway through would end in a traceback.
        """
        absent = [label for module, label in self.modules.items() if not _installed(module)]
        no_gpu = self.gpu and not driver.driver_available()
        if not absent and not no_gpu:
            return None
        needs = _listing((["a GPU"] if self.gpu else []) + list(self.modules.values()))
        lacks = _listing((["a GPU"] if no_gpu else []) + absent)
        return f"kerneldsl bench {name} needs {needs}; this machine lacks {lacks}" + (
            f": {self.install}" if absent else ""
        )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        self._load().add_arguments(parser)

    def run(self, args: argparse.Namespace) -> Report:
        return cast(Report, self._load().run(args))

    def _load(self) -> ModuleType:
        return importlib.import_module(self.module)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


_CUPY = "pip install cupy-cuda13x"

BENCHMARKS: dict[str, Benchmark] = {
    "compile": Benchmark(
        "cold NVRTC compile vs disk-cache hit in a fresh process vs in-process lookup",
        "kerneldsl.bench.compile_bench",
    ),
    "coldstart": Benchmark(
        "GPU: fresh process to first numpy result vs the cuda.bindings floor and CuPy; import times",
        "kerneldsl.bench.coldstart_bench",
        gpu=True,
        modules={"cupy": "CuPy"},
        install=_CUPY,
    ),
    "runtime": Benchmark(
        "GPU: launch cost, graph replay, transfers, numpy end to end, side by side with CuPy and cuda.core",
        "kerneldsl.bench.runtime_bench",
        gpu=True,
        modules={"cupy": "CuPy"},
        install=_CUPY,
    ),
    "blas": Benchmark(
        "GPU: kd.blas gemm throughput vs cupy.matmul, per-call host cost vs the nvmath binding, CuPy, torch",
        "kerneldsl.bench.blas_bench",
        gpu=True,
        modules={"nvmath": "nvmath-python"},
        install="pip install 'kerneldsl[blas]'",
    ),
    "ops": Benchmark(
        "GPU: kd.ops saxpy / sum / fused chain bandwidth vs torch and CuPy, compile times, ops launch cost",
        "kerneldsl.bench.ops_bench",
        gpu=True,
        modules={"cupy": "CuPy", "torch": "PyTorch"},
        install=f"{_CUPY} torch",
    ),
    "arrays": Benchmark(
        "GPU: array code allocating its results, fused GELU, alloc+free, numpy calls, keywords vs torch and CuPy",
        "kerneldsl.bench.arrays_bench",
        gpu=True,
        modules={"cupy": "CuPy", "torch": "PyTorch"},
        install=f"{_CUPY} torch",
    ),
    "reduce": Benchmark(
        "GPU: kd.ops.sum over any axis set and strided views, full sum, cumsum, host cost vs CuPy and torch",
        "kerneldsl.bench.reduce_bench",
        gpu=True,
        modules={"cupy": "CuPy", "torch": "PyTorch"},
        install=f"{_CUPY} torch",
    ),
    "fuse": Benchmark(
        "GPU: @kd.fuse softmax, log-softmax, logsumexp, layer/RMS norm vs torch, torch.compile, Triton, copy floor",
        "kerneldsl.bench.fuse_bench",
        gpu=True,
        modules={"torch": "PyTorch"},
        install="pip install torch",
    ),
    "random": Benchmark(
        "GPU: kd.random.normal / uniform of 2^28 float32 vs torch.randn / rand and cupy.random",
        "kerneldsl.bench.random_bench",
        gpu=True,
        modules={"cupy": "CuPy", "torch": "PyTorch"},
        install=f"{_CUPY} torch",
    ),
    "kernels": Benchmark(
        "GPU: a cooperative grid.sync sum and a cub::BlockReduce sum of 2^28 float32 vs kd.ops.sum",
        "kerneldsl.bench.kernels_bench",
        gpu=True,  # the headers extra too: without it the first compile names it (HeadersNotAvailableError)
    ),
    "tune": Benchmark(
        "GPU: @kd.autotune on a tiled matmul and row sums: per-config table, winner, tuning time, warm call cost",
        "kerneldsl.bench.tune_bench",
        gpu=True,
    ),
    "cpu": Benchmark(
        "CPU device: CUDA-style kernels vs NVIDIA Warp's CPU device, Numba's CUDA simulator and NumPy; "
        "fiber costs per thread; kd.ops and @kd.fuse vs NumPy; a small kernel's first call",
        "kerneldsl.bench.cpu_bench",
        modules={"warp": "NVIDIA Warp", "numba": "Numba"},
        install="pip install 'kerneldsl[bench-cpu]'",
    ),
    "torch": Benchmark(
        "kd.torch.op: host cost of a warm operator call vs the direct kernel call and a hand-written custom_op "
        "(CPU tensors; CUDA tensors and CUDA graphs with a GPU)",
        "kerneldsl.bench.torch_bench",
        modules={"torch": "PyTorch"},
        install="pip install 'kerneldsl[torch]'",
    ),
    "distributed": Benchmark(
        "GPU: remote kernel call vs Dask actor and task round trips, pipelining, worker-to-worker copies, "
        "scaling over 1..N GPUs, a sharded sum, worker cold start",
        "kerneldsl.bench.distributed_bench",
        gpu=True,
        modules={"distributed": "Dask distributed"},
        install="pip install 'kerneldsl[distributed]'",
    ),
}
