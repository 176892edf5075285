"""How far a floating-point result may lie from its float64 reference, element by element: what
the tests and the benches accept as a correct answer.

A tolerance taken from the whole array's magnitude, or from its largest value, cannot fail where
the result is small: zeros, half the value or a dropped term pass there. Every bound here belongs
to one output element and comes from that element's own terms and the error analysis of how it is
computed (Higham, *Accuracy and Stability of Numerical Algorithms*, chapters 2-4), so a wrong
answer fails wherever the precision can tell it from the right one:

- A sum of n terms accumulated with unit roundoff u, in any order (serial, pairwise, a tree of
  warps and blocks, a scan's look-back), is within ``gamma(n) * sum |x_i|`` of the exact sum,
  ``gamma(n) = n u / (1 - n u)``: n - 1 additions and the rounding of each term into the
  accumulator. It is exact when every partial sum is representable: terms on a common
  power-of-two grid g whose absolute sum is at most ``2**p * g`` (p significand bits). Data of
  small integers therefore sums exactly, and any dropped or repeated term shows.
- Storing into a narrower dtype than the accumulator rounds once more: half an ulp of the output.
- The reference is computed in float64 by the same rules, and its own bound is added.
- Fused softmax, log-softmax, logsumexp, RMS and layer norm (the rows kernels build with
  ``--use_fast_math`` and read a row twice: its max or mean first, then the rest): ``__expf(d)``
  is within ``2 + 1.16 |d|`` ulp, ``__logf`` within 3 ulp (``2**-21`` absolute on [0.5, 2]), a
  division or a square root within 2 ulp, float32 denormals flush to zero; counted in units of u
  below, with margin. Each value is held to its own terms: the smallest probabilities too.

A bound never compares the result with itself: callers pass the exact (float64) reference and
the inputs, and the bound follows from the inputs alone. Overflow is outside these bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Axis = int | tuple[int, ...] | None


@dataclass(frozen=True)
class Precision:
    """A binary floating-point format: significand bits (the implicit one included) and the
    exponent of its smallest normal number."""

    bits: int
    min_exponent: int

    @property
    def unit_roundoff(self) -> float:
        return 2.0**-self.bits

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.min_exponent - self.bits + 1)

    @property
    def smallest_normal(self) -> float:
        return 2.0**self.min_exponent


PRECISIONS = {
    "bfloat16": Precision(8, -126),
    "float16": Precision(11, -14),
    "float32": Precision(24, -126),
    "float64": Precision(53, -1022),
}


def precision(dtype: npt.DTypeLike) -> Precision:
    name = np.dtype(dtype).name
    if name not in PRECISIONS:
        raise ValueError(f"no floating-point precision for {name}: integer results are compared exactly")
    return PRECISIONS[name]


def ulp(values: npt.ArrayLike, dtype: npt.DTypeLike) -> np.ndarray:
    """The spacing of ``dtype``'s numbers at ``|values|`` (subnormal spacing near zero)."""
    p = precision(dtype)
    magnitude = np.abs(np.asarray(values, dtype=np.float64))
    _, exponent = np.frexp(magnitude)  # magnitude = f * 2**exponent, f in [0.5, 1)
    top = np.where(magnitude > 0, exponent - 1, p.min_exponent)
    spacing: np.ndarray = np.ldexp(1.0, np.maximum(top, p.min_exponent) - (p.bits - 1))
    return np.where(np.isfinite(magnitude), spacing, np.inf)


def gamma(n: npt.ArrayLike, dtype: npt.DTypeLike) -> np.ndarray:
    """``n u / (1 - n u)``: the relative error bound of n roundings (infinite once n u >= 1)."""
    nu = np.asarray(n, dtype=np.float64) * precision(dtype).unit_roundoff
    with np.errstate(divide="ignore"):
        result: np.ndarray = np.where(nu < 1, nu / np.maximum(1 - nu, 0.0), np.inf)
    return result


def rounding_error(values: npt.ArrayLike, out: npt.DTypeLike, acc: npt.DTypeLike) -> np.ndarray:
    """Storing a value computed in ``acc`` into ``out``: half an ulp of ``out``, none when ``out``
    is at least as precise."""
    if precision(out).bits >= precision(acc).bits:
        return np.zeros_like(np.asarray(values, dtype=np.float64))
    return 0.5 * ulp(values, out)


