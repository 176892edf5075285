"""kd.ops, reductions and @kd.fuse on the GPU, against NumPy on fresh random data.

Outputs are poisoned (``out=`` prefilled with a 0xA5 byte pattern) so a kernel that skips an
element cannot pass. Tolerances: arithmetic (+ - * /, negative, abs, minimum, maximum, where,
clip, square, sqrt, astype, integer power, fma/axpy in float32/float64) must match NumPy
exactly; CUDA's transcendental functions (exp, log, sin, cos, tanh, float power) may differ by
a few ulp (``MATH_RTOL``); float reductions are compared with a float64 reference within each
output's own error bound (``kerneldsl.bench.error_bounds``: ``gamma(n) * sum |x|`` over the terms
of that output, none where every partial sum is representable, plus the output's rounding), and
each check first shows that its bound rejects zeros and half the value. Sums, means and norms run
on small integers, whose float32 sums are exact: a dropped or repeated element shows.
"""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.bench import error_bounds
from kerneldsl.dtypes import all_element_types

pytestmark = pytest.mark.gpu

DTYPES = [et.numpy for et in all_element_types().values() if et.kind != "c"]  # complex: test_complex_arrays_gpu.py
FLOATS = [dt for dt in DTYPES if dt.kind == "f" or dt.name == "bfloat16"]
INTS = [dt for dt in DTYPES if dt.kind in "iu"]
EXACT_BINARY = ("add", "subtract", "multiply", "divide", "minimum", "maximum")
MATH = ("exp", "log", "sin", "cos", "tanh")


def ids(dt: np.dtype) -> str:
    return dt.name


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name == "bfloat16"


def eps(dt: np.dtype) -> float:
    if dt.name == "bfloat16":
        return 2.0**-7
    return float(np.finfo(dt).eps)


def rand(rng: np.random.Generator, dt: np.dtype, shape, *, small: bool = False) -> np.ndarray:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (max(info.min, -8), min(info.max, 8)) if small else (info.min, info.max)
        return rng.integers(lo, hi, shape, dtype=dt, endpoint=True)
    return (rng.standard_normal(shape) * (1 if small else 3)).astype(dt)


