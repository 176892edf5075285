"""Kernel calls and ``kd.ops`` results are typed from the declaration: mypy --strict and pyright
accept the calls in ``tests/typecheck/pass_*.py`` (their ``assert_type``s included) and reject
each line of ``tests/typecheck/fail_*.py`` marked ``# expect: <mypy error code>``, and no other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from checkers import Errors, mypy, pyright

CASES = Path(__file__).parent / "typecheck"
_EXPECT = re.compile(r"#\s*expect:\s*([a-z-]+)")


def _expected() -> dict[str, dict[int, str]]:
    found: dict[str, dict[int, str]] = {}
    for path in sorted(CASES.glob("*.py")):
        lines = path.read_text().splitlines()
        found[path.name] = {i: m[1] for i, text in enumerate(lines, 1) if (m := _EXPECT.search(text))}
    return found


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: Any) -> Errors:
    return mypy([CASES], tmp_path_factory.mktemp("mypy-cache"))


@pytest.fixture(scope="module")
def pyright_errors() -> Errors:
    return pyright([CASES])


def test_every_failing_case_marks_its_errors() -> None:
    expected = _expected()
    assert all(expected[name] for name in expected if name.startswith("fail_"))
    assert not any(expected[name] for name in expected if not name.startswith("fail_"))


def test_mypy_accepts_the_passing_cases(mypy_errors: Errors) -> None:
    assert {name: dict(lines) for name, lines in mypy_errors.items() if not name.startswith("fail_")} == {}


def test_pyright_accepts_the_passing_cases(pyright_errors: Errors) -> None:
    assert {name: dict(lines) for name, lines in pyright_errors.items() if not name.startswith("fail_")} == {}


def test_mypy_rejects_exactly_the_marked_lines_with_their_codes(mypy_errors: Errors) -> None:
    for name, lines in _expected().items():
        if name.startswith("fail_"):
            got = mypy_errors.get(name, {})
            assert sorted(got) == sorted(lines), name
            assert all(code in got[line] for line, code in lines.items()), (name, dict(got))


def test_pyright_rejects_exactly_the_marked_lines(pyright_errors: Errors) -> None:
    for name, lines in _expected().items():
        if name.startswith("fail_"):
            assert sorted(pyright_errors.get(name, {})) == sorted(lines), name
