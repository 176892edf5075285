"""The ``ops`` and ``layouts`` sections' cases of ``kerneldsl bench cpu``: kd.ops and @kd.fuse
expressions with NumPy's way of computing each, on seeded data, and NumPy's answer.

``ops``: elementwise add and multiply per float dtype, reductions along each axis, the fused
softmax and layer norm, and cumsum, each into a preallocated output. ``layouts``: the layouts
users pass besides one contiguous shape (broadcast operands, strided, sliced and transposed
views, a 3-D array's every axis) and float32 math functions, each returning a new array; the
float64 math functions too, reported without a bar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import kerneldsl as kd

from . import cpu_cases
from .cpu_cases import Case
from .pipelines import EPS, layer_norm, softmax


def numpy_softmax(x: np.ndarray, out: np.ndarray) -> None:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.divide(e, e.sum(axis=-1, keepdims=True), out=out)


def numpy_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc * xc).mean(axis=-1, keepdims=True)
    np.add(xc / np.sqrt(var + np.float32(EPS)) * w, b, out=out)


@dataclass(frozen=True)
class OpCase:
    """An op on the CPU device and NumPy's way of computing it, both into a preallocated output."""

    case: Case
    kd_call: Callable[[tuple[Any, ...], kd.DeviceArray], object]
    numpy_call: Callable[[tuple[np.ndarray, ...], np.ndarray], object]
    operands: tuple[np.ndarray, ...]
    target: float


def op_cases(n: int, side: int, seed: int = 2) -> list[OpCase]:
    """Elementwise add and multiply per float dtype, reductions along each axis, the fused
    pipelines and cumsum, each with NumPy's answer (float64 where NumPy's own rounds)."""
    rng = np.random.default_rng(seed)
    dtypes: list[tuple[str, Any, float]] = [("float32", np.float32, 1.2), ("float16", np.float16, 2.0)]
    try:
        import ml_dtypes

        dtypes.append(("bfloat16", ml_dtypes.bfloat16, 2.0))
    except ImportError:
        pass
    cases = []
    for label, dtype, target in dtypes:
        a, b = (rng.standard_normal(n).astype(dtype) for _ in range(2))
        for op in ("add", "multiply"):
            ufunc = getattr(np, op)
            want = ufunc(a, b)
            cases.append(OpCase(Case(f"{op} {label}", {}, want, 0.0, n), _kd_op(op), _np_op(ufunc), (a, b), target))
    eighths = cpu_cases.exact_eighths(rng, side * side).reshape(side, side)
    x = rng.standard_normal((side, side), dtype=np.float32)
    for axis in (0, 1):
        for op, data in (("sum", eighths), ("max", x), ("argmax", x)):
            want = getattr(np, op)(data, axis=axis)
            case = Case(f"{op} axis={axis} float32", {}, want, 0.0, data.size)
            cases.append(OpCase(case, _kd_op(op, axis=axis), _np_op(getattr(np, op), axis=axis), (data,), 2.0))
    w, b = rng.standard_normal(side, dtype=np.float32), rng.standard_normal(side, dtype=np.float32)
    exact = np.empty((side, side), np.float64)
    numpy_softmax(x.astype(np.float64), exact)
    cases.append(
        OpCase(
            Case("softmax float32 (fused vs unfused)", {}, exact, 2e-5, x.size, atol=1e-7),
            lambda ops, out: softmax(*ops, out=out),
            lambda ops, out: numpy_softmax(ops[0], out),
            (x,),
            1.0,
        )
    )
    normed = np.empty((side, side), np.float64)
    numpy_layer_norm(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), normed)
    cases.append(
        OpCase(
            Case("layer norm float32 (fused vs unfused)", {}, normed, 2e-5, x.size, atol=1e-5),
            lambda ops, out: layer_norm(*ops, out=out),
            lambda ops, out: numpy_layer_norm(ops[0], ops[1], ops[2], out),
            (x, w, b),
            1.0,
        )
    )
    flat = cpu_cases.exact_eighths(rng, n)
    cases.append(
        OpCase(Case("cumsum float32", {}, np.cumsum(flat), 0.0, n), _kd_op("cumsum"), _np_op(np.cumsum), (flat,), 2.0)
    )
    for axis in (0, 1):
        want = np.cumsum(eighths, axis=axis)
        case = Case(f"cumsum axis={axis} float32", {}, want, 0.0, eighths.size)
        cases.append(OpCase(case, _kd_op("cumsum", axis=axis), _np_op(np.cumsum, axis=axis), (eighths,), 2.0))
    return cases


def _kd_op(name: str, **keywords: Any) -> Callable[[tuple[Any, ...], kd.DeviceArray], object]:
    op = getattr(kd.ops, name)
    return lambda operands, out: op(*operands, out=out, **keywords)


def _np_op(function: Any, **keywords: Any) -> Callable[[tuple[np.ndarray, ...], np.ndarray], object]:
    return lambda operands, out: function(*operands, out=out, **keywords)


@dataclass(frozen=True)
class LayoutCase:
    """An expression on the CPU device and in NumPy, each returning a new array."""

    case: Case
    on_device: Callable[..., Any]
    in_numpy: Callable[..., Any]
    operands: tuple[np.ndarray, ...]
    target: float | None  # None: reported, held to no bar