def poisoned(session, shape, dt) -> DeviceArray:
    dt = np.dtype(dt)
    garbage = np.frombuffer(b"\xa5" * (int(np.prod(shape)) * dt.itemsize), dtype=dt).reshape(shape)
    return session.to_device(garbage)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Bitwise-equal values (NaN equals NaN), same dtype and shape."""
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if is_float(got.dtype):
        g, w = got.astype(np.float64), want.astype(np.float64)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        assert same.all(), f"{np.count_nonzero(~same)} mismatches, first: got {g[~same][:5]} want {w[~same][:5]}"
    else:
        np.testing.assert_array_equal(got, want)


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float = 0.0) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def numpy_result(name: str, *operands):
    with np.errstate(all="ignore"):
        return {"abs": np.abs, "divide": np.true_divide}.get(name, getattr(np, name, None))(*operands)


def accepts(op, *operands) -> bool:
    try:
        op.resolve([o.dtype if isinstance(o, np.ndarray) else o for o in operands])
        return True
    except TypeError:
        return False


def run_device(session, op, *operands, **kw):
    """Upload, run with a poisoned out=, return (result on host, the out array)."""
    dev = [session.to_device(o) if isinstance(o, np.ndarray) else o for o in operands]
    plan = op._plan(dev, None)
    out = poisoned(session, plan.shape, plan.dtype)
    result = op(*dev, out=out, **kw)
    assert result is out
    return out.to_host()


# --- elementwise ops ----------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@pytest.mark.parametrize("name", EXACT_BINARY)
def test_binary_ops_match_numpy_exactly(device_session, rng, name: str, dt: np.dtype) -> None:
    op = ops.ELEMENTWISE[name]
    a, b = rand(rng, dt, 1027), rand(rng, dt, 1027)
    if name == "divide" and dt.kind in "iub":
        b[b == 0] = 1
    if not accepts(op, a, b):
        pytest.skip(f"numpy has no {name} for {dt}")
    assert_same(run_device(device_session, op, a, b), numpy_result(name, a, b))


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@pytest.mark.parametrize("name", ("negative", "abs", "square", "sqrt"))
def test_unary_ops_match_numpy_exactly(device_session, rng, name: str, dt: np.dtype) -> None:
    op = ops.ELEMENTWISE[name]
    a = rand(rng, dt, 1001)
    if not accepts(op, a):
        pytest.skip(f"numpy has no {name} for {dt}")
    assert_same(run_device(device_session, op, a), numpy_result(name, a))  # sqrt is correctly rounded on both


@pytest.mark.parametrize("dt", [dt for dt in DTYPES if dt != np.bool_], ids=ids)
@pytest.mark.parametrize("name", MATH)
def test_math_functions_within_a_few_ulp(device_session, rng, name: str, dt: np.dtype) -> None:
    op = ops.ELEMENTWISE[name]
    a = rand(rng, dt, 1001, small=True)
    if name == "log" and is_float(dt):
        a = np.abs(a)
    want = numpy_result(name, a)
    got = run_device(device_session, op, a)
    e = eps(want.dtype)
    assert_close(got, want, rtol=8 * e, atol=8 * e)


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
def test_power(device_session, rng, dt: np.dtype) -> None:
    if dt == np.bool_:
        pytest.skip("numpy promotes bool power to int8; covered by int8")
    a = rand(rng, dt, 513, small=True)
    b = (rng.integers(0, 5, 513)).astype(dt) if not is_float(dt) else np.abs(rand(rng, dt, 513, small=True))
    if is_float(dt):
        a = np.abs(a)
    want = numpy_result("power", a, b)
    got = run_device(device_session, ops.power, a, b)
    if is_float(dt):
        assert_close(got, want, rtol=16 * eps(dt), atol=16 * eps(dt))
    else:
        assert_same(got, want)


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
def test_where_clip_fma_axpy(device_session, rng, dt: np.dtype) -> None:
    a, b, c = rand(rng, dt, 777), rand(rng, dt, 777), rand(rng, dt, 777)
    cond = rng.integers(0, 2, 777).astype(bool)
    assert_same(run_device(device_session, ops.where, cond, a, b), np.where(cond, a, b))
    lo, hi = (np.minimum(a, b), np.maximum(a, b)) if dt != np.bool_ else (a, b)
    assert_same(run_device(device_session, ops.clip, c, lo, hi), np.clip(c, lo, hi))
    if dt == np.bool_:
        return
    with np.errstate(all="ignore"):
        want = a * b + c
    got = run_device(device_session, ops.fma, a, b, c)
    half = dt.itemsize == 2 and is_float(dt)
    if half:  # NumPy rounds a*b to 16 bits before adding; we keep it in float32: within 2 ulp of the terms
        scale = float(np.max(np.abs(a.astype(np.float32) * b.astype(np.float32)) + np.abs(c.astype(np.float32))))
        assert_close(got, want, rtol=2 * eps(dt), atol=2 * eps(dt) * scale)
    else:
        assert_same(got, want)
    alpha = dt.type(3) if not is_float(dt) else dt.type(1.5)
    with np.errstate(all="ignore"):
        want = alpha * a + b
    got = run_device(device_session, ops.axpy, alpha, a, b)
    if half:
        scale = float(np.max(1.5 * np.abs(a.astype(np.float32)) + np.abs(b.astype(np.float32))))
        assert_close(got, want, rtol=2 * eps(dt), atol=2 * eps(dt) * scale)
    else:
        assert_same(got, want)


@pytest.mark.parametrize("src", DTYPES, ids=ids)
@pytest.mark.parametrize("dst", DTYPES, ids=ids)
def test_astype(device_session, rng, src: np.dtype, dst: np.dtype) -> None:
    a = rand(rng, src, 300, small=dst.kind in "iub" and is_float(src))
    if is_float(src) and dst.kind == "u":
        a = np.abs(a)  # float -> unsigned of negatives is undefined in NumPy (C casts)
    with np.errstate(all="ignore"):
        want = a.astype(dst)
    out = poisoned(device_session, a.shape, dst)
    ops.astype(device_session.to_device(a), dst, out=out)
    got = out.to_host()
    if src == np.float64 and dst.itemsize == 2 and is_float(dst):  # we round through float32
        assert_close(got, want, rtol=eps(dst), atol=0)
    else:
        assert_same(got, want)


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@pytest.mark.parametrize("name", sorted(ops.COMPARISONS))
def test_comparisons_match_numpy_with_mixed_and_nan_operands(device_session, rng, name: str, dt: np.dtype) -> None:
    op = ops.ELEMENTWISE[name]
    a, b = rand(rng, dt, 1027), rand(rng, np.float32, 1027)
    b[::7] = a[::7]  # equal pairs
    if is_float(dt):
        a[::11] = np.nan
    assert_same(run_device(device_session, op, a, b), numpy_result(name, a, b))
    assert_same(run_device(device_session, op, a, a), numpy_result(name, a, a))


@pytest.mark.parametrize("dt", [dt for dt in DTYPES if dt != np.bool_], ids=ids)
@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
def test_floor_divide_and_remainder_match_numpy(device_session, rng, name: str, dt: np.dtype) -> None:
    op = ops.ELEMENTWISE[name]
    a, b = rand(rng, dt, 2053, small=dt.kind in "iu"), rand(rng, dt, 2053, small=dt.kind in "iu")
    b[::17] = 0  # NumPy: 0 for integers, inf / nan for floats
    a[::5] = -a[::5]
    if not accepts(op, a, b):
        pytest.skip(f"numpy has no {name} for {dt}")
    assert_same(run_device(device_session, op, a, b), numpy_result(name, a, b))


@pytest.mark.parametrize(
    "dt", [np.dtype(t) for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64")], ids=ids
)
@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
def test_integer_floor_divide_and_remainder_match_numpy_over_the_whole_range(
    device_session, rng, name: str, dt: np.dtype
) -> None:
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, 4099, endpoint=True).astype(dt)
    b = rng.integers(info.min, info.max, 4099, endpoint=True).astype(dt)
    a[::13], b[::7], b[1::11] = info.min, 0, (1 if info.min == 0 else -1)  # the extremes, 0 and the wrap
    b[2::9] = rng.integers(1, 9, b[2::9].size)  # quotients of every size
    assert_same(run_device(device_session, ops.ELEMENTWISE[name], a, b), numpy_result(name, a, b))


def test_device_array_operators_match_numpy(device_session, rng) -> None:
    x, y = rand(rng, np.float32, (33, 7)), rand(rng, np.float32, 7)
    i, j = rand(rng, np.int32, 500, small=True), rand(rng, np.int32, 500, small=True)
    j[j == 0] = 3
    dx, dy, di, dj = (device_session.to_device(v) for v in (x, y, i, j))
    with np.errstate(all="ignore"):
        for got, want in [
            (dx + dy, x + y),
            (dx - 2, x - 2),
            (2 * dx, 2 * x),
            (dx / dy, x / y),
            (1 / dx, 1 / x),
            (-dx, -x),
            (abs(dx), abs(x)),
            (dx < dy, x < y),
            (dx == dx, x == x),
            (di // dj, i // j),
            (di % dj, i % j),
            (-7 // dj, -7 // j),
            (di != 0, i != 0),
        ]:
            assert_same(got.to_host(), want)
    e = eps(np.dtype(np.float32))
    assert_close((dx**2).to_host(), x**2, 8 * e, 8 * e)  # CUDA's pow, within a few ulp (see test_power)
    dz = device_session.to_device(x.copy())
    dz += dy
    dz *= 0.5
    assert_same(dz.to_host(), (x + y) * np.float32(0.5))


def test_nan_and_inf_propagation(device_session) -> None:
    a = np.array([1, np.nan, 3, np.inf, -np.inf, np.nan, 0], np.float32)
    b = np.array([np.nan, 2, 1, np.nan, np.inf, np.nan, -0.0], np.float32)
    for name in ("minimum", "maximum", "add", "subtract", "multiply", "divide"):
        assert_same(run_device(device_session, ops.ELEMENTWISE[name], a, b), numpy_result(name, a, b))
    for name in ("sqrt", "abs", "negative"):
        assert_same(run_device(device_session, ops.ELEMENTWISE[name], a), numpy_result(name, a))
    e = eps(np.dtype(np.float32))
    for name in ("exp", "log", "sin", "tanh"):  # NaN and inf in the same places, values within a few ulp
        assert_close(
            run_device(device_session, ops.ELEMENTWISE[name], a), numpy_result(name, a), rtol=8 * e, atol=8 * e
        )
    assert_same(run_device(device_session, ops.clip, a, 0.0, 2.0), np.clip(a, 0.0, 2.0))


def test_integer_wraparound(device_session) -> None:
    i32 = np.array([2**31 - 1, -(2**31), -(2**31), 7], np.int32)
    one = np.array([1, -1, 1, 0], np.int32)
    with np.errstate(all="ignore"):
        assert_same(run_device(device_session, ops.add, i32, one), i32 + one)
        assert_same(run_device(device_session, ops.subtract, i32, one), i32 - one)
        assert_same(run_device(device_session, ops.multiply, i32, i32), i32 * i32)
        assert_same(run_device(device_session, ops.negative, i32), -i32)
        assert_same(run_device(device_session, ops.abs, i32), np.abs(i32))
    u8 = np.array([0, 1, 255], np.uint8)
    assert_same(run_device(device_session, ops.subtract, u8, np.uint8(1)), u8 - np.uint8(1))
    i64 = np.array([2**62, -(2**63)], np.int64)
    with np.errstate(all="ignore"):
        assert_same(run_device(device_session, ops.multiply, i64, np.int64(4)), i64 * np.int64(4))
        assert_same(
            run_device(device_session, ops.power, np.array([3, 7], np.int8), np.array([5, 9], np.int8)),
            np.power(np.array([3, 7], np.int8), np.array([5, 9], np.int8)),
        )


def test_python_scalars_are_weak_and_numpy_scalars_strong(device_session, rng) -> None:
    x = rand(rng, np.float16, 100)
    dx = device_session.to_device(x)
    got = ops.multiply(dx, 0.1).to_host()
    assert_same(got, x * 0.1)
    got = ops.multiply(dx, np.float32(0.1)).to_host()
    assert_same(got, x * np.float32(0.1))
    i8 = rand(rng, np.int8, 100)
    assert_same(ops.add(device_session.to_device(i8), 3).to_host(), i8 + 3)
    with pytest.raises(OverflowError):
        ops.add(device_session.to_device(np.zeros(3, np.uint8)), -1)


@pytest.mark.parametrize("n", [1, 3, 4, 5, 1 << 20, (1 << 20) + 7])
def test_vector_path_tails(device_session, rng, n: int) -> None:
    for dt in (np.float32, np.int8, np.float64, np.float16):
        a, b = rand(rng, dt, n), rand(rng, dt, n)
        with np.errstate(all="ignore"):
            assert_same(run_device(device_session, ops.add, a, b), a + b)


def test_empty_and_size_one(device_session) -> None:
    for shape in [(0,), (0, 3), (1,), (1, 1), ()]:
        a = np.ones(shape, np.float32)
        got = ops.add(device_session.to_device(a), device_session.to_device(a))
        assert got.shape == shape
        assert_same(got.to_host(), a + a)
        assert_same(ops.add(a, a), a + a)  # numpy path


def test_broadcasting(device_session, rng) -> None:
    cases = [
        ((3, 1, 5), (4, 1)),
        ((4, 5), (5,)),
        ((4, 1), (1, 6)),
        ((2, 3, 4), ()),
        ((1,), (7,)),
        ((5, 1, 1), (1, 1, 6)),
    ]
    for sa, sb in cases:
        a, b = rand(rng, np.float32, sa), rand(rng, np.int16, sb)
        assert_same(run_device(device_session, ops.add, a, b), a + b)
        assert_same(ops.multiply(a, b), a * b)
    with pytest.raises(ValueError, match="broadcast"):
        ops.add(device_session.to_device(np.ones(3)), device_session.to_device(np.ones(4)))


def test_in_place_and_overlapping_broadcast_out(device_session, rng) -> None:
    x = rand(rng, np.float32, (8, 16))
    dx = device_session.to_device(x)
    ops.add(dx, dx, out=dx)  # flat layout: in place is safe
    assert_same(dx.to_host(), x + x)
    y = rand(rng, np.float32, 1000)
    dy = device_session.to_device(y)
    ops.axpy(np.float32(2), device_session.to_device(y), dy, out=dy)
    assert_same(dy.to_host(), np.float32(2) * y + y)


def test_numpy_in_numpy_out(rng) -> None:
    a, b = rand(rng, np.float32, (30, 40)), rand(rng, np.float32, (40,))
    got = ops.add(a, b)
    assert isinstance(got, np.ndarray)
    assert_same(got, a + b)
    out = np.full((30, 40), np.nan, np.float32)
    assert ops.add(a, b, out=out) is out
    assert_same(out, a + b)
    strided = a[:, ::2]
    assert_close(ops.sin(strided), np.sin(strided), 8 * eps(np.dtype(np.float32)), 8 * eps(np.dtype(np.float32)))
    target = np.zeros((30, 40), np.float32)[:, ::2]
    ops.multiply(strided, 2, out=target)
    assert_same(target, strided * 2)
    assert_same(ops.add(np.float32(1), np.float32(2)), np.asarray(np.float32(3)))
    with pytest.raises(TypeError, match="out= must be a numpy array"):
        ops.add(a, a, out=kd.default_session().empty(a.shape, a.dtype))


def test_mixed_numpy_and_device_operands_run_on_device(device_session, rng) -> None:
    a, b = rand(rng, np.float32, 100), rand(rng, np.float32, 100)
    got = ops.add(device_session.to_device(a), b)
    assert isinstance(got, DeviceArray)
    assert_same(got.to_host(), a + b)


def test_out_dtype_casting(device_session, rng) -> None:
    a = rand(rng, np.int16, 50)
    out = poisoned(device_session, (50,), np.float32)
    ops.add(device_session.to_device(a), device_session.to_device(a), out=out)
    assert_same(out.to_host(), (a + a).astype(np.float32))
    with pytest.raises(TypeError, match="same_kind"):
        ops.add(device_session.to_device(rand(rng, np.float32, 5)), 1.0, out=device_session.empty(5, np.int32))


def test_foreign_arrays(device_session, rng) -> None:
    cp = pytest.importorskip("cupy")
    x = rand(rng, np.float32, 1001)
    cx = cp.asarray(x)
    got = ops.multiply(cx, 2.0)
    assert isinstance(got, DeviceArray)
    assert_same(got.to_host(), x * 2)
    misaligned = cx[1:]  # 4-byte offset: the scalar path
    assert_same(ops.add(misaligned, misaligned).to_host(), x[1:] + x[1:])
    with pytest.raises(ValueError, match="strided"):
        ops.add(cx[::2], 1.0)


def test_hypothesis_broadcast_shapes(device_session) -> None:
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(
        shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=6),
        seed=st.integers(0, 2**32 - 1),
    )
    def check(shapes, seed):
        rng = np.random.default_rng(seed)
        a, b = rand(rng, np.float32, shapes.input_shapes[0]), rand(rng, np.int32, shapes.input_shapes[1])
        assert_same(
            ops.subtract(device_session.to_device(a), device_session.to_device(b)).to_host()
            if a.size and b.size
            else ops.subtract(a, b),
            a - b,
        )

    check()


# --- reductions --------------------------------------------------------------------------------------


ORDER_REDUCTIONS = {"max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}


def summable(rng: np.random.Generator, dt: np.dtype, shape) -> np.ndarray:
    """Integers in [-15, 15] for float dtypes: sums of up to 2^20 + 3 of them are exact in float32
    (every partial sum below 2^24), so a float sum's only rounding is its output's. Integer
    dtypes: their full range (their sums are exact anyway)."""
    if is_float(dt):
        return rng.integers(-15, 16, shape).astype(dt)
    return rand(rng, dt, shape)


def reference_and_bound(name: str, x: np.ndarray, axis, plan) -> tuple[np.ndarray, np.ndarray]:
    """The float64 result of the reduction ``name`` and its error bound, per output."""
    x64 = x.astype(np.float64)
    if name == "sum":
        return np.sum(x64, axis=axis), error_bounds.sum_bound(x, axis, acc=plan.acc, out=plan.dtype)
    if name == "mean":
        return np.mean(x64, axis=axis), error_bounds.mean_bound(x, axis, acc=plan.acc, out=plan.dtype)
    return np.sqrt(np.sum(x64 * x64, axis=axis)), error_bounds.norm_bound(x, axis, acc=plan.acc, out=plan.dtype)


def assert_reduction(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str) -> None:
    """Within the bound, after showing the bound rejects zeros and half the value."""
    error_bounds.assert_rejects_wrong_answers(want, bound, what)
    error_bounds.assert_within(got, want, bound, what)


def _reduce(session, name: str, x: np.ndarray, axis=None):
    r = getattr(ops, name)
    plan = r._plan((x,), axis, None)
    out = poisoned(session, plan.shape, plan.dtype)
    assert r(session.to_device(x), axis=axis, out=out) is out
    return out.to_host(), plan


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@pytest.mark.parametrize(
    "shape, axis",
    [
        ((1000,), None),
        (((1 << 20) + 3,), None),
        ((37, 1000), 1),
        ((37, 1000), 0),
        ((3, 5000), 1),
        ((5000, 3), 0),
        ((4, 6, 5), 1),
        ((37, 1000), None),
        ((37, 1000), -1),
    ],
)
def test_reductions_match_numpy(device_session, rng, dt: np.dtype, shape, axis) -> None:
    x = rand(rng, dt, shape)
    for name, reduce in ORDER_REDUCTIONS.items():
        got, plan = _reduce(device_session, name, x, axis)
        with np.errstate(all="ignore"):
            assert_same(got, np.asarray(reduce(x, axis=axis)).astype(plan.dtype))
    terms = summable(rng, dt, shape)
    for name in ("sum", "mean", "norm"):
        got, plan = _reduce(device_session, name, terms, axis)
        assert got.dtype == plan.dtype
        if name == "sum" and not is_float(plan.acc):
            assert_same(got, np.asarray(np.sum(terms, axis=axis)).astype(plan.dtype))
            continue
        want, bound = reference_and_bound(name, terms, axis, plan)
        assert_reduction(got, want, bound, f"{name} of {dt.name} {shape} over axis {axis}")


@pytest.mark.parametrize("dt", INTS + [np.dtype(np.float32)], ids=ids)
def test_prod_and_dot(device_session, rng, dt: np.dtype) -> None:
    x = rand(rng, dt, 25, small=True)
    got, plan = _reduce(device_session, "prod", x)
    with np.errstate(all="ignore"):
        want = np.prod(x)
    if is_float(dt):
        np.testing.assert_allclose(got, want, rtol=30 * eps(dt))
    else:
        assert_same(got, np.asarray(want))
    normal, integers = (rand(rng, dt, 4097), rand(rng, dt, 4097)), (summable(rng, dt, 4097), summable(rng, dt, 4097))
    for a, b in (normal, integers):
        got = ops.dot(device_session.to_device(a), device_session.to_device(b)).to_host()
        if not is_float(dt):
            with np.errstate(all="ignore"):
                assert_same(got, np.asarray(np.dot(a, b)))
            continue
        products = a.astype(np.float64) * b.astype(np.float64)  # each rounds once in float32: gamma(n) covers it
        bound = error_bounds.sum_bound(products, acc=dt, out=dt)
        if a is integers[0]:  # exact in float32: the bound is zero, and rejects any wrong value
            assert_reduction(got, products.sum(), bound, f"dot of {dt.name} integers")
        else:
            error_bounds.assert_within(got, products.sum(), bound, f"dot of {dt.name}")


def test_reductions_are_deterministic(device_session, rng) -> None:
    x = device_session.to_device(rand(rng, np.float32, (1 << 22) + 5))
    first = ops.sum(x).to_host()
    for _ in range(5):
        assert ops.sum(x).to_host().tobytes() == first.tobytes()


def test_reduction_nan_inf_and_empty(device_session) -> None:
    x = np.array([1, np.nan, 5, np.nan, 2], np.float32)
    assert np.isnan(ops.max(device_session.to_device(x)).to_host())
    assert np.isnan(ops.min(x))
    assert ops.argmax(device_session.to_device(x)).to_host() == np.argmax(x) == 1
    assert ops.argmin(x) == np.argmin(x)
    assert np.isnan(ops.sum(np.array([np.inf, -np.inf], np.float32)))
    assert ops.sum(np.zeros(0, np.float32)) == 0
    assert ops.prod(np.zeros(0, np.int32)) == 1
    assert ops.sum(device_session.to_device(np.zeros((0, 4), np.float32)), axis=0).to_host().tolist() == [0, 0, 0, 0]
    assert ops.sum(np.zeros((4, 0), np.float32), axis=0).shape == (0,)
    for name in ("max", "min", "argmax", "argmin"):
        with pytest.raises(ValueError):
            getattr(ops, name)(np.zeros(0, np.float32))
        with pytest.raises(ValueError):
            getattr(ops, name)(device_session.to_device(np.zeros((3, 0), np.float32)), axis=1)
    assert ops.argmax(np.ones(1, np.float32)) == 0
    assert ops.sum(np.full(1, 7, np.int8)) == 7
    big_nan = np.ones((1 << 20) + 1, np.float32)
    big_nan[123457] = np.nan
    assert ops.argmax(big_nan) == 123457 and np.isnan(ops.sum(big_nan))


def test_numpy_reductions_return_numpy(rng) -> None:
    x = rand(rng, np.float32, (20, 30))
    assert isinstance(ops.sum(x, axis=0), np.ndarray)
    s = ops.sum(x)
    assert np.ndim(s) == 0 and np.asarray(s).dtype == np.float32
    out = np.empty(30, np.float64)
    assert ops.sum(x, axis=0, out=out) is out
    # a column may cancel to near zero: its error is bounded by its terms, not by its value
    bound = error_bounds.sum_bound(x, 0, acc=np.float32, out=np.float64)
    error_bounds.assert_within(out, x.astype(np.float64).sum(0), bound, "column sums")


def test_user_reduction(device_session, rng) -> None:
    x = rand(rng, np.float32, 100000)
    l2 = kd.reduction(map="x * x", reduce="a + b", identity="0", post="sqrt(r)", name="l2")
    got = l2(device_session.to_device(x)).to_host()
    np.testing.assert_allclose(got, np.linalg.norm(x.astype(np.float64)), rtol=1e-5)
    absmax = kd.reduction(map="fabs(x)", reduce="a > b ? a : b", identity="0", name="absmax")
    assert absmax(x) == np.max(np.abs(x))


# --- fusion ------------------------------------------------------------------------------------------


@kd.fuse
def chain(x, y):
    t = ((x * 2 + y) * x - 3) * 0.5
    return kd.ops.square(kd.ops.sin(t) + y)


def unfused(x, y):
    t = ops.multiply(ops.subtract(ops.multiply(ops.add(ops.multiply(x, 2), y), x), 3), 0.5)
    return ops.square(ops.add(ops.sin(t), y))


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_fused_equals_unfused(device_session, rng, dt: np.dtype) -> None:
    x, y = rand(rng, dt, 100003, small=True), rand(rng, dt, 100003, small=True)
    dx, dy = device_session.to_device(x), device_session.to_device(y)
    fused = chain(dx, dy).to_host()
    assert_same(fused, unfused(dx, dy).to_host())  # same rounding steps, no FMA contraction
    with np.errstate(all="ignore"):
        two, three, half = (np.asarray(v, dt) for v in (2, 3, 0.5))  # NEP 50's weak scalars, under any ml_dtypes
        ref = np.square(np.sin(((x * two + y) * x - three) * half) + y)
    assert_close(fused, ref, rtol=16 * eps(dt), atol=16 * eps(dt))
    assert_same(chain(x, y), fused)  # numpy in, numpy out


def test_fused_reduction_and_broadcast(device_session, rng) -> None:
    @kd.fuse
    def centered_sq_norms(m, row):
        return kd.ops.sum(kd.ops.square(m - row), axis=1)

    m, row = rand(rng, np.float32, (64, 3000)), rand(rng, np.float32, 3000)
    got = centered_sq_norms(device_session.to_device(m), device_session.to_device(row)).to_host()
    np.testing.assert_allclose(got, ((m.astype(np.float64) - row) ** 2).sum(1), rtol=1e-5)

    @kd.fuse
    def total(x, y, a):
        return kd.ops.sum(x * a + y)

    # integers in [-3, 3]: every x * a + y is a multiple of 1/2 and every partial sum of them is exact
    # in float32 (sum |x a + y| <= 4.5 n < 2^23), so a dropped or repeated element shows
    x, y = (rng.integers(-3, 4, (1 << 20) + 9).astype(np.float32) for _ in range(2))
    for a in (0.5, 2.0):  # a is a runtime parameter: same kernel, new value
        got = total(device_session.to_device(x), device_session.to_device(y), a).to_host()
        terms = x.astype(np.float64) * a + y
        bound = error_bounds.sum_bound(terms, acc=np.float32, out=np.float32)
        assert_reduction(got, terms.sum(), bound, f"sum(x * {a} + y)")
    assert len({p.program for p in total._plans.values()}) == 1


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64, np.int32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 7, 4099, 1 << 20])
def test_0d_operands_broadcast_like_numpy_in_the_flat_layout(device_session, rng, dt, n: int) -> None:  # type: ignore[no-untyped-def]
    x = rand(rng, np.dtype(dt), (n,))
    a, b = rand(rng, np.dtype(dt), (1,)).reshape(()), rand(rng, np.dtype(dt), (1,)).reshape(())
    da, db, dx = device_session.to_device(a), device_session.to_device(b), device_session.to_device(x)
    assert da.shape == () and kd.ops.multiply.inspect(a, x).decisions.layout == "flat"
    for _ in range(3):  # the Python path, then the C path
        assert_same(kd.ops.add(kd.ops.multiply(da, dx), db).to_host(), a * x + b)
