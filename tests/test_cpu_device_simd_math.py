"""kd.ops' host plans on the CPU device vectorize their loops, and their float math functions then run
through libmvec's vector variants or the shim's own polynomials in double (the log family, expm1,
atan): each stays within CUDA's documented ulp bound for the function (the CUDA Math API's
single-precision table), measured here against float64 on every binade of its domain, and keeps
the special values and the sign of zero, on contiguous data and on views; the float16 conversions
their loops run are exact. Their double functions vectorize where that keeps CUDA's double-precision
bound (libmvec's atan, asinh, acosh, acos, sinh, atanh, log, pow and hypot; the shim's own exp,
expm1, cosh, tanh, log1p, log2, log10 and arcsin), measured against long double. Where the host has
no libmvec, the kernels call libm as before."""

from __future__ import annotations

from typing import Any, NewType

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.jit import host_compile
from kerneldsl.jit.host_compile import NO_TRAPS, SIMD_MATH, host_options, simd_math_available

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="no host C++ compiler for the CPU device")

# name: (CUDA's single-precision bound in ulp, the domain sampled)
BOUNDS: dict[str, tuple[float, tuple[float, float]]] = {
    "exp": (2, (-104, 89)),
    "expm1": (1, (-20, 89)),
    "log": (1, (0, np.inf)),
    "log2": (1, (0, np.inf)),
    "log10": (2, (0, np.inf)),
    "log1p": (1, (-1, np.inf)),
    "sin": (2, (-np.inf, np.inf)),
    "cos": (2, (-np.inf, np.inf)),
    "tan": (4, (-np.inf, np.inf)),
    "sinh": (3, (-90, 90)),
    "cosh": (2, (-90, 90)),
    "tanh": (2, (-np.inf, np.inf)),
    "arcsin": (2, (-1, 1)),
    "arccos": (2, (-1, 1)),
    "arctan": (2, (-np.inf, np.inf)),
    "arcsinh": (3, (-np.inf, np.inf)),
    "arccosh": (4, (1, np.inf)),
    "arctanh": (3, (-1, 1)),
}


n = NewType("n", int)


@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def call_log10f(out: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) out[i] = log10f(x[i]);"


def sample(low: float, high: float, seed: int, dtype: type[np.floating[Any]] = np.float32) -> np.ndarray:
    """Values of ``dtype`` (float32 or float64) in [low, high]: random bit patterns (every binade
    alike), uniform draws, and the two ends (an infinite one as a large finite value)."""
    rng = np.random.default_rng(seed)
    single = dtype == np.float32
    bits = rng.integers(0, 2 ** (32 if single else 64), 1 << 18, dtype=np.uint64)
    bits = (bits.astype(np.uint32) if single else bits).view(dtype)
    uniform = rng.uniform(max(low, -1e4), min(high, 1e4), 1 << 16).astype(dtype)
    edge = 3e38 if single else 1.7e308
    x = np.concatenate([bits, uniform, np.array([low, high], dtype).clip(-edge, edge)])
    return x[np.isfinite(x) & (x >= low) & (x <= high)]