# kd.ops' float32 math functions, each on normal draws moved into its domain.
MATH_DOMAINS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    **{
        name: lambda z: z
        for name in ("exp", "expm1", "sin", "cos", "tan", "arctan", "sinh", "cosh", "tanh", "arcsinh")
        + ("floor", "ceil", "trunc", "rint")
    },
    **{name: lambda z: np.abs(z) + 0.5 for name in ("log", "log2", "log10", "sqrt")},
    "log1p": np.abs,
    "arccosh": lambda z: np.abs(z) + 1,
    **{name: lambda z: np.tanh(z) for name in ("arcsin", "arccos", "arctanh")},
}


# The float16 ones measured (computed in float32 and rounded, on both sides).
HALF_MATH = ("exp", "log", "sin", "tanh", "sqrt", "arctan")


# Math functions on views: a transposed view's result is laid out as the view (NumPy's order='K', on both sides).
VIEW_MATH: tuple[tuple[str, Callable[[Any], Any], str], ...] = (
    ("sin", lambda a: a.T, "a transposed view"),
    ("exp", lambda a: a.T, "a transposed view"),
    ("log2", lambda a: a[:, ::2], "every other column"),
    ("exp", lambda a: a[:, 1:-1], "a sliced view"),
)


def _on_view(function: Callable[[Any], Any], view: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda a: function(view(a))


def layout_cases(side: int, seed: int = 3) -> list[LayoutCase]:
    """Ops on the layouts users pass besides one contiguous shape: a row and a column broadcast,
    strided and transposed views (elementwise, math functions and reduced), every axis of a 3-D
    array, and float32 math functions (float16 and float64 ones too); each against NumPy on the
    same data (``side`` x ``side`` elements)."""
    rng = np.random.default_rng(seed)
    x = cpu_cases.exact_eighths(rng, side * side).reshape(side, side)  # exact sums in any order
    row, col = cpu_cases.exact_eighths(rng, side), cpu_cases.exact_eighths(rng, side).reshape(side, 1)
    cube = x.reshape(side // 16, 16, side)
    spelled_alike: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...], float]] = [
        ("add a row (broadcast)", lambda a, r: a + r, (x, row), 1.2),
        ("multiply by a column (broadcast)", lambda a, c: a * c, (x, col), 1.2),
        ("add two strided views", lambda a: a[::2, ::3] + a[1::2, ::3], (x,), 1.2),
        ("add a transposed view", lambda a: a + a.T, (x,), 1.2),
        ("sum axis=0 of a transposed view", lambda a: a.T.sum(axis=0), (x,), 2.0),
        ("sum axis=1 of a transposed view", lambda a: a.T.sum(axis=1), (x,), 2.0),
        ("max axis=1 of a strided view", lambda a: a[:, ::2].max(axis=1), (x,), 2.0),
        ("sum axis=1 of a sliced view", lambda a: a[:, 3:-5].sum(axis=1), (x,), 2.0),
    ]
    spelled_alike += [(f"sum axis={axis} of a 3-D array", _summed(axis), (cube,), 2.0) for axis in range(3)]
    cases = []
    for name, f, operands, target in spelled_alike:
        want = f(*operands)
        cases.append(LayoutCase(Case(f"{name} float32", {}, want, 0.0, want.size), f, f, operands, target))
    z = rng.standard_normal(side * side, dtype=np.float32)
    for name, domain in MATH_DOMAINS.items():
        operand = domain(z).astype(np.float32)
        want = getattr(np, name)(operand.astype(np.float64))
        case = Case(f"{name} float32", {}, want, 1e-6, want.size, atol=1e-7)
        cases.append(LayoutCase(case, getattr(kd.ops, name), getattr(np, name), (operand,), 1.2))
    square = z.reshape(side, side)
    for name, view, spelled in VIEW_MATH:
        operand = MATH_DOMAINS[name](square).astype(np.float32)
        want = getattr(np, name)(view(operand).astype(np.float64))
        case = Case(f"{name} of {spelled} float32", {}, want, 1e-6, want.size, atol=1e-7)
        cases.append(
            LayoutCase(case, _on_view(getattr(kd.ops, name), view), _on_view(getattr(np, name), view), (operand,), 1.2)
        )
    for name in HALF_MATH:
        operand = MATH_DOMAINS[name](z).astype(np.float16)
        want = getattr(np, name)(operand.astype(np.float64))
        case = Case(f"{name} float16", {}, want, 2e-3, want.size, atol=1e-4)
        cases.append(LayoutCase(case, getattr(kd.ops, name), getattr(np, name), (operand,), 2.0))
    doubles = rng.standard_normal(side * side)
    for name, domain in MATH_DOMAINS.items():  # (no issue names a bar for float64: reported)
        operand = domain(doubles)
        want = getattr(np, name)(operand)
        case = Case(f"{name} float64", {}, want, 1e-13, want.size, atol=1e-300)
        cases.append(LayoutCase(case, getattr(kd.ops, name), getattr(np, name), (operand,), None))
    return cases


def _summed(axis: int) -> Callable[[Any], Any]:
    return lambda a: a.sum(axis=axis)
