"""The persistent runtime, measured side by side with its rivals in one process (GPU required).

- launch: host cost of enqueueing a 3-argument kernel while the stream is held by a spinning
  kernel (so the queue never drains), median per launch, against raw ``cuLaunchKernel`` with
  pre-packed parameters, cuda.core ``launch()`` and CuPy ``RawKernel``. Every launch adds 1 to
  each element of its ``y``: the counts are checked exactly afterwards.
- graph: 100 captured small kernels replayed, against CuPy's graph of the same kernel and
  against eager launches: GPU time per kernel with the stream held (``held_timing``: an event
  window over back-to-back small kernels would time their launches) and host time per replay,
  each count of launches checked exactly.
- transfer: H2D and D2H bandwidth, pageable and pinned, against CuPy on the same sizes.
- e2e: saxpy through the numpy borrowing path (copy in, launch, copy back) vs CuPy.
"""

from __future__ import annotations

import argparse
import ctypes
import struct
from collections.abc import Callable

import numpy as np

import kerneldsl as kd

from .held_timing import (
    SPIN_SOURCE,
    cupy_lane,
    gpu_cycles_per_ms,
    held_timing,
    interleaved_enqueue_costs,
    kd_lane,
    spin,
)
from .report import Report, print_report, wall_median

EXACT_COUNTS = 1 << 24  # float32 counts every launch exactly up to here


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
    """


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--launches", type=int, default=500, help="launches enqueued per repetition")
    parser.add_argument("--reps", type=int, default=30, help="repetitions (median reported)")
    parser.add_argument("--transfer-mib", type=int, default=256, help="transfer size in MiB")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def check_count(values: np.ndarray, launches: int, what: str) -> None:
    """Every element of a float32 ``y`` that ``launches`` launches of ``y = 1 * 1 + y`` updated from
    zero holds exactly ``launches``: a launch lost, repeated or sent to other memory shows."""
    if launches >= EXACT_COUNTS:
        raise ValueError(f"{what}: {launches} launches are more than float32 counts exactly ({EXACT_COUNTS})")
    wrong = np.count_nonzero(values != np.float32(launches))
    if wrong:
        raise AssertionError(f"{what}: {wrong} of {values.size} element(s) differ from the {launches} launches made")


def bench_launch(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    from cuda.bindings import driver as cu
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

    s = kd.default_session()
    n = 1024
    dy, dx = s.to_device(np.zeros(n, np.float32)), s.to_device(np.ones(n, np.float32))
    alpha = np.float32(1)  # every launch adds exactly 1 to each element of its y
    spin_cycles = 4_000_000 + 40_000 * args.launches  # about 20 µs of GPU time per launch enqueued
    saxpy(dy, dx, alpha)
    s.synchronize()

    def hold_kd() -> None:
        spin(spin_cycles)

    build = saxpy.inspect(dy, dx, alpha)
    bound = next(b for b in saxpy._bound.values() if b.build is build)
    buffer = (ctypes.c_char * 32)()
    struct.pack_into("<QQf4xi4x", buffer, 0, dy.ptr, dx.ptr, float(alpha), n)
    pointers = (ctypes.c_void_p * 4)(*[ctypes.addressof(buffer) + 8 * i for i in range(4)])
    params = ctypes.addressof(pointers)
    fn, stream_cu = bound.function, s.stream._cu
    grid = (n + 255) // 256

    def raw() -> None:
        cu.cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, stream_cu, params, 0)

    dev = Device(s.device)
    dev.set_current()
    arch = build.arch.replace("sm_", "")
    prog = Program(build.cuda_source + SPIN_SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{arch}"))
    module = prog.compile("cubin")
    core_saxpy, core_spin = module.get_kernel(build.generated.entry), module.get_kernel("kd_bench_spin")
    core_stream = dev.create_stream()
    config, one = LaunchConfig(grid=grid, block=256), LaunchConfig(grid=1, block=1)
    y_arg, x_arg, n_arg = dy.ptr, dx.ptr, np.int32(n)

    cp_stream = cp.cuda.Stream(non_blocking=True)
    raw_module = cp.RawModule(code=build.cuda_source + SPIN_SOURCE, options=("-std=c++17",))
    cp_saxpy, cp_spin = raw_module.get_function(build.generated.entry), raw_module.get_function("kd_bench_spin")
    cy, cx = cp.zeros(n, cp.float32), cp.ones(n, cp.float32)

    def cp_hold() -> None:
        cp_spin((1,), (1,), (np.int64(spin_cycles),))

    def cp_enqueue() -> None:
        cp_saxpy((grid,), (256,), (cy, cx, alpha, np.int32(n)))

    contenders = {
        "kerneldsl": (hold_kd, lambda: saxpy(dy, dx, alpha), s.synchronize),
        "kerneldsl, new scalar each call": (hold_kd, lambda: saxpy(dy, dx, np.float32(1)), s.synchronize),
        "kerneldsl, Python path": (hold_kd, lambda: saxpy._call(dy, dx, alpha), s.synchronize),
        "Session.launch, pre-packed": (
            hold_kd,
            lambda: s.launch(fn, (grid, 1, 1), (256, 1, 1), 0, None, params),
            s.synchronize,
        ),
        "raw cuLaunchKernel": (hold_kd, raw, s.synchronize),
        "cuda.core launch": (
            lambda: launch(core_stream, one, core_spin, np.int64(spin_cycles)),
            lambda: launch(core_stream, config, core_saxpy, y_arg, x_arg, alpha, n_arg),
            core_stream.sync,
        ),
        "CuPy RawKernel": (cp_hold, cp_enqueue, cp_stream.synchronize),
    }
    dy.copy_from_host(np.zeros(n, np.float32))
    with s.activated(), cp_stream:  # CuPy launches on its current stream
        results = interleaved_enqueue_costs(contenders, args.launches, args.reps)
        cp_stream.synchronize()
    s.synchronize()
    per_contender = args.launches * args.reps
    check_count(
        dy.to_host(), per_contender * (len(contenders) - 1), "kerneldsl, Session.launch, cuLaunchKernel, cuda.core"
    )
    check_count(cp.asnumpy(cy), per_contender, "CuPy RawKernel")
    return {k: v * 1e6 for k, v in results.items()}  # µs per launch


GRAPH_CALLS = 5  # replays (or eager batches of the same kernels) enqueued per held repetition


def bench_graph(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp

    s = kd.default_session()
    n, kernels = 1024, 100
    dy, dx = s.to_device(np.zeros(n, np.float32)), s.to_device(np.ones(n, np.float32))
    alpha = np.float32(1)  # every kernel adds exactly 1: the counts check each way of launching
    saxpy(dy, dx, alpha)
    with s.capture() as graph:
        for _ in range(kernels):
            saxpy(dy, dx, alpha)
    s.synchronize()
    dy.copy_from_host(np.zeros(n, np.float32))
    cycles_per_ms = gpu_cycles_per_ms()

    def eager() -> None:
        for _ in range(kernels):
            saxpy(dy, dx, alpha)

    timings = {}
    launched = 0
    for label, run in (("kerneldsl graph replay", graph.replay), ("kerneldsl eager", eager)):
        timings[label] = held_timing(kd_lane(s), run, calls=GRAPH_CALLS, reps=args.reps, cycles_per_ms=cycles_per_ms)
        launched += timings[label].calls * kernels
    check_count(dy.to_host(), launched, "kerneldsl graph replays and eager launches")

    cp_stream = cp.cuda.Stream(non_blocking=True)
    build = saxpy.inspect(dy, dx, alpha)
    cp_saxpy = cp.RawModule(code=build.cuda_source, options=("-std=c++17",)).get_function(build.generated.entry)
    cy, cx = cp.zeros(n, cp.float32), cp.ones(n, cp.float32)
    grid = ((n + 255) // 256,)
    with cp_stream:
        cp_saxpy(grid, (256,), (cy, cx, alpha, np.int32(n)))  # loads the module before the capture
        cy.fill(0)
        cp_stream.synchronize()
        cp_stream.begin_capture()
        for _ in range(kernels):
            cp_saxpy(grid, (256,), (cy, cx, alpha, np.int32(n)))
        cp_graph = cp_stream.end_capture()
        timings["CuPy graph replay"] = held_timing(
            cupy_lane(cp),
            lambda: cp_graph.launch(cp_stream),
            calls=GRAPH_CALLS,
            reps=args.reps,
            cycles_per_ms=cycles_per_ms,
        )
        cp_stream.synchronize()
    check_count(cp.asnumpy(cy), timings["CuPy graph replay"].calls * kernels, "CuPy graph replays")
    results: dict[str, float] = {}
    for label, timing in timings.items():
        results[f"{label}: GPU µs per kernel, stream held"] = timing.gpu_ms / kernels * 1e3
        results[f"{label}: host µs per {kernels} kernels"] = timing.host_us
    return results


def _bandwidth(nbytes: int, run: Callable[[], object], reps: int) -> float:
    return nbytes / wall_median(run, reps) / 1e9


def bench_transfer(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp
    import cupyx

    s = kd.default_session()
    count = args.transfer_mib * (1 << 20) // 4
    nbytes = count * 4
    reps = max(5, args.reps // 3)
    host = np.random.default_rng().standard_normal(count, dtype=np.float32)
    back = np.empty_like(host)
    dev = s.empty(count, np.float32)
    pinned = s.pinned_empty(count, np.float32)
    pinned.array[...] = host
    results = {
        "kerneldsl H2D pageable": _bandwidth(nbytes, lambda: dev.copy_from_host(host), reps),
        "kerneldsl D2H pageable": _bandwidth(nbytes, lambda: dev.copy_to_host(back), reps),
    }

    def h2d_pinned() -> None:
        dev.copy_from_host_async(pinned)
        s.stream.synchronize()

    def d2h_pinned() -> None:
        dev.copy_to_host_async(pinned)
        s.stream.synchronize()

    results["kerneldsl H2D pinned"] = _bandwidth(nbytes, h2d_pinned, reps)
    results["kerneldsl D2H pinned"] = _bandwidth(nbytes, d2h_pinned, reps)
    for name, got in (("kerneldsl pinned round trip", pinned.array), ("kerneldsl pageable D2H", back)):
        if not np.array_equal(got, host):
            raise AssertionError(f"{name}: the bytes that came back differ from those sent")

    cdev = cp.empty(count, cp.float32)
    cpinned = cupyx.empty_pinned(count, np.float32)
    cpinned[...] = host
    stream = cp.cuda.Stream(non_blocking=True)

    def cp_h2d_pinned() -> None:
        cdev.set(cpinned, stream=stream)
        stream.synchronize()

    def cp_d2h_pinned() -> None:
        cdev.get(stream=stream, out=cpinned)
        stream.synchronize()

    results["CuPy H2D pageable"] = _bandwidth(nbytes, lambda: cdev.set(host), reps)
    results["CuPy D2H pageable"] = _bandwidth(nbytes, lambda: cdev.get(out=back), reps)
    results["CuPy H2D pinned"] = _bandwidth(nbytes, cp_h2d_pinned, reps)
    results["CuPy D2H pinned"] = _bandwidth(nbytes, cp_d2h_pinned, reps)
    return results


def bench_e2e(args: argparse.Namespace) -> dict[str, float]:
    import cupy as cp

    n = 1 << 24
    rng = np.random.default_rng()
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    alpha = np.float32(2.0)
    expected = alpha * x + y
    out = y.copy()
    saxpy(out, x, alpha)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    reps = max(5, args.reps // 3)

    def kd_run() -> None:
        out[...] = y
        saxpy(out, x, alpha)

    build = saxpy.inspect(out, x, alpha)
    cp_saxpy = cp.RawModule(code=build.cuda_source, options=("-std=c++17",)).get_function(build.generated.entry)

    def cp_run() -> None:
        out[...] = y
        cy, cx = cp.asarray(out), cp.asarray(x)
        cp_saxpy(((n + 255) // 256,), (256,), (cy, cx, alpha, np.int32(n)))
        cy.get(out=out)

    results = {
        "kerneldsl numpy path (ms)": wall_median(kd_run, reps) * 1e3,
        "CuPy asarray+kernel+get (ms)": wall_median(cp_run, reps) * 1e3,
    }
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    return results


def run(args: argparse.Namespace) -> Report:
    report: Report = {
        "launch (µs per launch)": bench_launch(args),
        "graph": bench_graph(args),
        "transfer (GB/s)": bench_transfer(args),
        "e2e saxpy 2^24 float32": bench_e2e(args),
    }
    launch = report["launch (µs per launch)"]
    report["ratios"] = {
        "kerneldsl / raw launch": launch["kerneldsl"] / launch["raw cuLaunchKernel"],
        "kerneldsl graph / CuPy graph (GPU time)": report["graph"][
            "kerneldsl graph replay: GPU µs per kernel, stream held"
        ]
        / report["graph"]["CuPy graph replay: GPU µs per kernel, stream held"],
        "pinned H2D kerneldsl / CuPy": report["transfer (GB/s)"]["kerneldsl H2D pinned"]
        / report["transfer (GB/s)"]["CuPy H2D pinned"],
        "pinned D2H kerneldsl / CuPy": report["transfer (GB/s)"]["kerneldsl D2H pinned"]
        / report["transfer (GB/s)"]["CuPy D2H pinned"],
    }
    print_report(report, args)
    return report
