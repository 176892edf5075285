"""What calling a kerneldsl kernel as a PyTorch operator costs the host, side by side in one process.

One kernel of one element (``y = alpha * x``), so what is timed is the call, not the work:

- ``direct``: the kernel called with DeviceArrays, its output preallocated (kerneldsl's floor),
  and the baseline of the targets: the same direct call with its output allocated by
  ``torch.empty_like`` and adopted, as the operator must (the input adopted once, before timing);
- ``kd.torch.op``: the operator ``kd.torch.op`` registered (``Library.define`` / ``impl``), called
  as ``torch.ops.kdbench.scale.default(x, alpha)`` from eager PyTorch: adopts the tensor,
  allocates the output (``torch.empty_like``, the output being the input's twin), launches;
- ``custom_op``: the same work (the same adoption and allocation) wrapped by hand in
  ``torch.library.custom_op`` with a ``register_fake``, as users wrap kernels today;
- the dispatcher's floor: operators of the same schema registered the same way (for the CPU and
  CUDA keys) whose implementation returns its input, or only allocates the output
  (``torch.empty_like``); the operator's time above the allocating one is what kd.torch adds
  inside torch's dispatch (its warm call and the launch), apart from what the dispatcher costs;
- ``torch.mul``: PyTorch's own op on the same tensors, for scale.

Targets: the operator at most 2 µs above the direct call that allocates its output, and its
overhead (time above that call) at most 0.5x ``custom_op``'s; its time above the preallocated
direct call is shown too. Section ``cpu`` runs on CPU tensors (kerneldsl's CPU device); section
``cuda``, when a GPU and a CUDA torch are present, on CUDA tensors (host time per call, work
queued on torch's current stream) and under a CUDA graph (GPU time per captured op). Each figure
is the median over ``--reps`` rounds of ``--calls`` calls; in a round every contender takes its
turn, so a shared machine's load falls on all alike. Every contender that runs the kernel has its
result checked against ``alpha * x`` before and after timing. ``--clock cpu`` times rounds by
the thread's CPU time instead of the wall clock.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NewType, TypeVar, cast

import kerneldsl as kd

from ..torch.tensors import device_of  # kd.torch checks the extra (TorchNotAvailableError) before torch loads
from .report import Report, run_sections

if TYPE_CHECKING:
    import torch

T = TypeVar("T")
n = NewType("n", int)

ALPHA = 2.0
GRAPH_OPS = 100  # ops captured in the CUDA graph section's graph


class WrongResultError(AssertionError):
    """A benchmarked call returned something other than ``alpha * x``."""


@kd.kernel(grid=kd.cdiv(n, 128), block=128)
def scale(y: kd.Out[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i];
    """


_registered: dict[str, Any] = {}


def _operators() -> tuple[Any, Any]:
    """``kdbench::scale`` (kd.torch.op) and ``kdbench::scale_custom`` (custom_op by hand), made once."""
    import torch

    if not _registered:
        _registered["floor"] = _dispatcher_floor()
        _registered["op"] = kd.torch.op("kdbench::scale")(scale)

        def scale_custom(x: torch.Tensor, alpha: float) -> torch.Tensor:
            device = device_of(x)
            y = torch.empty_like(x)
            scale(device.adopt(y, "scale", "y"), device.adopt(x, "scale", "x"), alpha)
            return y

        def scale_custom_fake(x: torch.Tensor, alpha: float) -> torch.Tensor:
            return torch.empty_like(x)

        # the schema is given: annotations are strings here (from __future__ import annotations)
        registered = torch.library.custom_op(
            "kdbench::scale_custom", scale_custom, mutates_args=(), schema="(Tensor x, float alpha) -> Tensor"
        )
        registered.register_fake(scale_custom_fake)
        _registered["custom"] = registered
    return _registered["op"], _registered["custom"]


def _dispatcher_floor() -> Any:
    """``kdbench::floor_identity`` and ``kdbench::floor_allocate``: the operator's schema, registered
    with ``Library.define`` / ``impl`` as kd.torch registers, doing nothing (returning its input)
    or only allocating the output. Kept alive with the registrations (the library owns them)."""
    import torch

    library = cast(Any, torch.library.Library)("kdbench", "FRAGMENT")
    library.define("floor_identity(Tensor x, Scalar alpha) -> Tensor")
    library.define("floor_allocate(Tensor x, Scalar alpha) -> Tensor")
    for key in ("CPU", "CUDA"):
        library.impl("floor_identity", lambda x, alpha: x, key)
        library.impl("floor_allocate", lambda x, alpha: torch.empty_like(x), key)
    return library


