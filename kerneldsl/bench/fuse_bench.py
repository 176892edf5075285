"""Fused pipelines through reductions side by side with PyTorch and Triton in one process (GPU required).

Softmax, log-softmax and logsumexp over the last axis at (4096, 4096), (16384, 1024) and
(1024, 32768); layer norm and RMS norm at (4096, 4096) and (32768, 768); float32 and bfloat16.
Each is written with ``@kd.fuse`` the natural way (below) and timed against torch eager
(``torch.softmax``, ``F.layer_norm``, ``F.rms_norm`` ...), ``torch.compile`` of the same function
written in torch, for softmax Triton's fused-softmax tutorial (its kernel and its host code: 8
warps, ``num_stages`` from the shared memory size, as many persistent programs as the compiled
kernel's registers and shared memory let stay resident), and the copy floor: a device-to-device
copy moving the bytes the operation must move (read the input, write the output: for logsumexp,
one value a row). Ratio columns: kd over the fastest baseline (target <= 1.0) and kd over the
copy floor (target <= 1.3).

Every contender, the copy floor included, is timed the same way (``held_timing``: GPU time of
calls queued behind a spin kernel, best of 3 rounds in which every contender takes a turn; host
time per call reported beside it) and checked on the calls it timed: outputs written through
``out=`` are poisoned (NaN) before every timed pass, results allocated by the call are poisoned
once drained so that an allocator cannot hand a right answer back, and the last timed call's
result is compared, every element, with NumPy float64 within its error bound
(``error_bounds``; the baselines' own algorithms within ``BASELINE_SLACK`` times it). A wrong
result raises. ``--only sweep``: seeded random pipelines, shapes (2-D and 3-D, odd row lengths)
and dtypes (float16 too) against torch eager and, for softmax, the Triton kernel, with the worst
ratios. ``--only first``: the first call's time in a fresh process, with an empty and with a warm
disk cache (``fuse_first_call``).
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench import error_bounds
from kerneldsl.bench.fuse_first_call import bench_first_call
from kerneldsl.bench.held_timing import Lane, Timing, gpu_cycles_per_ms, held_timing, kd_lane, torch_lane
from kerneldsl.bench.ops_bench import best_rounds
from kerneldsl.bench.pipelines import EPS, layer_norm, softmax
from kerneldsl.bench.report import Report, Section, run_sections

ROW_SHAPES = ((4096, 4096), (16384, 1024), (1024, 32768))
NORM_SHAPES = ((4096, 4096), (32768, 768))
DTYPES = ("float32", "bfloat16")
SWEEP_DTYPES = ("float32", "float16", "bfloat16")
SWEEP_CASES = 16
SWEEP_SEED = 20
PIPELINES = ("softmax", "log_softmax", "logsumexp", "layer_norm", "rms_norm")
CALLS = 10  # calls queued behind the spin kernel per timed pass
BASELINE_SLACK = 4.0  # torch's and Triton's own reduction orders (online softmax, Welford) within 4x kd's bound


@kd.fuse
def log_softmax(x: Any) -> Any:
    s = x - kd.ops.max(x, axis=-1, keepdims=True)
    return s - kd.ops.log(kd.ops.sum(kd.ops.exp(s), axis=-1, keepdims=True))


@kd.fuse
def logsumexp(x: Any) -> Any:
    m = kd.ops.max(x, axis=-1, keepdims=True)
    return m + kd.ops.log(kd.ops.sum(kd.ops.exp(x - m), axis=-1, keepdims=True))


@kd.fuse
def rms_norm(x: Any, w: Any) -> Any:
    return x / kd.ops.sqrt(kd.ops.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def _reference(name: str, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
    """The pipeline in NumPy float64, rows along the last axis."""
    if name == "layer_norm":
        xc = x - x.mean(-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + EPS) * w + b
    if name == "rms_norm":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w
    m = x.max(-1, keepdims=True)
    if name == "softmax":
        e = np.exp(x - m)
        return e / e.sum(-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(-1, keepdims=True))
    return lse if name == "logsumexp" else x - lse


def _torch_functions(torch: Any, name: str, n: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(torch eager's own op, the pipeline written the natural way in torch for torch.compile)."""
    F = torch.nn.functional
    if name == "softmax":
        return (lambda x, w, b: torch.softmax(x, -1)), lambda x, w, b: _torch_softmax(x)
    if name == "log_softmax":
        return (lambda x, w, b: torch.log_softmax(x, -1)), lambda x, w, b: x - torch.logsumexp(x, -1, keepdim=True)
    if name == "logsumexp":
        return (lambda x, w, b: torch.logsumexp(x, -1, keepdim=True)), lambda x, w, b: _torch_lse(x)
    if name == "layer_norm":
        return (lambda x, w, b: F.layer_norm(x, (n,), w, b, EPS)), lambda x, w, b: _torch_layer_norm(x, w, b)
    eager = (lambda x, w, b: F.rms_norm(x, (n,), w, EPS)) if hasattr(F, "rms_norm") else None
    natural = lambda x, w, b: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w  # noqa: E731
    return eager or natural, natural


