"""What a fused function's first call compiles: NVRTC's minimal declarations (no runtime API,
textures or device launches, which generated code never uses) and no header, in every dtype (the
prelude spells the 16-bit types itself), so NVRTC parses as little as it can."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kerneldsl.bench.fuse_bench import layer_norm, softmax
from kerneldsl.jit.compiler import check_options

NO_HEADERS = {"system": None, "user": {}}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_a_fused_kernel_compiles_with_minimal_declarations_and_no_header(isolated_cache: Path, dtype: Any) -> None:
    build = softmax.inspect(np.zeros((64, 1024), dtype), arch="sm_90")
    assert "--minimal" in build.options
    assert build.key_material["headers"] == NO_HEADERS


@pytest.mark.parametrize(
    ("shape", "strategy", "passes"),
    [
        ((64, 32), "row-per-warp", 1),
        ((4096, 4096), "row-per-block", 1),
        ((8, 16384), "split", 1),
        ((2, 1 << 20), "split", 3),
    ],
)
def test_every_fused_strategy_compiles_with_minimal_declarations(
    isolated_cache: Path, shape: tuple[int, int], strategy: str, passes: int
) -> None:
    x, w = np.zeros(shape, np.float32), np.zeros(shape[-1], np.float32)
    build = layer_norm.inspect(x, w, w, arch="sm_90")
    assert (build.decisions.strategy, build.decisions.passes) == (strategy, passes)
    assert "--minimal" in build.options


def test_minimal_is_an_option_a_kernel_may_ask_for() -> None:
    assert check_options(["--minimal", "-minimal"]) == ("--minimal", "-minimal")


def test_the_first_call_bench_counts_the_cold_calls_that_found_the_templates_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    from kerneldsl.bench import fuse_first_call

    untimed = [0.90, 1, 1, 0]  # fills the shared bytecode prefix; not a figure
    cold_warm = [[0.15, 1, 1, 0], [0.01, 0, 0, 1], [0.14, 1, 1, 1], [0.01, 0, 0, 1], [0.16, 1, 1, 1], [0.02, 0, 0, 1]]
    results = iter([untimed, *cold_warm])
    prefixes = []

    def run(command: list[str], env: dict[str, str], **k: object) -> subprocess.CompletedProcess[str]:
        prefixes.append(env["PYTHONPYCACHEPREFIX"])
        Path(command[-1]).write_text(json.dumps(next(results)))  # what the process writes; its print is not read
        return subprocess.CompletedProcess(command, 0, stdout="anything\x00at all", stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    figures = fuse_first_call.bench_first_call(argparse.Namespace())
    assert len(prefixes) == 7 and len(set(prefixes)) == 1  # every process shares the untimed one's bytecode
    assert figures == {
        "first call, empty disk cache (s, target < 0.2)": 0.15,
        "first call, disk hit (s, target < 0.2)": 0.01,
        "disk-hit calls that imported jinja2": 0.0,
        "disk-hit calls that imported NVRTC": 0.0,
        "empty-cache calls with the templates' compiled code (of 3)": 2.0,
    }


def test_the_first_call_bench_writes_bytecode_even_where_the_environment_says_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    from kerneldsl.bench import fuse_first_call

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    environments = []

    def run(command: list[str], env: dict[str, str], **k: object) -> subprocess.CompletedProcess[str]:
        environments.append(env)
        Path(command[-1]).write_text(json.dumps([0.15, 1, 1, 1]))
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    fuse_first_call.bench_first_call(argparse.Namespace())
    assert environments and not any("PYTHONDONTWRITEBYTECODE" in env for env in environments)
