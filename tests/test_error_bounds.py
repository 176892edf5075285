"""The error bounds the GPU tests and the benches check results with (``kerneldsl.bench.error_bounds``),
on the CPU: a correct result, computed the way a kernel computes it (accumulated in float32, or
float64, serially or pairwise, then stored), passes; a wrong one (zeros, half the value, a dropped
term) fails, in every floating-point dtype."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kerneldsl.bench import error_bounds as eb

FLOATS = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64)]
Kernel = Callable[[np.ndarray, Any], np.ndarray]  # (data in its dtype, the accumulator) -> stored result


def ids(dt: np.dtype) -> str:
    return dt.name


def accumulator(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float64 if dt == np.float64 else np.float32)


def normal(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    return (rng.standard_normal(shape) * 3).astype(dt)


def serial_row_sums(x: np.ndarray, acc: Any) -> np.ndarray:
    """One thread folding a row left to right: the longest chain of roundings."""
    return np.cumsum(x.astype(acc), axis=1)[:, -1].astype(x.dtype)


def pairwise_row_sums(x: np.ndarray, acc: Any) -> np.ndarray:
    return np.sum(x.astype(acc), axis=1).astype(x.dtype)


def without_largest_term(x64: np.ndarray) -> np.ndarray:
    """Each row's exact sum with its largest-magnitude term left out."""
    largest = x64[np.arange(x64.shape[0]), np.argmax(np.abs(x64), axis=1)]
    return x64.sum(axis=1) - largest


# --- the primitives --------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_ulp_is_the_spacing_of_the_dtype(dt: np.dtype) -> None:
    values = np.array([1.0, 3.0, 1000.0, 1e-30], dtype=dt)
    bits = values.view(f"u{dt.itemsize}")
    following = (bits + 1).view(dt)  # the next representable number up: positive values' bit patterns count up
    np.testing.assert_array_equal(eb.ulp(values, dt), following.astype(np.float64) - values.astype(np.float64))
    assert eb.ulp(0.0, dt) == eb.precision(dt).smallest_subnormal


def test_gamma_grows_with_the_roundings_and_is_infinite_past_one() -> None:
    assert eb.gamma(0, np.float32) == 0
    assert eb.gamma(1000, np.float32) == pytest.approx(1000 * 2.0**-24, rel=1e-4)
    assert eb.gamma(1 << 24, np.float32) == np.inf


def test_integer_dtypes_have_no_floating_point_bound() -> None:
    with pytest.raises(ValueError, match="compared exactly"):
        eb.precision(np.int32)


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_small_integers_sum_exactly_so_only_the_output_rounds(dt: np.dtype) -> None:
    x = np.random.default_rng(1).integers(-15, 16, (1 << 20) + 3).astype(dt)
    acc = accumulator(dt)
    assert eb.accumulation_error(x.astype(np.float64), acc) == 0
    want = x.astype(np.float64).sum()
    assert eb.sum_bound(x, acc=acc, out=dt) == eb.rounding_error(abs(want), dt, acc)


@pytest.mark.parametrize("dt", [np.dtype(np.float32), np.dtype(np.float64)], ids=ids)
def test_in_an_exact_sum_one_dropped_term_of_a_million_fails(dt: np.dtype) -> None:
    x = np.random.default_rng(2).integers(1, 16, (1 << 20) + 3).astype(dt)
    want = x.astype(np.float64).sum()
    bound = eb.sum_bound(x, acc=dt, out=dt)
    eb.assert_within(np.sum(x), want, bound)  # NumPy's own float32 pairwise sum is exact here
    assert eb.violations(want - float(x[-1]), want, bound).all()  # the tail's last element left out


def test_sums_past_the_accumulators_precision_are_not_taken_for_exact() -> None:
    x = np.full(1 << 20, 17.0)  # partial sums reach 2^24 * 1.06: float32 rounds them
    assert eb.accumulation_error(x, np.float32) > 0
    assert eb.accumulation_error(x, np.float64) == 0