def _grid(terms: np.ndarray) -> float:
    """The largest power of two that divides every finite term (inf when all are zero)."""
    magnitude = np.abs(terms[np.isfinite(terms) & (terms != 0)])
    if magnitude.size == 0:
        return math.inf
    fraction, exponent = np.frexp(magnitude)
    significand = np.ldexp(fraction, 53).astype(np.int64)  # exact: float64 has 53 bits
    lowest_bit = np.log2((significand & -significand).astype(np.float64)).astype(np.int64)
    return math.ldexp(1.0, int((exponent - 53 + lowest_bit).min()))


def _exactly_summable(terms: np.ndarray, magnitude: np.ndarray, acc: npt.DTypeLike) -> np.ndarray:
    """Where every partial sum of ``terms`` (absolute sum ``magnitude``) is representable in ``acc``."""
    p, grid = precision(acc), _grid(terms)
    exact: np.ndarray = (magnitude <= math.ldexp(grid, p.bits)) & (grid >= p.smallest_subnormal)
    return exact


def accumulation_error(terms: npt.ArrayLike, acc: npt.DTypeLike, axis: Axis = None) -> np.ndarray:
    """The bound on summing ``terms`` (exact values, float64) over ``axis`` in ``acc``, per output:
    ``gamma(n) * sum |t|``, zero where every partial sum is representable."""
    t = np.asarray(terms, dtype=np.float64)
    magnitude = np.sum(np.abs(t), axis=axis)
    count = t.size // max(magnitude.size, 1)
    bound: np.ndarray = np.where(_exactly_summable(t, magnitude, acc), 0.0, gamma(count, acc) * magnitude)
    return bound


def prefix_accumulation_error(terms: npt.ArrayLike, acc: npt.DTypeLike, axis: int | None = None) -> np.ndarray:
    """``accumulation_error`` of every inclusive prefix along ``axis`` (of the flattened terms
    when None): prefix i sums i + 1 terms, in whatever order a scan takes."""
    t = np.asarray(terms, dtype=np.float64)
    if axis is None:
        t, axis = t.ravel(), 0
    magnitude = np.cumsum(np.abs(t), axis=axis)
    shape = [1] * t.ndim
    shape[axis] = t.shape[axis]
    count = np.arange(1, t.shape[axis] + 1).reshape(shape)
    bound: np.ndarray = np.where(_exactly_summable(t, magnitude, acc), 0.0, gamma(count, acc) * magnitude)
    return bound


def _keep(bound: np.ndarray, x: np.ndarray, axis: Axis, keepdims: bool) -> np.ndarray:
    if not keepdims:
        return bound
    axes = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    return np.expand_dims(bound, tuple(a % x.ndim for a in axes))


def _wide(x: npt.ArrayLike) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def sum_bound(
    x: npt.ArrayLike, axis: Axis = None, *, acc: npt.DTypeLike, out: npt.DTypeLike, keepdims: bool = False
) -> np.ndarray:
    """|computed sum - float64 reference sum| allowed per output: the accumulation's bound, the
    reference's, and the output's rounding."""
    x64 = _wide(x)
    err = accumulation_error(x64, acc, axis) + accumulation_error(x64, np.float64, axis)
    exact = np.sum(x64, axis=axis)
    return _keep(err + rounding_error(np.abs(exact) + err, out, acc), x64, axis, keepdims)


def mean_bound(
    x: npt.ArrayLike, axis: Axis = None, *, acc: npt.DTypeLike, out: npt.DTypeLike, keepdims: bool = False
) -> np.ndarray:
    """The sum's bound over n, and the division's roundings (two in ``acc``, as multiplying by a
    rounded 1/n takes; one in the reference)."""
    x64 = _wide(x)
    count = x64.size // max(np.sum(x64, axis=axis).size, 1)
    err = (accumulation_error(x64, acc, axis) + accumulation_error(x64, np.float64, axis)) / max(count, 1)
    mean = np.abs(np.sum(x64, axis=axis)) / max(count, 1)
    err = err + 2 * precision(acc).unit_roundoff * (mean + err) + precision(np.float64).unit_roundoff * mean
    return _keep(err + rounding_error(mean + err, out, acc), x64, axis, keepdims)


