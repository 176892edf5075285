"""Fused pipelines through reductions side by side with PyTorch and Triton in one process (GPU required).

Softmax, log-softmax and logsumexp over the last axis at (4096, 4096), (16384, 1024) and
(1024, 32768); layer norm and RMS norm at (4096, 4096) and (32768, 768); float32 and bfloat16.
Each is written with ``@kd.fuse`` the natural way (below) and timed (event-timed median, output
preallocated where the call allows it; the best of 3 rounds in which every contender takes a
turn) against torch eager (``torch.softmax``, ``F.layer_norm``, ``F.rms_norm`` ...),
``torch.compile`` of the same function written in torch, for softmax a Triton kernel written like
Triton's fused-softmax tutorial, and the copy floor: a device-to-device copy of the input (the
same bytes in and out). Ratio columns: kd over the fastest baseline (target <= 1.0) and kd over
the copy floor (target <= 1.3).

Every kd result is checked against NumPy float64 on its first rows first. ``--only sweep``: seeded
random pipelines, shapes (2-D and 3-D, odd row lengths) and dtypes (float16 too) against torch
eager and, for softmax, the Triton kernel, with the worst ratios. ``--only first``: the first
call's time in a fresh process, with an empty and with a warm disk cache (``fuse_first_call``).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import kerneldsl as kd
from kerneldsl.bench.fuse_first_call import bench_first_call
from kerneldsl.bench.ops_bench import _kd_timer, _torch_timer, best_rounds
from kerneldsl.bench.report import Report, Section, run_sections

ROW_SHAPES = ((4096, 4096), (16384, 1024), (1024, 32768))
NORM_SHAPES = ((4096, 4096), (32768, 768))
DTYPES = ("float32", "bfloat16")
SWEEP_DTYPES = ("float32", "float16", "bfloat16")
SWEEP_CASES = 16
SWEEP_SEED = 20
PIPELINES = ("softmax", "log_softmax", "logsumexp", "layer_norm", "rms_norm")
RELATIVE_TOLERANCE = {"float32": 2e-5, "float16": 4 * 2.0**-10, "bfloat16": 4 * 2.0**-7}  # 4 ulp at 16 bits
CHECKED_ROWS = 64
EPS = 1e-5


@kd.fuse
def softmax(x: Any) -> Any:
    m = kd.ops.max(x, axis=-1, keepdims=True)
    e = kd.ops.exp(x - m)
    return e / kd.ops.sum(e, axis=-1, keepdims=True)


@kd.fuse
def log_softmax(x: Any) -> Any:
    s = x - kd.ops.max(x, axis=-1, keepdims=True)
    return s - kd.ops.log(kd.ops.sum(kd.ops.exp(s), axis=-1, keepdims=True))


@kd.fuse
def logsumexp(x: Any) -> Any:
    m = kd.ops.max(x, axis=-1, keepdims=True)
    return m + kd.ops.log(kd.ops.sum(kd.ops.exp(x - m), axis=-1, keepdims=True))


@kd.fuse
def layer_norm(x: Any, w: Any, b: Any) -> Any:
    xc = x - kd.ops.mean(x, axis=-1, keepdims=True)
    var = kd.ops.mean(xc * xc, axis=-1, keepdims=True)
    return xc / kd.ops.sqrt(var + EPS) * w + b


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


@functools.lru_cache(maxsize=1)
def _triton_softmax() -> Callable[[Any, Any], None] | None:
    """Triton's fused-softmax tutorial kernel (a program per row, the row in one block of
    registers, rows strided over the programs), or None without Triton."""
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit  # type: ignore[untyped-decorator]  # triton ships no types
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):  # type: ignore[no-untyped-def]
        start = tl.program_id(0)
        step = tl.num_programs(0)
        for row in tl.range(start, n_rows, step):
            offsets = tl.arange(0, BLOCK_SIZE)
            mask = offsets < n_cols
            x = tl.load(in_ptr + row * in_stride + offsets, mask=mask, other=-float("inf")).to(tl.float32)
            e = tl.exp(x - tl.max(x, axis=0))
            y = e / tl.sum(e, axis=0)
            tl.store(out_ptr + row * out_stride + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)

    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def run(x: Any, y: Any) -> None:
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        grid = (min(rows, sms * 8),)
        softmax_kernel[grid](y, x, x.stride(0), y.stride(0), rows, cols, BLOCK_SIZE=block, num_warps=warps)

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


def _bench(
    name: str, shape: tuple[int, ...], dtype: str, args: argparse.Namespace, compiled: bool = True
) -> dict[str, float]:
    """kd against torch eager, torch.compile (``compiled`` and not ``--no-compile``), for softmax
    the Triton kernel (on the rows as a matrix) and the copy floor, after checking kd's result."""
    import torch

    kd_time, torch_time = _kd_timer(kd.default_session()), _torch_timer(torch)
    x, w, b, tx, tw, tb, kx, kw, kb = _inputs(shape, dtype)
    fused = {"softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp}.get(name)
    operands = (kx,) if fused is not None else ((kx, kw, kb) if name == "layer_norm" else (kx, kw))
    fused = fused or {"layer_norm": layer_norm, "rms_norm": rms_norm}[name]
    out = fused(*operands)
    got = out.to_host()[:CHECKED_ROWS].astype(np.float64)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    want = _reference(name, x64[:CHECKED_ROWS], w64, b64)
    tol = RELATIVE_TOLERANCE[dtype]  # every op of a 16-bit pipeline rounds
    atol = tol * max(1.0, float(np.max(np.abs(want))))
    if not np.allclose(got, want, rtol=tol, atol=atol):
        wrong = np.count_nonzero(~np.isclose(got, want, rtol=tol, atol=atol))
        raise AssertionError(f"{name} {shape} {dtype}: {wrong} element(s) off NumPy float64 by more than {tol}")
    eager, natural = _torch_functions(torch, name, shape[-1])
    contenders: dict[str, Callable[[], float]] = {
        "kd (ms)": lambda: kd_time(lambda: fused(*operands, out=out), args.reps),
        "torch eager (ms)": lambda: torch_time(lambda: eager(tx, tw, tb), args.reps),
    }
    if compiled and not args.no_compile:
        natural_compiled = torch.compile(natural, dynamic=False)
        natural_compiled(tx, tw, tb)
        contenders["torch.compile (ms)"] = lambda: torch_time(lambda: natural_compiled(tx, tw, tb), args.reps)
    if name == "softmax":
        triton_softmax = _triton_softmax()
        if triton_softmax is not None:
            rows = tx.reshape(-1, shape[-1])
            ty = torch.empty_like(rows)
            contenders["triton tutorial (ms)"] = lambda: torch_time(lambda: triton_softmax(rows, ty), args.reps)
    copy = torch.empty_like(tx)
    contenders["copy floor (ms)"] = lambda: torch_time(lambda: copy.copy_(tx), args.reps)
    results = best_rounds(contenders)
    baselines = [v for k, v in results.items() if k not in ("kd (ms)", "copy floor (ms)")]
    results["kd / fastest baseline"] = results["kd (ms)"] / min(baselines)
    results["kd / copy floor"] = results["kd (ms)"] / results["copy floor (ms)"]
    return results


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