def _torch_softmax(x: Any) -> Any:
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _torch_lse(x: Any) -> Any:
    m = x.amax(-1, keepdim=True)
    return m + (x - m).exp().sum(-1, keepdim=True).log()


def _torch_layer_norm(x: Any, w: Any, b: Any) -> Any:
    xc = x - x.mean(-1, keepdim=True)
    return xc * ((xc * xc).mean(-1, keepdim=True) + EPS).rsqrt() * w + b


def moved_bytes(name: str, shape: tuple[int, ...], itemsize: int) -> int:
    """The bytes ``name`` must move at least: read its input once, write its output once (and
    read layer norm's and RMS norm's weights)."""
    elements, row = math.prod(shape), shape[-1]
    writes = elements // row if name == "logsumexp" else elements
    weights = {"layer_norm": 2 * row, "rms_norm": row}.get(name, 0)
    return (elements + writes + weights) * itemsize


def tutorial_programs(n_rows: int, n_regs: int, size_smem: int, device: dict[str, int], num_warps: int) -> int:
    """Persistent programs the fused-softmax tutorial launches: as many per SM as the compiled
    kernel's registers and shared memory let stay resident, never more than the rows."""
    occupancy = device["max_num_regs"] // (n_regs * device["warpSize"] * num_warps)
    if size_smem:  # the tutorial divides by it: a kernel without shared memory is not limited by it
        occupancy = min(occupancy, device["max_shared_mem"] // size_smem)
    return min(device["multiprocessor_count"] * occupancy, n_rows)


def tutorial_stages(device: dict[str, int]) -> int:
    """The tutorial's software-pipelining stages: 4 with more than 200 KB of shared memory."""
    return 4 if device["max_shared_mem"] > 200000 else 2


TUTORIAL_WARPS = 8


@functools.lru_cache(maxsize=1)
def _triton_softmax() -> Callable[[Any, Any], None] | None:
    """Triton's fused-softmax tutorial (python/tutorials/02-fused-softmax.py): its kernel, rows
    strided over persistent programs with ``num_stages`` pipelined loads, and its host code; or
    None without Triton. 16-bit rows are widened to float32 as torch and kd compute them (the
    tutorial runs float32 only). The tutorial compiles and sizes the launch on every call; here
    that is done once per shape and dtype, as its ``kernels`` cache means, so that the host cost
    is the launch's."""
    try:
        import torch
        import triton
        import triton.language as tl
        from triton.runtime import driver
    except ImportError:
        return None

    @triton.jit  # type: ignore[untyped-decorator]  # triton ships no types
    def softmax_kernel(  # type: ignore[no-untyped-def]  # Triton's parameters carry no Python types
        output_ptr,
        input_ptr,
        input_row_stride,
        output_row_stride,
        n_rows,
        n_cols,
        BLOCK_SIZE: tl.constexpr,
        num_stages: tl.constexpr,
    ):
        row_start = tl.program_id(0)
        row_step = tl.num_programs(0)
        for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
            row_start_ptr = input_ptr + row_idx * input_row_stride
            col_offsets = tl.arange(0, BLOCK_SIZE)
            mask = col_offsets < n_cols
            row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf")).to(tl.float32)
            row_minus_max = row - tl.max(row, axis=0)
            numerator = tl.exp(row_minus_max)
            softmax_output = numerator / tl.sum(numerator, axis=0)
            output_ptrs = output_ptr + row_idx * output_row_stride + col_offsets
            tl.store(output_ptrs, softmax_output.to(output_ptr.dtype.element_ty), mask=mask)

    device = driver.active.utils.get_device_properties(torch.cuda.current_device())
    num_stages = tutorial_stages(device)
    launches: dict[tuple[Any, ...], tuple[Any, int]] = {}

    def run(x: Any, y: Any) -> None:
        n_rows, n_cols = x.shape
        key = (n_rows, n_cols, x.dtype)
        if key not in launches:
            block = triton.next_power_of_2(n_cols)
            kernel = softmax_kernel.warmup(
                y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=block, num_stages=num_stages,
                num_warps=TUTORIAL_WARPS, grid=(1,),
            )  # fmt: skip
            kernel._init_handles()
            programs = tutorial_programs(n_rows, kernel.n_regs, kernel.metadata.shared, device, TUTORIAL_WARPS)
            launches[key] = (kernel, programs)
        kernel, programs = launches[key]
        block = triton.next_power_of_2(n_cols)
        kernel[(programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, block, num_stages)

    return run


@functools.lru_cache(maxsize=len(ROW_SHAPES) * len(DTYPES))
def _inputs(shape: tuple[int, ...], dtype: str) -> tuple[Any, ...]:
    """x, w, b as NumPy arrays in ``dtype``, on the device for kd and for torch (made once per
    shape and dtype: the sections share them)."""
    import ml_dtypes
    import torch

    rng = np.random.default_rng(sum(shape))
    x32 = rng.standard_normal(shape, dtype=np.float32) * 3
    w32 = rng.random(shape[-1], dtype=np.float32) + 0.5
    b32 = rng.standard_normal(shape[-1], dtype=np.float32)
    stored_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    stored = [a.astype(stored_dtype) for a in (x32, w32, b32)]
    tensors = [torch.from_numpy(a.astype(np.float32)).cuda().to(getattr(torch, dtype)) for a in stored]
    s = kd.default_session()
    return (*stored, *tensors, *(s.to_device(a) for a in stored))


def expected(name: str, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline in NumPy float64 and each element's error bound, computed in float32 and
    stored in x's dtype."""
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    acc, out = np.float32, x.dtype
    if name == "softmax":
        bound = error_bounds.softmax_bound(x, acc=acc, out=out)
    elif name == "log_softmax":
        bound = error_bounds.log_softmax_bound(x, acc=acc, out=out)
    elif name == "logsumexp":
        bound = error_bounds.logsumexp_bound(x, acc=acc, out=out)
    elif name == "layer_norm":
        bound = error_bounds.layer_norm_bounds(x, w, b, acc=acc, out=out, eps=EPS)[0]
    else:
        bound = error_bounds.rms_norm_bound(x, w, acc=acc, out=out, eps=EPS)
    return _reference(name, x64, w64, b64), bound


def check(what: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> None:
    """Raise unless every element of ``got`` is within ``bound`` of ``want`` (shapes compared
    after dropping size-one axes: torch's logsumexp keeps or drops the last axis)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.size != want.size:
        raise AssertionError(f"{what}: {got.size} values, want {want.size}")
    error_bounds.assert_within(got.reshape(want.shape), want, bound, what)


@dataclass(frozen=True)
class Contender:
    """One way of running a case: its stream, the call timed, the last call's result on the host,
    how to poison what a drained pass leaves, and how far its result may lie from the reference."""

    lane: Lane
    run: Callable[[], Any]
    host_result: Callable[[Any], np.ndarray]  # the last call's return value -> its values
    poison: Callable[[list[Any]], None]
    want: np.ndarray
    bound: np.ndarray

    def timed(self, label: str, reps: int, cycles_per_ms: float) -> Timing:
        """``held_timing`` of ``run``, the last timed call checked, every pass poisoned once drained."""

        def drained(results: list[Any], final: bool) -> None:
            if final:
                check(label, self.host_result(results[-1]), self.want, self.bound)
            self.poison(results)

        self.poison([])
        return held_timing(self.lane, self.run, calls=CALLS, reps=reps, cycles_per_ms=cycles_per_ms, drained=drained)


def _torch_values(t: Any) -> np.ndarray:
    values: np.ndarray = t.float().cpu().numpy()
    return values


def _bench(
    name: str, shape: tuple[int, ...], dtype: str, args: argparse.Namespace, compiled: bool = True
) -> dict[str, float]:
    """kd against torch eager, torch.compile (``compiled`` and not ``--no-compile``), for softmax
    the tutorial's Triton kernel (on the rows as a matrix) and the copy floor, each timed with
    the stream held and checked on the calls it timed."""
    import torch

    s = kd.default_session()
    kd_stream, torch_stream = kd_lane(s), torch_lane(torch)
    x, w, b, tx, tw, tb, kx, kw, kb = _inputs(shape, dtype)
    want, bound = expected(name, x, w, b)
    baseline_bound = BASELINE_SLACK * bound
    fused = {"softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp}.get(name)
    operands = (kx,) if fused is not None else ((kx, kw, kb) if name == "layer_norm" else (kx, kw))
    fused = fused or {"layer_norm": layer_norm, "rms_norm": rms_norm}[name]
    out = fused(*operands)
    nan = float("nan")
    skipped_triton = False

    def poison_out(results: list[Any]) -> None:
        out.fill(nan)

    def poison_each(results: list[Any]) -> None:
        for result in results:
            result.fill_(nan)

    eager, natural = _torch_functions(torch, name, shape[-1])
    contenders: dict[str, Contender] = {
        "kd": Contender(kd_stream, lambda: fused(*operands, out=out), lambda _: out.to_host(), poison_out, want, bound),
        "torch eager": Contender(
            torch_stream, lambda: eager(tx, tw, tb), _torch_values, poison_each, want, baseline_bound
        ),
    }
    if compiled and not args.no_compile:
        natural_compiled = torch.compile(natural, dynamic=False)
        natural_compiled(tx, tw, tb)
        contenders["torch.compile"] = Contender(
            torch_stream, lambda: natural_compiled(tx, tw, tb), _torch_values, poison_each, want, baseline_bound
        )
    if name == "softmax":
        triton_softmax = _triton_softmax()
        rows = tx.reshape(-1, shape[-1])
        ty = torch.empty_like(rows)
        if triton_softmax is not None and not _triton_fits(triton_softmax, rows, ty):
            triton_softmax = None  # its one-block-a-row plan needs more shared memory than a block has
            skipped_triton = True
        if triton_softmax is not None:

            def poison_triton(results: list[Any]) -> None:
                ty.fill_(nan)

            contenders["triton tutorial"] = Contender(
                torch_stream,
                lambda: triton_softmax(rows, ty),
                lambda _: _torch_values(ty),
                poison_triton,
                want.reshape(-1, shape[-1]),
                baseline_bound.reshape(-1, shape[-1]),
            )
    floor_elements = moved_bytes(name, shape, tx.element_size()) // (2 * tx.element_size())
    floor_source = torch.rand(floor_elements, device="cuda").to(tx.dtype)
    floor_copy = torch.empty_like(floor_source)
    floor_want = _torch_values(floor_source).astype(np.float64)

    def poison_floor(results: list[Any]) -> None:
        floor_copy.fill_(nan)

    contenders["copy floor"] = Contender(
        torch_stream,
        lambda: floor_copy.copy_(floor_source),
        lambda _: _torch_values(floor_copy),
        poison_floor,
        floor_want,
        np.zeros(()),
    )
    cycles_per_ms = gpu_cycles_per_ms()
    timings: dict[str, Timing] = {}

    def turn(label: str) -> Callable[[], float]:
        def time_it() -> float:
            timing = contenders[label].timed(f"{name} {shape} {dtype} {label}", args.reps, cycles_per_ms)
            if label not in timings or timing.gpu_ms < timings[label].gpu_ms:
                timings[label] = timing
            return timing.gpu_ms

        return time_it

    best_rounds({label: turn(label) for label in contenders})
    results: dict[str, float] = {}
    for label, timing in timings.items():
        results[f"{label} GPU (ms)"] = timing.gpu_ms
        results[f"{label} host (µs per call)"] = timing.host_us
    baselines = [t.gpu_ms for label, t in timings.items() if label not in ("kd", "copy floor")]
    if skipped_triton:
        results["triton tutorial out of resources"] = 1.0
    results["kd / fastest baseline"] = timings["kd"].gpu_ms / min(baselines)
    results["kd / copy floor"] = timings["kd"].gpu_ms / timings["copy floor"].gpu_ms
    return results


def _triton_fits(softmax: Callable[[Any, Any], None], rows: Any, out: Any) -> bool:
    """Whether the tutorial's kernel compiles for these rows: its host code asks for a block of
    the whole row, which past some length needs more shared memory than the GPU gives a block
    (Triton raises ``OutOfResources``), as the tutorial itself would."""
    try:
        softmax(rows, out)
    except Exception as exc:  # triton.runtime.errors.OutOfResources; triton is imported lazily
        if type(exc).__name__ != "OutOfResources":
            raise
        return False
    return True


def _section(name: str, shapes: tuple[tuple[int, int], ...]) -> Callable[[argparse.Namespace], dict[str, float]]:
    def measure(args: argparse.Namespace) -> dict[str, float]:
        figures: dict[str, float] = {}
        for shape in shapes:
            for dtype in args.dtype or DTYPES:
                for k, v in _bench(name, shape, dtype, args).items():
                    figures[f"{shape[0]}x{shape[1]} {dtype} {k}"] = v
        return figures

    return measure


def sweep_cases(count: int, seed: int) -> list[tuple[str, tuple[int, ...], str]]:
    """Random (pipeline, shape, dtype): rows of 16 to 16384 values, mostly odd, 2^20 to 2^25
    elements in all, a third of them with a leading batch axis."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        row = int(round(2 ** rng.uniform(4, 14))) | int(rng.random() < 0.7)
        rows = max(1, int(2 ** rng.uniform(20, 25)) // row)
        shape: tuple[int, ...] = (rows, row)
        if rng.random() < 1 / 3:
            batch = int(rng.integers(2, 9))
            shape = (batch, max(1, rows // batch), row)
        cases.append((str(rng.choice(PIPELINES)), shape, str(rng.choice(SWEEP_DTYPES))))
    return cases


def bench_sweep(args: argparse.Namespace) -> dict[str, float]:
    figures: dict[str, float] = {}
    worst = {"kd / fastest baseline": (0.0, ""), "kd / copy floor": (0.0, "")}
    for name, shape, dtype in sweep_cases(args.sweep, args.seed):
        label = f"{name} {'x'.join(map(str, shape))} {dtype}"
        for k, v in _bench(name, shape, dtype, args, compiled=False).items():
            figures[f"{label} {k}"] = v
            if k in worst and v > worst[k][0]:
                worst[k] = (v, label)
    for k, (v, label) in worst.items():
        figures[f"worst {k}: {label}"] = v
    return figures


SECTIONS: dict[str, Section] = {
    "softmax": ("softmax over the last axis", _section("softmax", ROW_SHAPES)),
    "log_softmax": ("log-softmax over the last axis", _section("log_softmax", ROW_SHAPES)),
    "logsumexp": ("logsumexp over the last axis", _section("logsumexp", ROW_SHAPES)),
    "layer_norm": ("layer norm over the last axis", _section("layer_norm", NORM_SHAPES)),
    "rms_norm": ("RMS norm over the last axis", _section("rms_norm", NORM_SHAPES)),
    "sweep": ("seeded random pipelines, shapes and dtypes (torch eager, Triton)", bench_sweep),
    "first": ("a fused softmax's first call in a fresh process", bench_first_call),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per measurement (median reported)")
    parser.add_argument("--only", choices=list(SECTIONS), action="append", help="run only these sections (repeatable)")
    parser.add_argument("--dtype", choices=DTYPES, action="append", help="run only these dtypes (repeatable)")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip torch.compile (its compiles take most of the run)"
    )
    parser.add_argument("--sweep", type=int, default=SWEEP_CASES, help="random cases in the sweep section")
    parser.add_argument("--seed", type=int, default=SWEEP_SEED, help="the sweep's seed")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> Report:
    return run_sections(SECTIONS, args)