def norm_bound(
    x: npt.ArrayLike, axis: Axis = None, *, acc: npt.DTypeLike, out: npt.DTypeLike, keepdims: bool = False
) -> np.ndarray:
    """The 2-norm ``sqrt(sum x**2)``: the sum of squares' bound e carried through the square root
    (``|sqrt(a) - sqrt(s)| <= min(e / sqrt(s), sqrt(e))``), then the root's rounding (two ulp of
    ``acc``: a fast square root) and the output's."""
    x64 = _wide(x)
    squares = x64 * x64
    e = accumulation_error(squares, acc, axis) + accumulation_error(squares, np.float64, axis)
    norm = np.sqrt(np.sum(squares, axis=axis))
    with np.errstate(divide="ignore", invalid="ignore"):
        carried = np.where(norm > 0, np.minimum(e / norm, np.sqrt(e)), np.sqrt(e))
    err = carried + (4 * precision(acc).unit_roundoff + precision(np.float64).unit_roundoff) * (norm + carried)
    return _keep(err + rounding_error(norm + err, out, acc), x64, axis, keepdims)


def cumsum_bound(
    x: npt.ArrayLike, axis: int | None = None, *, acc: npt.DTypeLike, out: npt.DTypeLike, exclusive: bool = False
) -> np.ndarray:
    """Each prefix sum is a sum of its own terms: its bound, element by element (flattened when
    ``axis`` is None, as ``np.cumsum``)."""
    x64 = _wide(x)
    err = prefix_accumulation_error(x64, acc, axis) + prefix_accumulation_error(x64, np.float64, axis)
    prefix = np.abs(np.cumsum(x64, axis=axis))
    bound: np.ndarray = err + rounding_error(prefix + err, out, acc)
    if not exclusive:
        return bound
    along = 0 if axis is None else axis
    shifted: np.ndarray = np.roll(bound, 1, axis=along)  # the exclusive prefix i is the inclusive prefix i - 1
    index = [slice(None)] * shifted.ndim
    index[along] = slice(0, 1)
    shifted[tuple(index)] = 0.0  # the empty sum is exact
    return shifted


# Fused rows pipelines, in units of u of the accumulator (see the module's docstring).
EXP_ULPS, EXP_ULPS_PER_UNIT = 2.0, 1.16  # __expf(d): 2 + 1.16 |d| ulp
LOG_ULPS = 3.0  # __logf, away from 1
DIVIDE_ULPS = 2.0  # __fdividef