# --- reductions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
@pytest.mark.parametrize("kernel", [serial_row_sums, pairwise_row_sums], ids=["serial", "pairwise"])
def test_a_row_sum_computed_as_a_kernel_does_passes(dt: np.dtype, kernel: Kernel) -> None:
    x = normal(np.random.default_rng(3), (37, 1000), dt)
    acc = accumulator(dt)
    eb.assert_within(kernel(x, acc), x.astype(np.float64).sum(axis=1), eb.sum_bound(x, 1, acc=acc, out=dt))


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_zeros_half_sums_and_a_dropped_term_fail_every_row_sum(dt: np.dtype) -> None:
    x = normal(np.random.default_rng(4), (37, 1000), dt)
    x64, acc = x.astype(np.float64), accumulator(dt)
    want, bound = x64.sum(axis=1), eb.sum_bound(x, 1, acc=acc, out=dt)
    for wrong in (np.zeros_like(want), want / 2, without_largest_term(x64)):
        assert eb.violations(wrong, want, bound).sum() >= 35  # nearly every row; a row summing near 0 may not
    eb.assert_rejects_wrong_answers(want, bound)


def test_the_whole_array_tolerance_it_replaces_could_not_fail() -> None:
    """Issue 40: bfloat16 sums were held to ``eps(acc) * (log2 n + 2) * sum|x| + eps(out) * sum|x|``
    over the whole array, which accepted half of every row's sum; the per-row bound rejects it."""
    x = normal(np.random.default_rng(5), (37, 1000), np.dtype(ml_dtypes.bfloat16))
    x64 = x.astype(np.float64)
    mag, want = float(np.abs(x64).sum()), x64.sum(axis=1)
    old = (math.log2(1000) + 2) * 2.0**-23 * mag + 2.0**-7 * mag
    assert not eb.violations(want / 2, want, old).any()
    with pytest.raises(AssertionError, match="the error bound accepts"):
        eb.assert_rejects_wrong_answers(want, old)
    assert eb.violations(want / 2, want, eb.sum_bound(x, 1, acc=np.float32, out=x.dtype)).all()


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_means_and_norms_computed_as_a_kernel_does_pass_and_wrong_ones_fail(dt: np.dtype) -> None:
    x = normal(np.random.default_rng(6), (37, 1000), dt)
    x64, acc = x.astype(np.float64), accumulator(dt)
    mean, mean_bound = x64.mean(axis=1), eb.mean_bound(x, 1, acc=acc, out=dt)
    eb.assert_within((np.cumsum(x.astype(acc), axis=1)[:, -1] / acc.type(1000)).astype(dt), mean, mean_bound)
    norm, norm_bound = np.sqrt((x64 * x64).sum(axis=1)), eb.norm_bound(x, 1, acc=acc, out=dt)
    wide = x.astype(acc)
    eb.assert_within(np.sqrt(np.cumsum(wide * wide, axis=1)[:, -1]).astype(dt), norm, norm_bound)
    for want, bound in ((mean, mean_bound), (norm, norm_bound)):
        eb.assert_rejects_wrong_answers(want, bound)
    assert eb.violations(np.sqrt(norm**2 - np.max(x64 * x64, axis=1)), norm, norm_bound).all()


def test_keepdims_keeps_the_reduced_axes_as_ones() -> None:
    x = np.ones((4, 5, 6), np.float32)
    assert eb.sum_bound(x, (0, 2), acc=np.float32, out=np.float32, keepdims=True).shape == (1, 5, 1)
    assert eb.mean_bound(x, 1, acc=np.float32, out=np.float32, keepdims=True).shape == (4, 1, 6)


# --- scans ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_a_serial_cumsum_passes_and_zeros_or_halves_fail(dt: np.dtype) -> None:
    x = np.random.default_rng(7).random(5000).astype(dt)
    acc = accumulator(dt)
    want, bound = np.cumsum(x.astype(np.float64)), eb.cumsum_bound(x, acc=acc, out=dt)
    eb.assert_within(np.cumsum(x.astype(acc)).astype(dt), want, bound)
    eb.assert_rejects_wrong_answers(want, bound)


@pytest.mark.parametrize("dt", [np.dtype(np.float32), np.dtype(np.float64)], ids=ids)
def test_an_element_dropped_anywhere_in_an_exact_scan_fails(dt: np.dtype) -> None:
    """Issue 40: ``rtol = 2e-5 * log2(n)`` let an element dropped past about 2,000 pass; small
    integers scan exactly, so the bound is zero and any dropped element shows."""
    x = np.random.default_rng(8).integers(1, 4, (1 << 22) + 37).astype(dt)
    want, bound = np.cumsum(x.astype(np.float64)), eb.cumsum_bound(x, acc=dt, out=dt)
    assert not bound.any()
    for k in (5, 2500, x.size - 2):
        dropped = want.copy()
        dropped[k:] -= x[k]
        assert eb.violations(dropped, want, bound)[k:].all()
    assert not eb.violations(want, want, 1e-5 * want * math.log2(x.size))[2500:].any()  # what it replaces


