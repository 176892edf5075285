"""The benchmark results page is generated from recorded results files: ``kerneldsl bench NAME
--json`` records how the figures were made, and ``kerneldsl bench report FILE...`` turns the files
into Markdown with each run's machine, date and command."""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import pytest

from kerneldsl.bench import BENCHMARKS, Benchmark
from kerneldsl.bench.report import META, markdown, print_json, run_sections
from kerneldsl.cli import main

RECORDED = {
    META: {
        "command": "kerneldsl bench cpu --json",
        "date": "2026-12-05 12:00 UTC",
        "kerneldsl": "0.1.0",
        "python": "3.11.7",
        "cpu": "Example CPU",
        "cores": 2,
        "gpus": [],
        "cuda_driver": None,
        "nvrtc": "13.5",
    },
    "kernels (ms)": {"saxpy kerneldsl": 1.25, "saxpy | warp": 2.5},
}


def _write(tmp_path: Path, name: str, document: dict[str, object]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def _noisy_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kerneldsl bench noisy``: a benchmark that prints a note while it runs, as a skipped section does."""
    module = types.ModuleType("kd_test_noisy_bench")

    def section(args: argparse.Namespace) -> dict[str, float]:
        print("note: a baseline was skipped")
        return {"figure": 1.0}

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true")
        parser.set_defaults(only=None)

    module.__dict__.update(
        add_arguments=add_arguments, run=lambda args: run_sections({"noisy": ("section", section)}, args)
    )
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(BENCHMARKS, "noisy", Benchmark("prints a note", module.__name__))


def test_a_json_run_prints_only_json_on_stdout_and_its_notes_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _noisy_benchmark(monkeypatch)
    assert main(["bench", "noisy", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["section"] == {"figure": 1.0}
    assert "note: a baseline was skipped" in err


def test_a_table_run_prints_its_notes_with_its_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _noisy_benchmark(monkeypatch)
    assert main(["bench", "noisy"]) == 0
    out = capsys.readouterr().out
    assert "note: a baseline was skipped" in out and "figure" in out


def test_a_json_run_records_its_command_date_and_machine(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"section": {"figure": 1.0}}, argparse.Namespace(json=True, command_line="kerneldsl bench x --json"))
    recorded = json.loads(capsys.readouterr().out)
    assert recorded["section"] == {"figure": 1.0}
    assert recorded[META]["command"] == "kerneldsl bench x --json"
    assert {"date", "cpu", "cores", "gpus", "cuda_driver", "nvrtc", "python", "kerneldsl"} <= set(recorded[META])


def test_the_page_names_each_runs_machine_date_and_command(tmp_path: Path) -> None:
    page = markdown([_write(tmp_path, "cpu.json", RECORDED)])
    assert "## cpu" in page
    assert "`kerneldsl bench cpu --json`, 2026-12-05 12:00 UTC." in page
    assert "Machine: Example CPU (2 cores); no GPU; CUDA driver none, NVRTC 13.5" in page
    assert "### kernels (ms)" in page
    assert "| saxpy kerneldsl | 1.25 |" in page
    assert "| saxpy \\| warp | 2.5 |" in page  # a bar in a name does not split the table's row


def test_a_file_recorded_without_metadata_says_so(tmp_path: Path) -> None:
    page = markdown([_write(tmp_path, "old.json", {"launch (us)": {"warm": 4.5}})])
    assert "`old.json` was recorded without its machine, date and command." in page
    assert "| warm | 4.5 |" in page


def test_a_flat_report_is_one_table(tmp_path: Path) -> None:
    page = markdown([_write(tmp_path, "compile.json", {"cold_compile_s": 0.125, "nvrtc": "13.5"})])
    assert "### figures" in page and "| cold_compile_s | 0.125 |" in page and "| nvrtc | 13.5 |" in page


def test_without_results_files_the_page_says_none_are_recorded() -> None:
    assert "No results files are recorded yet." in markdown([])


def test_the_report_command_prints_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "cpu.json", RECORDED)
    assert main(["bench", "report", str(path)]) == 0
    assert capsys.readouterr().out == markdown([path])


def test_the_report_command_names_a_results_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main(["bench", "report", str(broken)]) == 1
    assert "kerneldsl: error:" in capsys.readouterr().err
