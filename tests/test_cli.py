"""The ``kerneldsl`` command, run in-process against an isolated cache; no GPU needed."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from kerneldsl import bench
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
    assert "no CUDA driver found: kernels can be compiled (set KERNELDSL_ARCH or pass --arch)" in out
    assert "not launched on a GPU" in out
    assert "NVRTC" in out and "sm_90" in out
    assert f"{isolated_cache}: does not exist yet" in out
    assert not isolated_cache.exists()


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
    assert info["cache"]["configured"] == str(isolated_cache) and info["cache"]["exists"] is False
    assert info["cache"]["directory"] is None
    assert info["cache"]["in_memory"] is False and info["cache"]["entries"] == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_info_says_when_the_cache_fell_back_to_memory(capsys, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("KERNELDSL_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    code, out, _ = run(capsys, "info", "--json")
    assert code == 0
    assert json.loads(out)["cache"] == {
        "configured": str(tmp_path / "a-file" / "cache"),
        "exists": False,
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
    assert len(rows) == 12  # each build's image and its rendered text (output "source")
    assert sum(row.split()[:3] == ["scale", "sm_90", "cubin"] for row in rows) == 2
    assert sum(row.split()[:3] == ["scale", "sm_90", "source"] for row in rows) == 2
    assert any("double* y" in row for row in rows)

    code, out, _ = run(capsys, "cache", "list", "--json")
    assert {(e["kernel"], e["arch"]) for e in json.loads(out)} == {
        (k, a) for k in ("scale", "fill") for a in ("sm_80", "sm_90")
    }

    code, out, _ = run(capsys, "cache", "info", "--json")
    assert code == 0 and json.loads(out)["exists"] is True and json.loads(out)["entries"] == 12
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and ": 12 entries," in out

    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and "removed 12 entries" in out
    code, out, _ = run(capsys, "cache", "list")
    assert "the cache is empty" in out


TILED = textwrap.dedent(
    """
    import kerneldsl as kd

    @kd.kernel(grid=kd.cdiv("n", 128), block=128, precompile=[{"TILE": 128}, {"TILE": 256}])
    def tiled(y: kd.Out["float32", "n"], TILE: kd.Const[int] = 128):
        return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = (float)TILE;"
    """
)


def test_cache_list_tells_builds_apart_by_their_bindings(capsys, tmp_path):
    path = tmp_path / "tiled_kernels.py"
    path.write_text(TILED)
    assert run(capsys, "compile", str(path), "--arch", "sm_90")[0] == 0
    code, out, _ = run(capsys, "cache", "list", "--json")
    images = [e["bindings"] for e in json.loads(out) if e["output"] == "cubin"]
    assert sorted(b["constants"]["TILE"] for b in images) == ["128", "256"]
    assert {b["index_bits"] for b in images} == {32}
    code, out, _ = run(capsys, "cache", "list")
    assert sum("TILE=128 32-bit" in row for row in out.splitlines()) == 2  # the image and its text


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


@pytest.mark.parametrize("command", ["compile", "tune"])
def test_help_of_commands_taking_a_module_says_its_code_runs(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal's width
    assert exit_info.value.code == 0
    assert "MODULE_OR_FILE is imported, which runs its code as you" in text
    assert "pass only code you trust" in text and "current directory first" in text


def test_bench_compile_prints_the_three_figures(capsys):
    code, out, _ = run(capsys, "bench", "compile", "--runs", "1", "--disk-runs", "1", "--iterations", "500")
    assert code == 0
    for label in ("cold compile", "disk-cache hit, fresh process", "in-process hit: get_build"):
        assert label in out

    code, out, _ = run(capsys, "bench", "compile", "--runs", "1", "--disk-runs", "1", "--iterations", "500", "--json")
    result = json.loads(out)
    assert result["cold_compile_s"] > result["disk_hit_later_s"] > result["get_build_ns"] * 1e-9


# --- looking creates nothing -------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["cache", "info"], ["cache", "list"], ["cache", "clear"], ["info"]])
def test_looking_at_the_cache_does_not_create_its_directory(capsys, isolated_cache, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "does not exist yet" in out
    assert not isolated_cache.exists()


def test_cache_list_into_a_closed_pipe_exits_quietly(isolated_cache):
    """``kerneldsl cache list | head -2``: the reader goes away, no BrokenPipeError traceback."""
    child = subprocess.Popen(
        [sys.executable, "-m", "kerneldsl.cli", "cache", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, KERNELDSL_CACHE_DIR=str(isolated_cache)),
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the child writes: it imports kerneldsl first
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 1
    assert err == ""


# --- the arch from the environment -------------------------------------------------------------


def test_an_invalid_arch_from_the_environment_names_the_variable(capsys, kernels_file, no_driver, monkeypatch):
    monkeypatch.setenv("KERNELDSL_ARCH", "garbage")
    code, out, err = run(capsys, "compile", str(kernels_file))
    assert code == 1 and out == ""
    assert err.startswith("kerneldsl: error: KERNELDSL_ARCH='garbage': invalid arch 'garbage'")


# --- bench requirements and plots --------------------------------------------------------------


@pytest.fixture
def bench_lacks(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make this machine lack a GPU and/or some modules, whatever is really installed."""

    def lack(*modules: str, gpu: bool = False) -> None:
        monkeypatch.setattr(bench, "_installed", lambda module: module not in modules)
        monkeypatch.setattr(driver, "driver_available", lambda: not gpu)

    return lack


