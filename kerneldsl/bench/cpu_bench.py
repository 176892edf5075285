"""The CPU device side by side with NVIDIA Warp's CPU device, Numba's CUDA simulator and NumPy.

One process, one CPU session (``kd.Session(device="cpu")``); every input is uploaded before
timing (``s.to_device``), so no transfer is timed. Seven sections (``--only``):

- ``kernels``: five kernels written as CUDA users write them (``cpu_kernels``) against the same
  computations in Warp (``cpu_warp``, ``wp.tid()`` and ``wp.atomic_add``), NumPy, and Numba's
  simulator (``cpu_simulator``, a child process, small sizes, compared per element). Targets:
  kerneldsl <= 1.0x Warp's time for saxpy and the stencil (no barrier), <= 2.0x for the
  transpose, the sum and the histogram, and >= 10,000x the simulator's speed per element. The sum
  and the histogram run over a grid-stride loop (16 elements a thread) and, reported beside them,
  a thread an element.
- ``sweep``: the five kernels against Warp over sizes besides the ones above (``cpu_cases.SWEEP``:
  odd, small and larger), each ratio and each kernel's worst, held to the same targets.
- ``fibers``: what waiting costs a CUDA thread on one worker: start and finish, a barrier, a warp
  shuffle (targets 6, 4 and 6 ns), from kernels of the same trivial work with a run-time count of
  barriers or shuffles against the work alone, which runs as a plain loop; measured split at the
  waits (how the CPU device runs them, held to the targets) and on fibers (``ON_FIBERS``: how it
  runs a body it cannot split).
- ``ops``: ``kd.ops`` elementwise (float32 <= 1.2x NumPy's time, 16-bit floats <= 2x), sum / max /
  argmax along each axis (<= 2x), ``@kd.fuse`` softmax and layer norm against NumPy's unfused
  expression (<= 1.0x), cumsum flat and along each axis (<= 2x); outputs preallocated on both sides.
- ``layouts``: ``kd.ops`` on broadcast operands, strided, sliced and transposed views, every axis
  of a 3-D array, and float32 math functions, against NumPy (the same targets), each result new;
  float64 math functions reported without a bar
  (the cases of both sections are ``cpu_ops``'s).
- ``first``: a small kernel's first call in fresh processes (``cpu_first_call``): cold disk cache
  <= 0.3 s; a disk hit that runs no compiler and imports no Jinja.
- ``checks``: what checked execution costs the five kernels: each one's time in a session with
  ``checks="bounds"`` (<= 3x) and with ``checks="all"`` (bounds, races, init, sync; <= 30x) over
  its time unchecked, all three in the same rounds.

Each timing is the median of ``--reps`` rounds after a warm-up call (which compiles); in a round
every contender takes a turn, so a change in a shared machine's load falls on all alike. Every
timed call writes over a poisoned output and its result is checked against NumPy before the next:
a wrong answer raises ``WrongResultError``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import kerneldsl as kd

from . import cpu_cases
from .cpu_cases import FULL, QUICK, QUICK_SWEEP, SWEEP, THREAD_ELEMENTS, Case, Sizes, case_size, poison_value
from .cpu_ops import LayoutCase, OpCase, layout_cases, op_cases
from .report import Report, print_json

SECTIONS = ("kernels", "sweep", "fibers", "ops", "layouts", "first", "checks")
CHECKED = {"bounds": 3.0, "all": 30.0}  # checks= and the most times its unchecked time it may take
BARRIER_FREE = ("saxpy", "stencil")
VARIANT = " (a thread an element)"


def warp_target(name: str) -> float:
    """The most kerneldsl's time may be of Warp's for kernel ``name``: Warp's own for the
    barrier-free kernels, twice it for those with barriers, shuffles or shared atomics."""
    return 1.0 if name in BARRIER_FREE else 2.0


@dataclass(frozen=True)
class Figure:
    """One measured figure, and the target it is held to (if any)."""

    name: str
    value: float
    unit: str
    target: float | None = None
    at_least: bool = False  # the target is a floor (a speedup), not a ceiling

    @property
    def met(self) -> str:
        if self.target is None:
            return ""
        return "yes" if (self.value >= self.target if self.at_least else self.value <= self.target) else "NO"

    @property
    def target_text(self) -> str:
        if self.target is None:
            return ""
        return f"{'>=' if self.at_least else '<='} {self.target:g} {self.unit}".rstrip()


@dataclass
class Contender:
    """One way of computing a case: poison its output, run (synchronized), read the result."""

    label: str
    run: Callable[[], object]
    result: Callable[[], np.ndarray]
    poison: Callable[[], object] = lambda: None


def time_checked(entries: Sequence[tuple[Case, Contender]], reps: int) -> dict[str, float]:
    """Median seconds of each contender over ``reps`` interleaved rounds, after a warm-up call;
    every call (warm-up included) writes over poison and is checked against its case before the next."""
    samples: dict[str, list[float]] = {contender.label: [] for _, contender in entries}
    for rep in range(reps + 1):
        for case, contender in entries:
            contender.poison()
            start = time.perf_counter()
            contender.run()
            elapsed = time.perf_counter() - start
            case.check(contender.label, contender.result())
            if rep:
                samples[contender.label].append(elapsed)
    return {label: statistics.median(times) for label, times in samples.items()}


def _kd_contender(
    s: kd.Session, label: str, out: kd.DeviceArray, call: Callable[[], object], zero: bool = False
) -> Contender:
    poison = poison_value(out.dtype)

    def run() -> None:
        if zero:  # accumulated with atomicAdd: a CUDA user clears it before the launch
            out.fill_zero()
        call()
        s.synchronize()

    return Contender(label, run, out.to_host, lambda: out.fill(poison))


def _numpy_contender(out: np.ndarray, call: Callable[[], object], label: str = "NumPy") -> Contender:
    poison = poison_value(out.dtype)
    return Contender(label, call, lambda: out, lambda: out.fill(poison))


# --- kernels ---------------------------------------------------------------------------------


def kerneldsl_contenders(s: kd.Session, case: Case) -> list[Contender]:
    """kerneldsl's kernels for ``case``; the sum and the histogram also a thread an element."""
    from . import cpu_kernels as k

    inputs = {name: s.to_device(value) for name, value in case.inputs.items()}
    out = s.empty(case.want.shape, case.want.dtype)
    grid = max(1, case.elements // (k.BLOCK * THREAD_ELEMENTS))
    calls: dict[str, Callable[[], object]]
    if case.name == "saxpy":
        calls = {"": lambda: k.saxpy(out, inputs["x"], inputs["y"], cpu_cases.SAXPY_ALPHA)}
    elif case.name == "transpose":
        calls = {"": lambda: k.transpose(out, inputs["x"])}
    elif case.name == "stencil":
        calls = {"": lambda: k.stencil(out, inputs["x"], cpu_cases.STENCIL_WEIGHT)}
    elif case.name == "sum":
        calls = {
            "": lambda: k.block_sum(out, inputs["x"], grid=grid),
            VARIANT: lambda: k.block_sum_per_element(out, inputs["x"]),
        }
    else:
        calls = {
            "": lambda: k.histogram(out, inputs["values"], grid=grid),
            VARIANT: lambda: k.histogram_per_element(out, inputs["values"]),
        }
    zero = case.name in ("sum", "histogram")
    return [_kd_contender(s, f"kerneldsl{suffix}", out, call, zero) for suffix, call in calls.items()]


def numpy_contender(case: Case) -> Contender:
    out = np.empty_like(case.want)
    run = cpu_cases.NUMPY_RUNS[case.name]
    return _numpy_contender(out, lambda: run(case, out))


def warp_contender(case: Case) -> Contender:
    from .cpu_warp import WarpRun

    warp = WarpRun(case)
    return Contender("Warp", warp.run, warp.result, warp.poison)


def bench_checks(s: kd.Session, sizes: Sizes, reps: int) -> list[Figure]:
    """Each kernel's time under ``checks=`` over its unchecked time (``s``), in interleaved rounds."""
    checked = {spelled: kd.Session(device="cpu", checks=spelled) for spelled in CHECKED}
    figures: list[Figure] = []
    try:
        for name, case in sizes.cases().items():
            entries = [(case, kerneldsl_contenders(s, case)[0])]
            for spelled, session in checked.items():
                contender = kerneldsl_contenders(session, case)[0]
                entries.append((case, dataclasses.replace(contender, label=spelled)))
            times = time_checked(entries, reps)
            unchecked = times["kerneldsl"]
            figures.append(Figure(f"{name}: unchecked", unchecked * 1e3, "ms"))
            for spelled, target in CHECKED.items():
                ratio = times[spelled] / unchecked
                figures.append(Figure(f"{name}: checks={spelled!r} / unchecked", ratio, "x", target))
    finally:
        for session in checked.values():
            session.close()
    return figures


def bench_kernels(s: kd.Session, sizes: Sizes, reps: int, simulator: bool = True) -> list[Figure]:
    """kerneldsl, Warp and NumPy on each case (ms), kerneldsl over Warp, and per element against
    the Numba simulator (measured in a child process after the others)."""
    from . import cpu_simulator, cpu_warp

    cpu_warp.init()
    figures: list[Figure] = []
    per_element: dict[str, float] = {}
    for name, case in sizes.cases().items():
        contenders = [*kerneldsl_contenders(s, case), warp_contender(case), numpy_contender(case)]
        times = time_checked([(case, c) for c in contenders], reps)
        target = warp_target(name)
        figures += [Figure(f"{name}: {label}", seconds * 1e3, "ms") for label, seconds in times.items()]
        for label, seconds in times.items():
            if label.startswith("kerneldsl"):
                variant = label.removeprefix("kerneldsl")
                per_element[name + variant] = seconds / case.elements
                figures.append(
                    Figure(f"{name}: {label} / Warp", seconds / times["Warp"], "x", None if variant else target)
                )
    if simulator:
        for label, simulated in cpu_simulator.measure(quick=sizes == QUICK).items():
            floor = None if label.endswith(VARIANT) else 10_000.0
            figures.append(Figure(f"{label}: Numba simulator", simulated * 1e6, "us/element"))
            speedup = simulated / per_element[label]
            figures.append(
                Figure(f"{label}: kerneldsl speedup per element over it", speedup, "x", floor, at_least=True)
            )
    return figures


def bench_sweep(s: kd.Session, sweep: Sequence[Sizes], reps: int) -> list[Figure]:
    """kerneldsl over Warp for each kernel at each size of ``sweep`` (the grid-stride sum and
    histogram), then each kernel's worst ratio, held to the kernel's target."""
    from . import cpu_warp

    cpu_warp.init()
    figures: list[Figure] = []
    worst: dict[str, float] = {}
    for sizes in sweep:
        for name, case in sizes.cases().items():
            times = time_checked([(case, kerneldsl_contenders(s, case)[0]), (case, warp_contender(case))], reps)
            ratio = times["kerneldsl"] / times["Warp"]
            figures.append(Figure(f"{name} {case_size(case)}: kerneldsl / Warp", ratio, "x"))
            worst[name] = max(ratio, worst.get(name, 0.0))
    return figures + [
        Figure(f"{name}: the worst kerneldsl / Warp of the sweep", ratio, "x", warp_target(name))
        for name, ratio in worst.items()
    ]


# --- fibers ----------------------------------------------------------------------------------


def _shuffled(lanes: np.ndarray, rounds: int) -> np.ndarray:
    """``v += __shfl_down_sync(full, v, 1)`` ``rounds`` times: the last lane of a warp reads its own ``v``."""
    v: np.ndarray = lanes.reshape(-1, 32).copy()
    for _ in range(rounds):
        v += np.concatenate([v[:, 1:], v[:, -1:]], axis=1)
    return v.ravel()


def bench_fibers(s: kd.Session, threads: int, extra: int, reps: int) -> list[Figure]:
    """Nanoseconds a CUDA thread for its start and finish, a barrier and a shuffle, in a kernel the
    CPU device splits at its waits (the bars) and in the same kernel on fibers.

    Kernels of the same trivial work: without a barrier or shuffle (a loop), with 0, 1 or
    1 + ``extra`` barriers, with 1 or 1 + ``extra`` shuffles, the count a run-time scalar (the
    barrier's text makes a kernel split, or run on fibers, whether or not it is reached). A barrier
    or shuffle costs the difference of the two counts over ``extra``. The three costs add up, as
    the issue states them (a prototype's: 12 ns to start and finish, 6-7 a barrier): a thread that
    waits once costs the loop, a start and finish, and a barrier. So starting and finishing costs
    the one-barrier kernel less the loop and a barrier. The grids run on one worker (the launching
    thread), so a figure is one core's time, whatever else the shared machine runs on the others.
    """
    from . import cpu_kernels as k

    lanes = np.arange(threads, dtype=np.uint32) % k.BLOCK
    many = 1 + extra
    variants = {"loop": (k.threads_plain, 1, lanes + 1)}
    for way, barriers, shuffles in (
        ("split", k.threads_barriers, k.threads_shuffles),
        ("fibers", k.fiber_barriers, k.fiber_shuffles),
    ):
        variants |= {
            f"{way}: 0 barriers": (barriers, 0, lanes),
            f"{way}: 1 barrier": (barriers, 1, lanes + 1),
            f"{way}: {many} barriers": (barriers, many, lanes + many),
            f"{way}: 1 shuffle": (shuffles, 1, _shuffled(lanes, 1)),
            f"{way}: {many} shuffles": (shuffles, many, _shuffled(lanes, many)),
        }
    entries = []
    for label, (kernel, count, want) in variants.items():
        out = s.empty(threads, np.uint32)
        call = functools.partial(kernel, out, np.int32(count))
        entries.append((Case(label, {}, want, 0.0, threads), _kd_contender(s, label, out, call)))
    with _one_worker():
        t = {label: seconds * 1e9 / threads for label, seconds in time_checked(entries, reps).items()}
    figures = [Figure("a thread as a loop (no wait)", t["loop"], "ns")]
    for way, bars in (("split", True), ("fibers", False)):
        waits_once = t[f"{way}: 1 barrier"] - t["loop"]
        barrier = (t[f"{way}: {many} barriers"] - t[f"{way}: 1 barrier"]) / extra
        shuffle = (t[f"{way}: {many} shuffles"] - t[f"{way}: 1 shuffle"]) / extra
        figures += [
            Figure(f"{way}: a thread reaching no wait, less the loop", t[f"{way}: 0 barriers"] - t["loop"], "ns"),
            Figure(f"{way}: a thread waiting at 1 barrier, less the loop", waits_once, "ns"),
            Figure(
                f"{way}: start and finish a thread: that, less the barrier",
                waits_once - barrier,
                "ns",
                6.0 if bars else None,
            ),
            Figure(f"{way}: a barrier ({many} vs 1 a thread)", barrier, "ns", 4.0 if bars else None),
            Figure(f"{way}: a warp shuffle ({many} vs 1 a thread)", shuffle, "ns", 6.0 if bars else None),
        ]
    return figures


@contextlib.contextmanager
def _one_worker() -> Iterator[None]:
    """The CPU device's pool cut to the launching thread while the block runs, then restored."""
    from ..runtime.host_runtime import runtime_library

    pool = runtime_library()
    workers = pool.kd_host_workers()
    pool.kd_host_set_workers(1)
    try:
        yield
    finally:
        pool.kd_host_set_workers(workers)


# --- ops ---------------------------------------------------------------------------------------


def op_contenders(s: kd.Session, op: OpCase) -> list[Contender]:
    """kerneldsl on the operands uploaded to ``s``, and NumPy on the host's; outputs preallocated."""
    dtype = op.case.want.dtype if op.case.want.dtype != np.float64 else np.dtype(np.float32)
    operands = tuple(s.to_device(a) for a in op.operands)
    kd_out, np_out = s.empty(op.case.want.shape, dtype), np.empty(op.case.want.shape, dtype)
    return [
        _kd_contender(s, f"kerneldsl {op.case.name}", kd_out, lambda: op.kd_call(operands, kd_out)),
        _numpy_contender(np_out, lambda: op.numpy_call(op.operands, np_out), f"NumPy {op.case.name}"),
    ]


def layout_contenders(s: kd.Session, op: LayoutCase) -> list[Contender]:
    """The expression on the operands uploaded to ``s`` and in NumPy on the host's, each result new."""
    operands = tuple(s.to_device(a) for a in op.operands)
    results: dict[str, Any] = {}

    def on_device() -> None:
        results["device"] = op.on_device(*operands)
        s.synchronize()

    def in_numpy() -> None:
        results["numpy"] = op.in_numpy(*op.operands)

    return [
        Contender(f"kerneldsl {op.case.name}", on_device, lambda: results["device"].to_host()),
        Contender(f"NumPy {op.case.name}", in_numpy, lambda: np.asarray(results["numpy"])),
    ]


def bench_layouts(s: kd.Session, side: int, reps: int) -> list[Figure]:
    return _ratios([(op.case, layout_contenders(s, op), op.target) for op in layout_cases(side)], reps)


def bench_ops(s: kd.Session, n: int, side: int, reps: int) -> list[Figure]:
    return _ratios([(op.case, op_contenders(s, op), op.target) for op in op_cases(n, side)], reps)


def _ratios(compared: Sequence[tuple[Case, list[Contender], float | None]], reps: int) -> list[Figure]:
    """Each case's two contenders (the CPU device's, then NumPy's) timed side by side, and the ratio."""
    figures = []
    for case, (on_device, on_host), target in compared:
        times = time_checked([(case, on_device), (case, on_host)], reps)
        kd_s, np_s = times[on_device.label], times[on_host.label]
        figures += [
            Figure(f"{case.name}: kerneldsl", kd_s * 1e3, "ms"),
            Figure(f"{case.name}: NumPy", np_s * 1e3, "ms"),
            Figure(f"{case.name}: kerneldsl / NumPy", kd_s / np_s, "x", target),
        ]
    return figures


# --- first call --------------------------------------------------------------------------------


def bench_first() -> tuple[list[Figure], list[str]]:
    """Figures of the three fresh processes, and notes naming the processes the disk hit started."""
    from .cpu_first_call import first_calls

    runs = first_calls()
    hit = runs["hit"]
    figures = [
        Figure("empty cache: session start (builds the runtime library)", runs["empty"]["session"], "s"),
        Figure("empty cache: first call", runs["empty"]["first_call"], "s"),
        Figure("cold kernel: session start (runtime library from disk)", runs["cold"]["session"], "s"),
        Figure("cold kernel: first call of a small kernel", runs["cold"]["first_call"], "s", 0.3),
        Figure("disk hit, fresh process: session start", hit["session"], "s"),
        Figure("disk hit, fresh process: first call", hit["first_call"], "s"),
        Figure("disk hit: processes the call started", len(hit["spawned_by_call"]), "", 0.0),
        Figure("disk hit: processes the whole process started", len(hit["spawned"]), ""),
        Figure("disk hit: compiler runs in the whole process", len(hit["compiler_runs"]), "", 0.0),
        Figure("disk hit: jinja2 in sys.modules after the call", float(hit["jinja_loaded"]), "", 0.0),
    ]
    notes = [f"the disk-hit process started: {command}" for command in hit["spawned"]]
    return figures, notes


# --- the table -------------------------------------------------------------------------------

TITLES = {
    "kernels": "CUDA-style kernels: kerneldsl CPU device vs Warp CPU, NumPy, Numba CUDA simulator",
    "sweep": "the five kernels over other sizes: kerneldsl CPU device / Warp CPU",
    "fibers": "what waiting costs a CUDA thread, split at the waits and on fibers (one worker)",
    "ops": "kd.ops and @kd.fuse on the CPU device vs NumPy (DeviceArrays: no transfer timed)",
    "layouts": "kd.ops on broadcast operands, views, a 3-D array and float math vs NumPy",
    "first": "first call on the CPU device, fresh processes",
    "checks": "checked execution's cost: each kernel's time with checks= over its unchecked time",
}


def print_table(title: str, figures: Sequence[Figure], notes: Sequence[str] = ()) -> None:
    print(title)
    print(f"  {'figure':66s} {'value':>12s} {'unit':10s} {'target':14s} met")
    for f in figures:
        print(f"  {f.name:66s} {f.value:12.4g} {f.unit:10s} {f.target_text:14s} {f.met}")
    for note in notes:
        print(f"  note: {note}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, not minutes): for a test")
    parser.add_argument("--reps", type=int, default=10, help="timed rounds per measurement (median reported)")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> Report:
    sizes = QUICK if args.quick else FULL
    s = kd.Session(device="cpu")
    measures: dict[str, Callable[[], tuple[list[Figure], list[str]]]] = {
        "kernels": lambda: (bench_kernels(s, sizes, args.reps), []),
        "sweep": lambda: (bench_sweep(s, QUICK_SWEEP if args.quick else SWEEP, max(1, args.reps // 2)), []),
        "fibers": lambda: (bench_fibers(s, sizes.n // 4, 4 if args.quick else 16, args.reps), []),
        "ops": lambda: (bench_ops(s, sizes.n, sizes.side, args.reps), []),
        "layouts": lambda: (bench_layouts(s, sizes.side, args.reps), []),
        "first": bench_first,
        "checks": lambda: (bench_checks(s, sizes, max(1, args.reps // 2)), []),
    }
    report: Report = {}
    for key in SECTIONS:
        if args.only and key not in args.only:
            continue
        figures, notes = measures[key]()
        report[TITLES[key]] = {f"{f.name} ({f.unit})" if f.unit else f.name: float(f.value) for f in figures}
        if not args.json:
            print_table(TITLES[key], figures, notes)
    if args.json:
        print_json(report, args)
    return report
