"""What every benchmark shares: a warmed-up wall-clock median, printing a report, and recording it.

A ``--json`` run prints the figures with a ``"meta"`` entry saying how they were made (the
command, the date, the machine: CPU, GPUs, driver, NVRTC, Python, kerneldsl), so a results file
kept in ``docs/results/`` stands on its own; ``kerneldsl bench report FILE...`` turns such files
into the Markdown page of benchmark results, which is never written by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._version import __version__

Report = dict[str, dict[str, float]]  # section ("launch (µs per launch)") -> figure name -> value
META = "meta"  # the JSON entry that holds a run's metadata, beside the sections


def wall_median(run: Callable[[], object], reps: int) -> float:
    """Median wall-clock seconds of ``run`` over ``reps`` calls, after one warm-up call."""
    run()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def print_report(report: Report, args: argparse.Namespace) -> None:
    """Sections of named figures, as an aligned table or (``args.json``) as recorded JSON."""
    if args.json:
        print_json(report, args)
        return
    for section, rows in report.items():
        print(section)
        for name, value in rows.items():
            print(f"  {name:40s} {value:10.3f}")


Section = tuple[str, Callable[[argparse.Namespace], dict[str, float]]]  # (title, measure)


def run_sections(sections: Mapping[str, Section], args: argparse.Namespace) -> Report:
    """Run the sections ``args.only`` names (all by default), printing each as it finishes so a
    later section's failure loses none before it; ``args.json`` prints them all at the end."""
    report: Report = {}
    for key, (title, bench) in sections.items():
        if args.only and key not in args.only:
            continue
        report[title] = bench(args)
        if not args.json:
            print_report({title: report[title]}, args)
    if args.json:
        print_json(report, args)
    return report


def print_json(figures: Mapping[str, Any], args: argparse.Namespace) -> None:
    """``figures`` as JSON, with the run's ``"meta"`` (``args.command_line``: what ``kerneldsl
    bench`` was given; absent when a benchmark runs from elsewhere, as in the tests), on
    ``args.json_stream`` (``kerneldsl bench`` hands the benchmark the real stdout there, while
    everything else it prints goes to stderr), else stdout."""
    document = json.dumps({META: run_metadata(getattr(args, "command_line", None)), **figures}, indent=2)
    print(document, file=getattr(args, "json_stream", None) or sys.stdout)


def run_metadata(command: str | None) -> dict[str, Any]:
    """How a run was made: the command, the UTC date, and the machine it ran on."""
    from ..jit.compiler import nvrtc_version
    from ..runtime import driver

    gpus: list[str] = []
    driver_version = None
    if driver.driver_available():
        driver_version = "{}.{}".format(*driver.driver_version())
        gpus = [driver.device_name(i) for i in range(driver.device_count())]
    return {
        "command": command,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "kerneldsl": __version__,
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "gpus": gpus,
        "cuda_driver": driver_version,
        "nvrtc": "{}.{}".format(*nvrtc_version()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --- the results page ------------------------------------------------------------------------


def markdown(paths: Iterable[Path]) -> str:
    """The benchmark results page: one section per results file (``kerneldsl bench NAME --json``
    output), its machine, date and command first, then a table per section of figures."""
    lines = [
        "# Benchmark results",
        "",
        "Generated from the recorded results files in `docs/results/` (each the output of one",
        "`kerneldsl bench NAME --json` run) by `kerneldsl bench report docs/results/*.json`; never",
        "edited by hand. Figures are what that run measured on that machine: compare ratios within",
        "one file, not absolute times across files. See [performance](guide/performance.md) for what",
        "each benchmark measures and how.",
    ]
    paths = sorted(paths)
    if not paths:
        lines += ["", "No results files are recorded yet."]
    for path in paths:
        lines += ["", *_file_section(path)]
    return "\n".join(lines) + "\n"


def _file_section(path: Path) -> list[str]:
    document = json.loads(path.read_text())
    meta = document.pop(META, None) or {}
    if not any(isinstance(v, dict) for v in document.values()):  # a flat report (bench compile)
        document = {"figures": document}
    lines = [f"## {path.stem}", ""]
    if meta:
        gpus = ", ".join(meta.get("gpus") or []) or "no GPU"
        lines += [
            f"`{meta.get('command') or 'kerneldsl bench ' + path.stem + ' --json'}`, {meta.get('date')}.",
            "",
            f"Machine: {meta.get('cpu')} ({meta.get('cores')} cores); {gpus}; CUDA driver "
            f"{meta.get('cuda_driver') or 'none'}, NVRTC {meta.get('nvrtc')}; Python {meta.get('python')}, "
            f"kerneldsl {meta.get('kerneldsl')}.",
        ]
    else:
        lines += [f"`{path.name}` was recorded without its machine, date and command."]
    for section, rows in document.items():
        if not isinstance(rows, dict):
            continue
        lines += ["", f"### {section}", "", "| figure | value |", "|---|---:|"]
        lines += [f"| {_cell(name)} | {_number(value)} |" for name, value in rows.items()]
    return lines


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else _cell(value)