def _checked(result: Any, x: torch.Tensor, name: str) -> None:
    import torch

    if not torch.equal(result, x * ALPHA):
        raise WrongResultError(f"{name}: {result} is not {ALPHA} * {x}")


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def _per_call(
    contenders: dict[str, Callable[[], Any]], calls: int, reps: int, sync: Callable[[], None], clock: str = "wall"
) -> dict[str, float]:
    """Median µs per call of each contender, over ``reps`` rounds that time every contender in turn,
    by the wall clock or by this thread's CPU time (which other jobs of a shared machine do not
    inflate, as they do wall time; work a GPU does while the thread waits is not counted)."""
    now = CLOCKS[clock]
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for run in contenders.values():  # warm: compile, load, remember the C path
        for _ in range(10):
            run()
    sync()
    for _ in range(reps):
        for name, run in contenders.items():
            start = now()
            for _ in range(calls):
                run()
            sync()
            samples[name].append((now() - start) / calls * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


DIRECT = "direct kerneldsl call, output preallocated (µs)"
BASELINE = "direct call, output from torch.empty_like (µs)"
OURS = "kd.torch.op from eager torch (µs)"
CUSTOM = "custom_op by hand (µs)"
FLOOR_IDENTITY = "dispatcher floor: an operator returning its input (µs)"
FLOOR_ALLOCATE = "dispatcher floor: an operator allocating its output (µs)"


def _figures(times: dict[str, float]) -> dict[str, float]:
    baseline = times[BASELINE]
    ours = times[OURS] - baseline
    custom = times[CUSTOM] - baseline
    return {
        **times,
        "kd.torch.op above the allocating direct call (µs, target <= 2)": ours,
        "kd.torch.op above the preallocated direct call (µs)": times[OURS] - times[DIRECT],
        "custom_op above the allocating direct call (µs)": custom,
        "kd.torch.op overhead / custom_op's (target <= 0.5)": ours / custom,
        "kd.torch.op above the allocating floor operator (µs)": times[OURS] - times[FLOOR_ALLOCATE],
    }


def _contenders(device: str, session: Any, sync: Callable[[], None]) -> dict[str, Callable[[], Any]]:
    import torch

    op, custom = _operators()
    overload = op.overload
    x = torch.full((1,), 3.0, device=device)
    dx = device_of(x).adopt(x, "scale", "x")
    dy = session.empty(1, "float32")
    stream = device_of(x).current_stream()
    launch = {} if stream is None else {"stream": stream}
    for name, result in [("kd.torch.op", overload(x, ALPHA)), ("custom_op", custom(x, ALPHA))]:
        _checked(result, x, name)
    scale(dy, dx, ALPHA, **launch)
    sync()
    if float(dy.to_host()[0]) != 3.0 * ALPHA:
        raise WrongResultError(f"direct call: {dy.to_host()} is not {ALPHA} * 3")
    contenders = {
        DIRECT: lambda: scale(dy, dx, ALPHA, **launch),
        BASELINE: lambda: _direct_allocating(x, dx, launch),
        OURS: lambda: overload(x, ALPHA),
        CUSTOM: lambda: custom(x, ALPHA),
        "torch.mul (µs)": lambda: torch.mul(x, ALPHA),
    }
    identity, allocate = torch.ops.kdbench.floor_identity.default, torch.ops.kdbench.floor_allocate.default
    contenders[FLOOR_IDENTITY] = lambda: identity(x, ALPHA)
    contenders[FLOOR_ALLOCATE] = lambda: allocate(x, ALPHA)
    return contenders


def _direct_allocating(x: Any, dx: Any, launch: dict[str, Any]) -> Any:
    """The direct call with the output the operator would allocate: what remains is the dispatch."""
    import torch

    y = torch.empty_like(x)
    scale(device_of(y).adopt(y, "scale", "y"), dx, ALPHA, **launch)
    return y


def bench_cpu(args: argparse.Namespace) -> dict[str, float]:
    import torch

    session = device_of(torch.empty(1)).session
    contenders = _contenders("cpu", session, lambda: None)
    figures = _figures(_per_call(contenders, args.calls, args.reps, lambda: None, args.clock))
    op, custom = _operators()
    x = torch.full((1,), 3.0)
    _checked(op.overload(x, ALPHA), x, "kd.torch.op after timing")
    _checked(custom(x, ALPHA), x, "custom_op after timing")
    return figures


def bench_cuda(args: argparse.Namespace) -> dict[str, float]:
    import torch

    if not torch.cuda.is_available():
        print("cuda: skipped (no GPU, or a CPU build of torch)")
        return {}
    x = torch.full((1,), 3.0, device="cuda")
    session = device_of(x).session
    figures = _figures(
        _per_call(
            _contenders("cuda", session, torch.cuda.synchronize),
            args.calls,
            args.reps,
            torch.cuda.synchronize,
            args.clock,
        )
    )
    figures.update(_graph_replay(args.reps))
    print(f"cuda: {torch.cuda.get_device_name(0)}")
    return figures


def _graph_replay(reps: int) -> dict[str, float]:
    """GPU µs per op of a CUDA graph of ``GRAPH_OPS`` chained calls, against the same chain of
    ``torch.mul``: what the op costs once the host is out of the way."""
    import torch

    op, _ = _operators()
    timings = {}
    steps: list[tuple[str, Callable[[Any], Any]]] = [
        ("kd.torch.op", lambda t: op.overload(t, 1.0)),
        ("torch.mul", lambda t: torch.mul(t, 1.0)),
    ]
    for name, step in steps:
        x = torch.full((1,), 3.0, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = x
            for _ in range(GRAPH_OPS):
                y = step(y)
        graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(y, x):
            raise WrongResultError(f"{name} in a CUDA graph: {y} is not {x}")
        samples = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / GRAPH_OPS)
        timings[f"{name} in a CUDA graph (GPU µs per op)"] = statistics.median(samples)
    return timings


SECTIONS = {
    "cpu": ("host cost of a warm call, CPU tensors on kerneldsl's CPU device (one element)", bench_cpu),
    "cuda": ("host cost of a warm call, CUDA tensors on torch's current stream (one element)", bench_cuda),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=15, help="timed rounds per contender (median reported)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    parser.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="time rounds by the wall clock, or by the thread's CPU time (steadier on a shared machine)",
    )
    parser.add_argument("--only", choices=list(SECTIONS), action="append", help="run only these sections (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
