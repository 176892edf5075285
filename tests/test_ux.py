"""Messages that point at the right place and say what to do (no GPU needed)."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import kerneldsl as kd
import kerneldsl.jit.build
from kerneldsl import cache, dtypes
from kerneldsl.errors import DeclarationError, ProxyAttributeError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_cache_fallback_warning_points_at_the_users_line(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(cache, "_default_cache", None)

    @kd.kernel(grid=1, block=1)
    def one(y: kd.Out["float32", "n"]) -> str:
        return f"{y}[0] = 1.0f;"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one.inspect(np.ones(2, np.float32), arch="sm_90")
    (warning,) = [w for w in caught if "cached in memory" in str(w.message)]
    assert warning.filename == __file__


def test_bfloat16_without_ml_dtypes_says_to_install_it(monkeypatch):
    """As on a machine without ml_dtypes: no bfloat16 row in the tables, numpy knows no such name."""
    dtypes.add_bfloat16()  # looked for once: later calls go by what was found
    monkeypatch.setattr(dtypes, "_ml_dtypes", None)
    row = dtypes.ELEMENT_TYPES.get("bfloat16")
    if row is not None:
        monkeypatch.delitem(dtypes.ELEMENT_TYPES, "bfloat16")
        monkeypatch.delitem(dtypes._BY_NUMPY, row.numpy)
    with pytest.raises(KeyError, match="pip install ml_dtypes"):
        dtypes.element_type("bfloat16")
    with pytest.raises(DeclarationError, match="pip install ml_dtypes"):

        @kd.kernel(grid=1, block=1)
        def half(y: kd.Out["bfloat16", "n"]) -> str:
            return ""


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_saxpy_example_says_registers_unknown_never_none(capsys, isolated_cache, monkeypatch):
    """ptxas's info log (and so the register count) is not always there."""
    monkeypatch.setattr(kerneldsl.jit.build.Build, "registers", property(lambda self: None))
    _example("saxpy").compile_specializations("sm_90")
    out = capsys.readouterr().out
    assert out.count("registers unknown") == 2 and "None" not in out


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scaled(y: kd.Out["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"], TILE: kd.Const[int] = 16) -> str:
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {a} * {x}[i];"


@pytest.fixture
def scaled_build(isolated_cache: Path) -> kerneldsl.jit.build.Build:
    return scaled.inspect(np.zeros(8, np.float32), np.zeros(8, np.float32), 1.0, TILE=32, arch="sm_90")


def test_a_build_prints_as_one_short_line_naming_its_specialization(scaled_build: kerneldsl.jit.build.Build) -> None:
    text = repr(scaled_build)
    assert len(text) < 200 and "\n" not in text
    assert "scaled[T=float32, TILE=32; 32-bit; sm_90]" in text and scaled_build.cache_key[:12] in text
    assert f"{scaled_build.registers} registers" in text


def test_a_builds_big_fields_stay_attributes_and_out_of_its_repr(scaled_build: kerneldsl.jit.build.Build) -> None:
    for obj in (scaled_build, scaled_build.compiled, scaled_build.generated, scaled_build.specialization):
        assert len(repr(obj)) < 200, type(obj).__name__
    assert scaled_build.cubin.startswith(b"\x7fELF") and "kd_scaled" in scaled_build.cuda_source


def test_a_build_shows_as_a_table_in_a_notebook(scaled_build: kerneldsl.jit.build.Build) -> None:
    table = scaled_build._repr_markdown_()
    assert "| constants | TILE=32 |" in table and "| index width | 32-bit |" in table and "| arch | sm_90 |" in table


@kd.kernel(grid=1, block=1)
def misspelt(y: kd.Out[kd.float32, "n"], a: kd.Scalar[kd.float32]) -> str:
    return f"{y}[0] = {y.shpe[0]};"


def test_a_misspelt_proxy_attribute_names_kernel_parameter_and_attributes(isolated_cache: Path) -> None:
    with pytest.raises(ProxyAttributeError) as info:
        misspelt.inspect(np.zeros(4, np.float32), 1.0, arch="sm_90")
    error = info.value
    assert isinstance(error, AttributeError)
    assert (error.kernel, error.param, error.attribute) == ("misspelt", "y", "shpe")
    assert "shape" in error.valid and "kernel" not in error.valid