def ulp_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulps of the float32 nearest ``want``, where both are finite floats."""
    with np.errstate(over="ignore"):
        nearest = want.astype(np.float32)
    finite = np.isfinite(nearest) & np.isfinite(got)
    return np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(np.abs(nearest[finite]))


@pytest.mark.parametrize("view", [False, True], ids=["contiguous", "every other element"])
@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_a_vectorized_float_function_stays_within_cudas_ulp_bound(cpu: Any, name: str, view: bool) -> None:
    bound, (low, high) = BOUNDS[name]
    x = sample(low, high, seed=len(name))
    if view:  # the strided plan's loop, vectorized too
        got = getattr(ops, name)(cpu.to_device(np.repeat(x, 2))[::2]).to_host()
    else:
        got = getattr(ops, name)(cpu.to_device(x)).to_host()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert ulp_errors(got, want).max() <= bound


@pytest.mark.parametrize("special", [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("name", ["exp", "expm1", "log", "log2", "log10", "log1p", "sin", "tanh", "arctan"])
@pytest.mark.parametrize("view", [False, True], ids=["contiguous", "every other element"])
def test_a_vectorized_float_function_keeps_the_special_values(cpu: Any, name: str, special: float, view: bool) -> None:
    x = np.full(300, special, np.float32)  # a vector loop and its scalar tail
    operand = cpu.to_device(np.repeat(x, 2))[::2] if view else cpu.to_device(x)
    got = getattr(ops, name)(operand).to_host()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


def test_the_flat_plan_is_built_to_round_and_select_in_vector_registers() -> None:
    assert NO_TRAPS in host_options((SIMD_MATH,))


def test_a_host_without_libmvec_keeps_libms_scalar_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_compile, "simd_math_available", lambda: False)
    assert SIMD_MATH not in host_options((SIMD_MATH,))


@pytest.mark.skipif(not simd_math_available(), reason="this host has no libmvec")
def test_a_host_with_libmvec_builds_the_flat_plan_with_simd_math() -> None:
    assert SIMD_MATH in host_options((SIMD_MATH,))


def test_every_float16_widens_exactly(cpu: Any) -> None:
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = ops.astype(cpu.to_device(halves), np.float32).to_host()
    want = halves.astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_a_float_narrows_to_float16_rounding_to_nearest_even(cpu: Any) -> None:
    rng = np.random.default_rng(16)
    bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.float32([65504, 65519.996, 65520, 2**-14, 2**-24, 2**-25, 3 * 2**-26, 2**-25 * 1.0000001, 1e-8])
    x = np.concatenate([bits, edges, -edges])
    got = ops.astype(cpu.to_device(x), np.float16).to_host()
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_a_float16_nan_widens_to_the_gpus_nan_keeping_its_sign(cpu: Any) -> None:
    payloads = np.array([0x7C01, 0x7D55, 0x7E00, 0x7FFF, 0xFC01, 0xFE00, 0xFFFF], np.uint16)
    halves = np.tile(np.concatenate([payloads, np.arange(25, dtype=np.uint16)]), 40).view(np.float16)
    got = ops.astype(cpu.to_device(halves), np.float32).to_host().view(np.uint32)
    nan = np.isnan(halves)
    assert np.array_equal(got[nan], 0x7FC00000 | (halves[nan].view(np.uint16).astype(np.uint32) & 0x8000) << 16)
    assert np.array_equal(got[~nan].view(np.float32), halves[~nan].astype(np.float32))


def test_a_float_nan_narrows_to_the_gpus_float16_nan_keeping_its_sign(cpu: Any) -> None:
    payloads = np.array([0x7F800001, 0x7FA00000, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC12345], np.uint32)
    x = np.tile(np.concatenate([payloads, np.arange(26, dtype=np.float32).view(np.uint32)]), 40).view(np.float32)
    got = ops.astype(cpu.to_device(x), np.float16).to_host().view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(got[nan], 0x7E00 | (x[nan].view(np.uint32) >> 16 & 0x8000).astype(np.uint16))
    assert np.array_equal(got[~nan].view(np.float16), x[~nan].astype(np.float16))


@pytest.mark.parametrize("name", ["exp", "log", "log2", "log10", "sin", "cos", "tan", "cosh", "arctan"])
def test_a_float16_function_is_within_a_float16_ulp_of_the_exact_result(cpu: Any, name: str) -> None:
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)  # every float16
    got = getattr(ops, name)(cpu.to_device(halves)).to_host()
    with np.errstate(all="ignore"):
        exact = getattr(np, name)(halves.astype(np.float64))
        want = exact.astype(np.float16)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    spacing = np.spacing(np.abs(want[finite])).astype(np.float64)
    assert (np.abs(got[finite].astype(np.float64) - exact[finite]) / spacing).max() <= 1


def test_a_kernels_log10f_stays_within_cudas_ulp_bound(cpu: Any) -> None:
    x = np.concatenate([np.float32([1.0180689]), sample(0, np.inf, seed=10)])  # (libm's log10f: 2.03 ulp there)
    out = cpu.empty(x.size, np.float32)
    call_log10f(out, cpu.to_device(x))
    with np.errstate(divide="ignore"):
        want = np.log10(x.astype(np.float64))
    assert ulp_errors(out.to_host(), want).max() <= BOUNDS["log10"][0]


def test_log10_of_a_strided_view_has_the_bits_of_log10_of_a_copy(cpu: Any) -> None:
    x = sample(0, np.inf, seed=11)[: 1 << 16].reshape(256, 256)
    view = ops.log10(cpu.to_device(x)[:, ::2]).to_host()
    np.testing.assert_array_equal(view, ops.log10(cpu.to_device(np.ascontiguousarray(x[:, ::2]))).to_host())


# name: (CUDA's single-precision bound in ulp, how the two operands are drawn)
BINARY_BOUNDS: dict[str, tuple[float, str]] = {"arctan2": (3, "any"), "power": (4, "positive base")}


@pytest.mark.parametrize("name", sorted(BINARY_BOUNDS))
def test_a_vectorized_float_function_of_two_stays_within_cudas_ulp_bound(cpu: Any, name: str) -> None:
    bound, draw = BINARY_BOUNDS[name]
    x, y = sample(-np.inf, np.inf, seed=1), sample(-np.inf, np.inf, seed=2)
    size = min(len(x), len(y))
    x, y = x[:size], y[:size]
    if draw == "positive base":
        x, y = np.abs(x), y / np.float32(2**100)  # (exponents whose powers are mostly finite)
    got = getattr(ops, name)(cpu.to_device(x), cpu.to_device(y)).to_host()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64), y.astype(np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert ulp_errors(got, want).max() <= bound


def test_a_negative_base_to_an_integer_power_takes_the_exponents_parity_within_cudas_bound(cpu: Any) -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, 1 << 16).astype(np.float32)
    y = rng.integers(-40, 40, x.size).astype(np.float32)
    got = ops.power(cpu.to_device(x), cpu.to_device(y)).to_host()
    want = np.power(x.astype(np.float64), y.astype(np.float64))
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert ulp_errors(got, want).max() <= BINARY_BOUNDS["power"][0]


def test_a_negative_base_to_a_fractional_power_is_nan(cpu: Any) -> None:
    x, y = np.float32([-2.0, -0.5, -3e38, -1e-45]), np.float32([0.5, -1.25, 2.5, 0.75])
    got = ops.power(cpu.to_device(np.tile(x, 40)), cpu.to_device(np.tile(y, 40))).to_host()
    assert np.isnan(got).all()


SPECIALS = np.float32([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-45, -3e38])


@pytest.mark.parametrize("name", sorted(BINARY_BOUNDS))
def test_a_vectorized_float_function_of_two_keeps_the_special_values(cpu: Any, name: str) -> None:
    x, y = (np.tile(grid.ravel(), 4) for grid in np.meshgrid(SPECIALS, SPECIALS))  # a vector loop and its tail
    got = getattr(ops, name)(cpu.to_device(x), cpu.to_device(y)).to_host()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


def test_a_vectorized_float_hypot_is_within_half_an_ulp_and_its_infinite_part_wins(cpu: Any) -> None:
    x = sample(-np.inf, np.inf, seed=30)
    y = sample(-np.inf, np.inf, seed=31)[: x.size]
    x = x[: y.size]
    got = ops.hypot(cpu.to_device(x), cpu.to_device(y)).to_host()
    assert ulp_errors(got, np.hypot(x.astype(np.float64), y.astype(np.float64))).max() <= 0.51
    special = np.float32([np.inf, np.nan, -np.inf, np.nan, 0.0, 3e38, 1e-45])
    other = np.float32([np.nan, -np.inf, 1.0, 1.0, -0.0, 3e38, 1e-45])
    with np.errstate(over="ignore"):
        want = np.hypot(special.astype(np.float64), other.astype(np.float64)).astype(np.float32)
    got = ops.hypot(cpu.to_device(np.tile(special, 40)), cpu.to_device(np.tile(other, 40))).to_host()
    np.testing.assert_array_equal(got, np.tile(want, 40))


# The double functions whose loops vectorize, name: (CUDA's double-precision bound in ulp from
# the correctly rounded result, the domain sampled); exp, expm1, cosh, tanh, log1p, log2, log10 and
# arcsin are the shim's own, the others libmvec's.
DOUBLE_BOUNDS: dict[str, tuple[float, tuple[float, float]]] = {
    "exp": (1, (-746, 710)),
    "expm1": (1, (-60, 710)),
    "cosh": (1, (-711, 711)),
    "tanh": (1, (-np.inf, np.inf)),
    "log1p": (1, (-1, np.inf)),
    "log2": (1, (0, np.inf)),
    "log10": (1, (0, np.inf)),
    "arcsin": (2, (-1, 1)),
    "log": (1, (0, np.inf)),
    "sinh": (2, (-711, 711)),
    "arccos": (2, (-1, 1)),
    "arctan": (2, (-np.inf, np.inf)),
    "arcsinh": (3, (-np.inf, np.inf)),
    "arccosh": (3, (1, np.inf)),
    "arctanh": (2, (-1, 1)),
}
# The reference: NumPy's long double functions (x87 extended precision on x86-64, 11 bits past double).
extended = pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="no extended-precision reference here")


def steps_from_rounded(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """How many doubles lie between ``got`` and the correctly rounded ``exact`` (long double): CUDA's
    measure, where both are finite and nonzero."""
    with np.errstate(over="ignore"):
        want = exact.astype(np.float64)
    finite = np.isfinite(want) & np.isfinite(got) & (want != 0)
    return np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]))


@extended
@pytest.mark.parametrize("view", [False, True], ids=["contiguous", "every other element"])
@pytest.mark.parametrize("name", sorted(DOUBLE_BOUNDS))
def test_a_vectorized_double_function_stays_within_cudas_ulp_bound(cpu: Any, name: str, view: bool) -> None:
    bound, (low, high) = DOUBLE_BOUNDS[name]
    x = sample(low, high, seed=len(name), dtype=np.float64)
    operand = cpu.to_device(np.repeat(x, 2))[::2] if view else cpu.to_device(x)
    got = getattr(ops, name)(operand).to_host()
    with np.errstate(all="ignore"):
        exact = getattr(np, name)(x.astype(np.longdouble))
    assert np.array_equal(np.isnan(got), np.isnan(exact))
    assert steps_from_rounded(got, exact).max() <= bound


@pytest.mark.parametrize("special", [0.0, -0.0, -1.0, 1e-310, -745.2, 709.8, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("name", sorted(DOUBLE_BOUNDS))
def test_a_vectorized_double_function_keeps_the_special_values(cpu: Any, name: str, special: float) -> None:
    x = np.full(300, special)  # a vector loop and its scalar tail
    got = getattr(ops, name)(cpu.to_device(x)).to_host()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
    exact = ~np.isfinite(want) | (want == 0)  # NaN, the infinities and the zeros (with their signs)
    np.testing.assert_array_equal(got[exact], want[exact])
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
    bound = DOUBLE_BOUNDS[name][0]
    assert (np.abs(got[~exact] - want[~exact]) <= bound * np.spacing(np.abs(want[~exact]))).all()


@extended
def test_the_double_exp_rounds_a_denormal_result_within_cudas_bound(cpu: Any) -> None:
    x = np.linspace(-745.2, -707.0, 1 << 16)  # results from below the least denormal to the least normal
    got = ops.exp(cpu.to_device(x)).to_host()
    exact = np.exp(x.astype(np.longdouble))
    spacing = np.maximum(np.spacing(exact.astype(np.float64)), np.float64(5e-324))  # (a denormal's: the least)
    assert (np.abs(got.astype(np.longdouble) - exact) / spacing).max() <= 1


@extended
@pytest.mark.parametrize("name", ["power", "hypot"])
def test_a_vectorized_double_function_of_two_stays_within_cudas_ulp_bound(cpu: Any, name: str) -> None:
    x, y = sample(-np.inf, np.inf, 3, np.float64), sample(-np.inf, np.inf, 4, np.float64)
    size = min(len(x), len(y))
    x, y = x[:size], y[:size]
    if name == "power":
        x, y = np.abs(x), y / 2.0**1000  # (exponents whose powers are mostly finite)
    got = getattr(ops, name)(cpu.to_device(x), cpu.to_device(y)).to_host()
    with np.errstate(all="ignore"):
        exact = getattr(np, name)(x.astype(np.longdouble), y.astype(np.longdouble))
    assert np.array_equal(np.isnan(got), np.isnan(exact))
    assert steps_from_rounded(got, exact).max() <= 2  # (CUDA's bound for both)
