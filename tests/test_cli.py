"""The ``kerneldsl`` command, run in-process against an isolated cache; no GPU needed."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from kerneldsl.cli import main
from kerneldsl.errors import DriverNotFoundError
from kerneldsl.runtime import driver

KERNELS = textwrap.dedent(
    """
    import kerneldsl as kd

    @kd.kernel(grid=kd.cdiv("n", 256), block=256, precompile=[{"T": "float32"}, {"T": "float64"}])
    def scale(y: kd.InOut["T", "n"], alpha: kd.Scalar["T"]):
        return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {alpha};"

    @kd.kernel(grid=kd.cdiv("n", 256), block=256)
    def fill(y: kd.Out["float32", "n"]):
        return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = 1.0f;"

    @kd.kernel(grid=kd.cdiv("n", 256), block=256)
    def copy(y: kd.Out["T", "n"], x: kd.In["T", "n"]):
        return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {x}[i];"
    """
)


@pytest.fixture(autouse=True)
def isolated(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets conftest's private cache; ``compile`` may add the target's directory to sys.path."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> int:
        raise DriverNotFoundError("libcuda.so.1 not found")

    monkeypatch.setattr(driver, "device_count", missing)


@pytest.fixture
def kernels_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_kernels.py"
    path.write_text(KERNELS)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_without_a_driver_says_so_plainly(capsys, no_driver, isolated_cache):
    code, out, _ = run(capsys, "info")
    assert code == 0
    assert "no CUDA driver found: kernels can be compiled (set KERNELDSL_ARCH or pass --arch) but not launched" in out
    assert "NVRTC" in out and "sm_90" in out
    assert f"{isolated_cache}: 0 entries" in out


def test_info_lists_each_device_with_its_target_arch(capsys, monkeypatch):
    monkeypatch.setattr(driver, "device_count", lambda: 1)
    monkeypatch.setattr(driver, "driver_version", lambda: (13, 0))
    monkeypatch.setattr(driver, "device_name", lambda ordinal: "NVIDIA H200")
    monkeypatch.setattr(driver, "compute_capability", lambda ordinal: (9, 0))
    code, out, _ = run(capsys, "info")
    assert code == 0
    assert "CUDA 13.0, 1 device(s)" in out
    assert "NVIDIA H200, compute capability 9.0, compiles for sm_90" in out


def test_info_json_parses(capsys, no_driver, isolated_cache):
    code, out, _ = run(capsys, "info", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["driver"]["available"] is False and "no CUDA driver" in info["driver"]["problem"]
    assert "sm_90" in info["supported_archs"]
    assert info["cache"]["directory"] == str(isolated_cache)
    assert info["cache"]["in_memory"] is False and info["cache"]["entries"] == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_info_says_when_the_cache_fell_back_to_memory(capsys, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    code, out, _ = run(capsys, "info", "--json")
    assert code == 0
    assert json.loads(out)["cache"] == {
        "configured": str(tmp_path / "a-file" / "cache"),
        "directory": None,
        "in_memory": True,
        "entries": 0,
        "bytes": 0,
    }


def test_compile_list_and_clear(capsys, kernels_file):
    code, out, _ = run(capsys, "compile", str(kernels_file), "--arch", "sm_80,sm_90")
    assert code == 0
    lines = out.splitlines()
    built = [line for line in lines if " nvrtc " in line]
    assert len(built) == 6  # scale x {float32, float64} x 2 archs, fill x 2 archs
    assert any(line.split()[:3] == ["scale", "T=float64", "sm_80"] for line in built)
    assert all("regs" in line for line in built)
    assert "copy: skipped: dtype variable(s) T but no precompile=[{...}] bindings declared" in lines

    code, out, _ = run(capsys, "compile", str(kernels_file), "--arch", "sm_90")
    assert code == 0 and out.count(" disk ") == 3 and " nvrtc " not in out

    code, out, _ = run(capsys, "cache", "list")
    assert code == 0
    rows = out.splitlines()[1:]
    assert len(rows) == 6
    assert sum(row.split()[:3] == ["scale", "sm_90", "cubin"] for row in rows) == 2
    assert any("double* y" in row for row in rows)

    code, out, _ = run(capsys, "cache", "list", "--json")
    assert {(e["kernel"], e["arch"]) for e in json.loads(out)} == {
        (k, a) for k in ("scale", "fill") for a in ("sm_80", "sm_90")
    }

    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and ": 6 entries," in out

    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and "removed 6 entries" in out
    code, out, _ = run(capsys, "cache", "list")
    assert "the cache is empty" in out


def test_compile_a_module_by_dotted_name_to_ptx(capsys, tmp_path, monkeypatch):
    (tmp_path / "dotted_kernels.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = run(capsys, "compile", "dotted_kernels", "--arch", "sm_90", "--output", "ptx")
    assert code == 0
    assert sum(" ptx " in line and " nvrtc " in line for line in out.splitlines()) == 3


@pytest.mark.parametrize("arch", ["sm_81", "banana"])
def test_invalid_arch_exits_1_with_a_clear_message(capsys, kernels_file, arch):
    code, out, err = run(capsys, "compile", str(kernels_file), "--arch", f"sm_90,{arch}")
    assert code == 1 and out == ""
    assert err.startswith("kerneldsl: error: ") and repr(arch) in err
    assert "Traceback" not in err


def test_missing_arch_without_a_device_says_how_to_give_one(capsys, kernels_file, no_driver, monkeypatch):
    monkeypatch.delenv("KERNELDSL_ARCH", raising=False)
    code, _, err = run(capsys, "compile", str(kernels_file))
    assert code == 1 and "--arch" in err and "KERNELDSL_ARCH" in err


@pytest.mark.parametrize("target", ["no_such_module_here", "missing_file.py"])
def test_missing_target_exits_1(capsys, target):
    code, _, err = run(capsys, "compile", target, "--arch", "sm_90")
    assert code == 1 and err.startswith("kerneldsl: error: ") and target in err


@pytest.mark.parametrize("argv", [[], ["compile"], ["cache"], ["bench"], ["bench", "compile", "--runs", "0"]])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2


def test_bench_compile_prints_the_three_figures(capsys):
    code, out, _ = run(capsys, "bench", "compile", "--runs", "1", "--disk-runs", "1", "--iterations", "500")
    assert code == 0
    for label in ("cold compile", "disk-cache hit, fresh process", "in-process hit: get_build"):
        assert label in out

    code, out, _ = run(capsys, "bench", "compile", "--runs", "1", "--disk-runs", "1", "--iterations", "500", "--json")
    result = json.loads(out)
    assert result["cold_compile_s"] > result["disk_hit_later_s"] > result["get_build_ns"] * 1e-9
