"""The complex math header (templates/complex_math.cuh.j2) built for the host by the C++ compiler,
checked against the Array API standard's special-case tables (tests/complex_cases.py: every case bit
for bit) and finite values against mpmath and NumPy; the kd.ops rows that use it, compiled by NVRTC.

Bounds on random finite inputs (parts +-10^U(-6, 2.5)), against mpmath at 120 bits: the normwise
error |w - ref| / |ref| is at most 4 eps of the dtype for every function, and each part is within
6 ulp of its own magnitude except expm1's real part (NumPy's formula, expm1(x) cos(y) - 2 sin^2(y/2),
cancels where exp(x) cos(y) is near 1). Against NumPy (complex128, on the unit square with
|z| >= 0.1, where NumPy's own log1p is accurate): within 8 eps normwise; power (exp(b log a), as
NumPy's, whose error grows with |b log a|) within 16.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from complex_cases import FUNCTIONS, OPS_NAME, Part, failures, sentences

from kerneldsl import ops
from kerneldsl.jit.codegen import templates_dir

C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
EPS = {C64: 2.0**-23, C128: 2.0**-52}
ALL = [*FUNCTIONS, "log2", "log10", "asin", "atan"]
SPEC = Path(__file__).parent.parent / ".array-api-tests/array-api/src/array_api_stubs/_2024_12/elementwise_functions.py"
NUMPY_NAME = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan"}
NUMPY_NAME["atanh"] = "arctanh"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/complex_math_harness.cpp built with the host C++ compiler (no fast math, no contraction)."""
    compiler = next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)
    if compiler is None:
        pytest.skip("no host C++ compiler (g++, c++ or clang++) on PATH")
    exe = tmp_path_factory.mktemp("complex_math") / "harness"
    source = Path(__file__).with_name("complex_math_harness.cpp")
    command = [compiler, "-std=c++17", "-O2", "-ffp-contract=off", f"-I{templates_dir()}", "-x", "c++", str(source)]
    subprocess.run([*command, "-o", str(exe), "-lm"], check=True, capture_output=True)
    return exe


def host(harness: Path, function: str, z: np.ndarray) -> np.ndarray:
    """``function`` (the standard's name) of each element of ``z``, on the host build."""
    code = "f" if z.dtype == C64 else "d"
    done = subprocess.run([str(harness), function, code], input=z.tobytes(), capture_output=True, check=True)
    return np.frombuffer(done.stdout, z.dtype)


def finite_inputs(dtype: np.dtype, n: int = 2000, seed: int = 22) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = 10.0 ** rng.uniform(-6, 2.5, (2, n)) * rng.choice([-1.0, 1.0], (2, n))
    return (parts[0] + 1j * parts[1]).astype(dtype)


