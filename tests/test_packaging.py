"""What a plain install gives a new user: a wheel that builds in isolation, and a CLI and package
that work without any extra (``.ci/run`` does the same with real venvs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Run first in a subprocess: these modules cannot be imported, as on a machine without the extra.
BLOCK_IMPORTS = textwrap.dedent(
    """
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        def __init__(self, *names):
            self.names = names

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent(NAMES))
    """
)


def run_without(names: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    script = BLOCK_IMPORTS.replace("NAMES", ", ".join(map(repr, names))) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv", [["info"], ["cache", "info"], ["cache", "list"], ["bench", "--help"]])
def test_cli_commands_run_without_dask(argv: list[str], tmp_path: Path) -> None:
    result = run_without(
        ("distributed", "dask"),
        f"""
        import os, sys
        os.environ["KERNELDSL_CACHE_DIR"] = {str(tmp_path / "cache")!r}
        from kerneldsl.cli import main
        try:
            code = main({argv!r})
        except SystemExit as exc:  # --help
            code = exc.code
        sys.exit(code)
        """,
    )
    assert result.returncode == 0, result.stderr


def test_the_cli_imports_no_benchmark_and_no_baseline() -> None:
    """Dask alone was ~190 ms of a ~325 ms start; a benchmark's module is imported to run it."""
    code = (
        "import sys, kerneldsl.cli as c; c.build_parser(); "
        "print(sorted(m for m in sys.modules if m.endswith('_bench') or m.split('.')[0] in "
        "('distributed', 'dask', 'ml_dtypes', 'cupy', 'torch', 'nvmath', 'matplotlib')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr


def test_kd_distributed_without_the_extra_names_the_extra() -> None:
    result = run_without(
        ("distributed",),
        """
        import kerneldsl as kd
        from kerneldsl.errors import DistributedNotAvailableError
        try:
            kd.distributed
        except DistributedNotAvailableError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'kerneldsl[distributed]'" in result.stdout


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The files of a wheel built as pip builds by default: in its own environment with only the
    build requirements, so setup.py cannot import kerneldsl (its dependencies are not there)."""
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = out.glob("kerneldsl-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def _python_folders(paths: list[PurePosixPath]) -> set[PurePosixPath]:
    return {path.parent for path in paths if path.suffix == ".py" and "__pycache__" not in path.parts}


def test_an_isolated_build_ships_every_python_folder_of_the_package(wheel_names: list[str]) -> None:
    """A folder under kerneldsl/ that holds Python is a subpackage the wheel must carry (a hand-written
    package list once left kerneldsl.array_api out of every non-editable install)."""
    on_disk = [PurePosixPath(path.relative_to(ROOT).as_posix()) for path in (ROOT / "kerneldsl").rglob("*.py")]
    shipped = [PurePosixPath(name) for name in wheel_names if name.startswith("kerneldsl/")]
    assert PurePosixPath("kerneldsl/array_api") in _python_folders(on_disk)
    assert _python_folders(shipped) == _python_folders(on_disk)


def test_an_isolated_build_ships_every_template_file(wheel_names: list[str]) -> None:
    """The templates folder (Jinja templates and the CPU device's host sources under host/) ships
    as kerneldsl/templates."""
    templates = ROOT / "templates"
    on_disk = {
        f"kerneldsl/templates/{path.relative_to(templates).as_posix()}"
        for path in templates.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert any(name.endswith(".j2") for name in on_disk)
    assert on_disk <= set(wheel_names)


def test_an_isolated_build_compiles_the_templates_into_the_wheel(wheel_names: list[str]) -> None:
    assert "kerneldsl/py.typed" in wheel_names
    assert any(n.startswith("kerneldsl/templates/__pycache__/") and n.endswith(".jinja") for n in wheel_names)
