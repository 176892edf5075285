"""Benchmarks of kerneldsl's own costs, run by ``kerneldsl bench NAME``.

``BENCHMARKS`` is the registry the CLI builds its ``bench`` subcommands from: a new benchmark
is one entry here, with its options and an entry point taking the parsed arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from . import blas_bench, compile_bench, ops_bench, runtime_bench


@dataclass(frozen=True)
class Benchmark:
    """One ``kerneldsl bench`` subcommand."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # returns the exit code


BENCHMARKS: dict[str, Benchmark] = {
    "compile": Benchmark(
        "cold NVRTC compile vs disk-cache hit in a fresh process vs in-process lookup",
        compile_bench.add_arguments,
        compile_bench.run,
    ),
    "runtime": Benchmark(
        "GPU: launch cost, graph replay, transfers, numpy end to end, side by side with CuPy and cuda.core",
        runtime_bench.add_arguments,
        runtime_bench.run,
    ),
    "blas": Benchmark(
        "GPU: kd.blas gemm throughput vs cupy.matmul, per-call host cost vs the nvmath binding, CuPy, torch",
        blas_bench.add_arguments,
        blas_bench.run,
    ),
    "ops": Benchmark(
        "GPU: kd.ops saxpy / sum / fused chain bandwidth vs torch and CuPy, compile times, ops launch cost",
        ops_bench.add_arguments,
        ops_bench.run,
    ),
}