@pytest.mark.parametrize("dt", [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)], ids=ids)
def test_a_16_bit_scan_rejects_a_dropped_element_while_the_output_can_resolve_it(dt: np.dtype) -> None:
    x = np.random.default_rng(9).integers(1, 4, 200).astype(dt)  # prefixes below 2^8: exact in bfloat16 too
    want, bound = np.cumsum(x.astype(np.float64)), eb.cumsum_bound(x, acc=np.float32, out=dt)
    dropped = want.copy()
    dropped[50:] -= float(x[50])
    assert eb.violations(dropped, want, bound)[50:].all()


def test_exclusive_prefixes_start_exact_and_follow_the_inclusive_ones() -> None:
    x = np.random.default_rng(10).random((3, 100), dtype=np.float32)
    inclusive = eb.cumsum_bound(x, 1, acc=np.float32, out=np.float32)
    exclusive = eb.cumsum_bound(x, 1, acc=np.float32, out=np.float32, exclusive=True)
    assert (exclusive[:, 0] == 0).all()
    np.testing.assert_array_equal(exclusive[:, 1:], inclusive[:, :-1])


# --- fused rows ----------------------------------------------------------------------------------


def rows_in(acc: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x - max, sum exp(x - max)) in the accumulator, as a rows kernel computes them."""
    wide = x.astype(acc)
    d = wide - wide.max(axis=-1, keepdims=True)
    return d, np.exp(d).sum(axis=-1, keepdims=True, dtype=acc)


def softmax64(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_softmax_checks_every_probability_against_its_own_magnitude(dt: np.dtype) -> None:
    x = normal(np.random.default_rng(11), (64, 4096), dt)
    acc = accumulator(dt)
    d, total = rows_in(acc, x)
    want, bound = softmax64(x), eb.softmax_bound(x, acc=acc, out=dt)
    eb.assert_within((np.exp(d) / total).astype(dt), want, bound)
    eb.assert_rejects_wrong_answers(want, bound)
    below_median = want < np.median(want)
    zeroed = np.where(below_median, 0.0, want)  # the smaller half of the probabilities
    caught = eb.violations(zeroed, want, bound)[below_median]
    resolvable = (want > bound)[below_median]  # all but float16's subnormal-range probabilities
    np.testing.assert_array_equal(caught, resolvable)
    assert resolvable.mean() > (0.8 if dt == np.float16 else 0.999)
    largest = np.argmax(x.astype(np.float64), axis=-1)
    without = softmax64(x) * (1 / (1 - want[np.arange(64), largest]))[:, None]  # a row sum missing its largest term
    assert eb.violations(without, want, bound).any(axis=-1).all()


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_logsumexp_and_log_softmax_pass_as_computed_and_fail_wrong(dt: np.dtype) -> None:
    x = normal(np.random.default_rng(12), (64, 4096), dt)
    acc = accumulator(dt)
    d, total = rows_in(acc, x)
    x64 = x.astype(np.float64)
    m64 = x64.max(axis=-1, keepdims=True)
    lse = m64 + np.log(np.exp(x64 - m64).sum(axis=-1, keepdims=True))
    lse_bound = eb.logsumexp_bound(x, acc=acc, out=dt)
    eb.assert_within((x.astype(acc).max(axis=-1, keepdims=True) + np.log(total)).astype(dt), lse, lse_bound)
    log_softmax, log_bound = x64 - lse, eb.log_softmax_bound(x, acc=acc, out=dt)
    eb.assert_within((d - np.log(total)).astype(dt), log_softmax, log_bound)
    for want, bound in ((lse, lse_bound), (log_softmax, log_bound)):
        eb.assert_rejects_wrong_answers(want, bound)
    largest = np.exp(x64 - m64).max(axis=-1, keepdims=True)
    total64 = np.exp(x64 - m64).sum(axis=-1, keepdims=True)
    assert eb.violations(m64 + np.log(total64 - largest), lse, lse_bound).all()  # the largest term dropped
    assert eb.logsumexp_bound(x, acc=acc, out=dt, keepdims=False).shape == (64,)


def test_minus_infinity_gives_exact_zeros_and_nan_must_meet_nan() -> None:
    x = np.random.default_rng(13).standard_normal((3, 10)).astype(np.float32)
    x[0, ::2] = -np.inf
    bound = eb.softmax_bound(x, acc=np.float32, out=np.float32)
    want = softmax64(x)
    assert np.isfinite(bound).all() and (bound[0, ::2] < 1e-37).all()
    assert eb.violations(np.where(np.isnan(want), 0, want), np.full_like(want, np.nan), bound).all()
    assert not eb.violations(np.full(3, np.nan), np.full(3, np.nan), 0.0).any()
    assert eb.violations(np.array([np.inf, -np.inf]), np.array([-np.inf, -np.inf]), np.inf).tolist() == [True, False]


def test_assert_within_names_the_elements_off_their_bound() -> None:
    with pytest.raises(AssertionError, match=r"sum: 1 of 3 element\(s\) off their error bound \(at \(1,\) got 2.5"):
        eb.assert_within(np.array([1.0, 2.5, 3.0]), np.array([1.0, 2.0, 3.0]), 0.1, "sum")
    with pytest.raises(AssertionError, match="shape"):
        eb.assert_within(np.zeros(2), np.zeros(3), 0.0)


EPS = 1e-5


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_rms_norm_computed_in_the_accumulator_passes_and_wrong_results_fail(dt: np.dtype) -> None:
    rng = np.random.default_rng(14)
    x, w = normal(rng, (64, 768), dt), (rng.random(768) + 0.5).astype(dt)
    acc = accumulator(dt)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + EPS) * w64
    wide = x.astype(acc)
    got = wide / np.sqrt((wide * wide).mean(axis=-1, keepdims=True, dtype=acc) + acc.type(EPS)) * w.astype(acc)
    bound = eb.rms_norm_bound(x, w, acc=acc, out=dt, eps=EPS)
    eb.assert_within(got.astype(dt), want, bound)
    eb.assert_rejects_wrong_answers(want, bound)
    small = np.abs(want) < np.quantile(np.abs(want), 0.1)
    assert eb.violations(want * 0.9, want, bound)[small].mean() > 0.9  # the smallest values are checked too


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_layer_norm_outputs_computed_in_the_accumulator_pass_and_wrong_ones_fail(dt: np.dtype) -> None:
    rng = np.random.default_rng(15)
    x, w, b = normal(rng, (64, 768), dt), normal(rng, (768,), dt), normal(rng, (768,), dt)
    acc = accumulator(dt)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    mean64 = x64.mean(axis=-1, keepdims=True)
    rstd64 = 1 / np.sqrt(((x64 - mean64) ** 2).mean(axis=-1, keepdims=True) + EPS)
    wants = ((x64 - mean64) * rstd64 * w64 + b64, mean64, rstd64)
    wide = x.astype(acc)
    mean = wide.mean(axis=-1, keepdims=True, dtype=acc)
    rstd = acc.type(1) / np.sqrt(((wide - mean) ** 2).mean(axis=-1, keepdims=True, dtype=acc) + acc.type(EPS))
    gots = ((wide - mean) * rstd * w.astype(acc) + b.astype(acc), mean, rstd)
    bounds = eb.layer_norm_bounds(x, w, b, acc=acc, out=dt, eps=EPS)
    for got, want, bound in zip(gots, wants, bounds):
        eb.assert_within(got.astype(dt), want, bound)
        eb.assert_rejects_wrong_answers(want, bound)
    y, y_bound = wants[0], bounds[0]
    assert eb.violations(y - b64 * 0.5, y, y_bound).mean() > 0.9  # half the bias dropped


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_a_quotient_is_held_to_its_own_magnitude(dt: np.dtype) -> None:
    x = normal(np.random.default_rng(16), (16, 1000), dt)
    acc = accumulator(dt)
    wide = x.astype(acc)
    want = x.astype(np.float64) / np.abs(x.astype(np.float64)).max(axis=-1, keepdims=True)
    bound = eb.value_bound(want, 2, acc=acc, out=dt)
    eb.assert_within((wide / np.abs(wide).max(axis=-1, keepdims=True)).astype(dt), want, bound)
    eb.assert_rejects_wrong_answers(want, bound)
    small = np.abs(want) < 0.01
    assert eb.violations(want * 0.9, want, bound)[small].all()  # values near zero are checked too
