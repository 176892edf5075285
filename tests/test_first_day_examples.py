"""The examples run as a newcomer runs them (``python examples/X.py``): on the first GPU, else on
the CPU device, asking kerneldsl's public API whether there is one; their output is a summary."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kerneldsl as kd

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

needs_a_device = pytest.mark.skipif(
    not (kd.is_available("cuda") or kd.is_available("cpu")), reason="neither a GPU nor the CPU device here"
)


def run_example(path: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELDSL_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, str(path), *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    found |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return found


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_asks_the_public_api_not_the_runtime_whether_there_is_a_gpu(path: Path) -> None:
    assert not {m for m in imported_modules(path) if m.startswith("kerneldsl.runtime")}


@needs_a_device
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_runs_on_the_first_device(path: Path, tmp_path: Path) -> None:
    if path.name == "gemm_pipeline.py" and not kd.blas.available():
        pytest.skip("the blas extra is not installed (the example says so and stops)")
    done = run_example(path, cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "matches numpy" in done.stdout or "residual" in done.stdout


@needs_a_device
def test_the_fused_pipeline_summarises_its_kernel_and_shows_the_source_on_request(tmp_path: Path) -> None:
    path = ROOT / "examples" / "fused_pipeline.py"
    quiet = run_example(path, cache=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert len(quiet.stdout.splitlines()) <= 3 and "__global__" not in quiet.stdout
    shown = run_example(path, "--source", cache=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert 'extern "C" __global__ void kd_chain(' in shown.stdout
