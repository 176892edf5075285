"""``kerneldsl bench NAME`` and ``kerneldsl bench report``: a benchmark run with its own options,
and the results page from recorded runs."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path

from ..bench import BENCHMARKS, plot
from ..bench.report import markdown as results_page


def cmd_bench(args: argparse.Namespace) -> int:
    """Run a benchmark once what it needs is known to be here (else one line, exit 2), then plot it.

    The benchmark's own options are parsed here, by a parser its module builds: the ``kerneldsl``
    parser knows only the names, so no other command imports a benchmark (or its baselines).
    """
    name = args.benchmark
    benchmark = BENCHMARKS[name]
    parser = argparse.ArgumentParser(prog=f"kerneldsl bench {name}", description=benchmark.help)
    benchmark.add_arguments(parser)
    parser.add_argument(
        "--plot", metavar="FILE.svg", help="also draw the figures, one bar chart per section (needs matplotlib)"
    )
    args = parser.parse_args(options := args.options)
    args.command_line = shlex.join(["kerneldsl", "bench", name, *options])  # recorded with --json
    unmet = benchmark.unmet(name) or (plot.unavailable() if args.plot else None)
    if unmet:
        print(f"kerneldsl: error: {unmet}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):  # stdout holds the JSON alone: notes printed on the way go to stderr
        args.json_stream = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            report = benchmark.run(args)
    else:
        report = benchmark.run(args)
    if args.plot:
        plot.save(report, args.plot, f"kerneldsl bench {name}")
        print(f"plotted to {args.plot}", file=sys.stderr)  # stdout may be --json
    return 0


def cmd_bench_report(args: argparse.Namespace) -> int:
    """The benchmark results page, in Markdown, from results files that ``--json`` runs printed."""
    try:
        page = results_page(Path(p) for p in args.results)
    except (OSError, ValueError) as exc:  # a file that is missing, or not JSON
        print(f"kerneldsl: error: {exc}", file=sys.stderr)
        return 1
    print(page, end="")
    return 0
