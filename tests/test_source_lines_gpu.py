"""Source lines on a device: ``.ci/gpu_oob_write.py`` (a kernel storing one element past its
array) runs, and on a GPU NVIDIA's memcheck names the script's line, since kernels are built with
``-lineinfo`` and ``#line`` directives naming the user's file (``tests/test_source_lines.py`` has
the rest, which needs no device)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / ".ci" / "gpu_oob_write.py"


def store_line() -> int:
    """The script's out-of-bounds store, found in its text."""
    lines = [i for i, text in enumerate(SCRIPT.read_text().splitlines(), start=1) if "y[i] = 1.0f;" in text]
    assert len(lines) == 1, lines
    return lines[0]


def run_script(*prefix: str, cache: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))  # where the GPU machine has wheels
    env = {**os.environ, "PYTHONPATH": path, "KERNELDSL_CACHE_DIR": str(cache)}
    argv = [*prefix, sys.executable, str(SCRIPT)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False, cwd=ROOT)


def test_the_out_of_bounds_script_runs_and_names_its_store_line(tmp_path: Path) -> None:
    """A 4-byte overrun faults on neither device (the GPU's pool and the host allocator's slack
    hold it): the script finishes, naming the line a checker is to report."""
    done = run_script(cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert f"the out-of-bounds store is at {SCRIPT}:{store_line()}" in done.stdout


def test_memcheck_names_the_scripts_store_line(tmp_path: Path) -> None:
    from kerneldsl.runtime.driver import driver_available

    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None or not driver_available() or os.environ.get("KERNELDSL_DEVICE") == "cpu":
        pytest.skip("needs a GPU and NVIDIA's compute-sanitizer")
    done = run_script(sanitizer, "--tool", "memcheck", cache=tmp_path / "cache")
    report = done.stdout + done.stderr
    assert "Invalid __global__ write of size 4" in report, report
    assert f"gpu_oob_write.py:{store_line()}" in report, report