def unit_square(dtype: np.dtype, n: int = 2000, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    return z[np.abs(z) >= 0.1].astype(dtype)


def _mp_reference(function: str, z: np.ndarray) -> np.ndarray:
    mpmath = pytest.importorskip("mpmath")
    direct = {"log2": lambda w: mpmath.log(w, 2), "log10": lambda w: mpmath.log(w, 10), "sign": lambda w: w / abs(w)}
    f = direct.get(function) or getattr(mpmath, function)
    with mpmath.workprec(120):
        return np.array([complex(f(mpmath.mpc(complex(v)))) for v in z.astype(np.complex128)])


def _normwise(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> np.ndarray:
    got, want = got.astype(np.complex128), want.astype(np.complex128)
    return np.abs(got - want) / (np.abs(want) * EPS[dtype])


def _partwise(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> np.ndarray:
    part = np.float32 if dtype == C64 else np.float64
    got, want = got.astype(np.complex128), want.astype(np.complex128)
    ulp = [np.spacing(np.abs(w).astype(part)).astype(np.float64) for w in (want.real, want.imag)]
    return np.maximum(np.abs(got.real - want.real) / ulp[0], np.abs(got.imag - want.imag) / ulp[1])


@pytest.mark.parametrize("dtype", [C64, C128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_special_case_of_the_standard_holds_bit_for_bit(harness: Path, function: str, dtype: np.dtype) -> None:
    wrong = failures(function, dtype, lambda z: host(harness, function, z))
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("dtype", [C64, C128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("function", [f for f in ALL if f != "abs"])
def test_finite_values_are_within_the_stated_bounds_of_mpmath(harness: Path, function: str, dtype: np.dtype) -> None:
    z = finite_inputs(dtype, 1000)
    want = _mp_reference(function, z)
    with np.errstate(over="ignore"):
        representable = np.isfinite(want.astype(dtype)) & (np.abs(want) > np.finfo(dtype).tiny * 2**30)
    got = host(harness, function, z)[representable]
    want = want[representable]
    assert _normwise(got, want, dtype).max() <= 4
    if function != "expm1":
        assert _partwise(got, want, dtype).max() <= 6


@pytest.mark.parametrize("dtype", [C64, C128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("function", [f for f in ALL if f != "abs"])
def test_finite_values_match_numpy(harness: Path, function: str, dtype: np.dtype) -> None:
    z = unit_square(dtype)
    want = getattr(np, NUMPY_NAME.get(function, function))(z.astype(np.complex128))
    assert _normwise(host(harness, function, z), want, dtype).max() <= 8


def test_the_absolute_value_is_hypot_of_the_parts(harness: Path) -> None:
    z = finite_inputs(C128)
    got = host(harness, "abs", z)
    assert np.array_equal(got.real, np.hypot(z.real, z.imag)) and not got.imag.any()


def test_a_part_with_the_wrong_zero_sign_fails_its_case() -> None:
    assert Part(0.0).matches(0.0, np.dtype(np.float64))
    assert not Part(0.0).matches(-0.0, np.dtype(np.float64))
    assert Part(0.0, any_sign=True).matches(-0.0, np.dtype(np.float64))
    assert not Part(math.inf).matches(math.nan, np.dtype(np.float64))


def test_the_case_table_is_the_standards_text() -> None:
    if not SPEC.is_file():
        pytest.skip(f"the standard's text is not here ({SPEC})")
    text = " ".join(SPEC.read_text(encoding="utf-8").split())
    for function, lines in sentences().items():
        assert f"def {function}(" in text
        for line in lines:
            assert line in text, (function, line)


@pytest.mark.parametrize("dtype", [C64, C128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("function", sorted({*ALL, "log2", "log10"} - {"abs"}))
def test_each_function_is_a_kd_ops_row_that_nvrtc_compiles(function: str, dtype: np.dtype) -> None:
    op: Any = getattr(ops, OPS_NAME.get(function, NUMPY_NAME.get(function, function)))
    assert op.expression(dtype, (dtype,)) == f"kd_{function}(a)"
    assert op.resolve([dtype])[0] == dtype
    assert op.inspect(np.zeros(5, dtype), arch="sm_90").cubin


def host_pow(harness: Path, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    part = a.real.dtype
    quads = np.stack([a.real, a.imag, b.real.astype(part), b.imag.astype(part)], axis=1)
    done = subprocess.run(
        [str(harness), "pow", "f" if a.dtype == C64 else "d"], input=quads.tobytes(), capture_output=True, check=True
    )
    return np.frombuffer(done.stdout, a.dtype)


@pytest.mark.parametrize("dtype", [C64, C128], ids=["complex64", "complex128"])
def test_power_matches_numpy_for_integer_and_complex_exponents(harness: Path, dtype: np.dtype) -> None:
    a, b = 2 * unit_square(dtype, seed=1), 3 * unit_square(dtype, seed=2)
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    b[: n // 2] = np.arange(n // 2) % 19 - 9  # repeated squaring, then the reciprocal for b < 0
    want = np.power(a.astype(np.complex128), b.astype(np.complex128))
    assert _normwise(host_pow(harness, a, b), want, dtype).max() <= 16


def test_power_of_and_to_zero_is_numpys(harness: Path) -> None:
    a = np.array([2 + 1j, 0, 0, 0, 0], C128)
    b = np.array([0, 2, 0.5, -1, 1j], C128)
    got = host_pow(harness, a, b)
    assert got[:3].tolist() == [1, 0, 0] and np.isnan(got[3:]).all()
    with np.errstate(all="ignore"):
        assert np.isnan(np.power(a[3:], b[3:])).all()


@pytest.mark.parametrize("dtype", [C64, C128], ids=["complex64", "complex128"])
@pytest.mark.parametrize(("name", "arity"), [("power", 2), ("round", 1)])
def test_power_and_round_have_complex_rows_that_nvrtc_compiles(name: str, arity: int, dtype: np.dtype) -> None:
    op: Any = getattr(ops, name)
    assert op.resolve([dtype] * arity)[0] == dtype
    assert op.inspect(*[np.zeros(5, dtype)] * arity, arch="sm_90").cubin


def axes() -> np.ndarray:
    """Points on both axes, with both zeros: on and off each function's branch cuts."""
    values = [v * s for v in (1e-10, 0.5, 1.0, 2.0, 3.0, 1e10, 1e300) for s in (1, -1)]
    return np.array([p for v in values for zero in (0.0, -0.0) for p in (complex(v, zero), complex(zero, v))])


def same_parts(got: np.ndarray, want: np.ndarray, ulps: float) -> np.ndarray:
    """Per element: each part equal within ``ulps`` (relative), a zero's sign the same, NaN for NaN."""
    ok = np.ones(len(got), bool)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        with np.errstate(invalid="ignore"):
            near = np.abs(g - w) <= ulps * np.spacing(np.abs(w))
        zero_sign = (w != 0) | (np.signbit(g) == np.signbit(w))
        ok &= (near & zero_sign) | (g == w) & zero_sign | (np.isnan(g) & np.isnan(w))
    return ok


# not expm1 (NumPy's expm1(1e10 + 0j) is inf + NaN j, the standard's +inf + 0j) nor log1p (NumPy's
# log(hypot(1 + x, y)) loses the digits of a small z)
@pytest.mark.parametrize("function", [f for f in ALL if f not in ("abs", "expm1", "log1p")])
def test_signed_zeros_choose_the_side_of_a_branch_cut_as_numpy(harness: Path, function: str) -> None:
    z = axes()
    with np.errstate(all="ignore"):
        want = getattr(np, NUMPY_NAME.get(function, function))(z)
    ok = same_parts(host(harness, function, z), want, 16)
    assert ok.all(), z[~ok]
