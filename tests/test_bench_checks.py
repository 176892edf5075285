"""The benchmarks' checking and timing logic, on the CPU: a bench fails loudly on a wrong result,
and its held-stream timing counts what it ran and refuses a figure the host could have diluted.
(The benches' GPU figures are measured on a GPU; here their pure-Python parts run against doubles.)"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from kerneldsl.bench import error_bounds, fuse_bench, held_timing, runtime_bench


class FakeLane:
    """A stream double: ``record`` stamps a GPU clock that advances by ``gpu_ms_per_call`` for
    each call enqueued since the last record; ``hold`` notes the spin's cycles."""

    def __init__(self, gpu_ms_per_call: float) -> None:
        self.gpu_ms_per_call = gpu_ms_per_call
        self.clock = 0.0
        self.pending = 0
        self.holds: list[int] = []

    def lane(self) -> held_timing.Lane:
        return held_timing.Lane(self.holds.append, self.record, lambda a, b: b - a, lambda: None)

    def call(self) -> object:
        self.pending += 1
        return object()

    def record(self) -> float:
        self.clock += self.pending * self.gpu_ms_per_call
        self.pending = 0
        return self.clock


def test_held_timing_reports_gpu_time_per_call_and_counts_every_call() -> None:
    fake = FakeLane(gpu_ms_per_call=0.004)
    timing = held_timing.held_timing(fake.lane(), fake.call, calls=7, reps=5, cycles_per_ms=1e6)
    assert timing.gpu_ms == pytest.approx(0.004)
    assert timing.calls == 1 + 7 + 5 * 7  # warm-up, the pass that sizes the spin, the repetitions
    assert timing.host_us > 0 and len(fake.holds) == 5


def test_the_spin_outlasts_the_hosts_enqueue_time_with_headroom() -> None:
    assert held_timing.spin_cycles(0.002, 1000.0) == int(2 * held_timing.SPIN_HEADROOM * 1000)
    assert held_timing.spin_cycles(0.0, 1000.0) == int(held_timing.MIN_SPIN_MS * 1000)


def test_a_repetition_the_host_outlasted_is_repeated_with_a_longer_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    seconds = itertools.count()
    monkeypatch.setattr(held_timing, "perf_counter", lambda: next(seconds) * 1e-4)  # every call 0.1 ms
    monkeypatch.setattr(held_timing, "spin_cycles", lambda host, rate: int(0.05 * rate))  # 0.05 ms: too short
    fake = FakeLane(gpu_ms_per_call=0.001)
    timing = held_timing.held_timing(fake.lane(), fake.call, calls=1, reps=1, cycles_per_ms=1e6)
    assert fake.holds == [50_000, 200_000]  # the first spin ended before the host did: not counted
    assert timing.calls == 1 + 1 + 2


def test_a_host_that_outlasts_every_spin_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    seconds = itertools.count()
    monkeypatch.setattr(held_timing, "perf_counter", lambda: next(seconds) * 10.0)  # every call 10 s
    monkeypatch.setattr(held_timing, "spin_cycles", lambda host, rate: int(0.05 * rate))
    fake = FakeLane(gpu_ms_per_call=0.001)
    with pytest.raises(held_timing.StreamNotHeldError, match="longer than"):
        held_timing.held_timing(fake.lane(), fake.call, calls=1, reps=1, cycles_per_ms=1.0)


def test_each_drained_pass_is_handed_over_and_only_the_last_timed_one_is_final() -> None:
    fake = FakeLane(gpu_ms_per_call=0.001)
    passes: list[tuple[int, bool]] = []
    held_timing.held_timing(
        fake.lane(),
        fake.call,
        calls=3,
        reps=4,
        cycles_per_ms=1e6,
        drained=lambda r, final: passes.append((len(r), final)),
    )
    assert passes == [(4, False), (3, False), (3, False), (3, False), (3, True)]  # warm-up + sizing pass first


def test_held_enqueue_cost_holds_then_syncs_each_repetition() -> None:
    events: list[str] = []
    cost = held_timing.held_enqueue_cost(
        lambda: events.append("hold"), lambda: events.append("call"), lambda: events.append("sync"), 3, 2
    )
    assert events == ["hold", "call", "call", "call", "sync"] * 2 and cost >= 0


# --- the runtime bench's launch counts ----------------------------------------------------------


def test_launch_counts_pass_when_every_launch_landed() -> None:
    runtime_bench.check_count(np.full(1024, 90_000, np.float32), 90_000, "saxpy")


@pytest.mark.parametrize("wrong", [89_999, 90_001, 0])
def test_a_lost_or_extra_launch_fails_the_launch_bench(wrong: int) -> None:
    values = np.full(1024, 90_000, np.float32)
    values[17] = wrong
    with pytest.raises(AssertionError, match="1 of 1024 element"):
        runtime_bench.check_count(values, 90_000, "saxpy")


def test_more_launches_than_float32_counts_exactly_are_refused() -> None:
    with pytest.raises(ValueError, match="counts exactly"):
        runtime_bench.check_count(np.zeros(4, np.float32), 1 << 24, "saxpy")


def test_the_bench_modules_import_without_a_gpu() -> None:
    import importlib

    from kerneldsl.bench import BENCHMARKS

    for benchmark in BENCHMARKS.values():
        module: Any = importlib.import_module(benchmark.module)
        assert callable(module.run)


