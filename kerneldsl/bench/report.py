"""What every benchmark shares: a warmed-up wall-clock median, and printing a report."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

Report = dict[str, dict[str, float]]  # section ("launch (µs per launch)") -> figure name -> value


def wall_median(run: Callable[[], object], reps: int) -> float:
    """Median wall-clock seconds of ``run`` over ``reps`` calls, after one warm-up call."""
    run()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def print_report(report: Report, as_json: bool) -> None:
    """Sections of named figures, as an aligned table or as JSON."""
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for section, rows in report.items():
        print(section)
        for name, value in rows.items():
            print(f"  {name:40s} {value:10.3f}")
