"""The shape of the package: one name per module, one door to the driver, one C contract."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import kerneldsl
from kerneldsl import fastpath

PACKAGE = Path(kerneldsl.__file__).parent


def _modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(kerneldsl.__path__, "kerneldsl.")]


@pytest.mark.parametrize("name", _modules())
def test_importing_a_module_by_name_gives_that_module(name: str) -> None:
    module = importlib.import_module(name)
    parent, _, leaf = name.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is module


def _session_private_names() -> set[str]:
    """Every ``self._x`` attribute and ``_x`` method the Session class defines."""
    tree = ast.parse((PACKAGE / "runtime" / "session.py").read_text())
    (session,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session"]
    names = {n.name for n in session.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")}
    for node in ast.walk(session):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                names.add(node.attr)
    return names - {"__init__", "__enter__", "__exit__", "__repr__"}


def _library_files() -> list[Path]:
    """Library modules outside runtime/; bench/ measures raw driver calls as baselines on purpose."""
    return [
        p
        for p in PACKAGE.rglob("*.py")
        if p.parent.name not in ("runtime", "bench") and p.parent.parent.name != "runtime"
    ]


def _driver_touches(source: str, label: str, private: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{label}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module and "bindings" in node.module:
            if any(a.name == "driver" for a in node.names) or node.module.endswith(".driver"):
                found.append(f"{where} imports the CUDA driver bindings")
        elif isinstance(node, ast.Import) and any(a.name.startswith("cuda.bindings.driver") for a in node.names):
            found.append(f"{where} imports the CUDA driver bindings")
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr == "_d" or (owner == "driver" and node.attr in ("api", "ensure_init", "check")):
                found.append(f"{where} calls the driver directly ({node.attr})")
            elif node.attr in private and owner != "self":
                found.append(f"{where} reads Session.{node.attr}")
    return found


def test_only_the_runtime_touches_the_driver_or_private_session_state() -> None:
    private = _session_private_names()
    assert {"_captures", "_deferred", "_stream_cu", "_lock"} <= private  # the scan sees what it must
    touches = [
        t
        for path in _library_files()
        for t in _driver_touches(path.read_text(), str(path.relative_to(PACKAGE)), private)
    ]
    assert touches == []


def test_the_driver_door_check_catches_private_reads_and_driver_calls() -> None:
    offender = "from cuda.bindings import driver\ndef f(session):\n    return session._captures, session._d.cuInit(0)\n"
    assert len(_driver_touches(offender, "offender.py", _session_private_names())) == 3


def test_the_c_module_agrees_with_the_launch_tables() -> None:
    compiled = pytest.importorskip("kerneldsl._fastlaunch")
    assert (compiled.OPCODES, compiled.SLOT_KINDS) == (fastpath.OPCODES, fastpath.SLOT_KINDS)
