"""``kerneldsl bench cpu``'s checking logic: every timed call writes over poison and is checked
against NumPy, a wrong answer raises, and the bench's own kernels, ops and fiber micro-kernels
compute NumPy's answers on tiny sizes on the CPU device. No timing is asserted."""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.bench import BENCHMARKS, cpu_bench, cpu_cases, cpu_ops
from kerneldsl.bench.cpu_bench import Contender, Figure, time_checked
from kerneldsl.bench.cpu_cases import Case, Sizes, WrongResultError

TINY = Sizes(n=2048 + 7, rows=40, cols=70, side=48, simulated_n=0, simulated_side=0)
needs_cpu_device = pytest.mark.skipif(not kd.is_available("cpu"), reason="the CPU device is not available here")


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):  # type: ignore[no-untyped-def]
    yield


def _numpy_writing(case: Case, values: np.ndarray) -> Contender:
    out = np.empty_like(case.want)
    return Contender("writer", lambda: np.copyto(out, values), lambda: out, lambda: out.fill(-1))


def test_a_wrong_element_raises_naming_the_contender_and_where() -> None:
    case = cpu_cases.histogram(1000, np.random.default_rng(0))
    wrong = case.want.copy()
    wrong[7] += 1
    with pytest.raises(WrongResultError, match=r"writer histogram: 1 of 256 element\(s\) wrong, first at \(7,\)"):
        time_checked([(case, _numpy_writing(case, wrong))], reps=1)


def test_a_contender_that_writes_nothing_is_caught_by_the_poison() -> None:
    case = cpu_cases.transpose(5, 9, np.random.default_rng(0))
    out = np.empty_like(case.want)
    np.copyto(out, case.want)  # right before the poison: only a call that writes passes
    idle = Contender("idle", lambda: None, lambda: out, lambda: out.fill(np.nan))
    with pytest.raises(WrongResultError, match="idle transpose"):
        time_checked([(case, idle)], reps=1)


def test_a_result_within_the_tolerance_passes_and_one_outside_raises() -> None:
    case = cpu_cases.saxpy(100, np.random.default_rng(0))
    time_checked([(case, _numpy_writing(case, case.want * np.float32(1 + 5e-7)))], reps=1)
    with pytest.raises(WrongResultError):
        time_checked([(case, _numpy_writing(case, case.want * np.float32(1 + 1e-5)))], reps=1)


def test_every_timed_call_is_checked_not_only_the_first() -> None:
    case = cpu_cases.saxpy(64, np.random.default_rng(0))
    out = np.empty_like(case.want)
    calls = []

    def run() -> None:
        calls.append(1)
        np.copyto(out, case.want if len(calls) < 3 else case.want + 1)

    with pytest.raises(WrongResultError):
        time_checked([(case, Contender("late", run, lambda: out))], reps=5)
    assert len(calls) == 3


def test_the_sum_inputs_are_exact_in_float32_in_any_order() -> None:
    case = cpu_cases.total(1 << 16, np.random.default_rng(0))
    x = case.inputs["x"]
    assert np.float32(x.sum(dtype=np.float32)) == case.want[0] == np.float32(np.cumsum(x[::-1])[-1])


def test_a_figure_meets_a_ceiling_or_a_floor() -> None:
    assert Figure("ratio", 1.5, "x", 2.0).met == "yes"
    assert Figure("ratio", 2.5, "x", 2.0).met == "NO"
    assert Figure("speedup", 9_000.0, "x", 10_000.0, at_least=True).met == "NO"
    assert Figure("info", 3.0, "ms").met == ""


def test_the_bench_is_registered_with_its_baselines_and_options() -> None:
    bench = BENCHMARKS["cpu"]
    assert not bench.gpu and set(bench.modules) == {"warp", "numba"} and "bench-cpu" in bench.install
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--quick", "--reps", "3", "--only", "fibers"])
    assert (args.quick, args.reps, args.only) == (True, 3, ["fibers"])


@needs_cpu_device
@pytest.mark.parametrize("name", ["saxpy", "transpose", "sum", "histogram", "stencil"])
def test_the_kernels_compute_numpys_answer_on_the_cpu_device(cpu, name) -> None:  # type: ignore[no-untyped-def]
    case = TINY.cases()[name]
    contenders = cpu_bench.kerneldsl_contenders(cpu, case)
    assert len(contenders) == (2 if name in ("sum", "histogram") else 1)
    times = time_checked([(case, c) for c in contenders], reps=1)
    assert set(times) == {c.label for c in contenders}


@needs_cpu_device
def test_a_kernel_computing_something_else_raises(cpu) -> None:  # type: ignore[no-untyped-def]
    from kerneldsl.bench import cpu_kernels

    case = TINY.cases()["saxpy"]
    x, y = (cpu.to_device(case.inputs[k]) for k in ("x", "y"))
    out = cpu.empty(case.want.shape, case.want.dtype)
    wrong_alpha = cpu_bench._kd_contender(cpu, "kerneldsl", out, lambda: cpu_kernels.saxpy(out, x, y, 0.5))
    with pytest.raises(WrongResultError, match="kerneldsl saxpy"):
        time_checked([(case, wrong_alpha)], reps=1)


@needs_cpu_device
def test_the_waiting_micro_kernels_compute_their_expected_values_split_and_on_fibers(cpu) -> None:  # type: ignore[no-untyped-def]
    figures = cpu_bench.bench_fibers(cpu, threads=1024, extra=3, reps=1)
    assert [f.target for f in figures] == [None, None, None, 6.0, 4.0, 6.0] + [None] * 5


@needs_cpu_device
def test_the_ops_and_fused_pipelines_compute_numpys_answer(cpu) -> None:  # type: ignore[no-untyped-def]
    for op in cpu_ops.op_cases(n=4096 + 3, side=33):
        time_checked([(op.case, c) for c in cpu_bench.op_contenders(cpu, op)], reps=1)


@needs_cpu_device
def test_the_layout_cases_compute_numpys_answer(cpu) -> None:  # type: ignore[no-untyped-def]
    for op in cpu_ops.layout_cases(side=48):
        time_checked([(op.case, c) for c in cpu_bench.layout_contenders(cpu, op)], reps=1)


@pytest.mark.skipif(importlib.util.find_spec("warp") is None, reason="NVIDIA Warp (warp-lang) is not installed")
def test_warps_kernels_compute_numpys_answer() -> None:
    from kerneldsl.bench import cpu_warp

    cpu_warp.init()
    for case in TINY.cases().values():
        time_checked([(case, cpu_bench.warp_contender(case))], reps=1)
