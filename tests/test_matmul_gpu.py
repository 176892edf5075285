"""``kd.matmul`` and ``@`` on a real GPU against ``np.matmul`` (float64 references). Run with ``-m gpu``.

Fresh random data each run (the seed is in every failure message); an error is measured
against the sum of absolute terms, so cancellation cannot hide or fake a mismatch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.dtypes import ELEMENT_TYPES, add_bfloat16
from kerneldsl.runtime import Session

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not blas.available(), reason="kerneldsl[blas] is not installed")]

BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None
DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)] + ([BF16] if BF16 is not None else [])
# output rounding of the storage type plus float32 accumulation (the half types) over k terms
TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}
if BF16 is not None:
    TOL[BF16] = 3e-2

SHAPES = [
    ((3, 5), (5, 7)),
    ((5,), (5, 7)),
    ((3, 5), (5,)),
    ((37,), (37,)),
    ((4, 3, 5), (4, 5, 6)),
    ((2, 1, 4, 3), (5, 3, 6)),
    ((1, 4, 3), (5, 3, 6)),
    ((4, 3), (5, 3, 6)),
    ((2, 4, 3), (3,)),
    ((6,), (2, 6, 3)),
]


def uniform(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


def assert_matmul(got: Any, a: np.ndarray, b: np.ndarray, dtype: Any, rng: np.random.Generator) -> None:
    """``got`` is np.matmul(a, b) in shape, dtype and value (within the dtype's bound)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    host = got.to_host() if isinstance(got, kd.DeviceArray) else np.asarray(got)
    assert host.shape == ref.shape and host.dtype == np.dtype(dtype)
    err = np.abs(host.astype(np.float64) - ref)
    seed = rng.bit_generator.seed_seq.entropy  # type: ignore[attr-defined]
    assert np.all(err <= TOL[np.dtype(dtype)] * bound + 1e-30), f"max error {err.max():.3g} (seed {seed})"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=str)
def test_matmul_matches_numpy(
    default_device_session: Session,
    fresh_rng: np.random.Generator,
    dtype: Any,
    sa: tuple[int, ...],
    sb: tuple[int, ...],
) -> None:
    a, b = uniform(fresh_rng, sa, dtype), uniform(fresh_rng, sb, dtype)
    assert_matmul(default_device_session.to_device(a) @ default_device_session.to_device(b), a, b, dtype, fresh_rng)


def _same(x: Any) -> Any:
    return x


# name -> (a's shape, b's shape, the view of a, the view of b): the same on numpy and device arrays
VIEWS: dict[str, tuple[tuple[int, ...], tuple[int, ...], Any, Any]] = {
    "a.T": ((5, 7), (5, 6), lambda x: x.T, _same),
    "b.T": ((7, 5), (6, 5), _same, lambda x: x.T),
    "both.T": ((5, 7), (6, 5), lambda x: x.T, lambda x: x.T),
    "column slices": ((7, 9), (5, 8), lambda x: x[:, 2:7], lambda x: x[:, 1:7]),
    "reversed rows": ((7, 5), (5, 6), lambda x: x[::-1], _same),
    "transposed batch": ((3, 5, 4), (3, 5, 6), lambda x: x.transpose(0, 2, 1), _same),
    "transposed vector matrix": ((5,), (6, 5), _same, lambda x: x.T),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(VIEWS))
def test_strided_views_match_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any, case: str
) -> None:
    sa, sb, view_a, view_b = VIEWS[case]
    a, b = uniform(fresh_rng, sa, dtype), uniform(fresh_rng, sb, dtype)
    got = view_a(default_device_session.to_device(a)) @ view_b(default_device_session.to_device(b))
    assert_matmul(got, view_a(a), view_b(b), dtype, fresh_rng)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)], ids=str)
def test_out_is_written(default_device_session: Session, fresh_rng: np.random.Generator, dtype: Any) -> None:
    a, b = uniform(fresh_rng, (2, 3, 5), dtype), uniform(fresh_rng, (5, 4), dtype)
    out = default_device_session.to_device(np.full((2, 3, 4), np.nan, dtype))
    assert kd.matmul(default_device_session.to_device(a), default_device_session.to_device(b), out=out) is out
    assert_matmul(out, a, b, dtype, fresh_rng)


def test_out_of_a_wider_dtype(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    a, b = uniform(fresh_rng, (6, 5), np.float32), uniform(fresh_rng, (5, 6), np.float32)
    out = default_device_session.to_device(np.full((6, 6), np.nan, np.float64))
    assert kd.matmul(default_device_session.to_device(a), default_device_session.to_device(b), out) is out
    np.testing.assert_allclose(out.to_host(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)


def test_at_equals_writes_the_product_into_the_left_operand(
    default_device_session: Session, fresh_rng: np.random.Generator
) -> None:
    a, b = uniform(fresh_rng, (6, 6), np.float32), uniform(fresh_rng, (6, 6), np.float32)
    d = before = default_device_session.to_device(a)
    d @= default_device_session.to_device(b)
    assert d is before
    assert_matmul(d, a, b, np.float32, fresh_rng)


def test_mixed_dtypes_promote(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    a, b = uniform(fresh_rng, (4, 5), np.float16), uniform(fresh_rng, (5, 3), np.float32)
    assert_matmul(
        kd.matmul(default_device_session.to_device(a), default_device_session.to_device(b)),
        a.astype(np.float32),
        b,
        np.float32,
        fresh_rng,
    )


def test_host_operands(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    a, b = uniform(fresh_rng, (3, 5), np.float32), uniform(fresh_rng, (5, 7), np.float32)
    got = kd.matmul(a, b)
    assert type(got) is np.ndarray
    assert_matmul(got, a, b, np.float32, fresh_rng)
    assert_matmul(kd.matmul(a, default_device_session.to_device(b)), a, b, np.float32, fresh_rng)


def test_empty_and_zero_inner_extents(default_device_session: Session) -> None:
    assert kd.matmul(default_device_session.zeros((0, 3)), default_device_session.zeros((3, 4))).shape == (0, 4)
    got = kd.matmul(
        default_device_session.to_device(np.ones((2, 3, 0), np.float32)),
        default_device_session.to_device(np.ones((2, 0, 4), np.float32)),
    )
    assert got.shape == (2, 3, 4) and not got.to_host().any()


def test_conjugate_gradient_as_written_for_numpy(default_device_session: Session) -> None:
    """The issue's example: CG spelled with ``@`` on 1-D and 2-D arrays runs and converges."""
    n = 64
    rng = np.random.default_rng(0)
    m = rng.standard_normal((n, n))
    host_a = (m @ m.T + n * np.eye(n)).astype(np.float64)
    host_b = rng.standard_normal(n)
    A, b = default_device_session.to_device(host_a), default_device_session.to_device(host_b)
    x = default_device_session.zeros(n, np.float64)
    r = b - A @ x
    p = r.copy()
    rr = (r @ r).to_host()
    for _ in range(n):
        Ap = A @ p
        alpha = float(rr / (p @ Ap).to_host())
        x = x + alpha * p
        r = r - alpha * Ap
        new = (r @ r).to_host()
        if np.sqrt(new) < 1e-10:
            break
        p = r + float(new / rr) * p
        rr = new
    np.testing.assert_allclose(x.to_host(), np.linalg.solve(host_a, host_b), rtol=1e-8, atol=1e-8)
