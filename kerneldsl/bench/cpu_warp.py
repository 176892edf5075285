"""The five computations of ``kerneldsl bench cpu`` in NVIDIA Warp, written as Warp users write them.

One Warp thread an element (``wp.tid()``), on Warp's CPU device: a 2-D launch for the transpose
and the stencil (Warp's CPU device has no shared memory or barriers, so no tiles), and
``wp.atomic_add`` into the result for the sum and the histogram. Imported only when the Warp
baseline runs (``pip install warp-lang``).
"""

# Warp reads its kernels' annotations at run time: calls such as wp.array(dtype=float) are Warp's
# types, which mypy cannot read as annotations.
# mypy: disable-error-code="valid-type"

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..errors import ExtraNotInstalledError
from .cpu_cases import SAXPY_ALPHA, STENCIL_WEIGHT, Case, poison_value

try:
    wp: Any = importlib.import_module("warp")  # Warp's own annotations are partial: it is used untyped
except ImportError as exc:
    raise ExtraNotInstalledError(
        f"the Warp baseline of kerneldsl bench cpu needs warp-lang ({exc}): pip install 'kerneldsl[bench-cpu]'"
    ) from exc
kernel = cast(Callable[[Callable[..., None]], Any], wp.kernel)
DEVICE = "cpu"


@kernel
def saxpy(alpha: float, x: wp.array(dtype=float), y: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
    i = wp.tid()
    out[i] = alpha * x[i] + y[i]


@kernel
def transpose(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)) -> None:
    i, j = wp.tid()
    out[j, i] = x[i, j]


@kernel
def total(x: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
    i = wp.tid()
    wp.atomic_add(out, 0, x[i])


@kernel
def histogram(values: wp.array(dtype=wp.int32), bins: wp.array(dtype=wp.int32)) -> None:
    i = wp.tid()
    wp.atomic_add(bins, values[i], 1)


@kernel
def stencil(weight: float, x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)) -> None:
    i, j = wp.tid()
    if i == 0 or j == 0 or i == x.shape[0] - 1 or j == x.shape[1] - 1:
        out[i, j] = x[i, j]
    else:
        out[i, j] = (x[i, j] + x[i - 1, j] + x[i + 1, j] + x[i, j - 1] + x[i, j + 1]) * weight


def init() -> None:
    """Start Warp without its banner; it compiles kernels with its own bundled clang on first launch."""
    wp.config.log_level = wp.LOG_ERROR
    wp.init()


def synchronize() -> None:
    wp.synchronize_device(DEVICE)


class WarpRun:
    """One case on Warp's CPU device: inputs uploaded once, an output to poison, the timed call."""

    def __init__(self, case: Case) -> None:
        self.inputs: dict[str, Any] = {name: wp.array(value, device=DEVICE) for name, value in case.inputs.items()}
        self.out = wp.empty(case.want.shape, dtype=wp.dtype_from_numpy(case.want.dtype), device=DEVICE)
        self._poison = poison_value(case.want.dtype)
        self.call = self._calls()[case.name]

    def _calls(self) -> dict[str, Callable[[], None]]:
        args = self.inputs
        out = self.out

        def launch(kernel: Any, dim: Any, *inputs: Any) -> None:
            wp.launch(kernel, dim=dim, inputs=[*inputs, out], device=DEVICE)

        def accumulate(kernel: Any, source: Any) -> None:
            out.zero_()
            launch(kernel, source.shape[0], source)

        return {
            "saxpy": lambda: launch(saxpy, args["x"].shape[0], float(SAXPY_ALPHA), args["x"], args["y"]),
            "transpose": lambda: launch(transpose, args["x"].shape, args["x"]),
            "sum": lambda: accumulate(total, args["x"]),
            "histogram": lambda: accumulate(histogram, args["values"]),
            "stencil": lambda: launch(stencil, args["x"].shape, float(STENCIL_WEIGHT), args["x"]),
        }

    def poison(self) -> None:
        self.out.fill_(self._poison)

    def run(self) -> None:
        self.call()
        synchronize()

    def result(self) -> np.ndarray:
        return np.array(self.out.numpy(), copy=True)
