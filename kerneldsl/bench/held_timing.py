"""Timing with the stream held: what every benchmark of small kernels shares (GPU required to run).

An event window around back-to-back launches measures the launch cost, not the kernel, once a
kernel takes less time than its launch (under about 20 µs): the GPU idles between launches
while the host enqueues. Holding the stream fixes both figures apart. A spin kernel is enqueued
first; the timed calls queue up behind it, between two events, while it spins; the host's time to
enqueue them is the host cost per call; once the spin ends the GPU runs them back to back, and the
events measure GPU time alone. The spin is sized from the host's own enqueue time (measured on a
warm-up pass) and checked on every repetition: a repetition whose enqueue outlasted the spin is
repeated with a longer one, so an idle gap never enters a figure.

Each library holds and times its own stream: ``Lane`` says how (kd's session stream, torch's
current stream, CuPy's current stream). Calls that allocate keep their results until the stream
drains, so no free waits on the spin in any library.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import kerneldsl as kd

SPIN_SOURCE = r"""
extern "C" __global__ void kd_bench_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""
SPIN_HEADROOM = 3.0  # the spin lasts this many times the host's warm-up enqueue time
MIN_SPIN_MS = 0.5
ATTEMPTS = 4  # longer spins tried for one repetition before giving up


@kd.kernel(grid=1, block=1)
def spin(cycles: kd.Scalar[kd.int64]) -> str:
    return """
    long long start = clock64();
    while (clock64() - start < cycles) { }
    """


@dataclass(frozen=True)
class Lane:
    """One library's stream: how to hold it, record an event on it, time two events, drain it."""

    hold: Callable[[int], object]  # enqueue a spin of this many GPU clock cycles
    record: Callable[[], Any]
    elapsed_ms: Callable[[Any, Any], float]
    synchronize: Callable[[], object]


@dataclass(frozen=True)
class Timing:
    """Medians per call: GPU time of calls run back to back, and the host's time to enqueue one;
    and how many calls ran in all (warm-up and repeated repetitions included), for the checks
    that count what the calls did."""

    gpu_ms: float
    host_us: float
    calls: int


class StreamNotHeldError(RuntimeError):
    """The host kept enqueueing after the longest spin tried had ended."""


def spin_cycles(host_seconds: float, cycles_per_ms: float) -> int:
    """GPU clock cycles to spin while the host enqueues work it took ``host_seconds`` to enqueue
    on a warm-up pass: ``SPIN_HEADROOM`` times that, at least ``MIN_SPIN_MS``."""
    return int(max(host_seconds * 1e3 * SPIN_HEADROOM, MIN_SPIN_MS) * cycles_per_ms)


Drained = Callable[[list[Any], bool], object]  # (a pass's results, whether it is the last one timed)


def held_timing(
    lane: Lane,
    run: Callable[[], Any],
    *,
    calls: int,
    reps: int,
    cycles_per_ms: float,
    drained: Drained | None = None,
) -> Timing:
    """Median GPU ms and host µs per call over ``reps`` repetitions of ``calls`` calls of ``run``
    enqueued behind a spin kernel, after a warm-up call and an unheld pass that sizes the spin.
    Results are kept until each pass drains, then handed to ``drained`` with whether that pass
    was the last one timed: a bench checks the last call's result there and poisons the rest
    (its ``out=``, or the results an allocator would hand back), so that no pass can pass by
    finding the right answer already in place."""
    made = 1 + calls
    kept: list[Any] = [run()]
    lane.synchronize()
    start = perf_counter()
    for _ in range(calls):
        kept.append(run())
    host = perf_counter() - start
    lane.synchronize()
    if drained is not None:
        drained(kept, False)
    kept.clear()
    cycles = spin_cycles(host, cycles_per_ms)
    gpu: list[float] = []
    enqueue: list[float] = []
    for rep in range(reps):
        for _attempt in range(ATTEMPTS):
            spin_ms = cycles / cycles_per_ms
            lane.hold(cycles)
            begin = lane.record()
            start = perf_counter()
            for _ in range(calls):
                kept.append(run())
            host = perf_counter() - start
            end = lane.record()
            lane.synchronize()
            made += calls
            held = host * 1e3 < spin_ms
            if drained is not None:
                drained(kept, held and rep == reps - 1)
            kept.clear()
            if held:
                break
            cycles *= 4  # the GPU may have idled: this repetition does not count
        else:
            raise StreamNotHeldError(
                f"enqueueing {calls} calls took {host * 1e3:.2f} ms, longer than a {spin_ms:.2f} ms spin"
            )
        gpu.append(lane.elapsed_ms(begin, end) / calls)
        enqueue.append(host / calls * 1e6)
    return Timing(statistics.median(gpu), statistics.median(enqueue), made)


def held_enqueue_cost(
    hold: Callable[[], object], enqueue: Callable[[], object], sync: Callable[[], object], launches: int, reps: int
) -> float:
    """Median seconds per enqueue while the stream is busy with a spin kernel (host cost alone)."""
    samples = []
    for _ in range(reps):
        hold()
        start = perf_counter()
        for _ in range(launches):
            enqueue()
        samples.append((perf_counter() - start) / launches)
        sync()
    return statistics.median(samples)


def interleaved_enqueue_costs(
    contenders: Mapping[str, tuple[Callable[[], object], Callable[[], object], Callable[[], object]]],
    launches: int,
    reps: int,
) -> dict[str, float]:
    """``held_enqueue_cost`` of each (hold, enqueue, sync) contender, taking turns every repetition
    so drift in clocks or load affects them all alike; median seconds per enqueue."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, (hold, enqueue, sync) in contenders.items():
            samples[name].append(held_enqueue_cost(hold, enqueue, sync, launches, 1))
    return {name: statistics.median(values) for name, values in samples.items()}


def kd_lane(session: kd.Session) -> Lane:
    """The session's stream, held by ``spin``."""
    return Lane(
        hold=lambda cycles: spin(cycles),
        record=lambda: session.create_event().record(),
        elapsed_ms=lambda a, b: b.elapsed_since(a),
        synchronize=session.synchronize,
    )


def torch_lane(torch: Any) -> Lane:
    """torch's current stream, held by ``torch.cuda._sleep`` (a spin of so many cycles)."""

    def record() -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    return Lane(torch.cuda._sleep, record, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)


def cupy_lane(cp: Any) -> Lane:
    """CuPy's current stream, held by the same spin compiled as a RawKernel."""
    kernel = cp.RawKernel(SPIN_SOURCE, "kd_bench_spin")

    def record() -> Any:
        event = cp.cuda.Event()
        event.record()
        return event

    return Lane(
        hold=lambda cycles: kernel((1,), (1,), (cp.int64(cycles),)),
        record=record,
        elapsed_ms=cp.cuda.get_elapsed_time,
        synchronize=lambda: cp.cuda.get_current_stream().synchronize(),
    )


@functools.lru_cache(maxsize=1)
def gpu_cycles_per_ms() -> float:
    """The spin kernel's clock rate, timed once between two events on kd's stream."""
    lane = kd_lane(kd.default_session())
    cycles = 20_000_000
    lane.hold(1000)
    lane.synchronize()
    begin = lane.record()
    lane.hold(cycles)
    end = lane.record()
    lane.synchronize()
    return cycles / lane.elapsed_ms(begin, end)