def _row_terms(x: npt.ArrayLike, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d = x - max, |d| where finite else 0, the row's largest such |d|, sum exp(d)) over ``axis``."""
    x64 = _wide(x)
    with np.errstate(invalid="ignore"):
        d = x64 - np.max(x64, axis=axis, keepdims=True)
    spread = np.where(np.isfinite(d), np.abs(d), 0.0)
    widest = np.max(spread, axis=axis, keepdims=True) if spread.size else spread
    with np.errstate(invalid="ignore"):
        total = np.sum(np.exp(d), axis=axis, keepdims=True)
    return d, spread, widest, total


def _exp_relative(spread: np.ndarray, u: float) -> np.ndarray:
    """Relative error of exp(x - max) computed in the accumulator: the subtraction's rounding
    (u |d|) carried through exp, and __expf's own."""
    result: np.ndarray = (2 * EXP_ULPS + (2 * EXP_ULPS_PER_UNIT + 1) * spread) * u
    return result


def _total_relative(n: int, widest: np.ndarray, acc: npt.DTypeLike) -> np.ndarray:
    """Relative error of a row's sum of n exponentials: its worst term's and the accumulation's
    (positive terms: ``gamma(n)`` relative)."""
    result: np.ndarray = _exp_relative(widest, precision(acc).unit_roundoff) + gamma(n, acc)
    return result


def softmax_bound(x: npt.ArrayLike, axis: int = -1, *, acc: npt.DTypeLike, out: npt.DTypeLike) -> np.ndarray:
    """Each probability relative to itself: its exponential's error, the row sum's, the
    division's; then flushed denormals (absolute) and the output's rounding. The smallest
    probabilities are held to their own magnitude, not to the largest's."""
    u = precision(acc).unit_roundoff
    d, spread, widest, total = _row_terms(x, axis)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(d) / total
    relative = _exp_relative(spread, u) + _total_relative(np.shape(x)[axis], widest, acc) + 2 * DIVIDE_ULPS * u
    err = relative * np.abs(p) + 2 * precision(acc).smallest_normal
    return np.asarray(err + rounding_error(np.abs(p) + err, out, acc))


def logsumexp_bound(
    x: npt.ArrayLike, axis: int = -1, *, acc: npt.DTypeLike, out: npt.DTypeLike, keepdims: bool = True
) -> np.ndarray:
    """``max + log(sum exp(x - max))``: the sum's relative error becomes the log's absolute
    error; __logf's own; the addition's rounding and the output's."""
    u = precision(acc).unit_roundoff
    x64 = _wide(x)
    d, spread, widest, total = _row_terms(x64, axis)
    log_total = np.log(total)
    with np.errstate(invalid="ignore"):
        result = np.max(x64, axis=axis, keepdims=True) + log_total
    err = _total_relative(x64.shape[axis], widest, acc) + (8 + 2 * LOG_ULPS * log_total) * u + u * np.abs(result)
    bound = err + rounding_error(np.abs(result) + err, out, acc)
    return np.asarray(bound if keepdims else np.squeeze(bound, axis))


def log_softmax_bound(x: npt.ArrayLike, axis: int = -1, *, acc: npt.DTypeLike, out: npt.DTypeLike) -> np.ndarray:
    """``(x - max) - log(sum exp(x - max))`` per element: the subtraction's rounding (u |d|), the
    log's error as in ``logsumexp_bound``, the final subtraction's rounding and the output's."""
    u = precision(acc).unit_roundoff
    d, spread, widest, total = _row_terms(x, axis)
    log_total = np.log(total)
    result = np.abs(d - log_total)
    err = u * spread + _total_relative(np.shape(x)[axis], widest, acc) + (8 + 2 * LOG_ULPS * log_total) * u
    err = err + u * result
    return np.asarray(err + rounding_error(result + err, out, acc))


def rms_norm_bound(
    x: npt.ArrayLike, w: npt.ArrayLike, axis: int = -1, *, acc: npt.DTypeLike, out: npt.DTypeLike, eps: float
) -> np.ndarray:
    """``x / sqrt(mean(x**2) + eps) * w`` per element, relative to itself (no sum cancels): half
    the sum of squares' relative error through the square root, the division's, the root's and
    the products' roundings (12 u); then flushed denormals and the output's rounding."""
    x64, w64 = _wide(x), _wide(w)
    n = x64.shape[axis]
    y = x64 / np.sqrt(np.mean(x64 * x64, axis=axis, keepdims=True) + eps) * w64
    relative = sum(gamma(n + 1, p) / 2 + 12 * precision(p).unit_roundoff for p in (acc, np.float64))
    err = relative * np.abs(y) + 2 * precision(acc).smallest_normal
    return np.asarray(err + rounding_error(np.abs(y) + err, out, acc))


def layer_norm_bounds(
    x: npt.ArrayLike,
    w: npt.ArrayLike,
    b: npt.ArrayLike,
    axis: int = -1,
    *,
    acc: npt.DTypeLike,
    out: npt.DTypeLike,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounds of ``(y, mean, rstd)`` for ``y = (x - mean) * rstd * w + b``,
    ``rstd = 1 / sqrt(mean((x - mean)**2) + eps)``. The mean's error e shifts every centered
    value alike, which moves the variance by e**2 only (the centered values sum to zero); each
    y then carries rstd's relative error on its own term and e * rstd * |w| absolute, so a y
    near zero is held to its terms' size, not the row's largest value."""
    x64, w64, b64 = _wide(x), _wide(w), _wide(b)
    n = x64.shape[axis]
    mean = np.mean(x64, axis=axis, keepdims=True)
    centered = x64 - mean
    variance = np.mean(centered * centered, axis=axis, keepdims=True)
    rstd = 1 / np.sqrt(variance + eps)
    term = centered * rstd * w64
    y = term + b64
    y_err = mean_err = rstd_rel = np.zeros(())
    for p in (acc, np.float64):
        u = precision(p).unit_roundoff
        e = gamma(n, p) * np.mean(np.abs(x64), axis=axis, keepdims=True) + 2 * u * np.abs(mean)
        relative = gamma(n + 1, p) + 6 * u + e * e / (variance + eps)
        rstd_p = relative / 2 + 9 * u  # + eps, the square root and the division
        y_err = y_err + np.abs(term) * (rstd_p + 2 * u) + (e + u * np.abs(centered)) * rstd * np.abs(w64)
        y_err = y_err + u * (np.abs(term) + np.abs(b64) + np.abs(y))
        mean_err, rstd_rel = mean_err + e, rstd_rel + rstd_p
    y_err = y_err + 2 * precision(acc).smallest_normal
    rstd_err = rstd_rel * rstd
    return (
        np.asarray(y_err + rounding_error(np.abs(y) + y_err, out, acc)),
        np.asarray(mean_err + rounding_error(np.abs(mean) + mean_err, out, acc)),
        np.asarray(rstd_err + rounding_error(rstd + rstd_err, out, acc)),
    )


def value_bound(values: npt.ArrayLike, ulps: float, *, acc: npt.DTypeLike, out: npt.DTypeLike) -> np.ndarray:
    """A value computed from exact operands within ``ulps`` ulp of ``acc`` (a fast division: 2),
    then stored: relative to the value itself, flushed denormals, and the output's rounding."""
    magnitude = np.abs(_wide(values))
    err = ulps * ulp(magnitude, acc) + 2 * precision(acc).smallest_normal
    return np.asarray(err + rounding_error(magnitude + err, out, acc))


def violations(got: npt.ArrayLike, want: npt.ArrayLike, bound: npt.ArrayLike) -> np.ndarray:
    """Where ``got`` is not within ``bound`` of ``want``: NaN must meet NaN and an infinity the
    same infinity, whatever the bound."""
    g, w = _wide(got), _wide(want)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), w.shape)
    finite = np.isfinite(w)
    with np.errstate(invalid="ignore"):
        off = np.abs(g - w)
        wrong = np.where(finite, ~(off <= b), ~((g == w) | (np.isnan(g) & np.isnan(w))))
    result: np.ndarray = np.asarray(wrong, dtype=bool)
    return result


