"""The templates' code cache: a template is parsed and compiled once, its code kept beside it
(``templates/__pycache__``) and used by later processes only while it was compiled from the
template's current source by this Jinja release; it renders exactly what the source renders."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pytest

import kerneldsl as kd
import kerneldsl.jit.codegen as codegen
from kerneldsl.jit.template_cache import TemplateCodeCache, compile_all
from kerneldsl.jit.template_options import COMPILED_DIR, make_environment


@kd.kernel(grid=1, block=1)
def one(y: kd.Out[kd.float32, 1]) -> str:
    return "y[0] = 1.0f;"


def rendered() -> tuple[str, str]:
    """A first render in a new process: the kernel's CUDA source and host adapter."""
    codegen._environment.cache_clear()
    generated = codegen.generate(one.specialize(np.zeros(1, np.float32), arch="sm_90"), one.body)
    return generated.cuda_source, generated.adapter_source


@pytest.fixture
def templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Code generation pointed at a copy of the templates, with no code cache yet."""
    copy = tmp_path / "templates"
    shutil.copytree(codegen.templates_dir(), copy, ignore=shutil.ignore_patterns(COMPILED_DIR))
    monkeypatch.setattr(codegen, "templates_dir", lambda: copy)
    yield copy
    monkeypatch.undo()
    codegen._environment.cache_clear()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The names of the templates Jinja parses and compiles from source, in order."""
    names: list[str | None] = []
    real_compile = jinja2.Environment.compile

    def compile_recorded(environment: jinja2.Environment, source: str, name: str | None = None, *args: Any) -> Any:
        names.append(name)
        return real_compile(environment, source, name, *args)

    monkeypatch.setattr(jinja2.Environment, "compile", compile_recorded)
    return names


def test_a_first_render_keeps_the_code_of_each_template_it_compiles(templates: Path, parsed: list[str]) -> None:
    rendered()
    assert parsed and len(set(parsed)) == len(parsed)
    assert len(list((templates / COMPILED_DIR).glob("*.jinja"))) == len(parsed)


def test_a_later_render_uses_the_kept_code_and_parses_no_template(templates: Path, parsed: list[str]) -> None:
    first = rendered()
    parsed.clear()
    assert rendered() == first
    assert parsed == []


@pytest.mark.parametrize("where", ["file", "directory"])
def test_code_another_user_could_have_written_is_never_loaded(templates: Path, parsed: list[str], where: str) -> None:
    first = rendered()
    kept = templates / COMPILED_DIR
    for path in kept.glob("*.jinja") if where == "file" else [kept]:
        path.chmod(path.stat().st_mode | 0o002)
    parsed.clear()
    assert rendered() == first
    assert parsed  # compiled from source again


def test_a_fifo_in_place_of_kept_code_is_compiled_around_never_waited_on(templates: Path, parsed: list[str]) -> None:
    first = rendered()
    fifos = list((templates / COMPILED_DIR).glob("*.jinja"))
    for path in fifos:
        path.unlink()
        os.mkfifo(path, 0o600)
    parsed.clear()
    renders: list[tuple[str, str]] = []
    worker = threading.Thread(target=lambda: renders.append(rendered()), daemon=True)
    worker.start()
    worker.join(timeout=60)
    waited = worker.is_alive()
    for path in fifos if waited else []:  # let a render blocked on a FIFO's open finish
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    worker.join(timeout=60)
    assert not waited, "the render waited on a FIFO"
    assert renders == [first]
    assert parsed  # compiled from source


def test_an_edited_template_is_compiled_from_its_source_never_from_stale_code(
    templates: Path, parsed: list[str]
) -> None:
    rendered()
    kernel = templates / "kernel.cu.j2"
    kernel.write_text(kernel.read_text().replace("{{ entry }}", "{{ entry }}_edited", 1))
    parsed.clear()
    cuda_source, _ = rendered()
    assert parsed == ["kernel.cu.j2"]
    assert "kd_one_edited" in cuda_source


def test_code_kept_by_another_jinja_release_is_not_used(
    templates: Path, parsed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = rendered()
    expected = list(parsed)
    parsed.clear()
    monkeypatch.setattr(jinja2, "__version__", "0.0.0")
    assert rendered() == first
    assert parsed == expected


def test_templates_render_from_source_where_their_code_cannot_be_kept(templates: Path, parsed: list[str]) -> None:
    first = rendered()
    shutil.rmtree(templates / COMPILED_DIR)
    (templates / COMPILED_DIR).write_text("not a directory")
    expected = list(parsed)
    parsed.clear()
    assert rendered() == first
    assert parsed == expected


def test_templates_compiled_by_the_package_build_render_what_their_sources_render(
    tmp_path: Path, parsed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup.py's step: ``compile_all`` into the built package's code cache."""
    loader = jinja2.FileSystemLoader(str(codegen.templates_dir()))
    cache = TemplateCodeCache(str(tmp_path / "built"))
    compiled = compile_all(make_environment(jinja2, loader, bytecode_cache=cache))
    templates = codegen.templates_dir()
    assert sorted(compiled) == sorted(p.relative_to(templates).as_posix() for p in templates.rglob("*.j2"))
    monkeypatch.setattr(codegen, "compiled_templates_dir", lambda: tmp_path / "empty")
    from_sources = rendered()
    monkeypatch.setattr(codegen, "compiled_templates_dir", lambda: tmp_path / "built")
    parsed.clear()
    try:
        assert rendered() == from_sources
        assert parsed == []
    finally:
        codegen._environment.cache_clear()


def test_a_truncated_code_file_is_compiled_again(templates: Path, parsed: list[str]) -> None:
    first = rendered()
    for kept in (templates / COMPILED_DIR).glob("*.jinja"):
        kept.write_bytes(kept.read_bytes()[:20])  # past the magic, into the checksum
    expected = list(parsed)
    parsed.clear()
    assert rendered() == first
    assert parsed == expected


def test_code_compiled_under_other_environment_settings_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "t.j2").write_text("{% if x %}\n  yes\n{% endif %}\n")
    loader = jinja2.FileSystemLoader(str(tmp_path))
    cache = TemplateCodeCache(str(tmp_path / COMPILED_DIR))
    trimmed = make_environment(jinja2, loader, bytecode_cache=cache).get_template("t.j2").render(x=True)
    untrimmed = jinja2.Environment(loader=loader, bytecode_cache=cache).get_template("t.j2").render(x=True)
    assert untrimmed == jinja2.Environment(loader=loader).get_template("t.j2").render(x=True) != trimmed
