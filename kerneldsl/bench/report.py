"""What every benchmark shares: a warmed-up wall-clock median, and printing a report."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Mapping

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
            print_report({title: report[title]}, False)
    if args.json:
        print_report(report, True)
    return report
