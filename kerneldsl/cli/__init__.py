"""The ``kerneldsl`` command: inspect the installation and the cache, compile ahead of time, benchmark.

Each subcommand is a function from parsed arguments to an exit code: 0 ok, 1 failure, 2 usage
(argparse's own). A kerneldsl error is one ``kerneldsl: error: ...`` line, never a traceback:
it is the user's setup, not a bug, that the message has to explain. Looking never creates
anything: ``info`` and ``cache`` leave a cache directory that does not exist yet alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__
from ..bench import BENCHMARKS
from ..errors import KernelDSLError
from ..jit.compiler import OUTPUTS
from ..jit.target import ARCH_ENV
from .ahead import cmd_compile, cmd_tune, import_target, module_kernels, skip_reason
from .bench import cmd_bench, cmd_bench_report
from .cache import cmd_cache_clear, cmd_cache_info, cmd_cache_list
from .check import cmd_check
from .info import cmd_info, collect_info, format_info

__all__ = ["build_parser", "collect_info", "format_info", "import_target", "main", "module_kernels", "skip_reason"]

# --- parser ----------------------------------------------------------------------------------

_TARGET = "dotted module name (looked up in the current directory first) or path to a .py file"
# ``compile`` and ``tune`` find kernels by importing the target: its top-level code runs
_RUNS_TARGET = (
    "MODULE_OR_FILE is imported, which runs its code as you, with your files and your GPU: "
    "pass only code you trust, as you would to python."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kerneldsl", description="Declarative CUDA kernels: tools.")
    parser.add_argument("--version", action="version", version=f"kerneldsl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="machine-readable output")

    _command(commands, "info", cmd_info, "versions, devices, target archs and the cache", parents=[as_json])

    cache = commands.add_parser("cache", help="inspect or empty the disk cache of compiled kernels")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    _command(actions, "info", cmd_cache_info, "location, entry count and size", parents=[as_json])
    _command(actions, "list", cmd_cache_list, "one line per cached kernel image", parents=[as_json])
    _command(actions, "clear", cmd_cache_clear, "remove every entry")

    compile_ = _command(
        commands,
        "compile",
        cmd_compile,
        "compile the declared precompile bindings into the cache",
        epilog=_RUNS_TARGET,
    )
    compile_.add_argument("target", metavar="MODULE_OR_FILE", help=_TARGET)
    compile_.add_argument(
        "--arch", help=f"comma-separated targets, e.g. sm_80,sm_90 (default: the device's, else ${ARCH_ENV})"
    )
    compile_.add_argument("--output", choices=OUTPUTS, default="cubin", help="image kind (default: cubin)")

    tune = _command(
        commands,
        "tune",
        cmd_tune,
        "tune the declared tune_for keys of @kd.autotune kernels (GPU)",
        epilog=_RUNS_TARGET,
    )
    tune.add_argument("target", metavar="MODULE_OR_FILE", help=_TARGET)

    check = _command(
        commands,
        "check",
        cmd_check,
        "run a script on the CPU device with every check on (bounds, races, init, sync, undefined) and report "
        "each finding at its line",
        epilog="SCRIPT runs as you, as it would with python: pass only code you trust.",
    )
    check.add_argument("--seed", type=int, default=0, help="run each block's threads in the order seed N draws")
    check.add_argument(
        "--address",
        action="store_true",
        help="AddressSanitizer instead of the race and init checks (they exclude each other): bounds, sync, "
        "address, undefined; the script runs with ASan's runtime preloaded",
    )
    check.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    check.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")

    bench = commands.add_parser("bench", help="measure kerneldsl's own costs on this machine")
    benchmarks = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, b in BENCHMARKS.items():
        _command(benchmarks, name, cmd_bench, b.help, add_help=False)  # cmd_bench parses its options
    page = _command(
        benchmarks,
        "report",
        cmd_bench_report,
        "the benchmark results page (Markdown) from results files of `kerneldsl bench NAME --json` runs",
    )
    page.add_argument("results", nargs="*", metavar="RESULTS.json", help="results files, one per run")
    return parser


def _command(
    group: Any, name: str, handler: Callable[[argparse.Namespace], int], help: str, **kwargs: Any
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = group.add_parser(name, help=help, description=help, **kwargs)
    sub.set_defaults(handler=handler)
    return sub


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, options = parser.parse_known_args(argv)
    if options and (args.command != "bench" or args.benchmark == "report"):
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    args.options = options
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return code
    except KernelDSLError as exc:
        print(f"kerneldsl: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # ``kerneldsl cache list | head``: the reader has all it wanted
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the final flush at exit would fail on the closed pipe again
    (the recipe in the ``signal`` module's documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
