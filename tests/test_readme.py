"""The README's Python blocks run as written, in order, in one namespace; statements marked
``# needs a GPU`` (on their first line) run only where a CUDA device is. Together, as one module,
they type-check under mypy --strict and pyright (GPU statements included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from checkers import mypy, pyright

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


@pytest.fixture(scope="module")
def readme_module(tmp_path_factory: Any) -> Path:
    path: Path = tmp_path_factory.mktemp("readme") / "readme_blocks.py"
    path.write_text("\n".join(_blocks()))
    return path


def test_the_readme_python_blocks_pass_mypy_strict(readme_module: Path) -> None:
    # One namespace, as they run: a later block may rebind a name (x: numpy, then a DeviceArray),
    # and dask's Client, called in the remote block, is untyped. kerneldsl itself is checked as a
    # user's mypy sees an installed package: its own errors are the package check's business.
    flags = ("--allow-redefinition", "--untyped-calls-exclude=distributed", "--follow-imports=silent")
    errors = mypy([readme_module], readme_module.parent / "cache", *flags)
    assert {name: dict(lines) for name, lines in errors.items()} == {}


def test_the_readme_python_blocks_pass_pyright(readme_module: Path) -> None:
    assert {name: dict(lines) for name, lines in pyright([readme_module]).items()} == {}


def test_the_readme_layout_names_every_folder_of_the_package() -> None:
    """The README's layout map matches the tree: every package folder is on it, and it names none
    that is gone."""
    text = README.read_text()
    section = text[text.index("## Layout") :]
    section = section[: section.index("\n## ")]
    named = set(re.findall(r"^kerneldsl/(\w+)/", section, flags=re.M))
    package = README.parent / "kerneldsl"
    folders = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert named == folders
