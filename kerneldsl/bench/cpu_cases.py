"""The computations ``kerneldsl bench cpu`` runs on every contender: seeded inputs, NumPy's answer,
how a result is checked, and NumPy's own way of computing each (timed as a baseline).

Pure NumPy, so the Numba-simulator child process shares it without importing a baseline twice.
Inputs of the sums are multiples of 1/8 below 1 whose total stays below 2**21: every partial sum
is exact in float32, so any order of summation (blocks, shuffles, atomics) must match exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BINS = 256
STENCIL_WEIGHT = np.float32(0.2)
SAXPY_ALPHA = np.float32(0.75)
THREAD_ELEMENTS = 16  # a grid-stride kernel's grid gives each thread this many elements (1024 blocks at 2**22)


class WrongResultError(AssertionError):
    """A contender computed something other than NumPy's answer: its timing means nothing."""


@dataclass(frozen=True)
class Case:
    """One computation on fixed inputs: what every contender must produce."""

    name: str
    inputs: dict[str, np.ndarray]
    want: np.ndarray
    rtol: float  # 0.0 (with atol 0.0): bit-exact; a float contender may contract a*x+y into one rounding
    elements: int  # what "per element" divides by
    atol: float = 0.0  # for results near zero after cancellation (layer norm)

    def check(self, contender: str, got: np.ndarray) -> None:
        """Raise ``WrongResultError`` naming the contender unless ``got`` is NumPy's answer."""
        if got.shape != self.want.shape:
            raise WrongResultError(f"{contender} {self.name}: shape {got.shape}, want {self.want.shape}")
        exact = not (self.rtol or self.atol)
        ok = got == self.want if exact else np.isclose(got, self.want, rtol=self.rtol, atol=self.atol)
        if not np.all(ok):
            bad = int(np.count_nonzero(~ok))
            first = np.unravel_index(int(np.argmin(ok)), ok.shape)
            raise WrongResultError(
                f"{contender} {self.name}: {bad} of {ok.size} element(s) wrong, "
                f"first at {tuple(int(i) for i in first)}: {got[first]!r}, want {self.want[first]!r}"
            )


def poison_value(dtype: np.dtype) -> float | int:
    """What an output holds before a checked call: the largest value for integers, else NaN
    (bfloat16 included, whose NumPy kind is 'V')."""
    return int(np.iinfo(dtype).max) if np.issubdtype(dtype, np.integer) else float("nan")


def exact_eighths(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.integers(0, 8, n) / 8).astype(np.float32)


def saxpy(n: int, rng: np.random.Generator) -> Case:
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    return Case("saxpy", {"x": x, "y": y}, SAXPY_ALPHA * x + y, 1e-6, n)


def transpose(rows: int, cols: int, rng: np.random.Generator) -> Case:
    x = rng.random((rows, cols), dtype=np.float32)
    return Case("transpose", {"x": x}, np.ascontiguousarray(x.T), 0.0, rows * cols)


def total(n: int, rng: np.random.Generator) -> Case:
    x = exact_eighths(rng, n)
    want = np.array([x.astype(np.float64).sum()], np.float32)
    if float(want[0]) >= 2.0**21:
        raise ValueError(f"sum of {n} eighths may round in float32: use at most 2**22 elements")
    return Case("sum", {"x": x}, want, 0.0, n)


def histogram(n: int, rng: np.random.Generator) -> Case:
    values = rng.integers(0, BINS, n, dtype=np.int32)
    return Case("histogram", {"values": values}, np.bincount(values, minlength=BINS).astype(np.int32), 0.0, n)


def stencil(side: int, rng: np.random.Generator) -> Case:
    x = rng.random((side, side), dtype=np.float32)
    out = np.empty_like(x)
    numpy_stencil(x, out)
    return Case("stencil", {"x": x}, out, 1e-6, side * side)


def numpy_saxpy(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    np.multiply(x, SAXPY_ALPHA, out=out)
    np.add(out, y, out=out)


def numpy_stencil(x: np.ndarray, out: np.ndarray) -> None:
    """Interior: 0.2 * (centre + up + down + left + right), summed in that order; the border copies ``x``."""
    out[...] = x
    inner = x[1:-1, 1:-1] + x[:-2, 1:-1]
    inner += x[2:, 1:-1]
    inner += x[1:-1, :-2]
    inner += x[1:-1, 2:]
    np.multiply(inner, STENCIL_WEIGHT, out=out[1:-1, 1:-1])


@dataclass(frozen=True)
class Sizes:
    """The problem sizes of one run."""

    n: int  # saxpy, sum, histogram elements
    rows: int  # transpose input rows
    cols: int  # transpose input columns
    side: int  # stencil grid side
    simulated_n: int  # the Numba simulator's elements (1-D) ...
    simulated_side: int  # ... and grid side (transpose, stencil): it is about 100,000x slower

    def cases(self, seed: int = 0) -> dict[str, Case]:
        rng = np.random.default_rng(seed)
        return {
            "saxpy": saxpy(self.n, rng),
            "transpose": transpose(self.rows, self.cols, rng),
            "sum": total(self.n, rng),
            "histogram": histogram(self.n, rng),
            "stencil": stencil(self.side, rng),
        }

    def simulated_cases(self, seed: int = 1) -> dict[str, Case]:
        small = Sizes(self.simulated_n, self.simulated_side, self.simulated_side, self.simulated_side, 0, 0)
        return small.cases(seed)


FULL = Sizes(n=1 << 22, rows=2000, cols=3000, side=2048, simulated_n=1 << 12, simulated_side=64)
QUICK = Sizes(n=1 << 16, rows=200, cols=300, side=256, simulated_n=1 << 10, simulated_side=32)

# The ``sweep`` section's sizes besides FULL's: odd ones that no block or tile divides, small ones
# where a launch's fixed costs weigh, and larger transposes and stencils (the sums stay exact only
# up to 2**22 elements).
SWEEP = (
    Sizes(n=(1 << 16) + 3, rows=257, cols=509, side=257, simulated_n=0, simulated_side=0),
    Sizes(n=1_000_003, rows=1023, cols=1537, side=1023, simulated_n=0, simulated_side=0),
    Sizes(n=(1 << 22) - 5, rows=4096, cols=4099, side=4095, simulated_n=0, simulated_side=0),
)
QUICK_SWEEP = (Sizes(n=1000, rows=33, cols=65, side=31, simulated_n=0, simulated_side=0),)


def case_size(case: Case) -> str:
    """A case's problem size as its inputs' shape: ``1000003`` or ``1023x1537``."""
    (first, *_) = case.inputs.values()
    return "x".join(str(extent) for extent in first.shape)


NUMPY_RUNS: dict[str, Callable[[Case, np.ndarray], object]] = {
    "saxpy": lambda c, out: numpy_saxpy(c.inputs["x"], c.inputs["y"], out),
    "transpose": lambda c, out: np.copyto(out, c.inputs["x"].T),
    "sum": lambda c, out: np.sum(c.inputs["x"], out=out[0, ...]),
    "histogram": lambda c, out: np.copyto(out, np.bincount(c.inputs["values"], minlength=BINS)),
    "stencil": lambda c, out: numpy_stencil(c.inputs["x"], out),
}
