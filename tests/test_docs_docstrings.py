"""Every public name explains itself: ``kd.__all__``, the public submodules' ``__all__`` and the
exceptions of ``kerneldsl.errors`` each have a docstring of their own, and a callable's docstring
names every parameter it takes (``help(kd.kernel)`` explains ``grid``, ``block``, ``shared``,
``options`` and ``precompile``). The API reference is generated from these docstrings, and every
example in them (a ``.. code-block:: python``) runs alone, on the CPU device where there is no GPU."""

from __future__ import annotations

import importlib
import inspect
import pydoc
import re
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

import kerneldsl as kd
from kerneldsl.runtime import driver

sys.path.insert(0, str(Path(__file__).parent.parent / "docs" / "_ext"))
kd_public = importlib.import_module("kd_public")  # the reference's own list of public modules and names
sys.path.pop(0)


def _public() -> list[tuple[str, Any]]:
    names = []
    for module_name in kd_public.PUBLIC_MODULES:
        module = kd_public.public_module(module_name)
        for name in kd_public.public_names(module):
            value = getattr(module, name)
            if isinstance(value, types.ModuleType) or not (callable(value) or isinstance(value, type)):
                continue  # modules have their own entry; data (dtypes, constants) is described on its page
            if isinstance(value, type) and value.__module__ == "numpy":
                continue  # kd.float32 and the other dtypes are numpy's own types
            names.append((f"{module_name}.{name}", value))
    return names


def _own_doc(value: Any) -> str | None:
    """The object's docstring, not one it inherits from its class (``kd.ops.sum`` is an instance)."""
    doc = value.__doc__
    if not isinstance(value, type) and not inspect.isroutine(value) and doc == type(value).__doc__:
        return None
    return inspect.cleandoc(doc) if doc else None


def _parameters(value: Any) -> list[str]:
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


@pytest.mark.parametrize(("name", "value"), _public(), ids=[name for name, _ in _public()])
def test_a_public_name_has_a_docstring_naming_its_parameters(name: str, value: Any) -> None:
    doc = _own_doc(value)
    assert doc, f"{name} has no docstring of its own"
    if not isinstance(value, type):
        missing = [p for p in _parameters(value) if p not in doc]
        assert missing == [], f"{name}'s docstring does not explain {missing}"


_MEMBERS = [(cls, m.strip()) for cls, members in kd_public.MEMBERS.items() for m in members.split(",")]


@pytest.mark.parametrize(("cls", "member"), _MEMBERS, ids=[f"{c}.{m}" for c, m in _MEMBERS])
def test_a_documented_member_has_a_docstring(cls: str, member: str) -> None:
    owner = getattr(kd, cls.rpartition(".")[2])
    assert inspect.getdoc(getattr(owner, member)), f"{cls}.{member} has no docstring"


def test_help_on_kd_kernel_explains_the_launch_parameters() -> None:
    text = pydoc.render_doc(kd.kernel, renderer=pydoc.plaintext)
    for parameter in ("grid", "block", "shared", "options", "precompile", "Examples"):
        assert parameter in text


@pytest.mark.parametrize("op", ["sum", "add", "cumsum", "where"])
def test_help_on_an_op_shows_the_op_not_its_class(op: str) -> None:
    text = pydoc.render_doc(getattr(kd.ops, op), renderer=pydoc.plaintext)
    assert "Parameters" in text and f"kd.ops.{op}(" in text
    assert "__init__" not in text and "Methods defined here" not in text


def test_an_op_signature_is_its_calls() -> None:
    assert str(inspect.signature(kd.ops.add)) == "(a, b, /, *, out=None, stream=None)"
    assert str(inspect.signature(kd.ops.sum)) == "(x, /, *, axis=None, out=None, keepdims=False)"


_EXAMPLE = re.compile(r"^\.\. code-block:: python\n\n(.*?)(?=^\S|\Z)", flags=re.S | re.M)


def _docstring_examples() -> list[Any]:
    """Each distinct example of the public names' docstrings (an alias shares its op's)."""
    examples: dict[str, str] = {}
    for name, value in _public():
        members = kd_public.MEMBERS.get(name, "").replace(" ", "").split(",") if isinstance(value, type) else []
        for documented in [value, *(getattr(value, m) for m in members if m)]:
            for block in _EXAMPLE.findall((inspect.getdoc(documented) or "") + "\n"):
                examples.setdefault(textwrap.dedent(block), name)
    return [pytest.param(code, id=f"{name}-{i}") for i, (code, name) in enumerate(examples.items())]


def test_the_docstrings_have_examples() -> None:
    assert len(_docstring_examples()) >= 50


@pytest.mark.parametrize("code", _docstring_examples())
def test_a_docstring_example_runs_alone(
    code: str, isolated_cache_module: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not (driver.driver_available() and driver.device_count() > 0):
        monkeypatch.setenv("KERNELDSL_DEVICE", "cpu")
    monkeypatch.setenv("KERNELDSL_ARCH", "sm_90")
    exec(compile(code, "<docstring example>", "exec"), {"__name__": "docstring_example"})
