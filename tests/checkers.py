"""Run mypy --strict and pyright over files as user code is checked, and collect their errors by
file and line (each tool run once over everything it is given, caches in a temporary folder)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

Errors = dict[str, dict[int, set[str]]]  # file name -> line -> error codes (mypy) / rules (pyright)

_MYPY_LINE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: .*?(?:\s+\[(?P<code>[a-z-]+)\])?$", re.M)


def require(tool: str) -> None:
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed")


def mypy(paths: list[Path], cache: Path, *flags: str) -> Errors:
    require("mypy")
    command = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(cache), *flags]
    done = subprocess.run([*command, *map(str, paths)], capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    errors: Errors = defaultdict(lambda: defaultdict(set))
    for m in _MYPY_LINE.finditer(done.stdout):
        errors[Path(m["file"]).name][int(m["line"])].add(m["code"] or "")
    return errors


def pyright(paths: list[Path]) -> Errors:
    require("pyright")
    command = [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable]
    done = subprocess.run([*command, *map(str, paths)], capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    errors: Errors = defaultdict(lambda: defaultdict(set))
    for d in json.loads(done.stdout)["generalDiagnostics"]:
        if d["severity"] == "error":
            errors[Path(d["file"]).name][d["range"]["start"]["line"] + 1].add(d.get("rule", ""))
    return errors