def assert_within(got: npt.ArrayLike, want: npt.ArrayLike, bound: npt.ArrayLike, what: str = "result") -> None:
    """Raise AssertionError naming the first elements off their bound (an explicit raise: a bench
    run under ``python -O`` checks too)."""
    g, w = _wide(got), _wide(want)
    if g.shape != w.shape:
        raise AssertionError(f"{what}: shape {g.shape}, want {w.shape}")
    wrong = violations(g, w, bound)
    if wrong.any():
        b = np.broadcast_to(np.asarray(bound, dtype=np.float64), w.shape)
        where = np.argwhere(wrong)[:3]
        shown = "; ".join(
            f"at {tuple(int(i) for i in k)} got {float(g[tuple(k)])!r} want {float(w[tuple(k)])!r} "
            f"within {float(b[tuple(k)]):.3g}"
            for k in where
        )
        raise AssertionError(f"{what}: {int(wrong.sum())} of {w.size} element(s) off their error bound ({shown})")


def assert_rejects_wrong_answers(want: npt.ArrayLike, bound: npt.ArrayLike, what: str = "result") -> None:
    """The check can fail: an all-zero result and half of each value both break ``bound`` somewhere
    (a tolerance that let them pass would test nothing)."""
    w = _wide(want)
    for label, wrong in (("zeros", np.zeros_like(w)), ("half the value", w / 2)):
        if not violations(wrong, w, bound).any():
            raise AssertionError(f"{what}: the error bound accepts {label}; it cannot tell a wrong result")