def test_bench_ops_without_cupy_and_torch_says_what_to_install_and_exits_2(capsys, bench_lacks):
    bench_lacks("cupy", "torch")
    code, out, err = run(capsys, "bench", "ops")
    assert code == 2 and out == ""
    assert err == (
        "kerneldsl: error: kerneldsl bench ops needs a GPU, CuPy and PyTorch; this machine lacks CuPy and "
        "PyTorch: pip install cupy-cuda13x torch\n"
    )


@pytest.mark.parametrize("name", ["runtime", "ops", "blas", "arrays"])
def test_gpu_benches_without_a_gpu_say_so_and_exit_2(capsys, bench_lacks, name):
    bench_lacks(gpu=True)
    code, _, err = run(capsys, "bench", name)
    assert code == 2
    assert err.startswith(f"kerneldsl: error: kerneldsl bench {name} needs a GPU") and "lacks a GPU\n" in err
    assert "Traceback" not in err


def test_bench_runtime_without_anything_lists_all_it_lacks(capsys, bench_lacks):
    bench_lacks("cupy", gpu=True)
    _, _, err = run(capsys, "bench", "runtime")
    assert "this machine lacks a GPU and CuPy: pip install cupy-cuda13x" in err


FAST_COMPILE_BENCH = ("bench", "compile", "--runs", "1", "--disk-runs", "1", "--iterations", "500")


def test_bench_compile_plot_draws_each_section(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "compile.svg"
    code, out, err = run(capsys, *FAST_COMPILE_BENCH, "--plot", str(figure))
    assert code == 0 and "cold compile" in out and f"plotted to {figure}" in err
    svg = figure.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for text in ("kerneldsl bench compile", "build time (ms)", "in-process hit (ns)", "get_build(spec)"):
        assert text in svg


def test_bench_plot_without_matplotlib_says_how_to_install_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code, out, err = run(capsys, *FAST_COMPILE_BENCH, "--plot", str(tmp_path / "x.svg"))
    assert code == 2 and out == ""  # refused before measuring
    assert err == "kerneldsl: error: --plot needs matplotlib: pip install 'kerneldsl[plot]'\n"
    assert not (tmp_path / "x.svg").exists()


# --- compile progress ---------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class NotTerminal(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_compile_shows_progress_on_a_terminal(capsys, kernels_file, monkeypatch):
    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    code, out, _ = run(capsys, "compile", str(kernels_file), "--arch", "sm_80,sm_90")
    assert code == 0 and "\r" not in out
    shown = stderr.getvalue()
    assert re.search(r"\r\[1/6\] scale T=float32 sm_80, \d+\.\d s", shown)
    assert re.search(r"\r\[6/6\] fill - sm_90, \d+\.\d s", shown)
    assert shown.endswith("\r")  # the line is wiped before the table


def test_compile_progress_is_quiet_off_a_terminal_and_for_few_builds(capsys, kernels_file, monkeypatch):
    stderr = NotTerminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert run(capsys, "compile", str(kernels_file), "--arch", "sm_80,sm_90")[0] == 0
    assert stderr.getvalue() == ""

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert run(capsys, "compile", str(kernels_file), "--arch", "sm_90")[0] == 0  # 3 builds
    assert terminal.getvalue() == ""


def test_info_names_the_cpu_devices_compiler() -> None:
    from kerneldsl.cli import collect_info

    found = collect_info()["cpu_device"]
    assert found["available"] and found["compiler"]


def test_info_says_why_there_is_no_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from kerneldsl.cli import collect_info

    monkeypatch.setenv("KERNELDSL_HOST_CXX", "/nonexistent/c++")
    found = collect_info()["cpu_device"]
    assert not found["available"] and "names no program" in found["problem"]
