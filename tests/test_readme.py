"""The README's Python blocks run as written, in order, in one namespace; statements marked
``# needs a GPU`` (on their first line) run only where a CUDA device is."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from kerneldsl.runtime import driver

README = Path(__file__).parent.parent / "README.md"
GPU_MARK = "# needs a GPU"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M)


def _has_gpu() -> bool:
    return driver.driver_available() and driver.device_count() > 0


def _statements(block: str, gpu: bool) -> list[ast.stmt]:
    lines = block.splitlines()
    return [s for s in ast.parse(block).body if gpu or GPU_MARK not in lines[s.lineno - 1]]


def test_the_readme_has_python_blocks_to_run() -> None:
    assert len(_blocks()) >= 3


def test_the_readme_python_blocks_run(isolated_cache: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("KERNELDSL_ARCH", "sm_90")
    namespace: dict[str, Any] = {"__name__": "readme"}
    gpu = _has_gpu()
    for block in _blocks():
        module = ast.Module(body=_statements(block, gpu), type_ignores=[])
        exec(compile(module, str(README), "exec"), namespace)
    assert "saxpy" in namespace and "fused" in namespace
