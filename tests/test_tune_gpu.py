"""Autotuning and resources on a real GPU: tuning leaves the caller's data alone, failing
configurations are skipped, tunings persist across processes, and the occupancy computed from
the function attributes agrees with the driver's own numbers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import tune
from kerneldsl.bench import tune_bench

pytestmark = pytest.mark.gpu


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def add_staged(y: kd.InOut["float32", "n"], x: kd.In["float32", "n"], PAD: kd.Const[int] = 1024):
    # A grid-stride loop: right for any block a configuration sets. PAD floats of static shared
    # memory, each thread staging its elements through its own slot.
    return f"""
    __shared__ float pad[{PAD}];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {{
        pad[threadIdx.x % {PAD}] = {x}[i];
        {y}[i] += pad[threadIdx.x % {PAD}];
    }}
    """


@pytest.fixture(autouse=True)
def private_cache(isolated_cache: Path) -> Path:
    return isolated_cache


def _inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def test_tuning_leaves_inout_device_arrays_as_one_call_leaves_them() -> None:
    y0, x = _inputs(100_003, 1)
    s = kd.default_session()
    y, dx = s.to_device(y0), s.to_device(x)
    tuned = kd.autotune(configs={"block": [64, 128, 256]}, key=("n",))(add_staged)
    before = tune.benchmark_launches()
    tuned(y, dx)
    assert tune.benchmark_launches() - before > 3  # every config ran several times, on copies
    np.testing.assert_array_equal(y.to_host(), y0 + x)


def test_tuning_leaves_inout_numpy_arrays_as_one_call_leaves_them() -> None:
    y0, x = _inputs(4099, 2)
    y = y0.copy()
    kd.autotune(configs={"block": [128, 256]}, key=("n",))(add_staged)(y, x)
    np.testing.assert_array_equal(y, y0 + x)


def test_a_config_too_large_to_launch_or_compile_is_skipped() -> None:
    y0, x = _inputs(5000, 3)
    s = kd.default_session()
    y, dx = s.to_device(y0), s.to_device(x)
    configs = [{"block": 256}, {"block": 2048, "PAD": 2048}, {"PAD": 65536}]  # 2048 threads; 256 KiB static shared
    tuned = kd.autotune(configs=configs, key=("n",))(add_staged)
    tuned(y, dx)
    choice = tuned.tune(y, dx)
    assert choice.config.label == "block=256"
    assert "zero occupancy" in str(choice.timings["block=2048 PAD=2048"].error)
    assert str(choice.timings["PAD=65536"].error).startswith("KernelCompileError")
    np.testing.assert_array_equal(y.to_host(), y0 + x)


MODULE = textwrap.dedent(
    """
    import kerneldsl as kd

    @kd.autotune(configs={"block": [64, 128, 256]}, key=("n",))
    @kd.kernel(grid=kd.cdiv("n", 256), block=256)
    def twice(y: kd.InOut["float32", "n"]):
        loop = "for (index_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)"
        return loop + f" {y}[i] *= 2.0f;"
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import kerneldsl as kd
    from kerneldsl import tune
    import gpu_tuned_module

    y = kd.default_session().to_device(np.ones(1 << 16, np.float32))
    gpu_tuned_module.twice(y)
    assert (y.to_host() == 2.0).all()
    print("result", tune.benchmark_launches(), gpu_tuned_module.twice.tune(y).source)
    """
)


def test_a_fresh_process_reuses_the_tuning_without_benchmarking(tmp_path: Path, private_cache: Path) -> None:
    (tmp_path / "gpu_tuned_module.py").write_text(MODULE)
    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(private_cache)}

    def run() -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        # one H200 run put a NUL byte between the two printed fields: read them by pattern
        [(launches, source)] = re.findall(r"result\W+(\d+)\W+(measured|remembered)", done.stdout)
        return [launches, source]

    first = run()
    assert int(first[0]) > 0 and first[1] == "measured"
    assert run() == ["0", "remembered"]


@pytest.mark.parametrize("block", [32, 64, 96, 128, 256, 512, 1024])
def test_occupancy_agrees_with_the_driver(block: int) -> None:
    y, x = kd.default_session().zeros(1 << 20, np.float32), kd.default_session().zeros(1 << 20, np.float32)
    occ = add_staged.occupancy(y, x, block=block)
    assert occ.blocks_per_sm == occ.driver_blocks_per_sm
    assert occ.blocks_per_sm > 0 and occ.warps_per_sm <= occ.max_warps_per_sm


@pytest.mark.parametrize("config", tune_bench.MATMUL_CONFIGS, ids=lambda c: "TILE={TILE},{TX}x{TY}".format(**c))
def test_occupancy_of_register_heavy_kernels_agrees_with_the_driver(config: dict[str, int]) -> None:
    s = kd.default_session()
    out, a, b = (s.zeros((256, 256), np.float32) for _ in range(3))
    tuned = tune_bench.tuned_matmul()
    occ = tuned.variant(next(c for c in tuned.configs if c.values == config)).occupancy(out, a, b)
    assert occ.blocks_per_sm == occ.driver_blocks_per_sm


def test_occupancy_with_dynamic_shared_memory_agrees_with_the_driver() -> None:
    y, x = kd.default_session().zeros(1 << 20, np.float32), kd.default_session().zeros(1 << 20, np.float32)
    occ = add_staged.occupancy(y, x, block=128, shared=40 * 1024)
    assert (occ.blocks_per_sm, occ.limited_by) == (occ.driver_blocks_per_sm, "shared memory")


def test_suggested_block_reaches_the_highest_occupancy_the_driver_reports() -> None:
    y, x = kd.default_session().zeros(1 << 20, np.float32), kd.default_session().zeros(1 << 20, np.float32)
    suggested = add_staged.suggest_block(y, x)
    assert 0 < suggested.block <= 1024 and suggested.min_grid > 0

    def warps(block: int) -> int:
        occ = add_staged.occupancy(y, x, block=block)
        assert occ.driver_blocks_per_sm is not None
        return occ.driver_blocks_per_sm * -(-block // 32)

    assert warps(suggested.block) == max(warps(b) for b in range(32, 1025, 32))


def test_resources_are_what_ptxas_reported() -> None:
    y, x = kd.default_session().zeros(1000, np.float32), kd.default_session().zeros(1000, np.float32)
    build = add_staged.inspect(y, x, PAD=768)  # a specialization no other test built: ptxas's report is fresh
    assert build.registers is not None and build.shared_bytes == 768 * 4
    found = add_staged.resources(y, x, PAD=768)
    assert (found.registers, found.shared_bytes) == (build.registers, build.shared_bytes)
    assert found.binary_version == int(build.arch.removeprefix("sm_")) and found.ptx_version > 0
    assert found.max_threads_per_block <= 1024 and build.resources() == found


@pytest.mark.parametrize("index", range(len(tune_bench.MATMUL_CONFIGS)))
def test_the_bench_matmul_matches_numpy_in_every_config(index: int) -> None:
    s = kd.default_session()
    rng = np.random.default_rng(index)
    a, b = rng.standard_normal((77, 100)).astype(np.float32), rng.standard_normal((100, 45)).astype(np.float32)
    tuned = tune_bench.tuned_matmul()
    out = s.empty((77, 45), np.float32)
    tuned.variant(tuned.configs[index])(out, s.to_device(a), s.to_device(b))
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_the_bench_row_sums_match_numpy_in_every_config() -> None:
    s = kd.default_session()
    x = np.random.default_rng(7).standard_normal((33, 1001)).astype(np.float32)
    tuned = tune_bench.tuned_row_sum()
    dx, out = s.to_device(x), s.empty(33, np.float32)
    for config in tuned.configs:
        out.fill(np.nan)
        tuned.variant(config)(out, dx)
        np.testing.assert_allclose(out.to_host(), x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_a_tuned_call_runs_the_winner_and_gets_numpys_answer() -> None:
    s = kd.default_session()
    x = np.random.default_rng(8).random((300, 3000), dtype=np.float32)
    out = s.empty(300, np.float32)
    tuned: Any = tune_bench.tuned_row_sum(rep_ms=2.0)
    tuned(out, s.to_device(x))
    np.testing.assert_allclose(out.to_host(), x.astype(np.float64).sum(axis=1), rtol=1e-5)
