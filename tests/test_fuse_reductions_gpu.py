"""@kd.fuse through reductions on the GPU: every strategy (asserted through Build.decisions first,
so a change of heuristics cannot silently stop covering one) against NumPy.

Softmax, log-softmax, logsumexp, layer norm and RMS norm are checked against the same pipeline in
float64 within each element's own error bound (``kerneldsl.bench.error_bounds``: computed in
float32 with fast math, stored once in the input's dtype), after showing that the bound rejects
zeros and half the value: the smallest probabilities are held to their own magnitude, not to the
largest's. Other float32 pipelines against the same formula in float64 (rtol 2e-5 and 2e-6 of
the largest value absolute: CUDA's expf/logf are within 2 ulp, sums fold in a fixed tree).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.bench import error_bounds
from kerneldsl.bench.fuse_bench import EPS, log_softmax, logsumexp, rms_norm, softmax  # the bench's pipelines

pytestmark = pytest.mark.gpu

ARCH = "sm_90"


@kd.fuse
def layer_norm(x: Any, w: Any, b: Any) -> Any:
    mean = kd.ops.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    rstd = 1.0 / kd.ops.sqrt(kd.ops.mean(xc * xc, axis=-1, keepdims=True) + EPS)
    return xc * rstd * w + b, mean, rstd


@kd.fuse
def column_softmax(x: Any) -> Any:
    e = kd.ops.exp(x - kd.ops.max(x, axis=0, keepdims=True))
    return e / kd.ops.sum(e, axis=0)


@kd.fuse
def standardize(x: Any) -> Any:  # over axes 0 and 2, which axis 1 interleaves
    mean = kd.ops.mean(x, axis=(0, 2), keepdims=True)
    xc = x - mean
    return xc / kd.ops.sqrt(kd.ops.mean(xc * xc, axis=(0, 2), keepdims=True) + EPS)


# --- references: the same ops in NumPy, in the input dtype, reductions accumulated in float64 ---------


def _sum(v: np.ndarray, axis: Any = -1) -> np.ndarray:
    return np.asarray(v.astype(np.float64).sum(axis=axis, keepdims=True)).astype(v.dtype)


def _mean(v: np.ndarray, axis: Any = -1) -> np.ndarray:
    n = np.prod([v.shape[a] for a in (axis if isinstance(axis, tuple) else (axis,))])
    return np.asarray(v.astype(np.float64).sum(axis=axis, keepdims=True) / n).astype(v.dtype)


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / _sum(e, axis)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    s = x - x.max(-1, keepdims=True)
    return s - np.log(_sum(np.exp(s)))


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return m + np.log(_sum(np.exp(x - m)))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    mean = _mean(x)
    xc = x - mean
    rstd = 1.0 / np.sqrt(_mean(xc * xc) + EPS)  # Python floats, as the fused functions: NumPy's rule decides
    return xc * rstd * w + b, mean, rstd


def _rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(_mean(x * x) + EPS) * w


def _ulp(dt: np.dtype) -> float:
    return 2.0**-7 if dt.name == "bfloat16" else float(np.finfo(dt).eps)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    # an absolute part scaled to the largest value: where a sum cancels (y = t + b near 0, log-softmax
    # near 0) the error is that of its largest term
    dt, wide = want.dtype, want.astype(np.float64)
    scale = max(1.0, float(np.nanmax(np.abs(wide[np.isfinite(wide)]), initial=0.0)))
    rtol, atol = (2e-5, 2e-6) if dt == np.float32 else (4 * _ulp(dt), 4 * _ulp(dt))
    np.testing.assert_allclose(got.astype(np.float64), wide, rtol=rtol, atol=atol * scale)


def _accumulator(dt: Any) -> Any:
    return np.float64 if np.dtype(dt) == np.float64 else np.float32


def _within(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str) -> None:
    """``got`` within ``bound`` of the float64 ``want``, after showing the bound rejects zeros and
    half the value."""
    error_bounds.assert_rejects_wrong_answers(want, bound, what)
    error_bounds.assert_within(got, want, bound, what)


def _check_rows(pipeline: str, got: np.ndarray, x: np.ndarray, *weights: np.ndarray, axis: int = -1) -> None:
    """A fused ``pipeline``'s result (stored in x's dtype) against it in float64, within its bound."""
    assert got.dtype == x.dtype
    wide = _wide(x, *weights)
    bounds = {"acc": _accumulator(x.dtype), "out": x.dtype}
    if pipeline == "softmax":
        want, bound = _softmax(wide[0], axis), error_bounds.softmax_bound(x, axis, **bounds)
    elif pipeline == "log_softmax":
        want, bound = _log_softmax(wide[0]), error_bounds.log_softmax_bound(x, axis, **bounds)
    elif pipeline == "logsumexp":
        want, bound = _logsumexp(wide[0]), error_bounds.logsumexp_bound(x, axis, **bounds)
    else:
        want, bound = _rms_norm(*wide), error_bounds.rms_norm_bound(x, weights[0], axis, eps=EPS, **bounds)
    _within(got, want, bound, f"{pipeline} of {x.dtype.name} {x.shape}")


def _check_layer_norm(got: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> None:
    """The three outputs of ``layer_norm`` (y, mean, rstd), each within its bound; y's and rstd's
    bounds reject zeros and halves (a mean of values of either sign can be smaller than its bound)."""
    bounds = error_bounds.layer_norm_bounds(x, w, b, acc=_accumulator(x.dtype), out=x.dtype, eps=EPS)
    for name, g, want, bound in zip(("y", "mean", "rstd"), got, _layer_norm(*_wide(x, w, b)), bounds):
        g = g if isinstance(g, np.ndarray) else g.to_host()
        assert g.dtype == x.dtype
        what = f"layer norm's {name} of {x.dtype.name} {x.shape}"
        if name != "mean":
            error_bounds.assert_rejects_wrong_answers(want, bound, what)
        error_bounds.assert_within(g, want, bound, what)


def _data(shape: tuple[int, ...], dt: Any, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dt)


def _reference_f32(fn: Any, *args: np.ndarray) -> Any:
    """``fn`` run in float64 on float32 data, returned as float32."""
    out = fn(*(a.astype(np.float64) for a in args))
    return tuple(o.astype(np.float32) for o in out) if isinstance(out, tuple) else out.astype(np.float32)


STRATEGIES = [
    ((333, 4096), ("row-per-block", 256, 4, 1)),  # a block per row, held in registers
    ((1001, 1024), ("row-per-warp", 32, 8, 1)),  # a warp per row
    ((2000, 36), ("row-per-warp", 4, 3, 1)),  # part of a warp: 36 columns in 9 vectors, 3 a lane
    ((2000, 37), ("row-per-warp", 16, 3, 1)),  # not whole vectors: 37 columns interleaved over 16 lanes
    ((300, 32768), ("row-per-block", 1024, 8, 1)),  # long rows: 1024 threads hold 32 values each
    ((264, 262_147), ("row-per-block", 1024, None, 3)),  # too long to hold: every phase reads the row again
    ((512, 65_536), ("split", 256, 8, 1)),  # too long for one block's registers: a cluster of 8 holds it
    ((8, 100_000), ("split", 512, 7, 1)),  # few long rows: a row per cluster of 8 blocks
    ((3, 2_000_003), ("split", 1024, None, 3)),  # split and read again
]


@pytest.mark.parametrize(("shape", "expected"), STRATEGIES)
def test_every_strategy_computes_softmax_like_numpy(device_session, shape, expected) -> None:  # type: ignore[no-untyped-def]
    x = _data(shape, np.float32, sum(shape))
    d = softmax.inspect(x, arch=ARCH).decisions
    assert (d.strategy, d.group, d.items, d.passes) == expected
    _check_rows("softmax", softmax(device_session.to_device(x)).to_host(), x)


@pytest.mark.parametrize("shape", [(77, 3000), (513, 768)])
def test_log_softmax_and_logsumexp_match_numpy(device_session, shape) -> None:  # type: ignore[no-untyped-def]
    x = _data(shape, np.float32, 3)
    d = device_session.to_device(x)
    _check_rows("log_softmax", log_softmax(d).to_host(), x)
    _check_rows("logsumexp", logsumexp(d).to_host(), x)


@pytest.mark.parametrize("shape", [(300, 4096), (1000, 768), (7, 33)])
def test_layer_norm_returns_output_mean_and_rstd_from_one_kernel(device_session, shape) -> None:  # type: ignore[no-untyped-def]
    x, w, b = _data(shape, np.float32, 4), _data(shape[-1:], np.float32, 5), _data(shape[-1:], np.float32, 6)
    _check_layer_norm(
        layer_norm(device_session.to_device(x), device_session.to_device(w), device_session.to_device(b)), x, w, b
    )


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("shape", [(64, 4096), (200, 1000), (50, 77)])
def test_half_precision_pipelines_accumulate_in_float32_and_store_their_dtype(device_session, dt, shape) -> None:  # type: ignore[no-untyped-def]
    x, w, b = _data(shape, dt, 7), _data(shape[-1:], dt, 8), _data(shape[-1:], dt, 9)
    assert softmax.inspect(x, arch=ARCH).decisions.accumulation == np.float32
    dx, dw, db = (device_session.to_device(a) for a in (x, w, b))
    _check_rows("softmax", softmax(dx).to_host(), x)
    _check_rows("rms_norm", rms_norm(dx, dw).to_host(), x, w)
    _check_layer_norm(layer_norm(dx, dw, db), x, w, b)


def _wide(*args: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(a.astype(np.float64) for a in args)


def test_a_leading_axis_is_reduced_through_strided_offsets(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data((513, 37), np.float32, 10)
    assert column_softmax.inspect(x, arch=ARCH).decisions.layout == "permuted"
    _check_rows("softmax", column_softmax(device_session.to_device(x)).to_host(), x, axis=0)


def test_interleaved_axes_reduce_as_one_row(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data((6, 9, 40), np.float32, 11)
    assert standardize.inspect(x, arch=ARCH).decisions.layout == "permuted"

    def reference(v: np.ndarray) -> np.ndarray:
        xc = v - v.mean(axis=(0, 2), keepdims=True)
        return xc / np.sqrt((xc * xc).mean(axis=(0, 2), keepdims=True) + EPS)

    _close(standardize(device_session.to_device(x)).to_host(), _reference_f32(reference, x))


def test_rows_with_minus_infinity_and_all_minus_infinity_rows_give_numpys_nan(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data((6, 300), np.float32, 12)
    x[1, ::3] = -np.inf
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    with np.errstate(invalid="ignore"):
        want = _reference_f32(_softmax, x)
    got = softmax(device_session.to_device(x)).to_host()
    assert np.isnan(got[2]).all() and np.isnan(want[2]).all()
    assert (got[1, ::3] == 0).all()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)  # NaN where NumPy has NaN


@kd.fuse
def max_plus_zero_sum(v: Any) -> Any:  # the max, through a fused rows kernel (a later op reads it)
    return kd.ops.max(v, axis=-1) + kd.ops.sum(v * 0, axis=-1)


@pytest.mark.parametrize(("rows", "cols"), [(6, 300), (4, 4096), (3, 32768)])  # row-per-warp and row-per-block
def test_a_nan_anywhere_in_a_row_makes_its_max_and_softmax_nan(device_session, rows: int, cols: int) -> None:  # type: ignore[no-untyped-def]
    x = _data((rows, cols), np.float32, 13)
    x[0, 0] = np.nan
    x[1, cols - 1] = np.nan
    x[2, cols // 2] = -np.nan
    d = device_session.to_device(x)
    got = softmax(d).to_host()
    assert np.isnan(got[:3]).all()
    np.testing.assert_allclose(got[3:], _reference_f32(_softmax, x[3:]), rtol=2e-5, atol=1e-6)
    row_max = max_plus_zero_sum(d).to_host()
    assert np.isnan(row_max[:3]).all() and (row_max[3:] == x[3:].max(axis=-1)).all()


@kd.fuse
def over_largest_magnitude(x: Any) -> Any:  # a held row: its values are widened once, read twice
    return x / kd.ops.max(kd.ops.abs(x), axis=-1, keepdims=True)


@pytest.mark.parametrize("cols", [1024, 1001])  # aligned and shifted rows
@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_a_16_bit_nan_in_any_lane_reaches_its_row_and_an_infinity_only_its_place(device_session, dt, cols: int) -> None:  # type: ignore[no-untyped-def]
    x = _data((16, cols), dt, 17)
    for lane in range(8):
        x[lane, 64 + lane] = np.nan if lane % 2 else -np.nan
        x[8 + lane, 64 + lane] = np.inf
    got = over_largest_magnitude(device_session.to_device(x)).to_host()
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = wide / np.abs(wide).max(axis=-1, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # whole rows 0-7, one place in rows 8-15
    bound = error_bounds.value_bound(want, 2, acc=np.float32, out=dt)  # a fast division of exact operands
    error_bounds.assert_within(got, want, bound, "x / max |x|")


def test_rows_of_one_element(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data((50, 1), np.float32, 13)
    np.testing.assert_array_equal(softmax(device_session.to_device(x)).to_host(), np.ones((50, 1), np.float32))
    _check_rows("logsumexp", logsumexp(device_session.to_device(x)).to_host(), x)


def test_empty_arrays(device_session) -> None:  # type: ignore[no-untyped-def]
    @kd.fuse
    def share(x: Any) -> Any:
        total = kd.ops.sum(x, axis=-1, keepdims=True)
        return x / total, total

    assert softmax(device_session.to_device(np.zeros((0, 5), np.float32))).shape == (0, 5)
    y, total = share(device_session.to_device(np.zeros((3, 0), np.float32)))
    assert y.shape == (3, 0)
    np.testing.assert_array_equal(total.to_host(), np.zeros((3, 1), np.float32))
    with pytest.raises(ValueError, match="zero-size"):
        softmax(device_session.to_device(np.zeros((3, 0), np.float32)))


def test_numpy_operands_give_a_tuple_of_numpy_results(device_session) -> None:  # type: ignore[no-untyped-def]
    x, w, b = _data((40, 96), np.float32, 14), _data((96,), np.float32, 15), _data((96,), np.float32, 16)
    got = layer_norm(x, w, b)
    assert isinstance(got, tuple) and all(isinstance(g, np.ndarray) for g in got)
    _check_layer_norm(got, x, w, b)


def test_the_same_input_gives_the_same_bits_every_run(device_session) -> None:  # type: ignore[no-untyped-def]
    d = device_session.to_device(_data((64, 32768), np.float32, 17))
    first = softmax(d).to_host()
    np.testing.assert_array_equal(softmax(d).to_host(), first)


def test_strided_views_are_read_through_a_copy(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data((64, 2048), np.float32, 18)
    view = device_session.to_device(x)[:, ::2]
    _check_rows("softmax", softmax(view).to_host(), np.ascontiguousarray(x[:, ::2]))


def test_out_receives_a_single_output(device_session) -> None:  # type: ignore[no-untyped-def]
    x = _data((128, 1024), np.float32, 19)
    out = device_session.empty((128, 1024), np.float32)
    assert softmax(device_session.to_device(x), out=out) is out
    _check_rows("softmax", out.to_host(), x)


def test_operands_broadcast_per_row_and_per_column(device_session) -> None:  # type: ignore[no-untyped-def]
    @kd.fuse
    def weighted(x: Any, s: Any, c: Any) -> Any:
        v = x * s + c
        return v / kd.ops.sum(kd.ops.abs(v), axis=-1, keepdims=True)

    x, s, c = _data((2, 7, 3000), np.float32, 20), _data((7, 1), np.float32, 21), _data((2, 1, 3000), np.float32, 22)

    def reference(x: np.ndarray, s: np.ndarray, c: np.ndarray) -> np.ndarray:
        v = x * s + c
        return v / np.abs(v).sum(-1, keepdims=True)

    got = weighted(*(device_session.to_device(a) for a in (x, s, c))).to_host()
    _close(got, _reference_f32(reference, x, s, c))


def test_a_cross_entropy_loss_is_one_value_per_row(device_session) -> None:  # type: ignore[no-untyped-def]
    @kd.fuse
    def cross_entropy(logits: Any, onehot: Any) -> Any:
        m = kd.ops.max(logits, axis=-1, keepdims=True)
        lse = m + kd.ops.log(kd.ops.sum(kd.ops.exp(logits - m), axis=-1, keepdims=True))
        return kd.ops.sum((lse - logits) * onehot, axis=-1)

    logits = _data((300, 1000), np.float32, 23)
    onehot = np.eye(1000, dtype=np.float32)[np.random.default_rng(24).integers(0, 1000, 300)]
    got = cross_entropy(device_session.to_device(logits), device_session.to_device(onehot)).to_host()
    want = (_logsumexp(logits.astype(np.float64)) - logits.astype(np.float64))[onehot.astype(bool)]
    _close(got, want.astype(np.float32))


@pytest.mark.parametrize("shape", [(64, 4096), (64, 1000), (7, 3)])
def test_several_reductions_of_one_value_and_a_tuple_of_outputs(device_session, shape) -> None:  # type: ignore[no-untyped-def]
    @kd.fuse
    def twice(x: Any) -> Any:
        e = kd.ops.exp(x - kd.ops.max(x, axis=-1, keepdims=True))
        return e / kd.ops.sum(e, axis=-1, keepdims=True) + kd.ops.max(e, axis=-1, keepdims=True), kd.ops.min(
            e * 2, axis=-1
        )

    def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True) + e.max(-1, keepdims=True), (e * 2).min(-1)

    x = _data(shape, np.float32, 25)
    got = twice(device_session.to_device(x))
    for g, want in zip(got, _reference_f32(reference, x)):
        _close(g.to_host(), want)


@pytest.mark.parametrize("shape", [(300, 4096), (1000, 768), (7, 33), (16, 40000)])
def test_warm_calls_launch_from_their_entry_and_read_each_calls_data(device_session, shape) -> None:  # type: ignore[no-untyped-def]
    w, b = _data(shape[-1:], np.float32, 5), _data(shape[-1:], np.float32, 6)
    dw, db = device_session.to_device(w), device_session.to_device(b)
    dx, out = device_session.empty(shape, np.float32), device_session.empty(shape, np.float32)
    for seed in range(4):  # the first call plans, the second makes the C entry, the rest launch from C
        x = _data(shape, np.float32, 20 + seed)
        dx.copy_from_host(x)
        _check_rows("softmax", softmax(dx).to_host(), x)
        assert softmax(dx, out=out) is out
        _check_rows("softmax", out.to_host(), x)
        _check_layer_norm(layer_norm(dx, dw, db), x, w, b)
    assert len(softmax._warm) >= 2 and len(layer_norm._warm) >= 1


# --- rows not a multiple of the vector: aligned vectors from each row's shift, per-element edges ------

SHIFTED = [(333, 7777), (333, 1001), (333, 421), (333, 4097), (8, 100_003)]  # the last is split
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", SHIFTED)
def test_shifted_rows_compute_softmax_and_log_softmax_like_numpy(device_session, shape, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data(shape, dt, shape[1])
    d = softmax.inspect(x, arch=ARCH).decisions
    assert (d.shifted, d.vector_width) == (True, 16 // np.dtype(dt).itemsize)
    dx = device_session.to_device(x)
    _check_rows("softmax", softmax(dx).to_host(), x)
    _check_rows("log_softmax", log_softmax(dx).to_host(), x)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", SHIFTED)
def test_shifted_rows_compute_layer_norm_and_rms_norm_like_numpy(device_session, shape, dt) -> None:  # type: ignore[no-untyped-def]
    x, w, b = _data(shape, dt, 30), _data(shape[-1:], dt, 31), _data(shape[-1:], dt, 32)
    assert layer_norm.inspect(x, w, b, arch=ARCH).decisions.shifted
    dx, dw, db = (device_session.to_device(a) for a in (x, w, b))
    _check_layer_norm(layer_norm(dx, dw, db), x, w, b)
    _check_rows("rms_norm", rms_norm(dx, dw).to_host(), x, w)


@pytest.mark.parametrize("dt", [np.float64, np.float16, ml_dtypes.bfloat16])
def test_shifted_rows_that_keep_exp_in_registers_match_numpy(device_session, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data((333, 409), dt, 34)  # every shift of the vector, edges at both ends of a row
    d = softmax.inspect(x, arch=ARCH).decisions
    assert (d.shifted, d.carried) == (True, True)
    dx = device_session.to_device(x)
    for name, fused, reference in (("softmax", softmax, _softmax), ("log_softmax", log_softmax, _log_softmax)):
        got = fused(dx).to_host()
        if np.dtype(dt) == np.float64:
            np.testing.assert_allclose(got, reference(*_wide(x)), rtol=1e-12, atol=1e-14)
        else:
            _check_rows(name, got, x)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16])
def test_a_shifted_view_of_a_wider_array_matches_numpy(device_session, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data((333, 8000), dt, 33)
    _check_rows("softmax", softmax(device_session.to_device(x)[:, :7777]).to_host(), np.ascontiguousarray(x[:, :7777]))


INTERLEAVED = [(100_003, 21), (3, 2001, 27), (2000, 13), (333, 9), (7, 127), (120015, 97)]  # 3-D, 1..32 lanes


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", INTERLEAVED)
def test_interleaved_short_rows_compute_softmax_and_layer_norm_like_numpy(device_session, shape, dt) -> None:  # type: ignore[no-untyped-def]
    x, w, b = _data(shape, dt, 40), _data(shape[-1:], dt, 41), _data(shape[-1:], dt, 42)
    for d in (softmax.inspect(x, arch=ARCH).decisions, layer_norm.inspect(x, w, b, arch=ARCH).decisions):
        assert (d.strategy, d.vector_width, d.shifted) == ("row-per-warp", 1, False)
    dx, dw, db = (device_session.to_device(a) for a in (x, w, b))
    _check_rows("softmax", softmax(dx).to_host(), x)
    _check_layer_norm(layer_norm(dx, dw, db), x, w, b)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_an_interleaved_kernel_reads_a_view_with_other_row_strides_in_place(device_session, dt) -> None:  # type: ignore[no-untyped-def]
    wide = _data((2000, 41), dt, 44)
    view = device_session.to_device(wide)[:, 3:40]  # rows 41 apart, each starting 3 elements in
    assert softmax.inspect(wide[:, 3:40], arch=ARCH).decisions.vector_width == 1
    _check_rows("softmax", softmax(view).to_host(), np.ascontiguousarray(wide[:, 3:40]))


@pytest.mark.parametrize("cols", [7777, 13])  # row-per-block; interleaved row-per-warp
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16])
def test_short_and_long_rows_write_only_their_own_elements(device_session, dt, cols) -> None:  # type: ignore[no-untyped-def]
    # rows 8..340 of a (349, cols) array: an aligned base whose neighbouring rows must stay as they were
    x = _data((333, cols), dt, 34)
    big = np.full((349, cols), 7.0, dt)
    dbig = device_session.to_device(big)
    out = dbig[8:341]
    assert softmax(device_session.to_device(x), out=out) is out
    got = dbig.to_host()
    np.testing.assert_array_equal(got[:8], big[:8])
    np.testing.assert_array_equal(got[341:], big[341:])
    _check_rows("softmax", got[8:341], x)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16])
def test_shifted_rows_with_minus_infinity_and_all_minus_infinity_rows_give_numpys_nan(device_session, dt) -> None:  # type: ignore[no-untyped-def]
    x = _data((6, 7777), dt, 35)
    x[1, ::3] = -np.inf
    x[2, :] = -np.inf
    got = softmax(device_session.to_device(x)).to_host().astype(np.float64)
    assert np.isnan(got[2]).all()
    assert (got[1, ::3] == 0).all()
    rows = [0, 1, 3, 4, 5]
    _check_rows("softmax", got[rows].astype(np.dtype(dt)), x[rows])