# --- the fuse bench ------------------------------------------------------------------------------


def test_the_copy_floor_moves_what_the_operation_must() -> None:
    assert fuse_bench.moved_bytes("softmax", (4096, 4096), 4) == 2 * 4096 * 4096 * 4
    assert fuse_bench.moved_bytes("logsumexp", (4096, 4096), 2) == (4096 * 4096 + 4096) * 2  # one value a row
    assert fuse_bench.moved_bytes("layer_norm", (8, 2, 768), 4) == (2 * 16 * 768 + 2 * 768) * 4
    assert fuse_bench.moved_bytes("rms_norm", (32768, 768), 2) == (2 * 32768 * 768 + 768) * 2


H100 = {"multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32, "max_shared_mem": 232448}


def test_the_tutorials_grid_is_its_occupancy_times_the_sms_capped_at_the_rows() -> None:
    # 32 registers x 32 lanes x 8 warps: 8 programs an SM by registers; 1 KB of shared memory: 227
    assert fuse_bench.tutorial_programs(100_000, 32, 1024, H100, 8) == 132 * 8
    assert fuse_bench.tutorial_programs(100_000, 32, 100_000, H100, 8) == 132 * 2  # shared memory limits
    assert fuse_bench.tutorial_programs(500, 32, 1024, H100, 8) == 500
    assert fuse_bench.tutorial_programs(100_000, 32, 0, H100, 8) == 132 * 8
    assert fuse_bench.tutorial_stages(H100) == 4 and fuse_bench.tutorial_stages({"max_shared_mem": 101376}) == 2


@pytest.mark.parametrize("name", fuse_bench.PIPELINES)
def test_a_pipelines_reference_passes_and_a_wrong_result_fails_its_check(name: str) -> None:
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(shape).astype(np.float32) * 3 for shape in ((16, 1000), (1000,), (1000,)))
    want, bound = fuse_bench.expected(name, x, w, b)
    fuse_bench.check(name, want.astype(np.float32), want, bound)
    for wrong in (np.zeros_like(want), want / 2, np.full_like(want, np.nan)):
        with pytest.raises(AssertionError, match=name):
            fuse_bench.check(name, wrong, want, bound)
    with pytest.raises(AssertionError, match="values"):
        fuse_bench.check(name, want[:-1], want, bound)


def _timed_contender(write: bool) -> tuple[fuse_bench.Contender, np.ndarray]:
    """A contender whose call writes ``out`` (when ``write``) on a stream double."""
    fake = FakeLane(gpu_ms_per_call=0.01)
    want = np.arange(6.0)
    out = np.zeros(6)

    def run() -> object:
        if write:
            out[...] = want
        return fake.call()

    def poison(results: list[Any]) -> None:
        out.fill(np.nan)

    contender = fuse_bench.Contender(fake.lane(), run, lambda _: out.copy(), poison, want, np.zeros(()))
    return contender, out


def test_the_fuse_bench_checks_the_calls_it_timed_on_poisoned_output() -> None:
    contender, out = _timed_contender(write=True)
    assert contender.timed("kd", 3, 1e6).gpu_ms == pytest.approx(0.01)
    assert np.isnan(out).all()  # poisoned again once checked


def test_a_call_that_leaves_its_output_alone_fails_the_fuse_bench() -> None:
    contender, _ = _timed_contender(write=False)  # the output still holds the poison
    with pytest.raises(AssertionError, match="6 of 6 element"):
        contender.timed("kd", 3, 1e6)


# --- the arrays bench's numpy path ---------------------------------------------------------------


def test_an_in_place_saxpy_that_writes_back_passes() -> None:
    from kerneldsl.bench import arrays_bench

    rng = np.random.default_rng(5)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    alpha = np.float32(1e-3)

    def call() -> None:
        y[...] = alpha * x + y

    arrays_bench.checked_saxpy(call, x, y, alpha, "numpy saxpy")


def test_a_saxpy_that_does_not_copy_its_result_back_fails_the_numpy_bench() -> None:
    from kerneldsl.bench import arrays_bench

    rng = np.random.default_rng(6)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    with pytest.raises(AssertionError, match="numpy saxpy"):
        arrays_bench.checked_saxpy(lambda: None, x, y, np.float32(1e-3), "numpy saxpy")


# --- the reduce benches --------------------------------------------------------------------------


def test_sparse_ones_sum_and_scan_exactly_in_float32() -> None:
    from kerneldsl.bench import reduce_bench

    x = reduce_bench.sparse_ones(1 << 22, 1)
    assert set(np.unique(x).tolist()) == {0.0, 1.0}
    np.testing.assert_array_equal(np.cumsum(x, dtype=np.float32), np.cumsum(x, dtype=np.float64))
    assert reduce_bench.FULL_N * reduce_bench.ONES_PER_ZERO * 1.01 < 2**24  # the full sum stays exact too


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.int32])
def test_the_layouts_bench_holds_each_output_to_its_own_bound(dt: Any) -> None:
    from kerneldsl.bench import reduce_layouts_bench as layouts

    x = layouts._data((37, 100, 13), dt, 1)
    want, bound = layouts._expected(x, (0, 2))
    assert bound.shape == want.shape == (100,)
    assert error_bounds.violations(np.zeros_like(want), want, bound).any()
    if np.dtype(dt).kind == "i":
        assert not bound.any()  # integer sums are exact
