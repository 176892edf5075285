"""kerneldsl.array_api on the GPU against NumPy: the functions composed from kd.ops, the new
op rows, the Array API operators and the CuPy-spelled CG solver (small, odd shapes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kerneldsl import array_api as xp

pytestmark = pytest.mark.gpu


def host(a: Any) -> np.ndarray:
    return a.to_host()  # type: ignore[no-any-return]


def test_creation_matches_numpy() -> None:
    np.testing.assert_array_equal(host(xp.eye(3, 5, k=1)), np.eye(3, 5, k=1))
    np.testing.assert_array_equal(host(xp.arange(2, 11, 3, dtype=xp.int16)), np.arange(2, 11, 3, dtype=np.int16))
    np.testing.assert_allclose(host(xp.linspace(-1, 2, 7, endpoint=False)), np.linspace(-1, 2, 7, endpoint=False))
    np.testing.assert_array_equal(host(xp.full((2, 3), 1.5, dtype=xp.float32)), np.full((2, 3), 1.5, np.float32))


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_tril_and_triu_match_numpy(rng: np.random.Generator, k: int) -> None:
    a = rng.standard_normal((2, 5, 4)).astype(np.float32)
    np.testing.assert_array_equal(host(xp.tril(xp.asarray(a), k=k)), np.tril(a, k))
    np.testing.assert_array_equal(host(xp.triu(xp.asarray(a), k=k)), np.triu(a, k))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_matches_numpy(indexing: str) -> None:
    x, y, z = np.arange(3.0), np.arange(4.0) * 2, np.arange(2.0) - 5
    got = xp.meshgrid(xp.asarray(x), xp.asarray(y), xp.asarray(z), indexing=indexing)
    for g, w in zip(got, np.meshgrid(x, y, z, indexing=indexing)):
        np.testing.assert_array_equal(host(g), w)


def test_roll_tile_repeat_match_numpy(rng: np.random.Generator) -> None:
    a = rng.integers(-50, 50, (3, 5)).astype(np.int32)
    d = xp.asarray(a)
    np.testing.assert_array_equal(host(xp.roll(d, 2, axis=1)), np.roll(a, 2, axis=1))
    np.testing.assert_array_equal(host(xp.roll(d, (1, -2), axis=(0, 1))), np.roll(a, (1, -2), axis=(0, 1)))
    np.testing.assert_array_equal(host(xp.roll(d, 7)), np.roll(a, 7))
    np.testing.assert_array_equal(host(xp.tile(d, (2, 1, 3))), np.tile(a, (2, 1, 3)))
    np.testing.assert_array_equal(host(xp.tile(d.T, (2,))), np.tile(a.T, (2,)))
    np.testing.assert_array_equal(host(xp.repeat(d, 2, axis=0)), np.repeat(a, 2, axis=0))
    np.testing.assert_array_equal(
        host(xp.repeat(d, xp.asarray([1, 0, 2, 3, 1]), axis=1)), np.repeat(a, [1, 0, 2, 3, 1], 1)
    )


def test_statistics_and_searching_match_numpy(rng: np.random.Generator) -> None:
    a = rng.integers(-2, 3, (4, 7)).astype(np.int8)
    d = xp.asarray(a)
    np.testing.assert_array_equal(host(xp.count_nonzero(d, axis=1)), np.count_nonzero(a, axis=1))
    got = host(xp.cumulative_sum(d, axis=1, include_initial=True))
    np.testing.assert_array_equal(got, np.concatenate([np.zeros((4, 1), np.int64), np.cumsum(a, axis=1)], axis=1))
    f = rng.standard_normal((5, 33))
    np.testing.assert_allclose(host(xp.std(xp.asarray(f), axis=1, correction=1)), np.std(f, axis=1, ddof=1))
    np.testing.assert_array_equal(host(xp.diff(xp.asarray(f), n=2)), np.diff(f, n=2))


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_numpy_with_nans_last(rng: np.random.Generator, side: str) -> None:
    table = np.sort(np.concatenate([rng.integers(0, 10, 20).astype(np.float32), [np.nan, np.nan]]))
    values = np.concatenate([rng.integers(-1, 12, 15).astype(np.float32), [np.nan, 3.0]]).reshape(17, 1)
    got = host(xp.searchsorted(xp.asarray(table), xp.asarray(values), side=side))
    np.testing.assert_array_equal(got, np.searchsorted(table, values, side=side))


def test_searchsorted_takes_a_sorter_and_a_scalar(rng: np.random.Generator) -> None:
    table = rng.integers(0, 50, 40).astype(np.int32)
    order = np.argsort(table, kind="stable")
    got = host(
        xp.searchsorted(xp.asarray(table), xp.asarray(np.array([7, 0, 49, 60], np.int32)), sorter=xp.asarray(order))
    )
    np.testing.assert_array_equal(got, np.searchsorted(table, [7, 0, 49, 60], sorter=order))
    scalar = xp.searchsorted(xp.sort(xp.asarray(table)), 25, side="right")
    assert scalar.shape == () and int(scalar) == np.searchsorted(np.sort(table), 25, side="right")


def test_integer_matmul_vecdot_and_tensordot_match_numpy(rng: np.random.Generator) -> None:
    a, b = rng.integers(-9, 9, (2, 3, 4)).astype(np.int32), rng.integers(-9, 9, (4, 5)).astype(np.int32)
    np.testing.assert_array_equal(host(xp.matmul(xp.asarray(a), xp.asarray(b))), a @ b)
    np.testing.assert_array_equal(host(xp.matmul(xp.asarray(a[0, 0]), xp.asarray(b))), a[0, 0] @ b)
    v = rng.integers(-9, 9, 4).astype(np.int32)
    np.testing.assert_array_equal(host(xp.vecdot(xp.asarray(a), xp.asarray(v))), (a * v).sum(-1))
    f, g = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 4, 2))
    got = host(xp.tensordot(xp.asarray(f), xp.asarray(g), axes=([1, 2], [1, 0])))
    np.testing.assert_allclose(got, np.tensordot(f, g, axes=([1, 2], [1, 0])), rtol=1e-10)


@pytest.mark.parametrize("name", ["tan", "log2", "log10", "logaddexp", "nextafter"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_new_op_rows_match_numpy(rng: np.random.Generator, name: str, dtype: Any) -> None:
    x = (rng.random(1001) * 4 + 0.01).astype(dtype)
    y = (rng.standard_normal(1001) * 3).astype(dtype)
    y[:4] = [np.inf, -np.inf, np.nan, x[3]]
    op, ref = getattr(xp, name), getattr(np, name)
    args = (x, y) if name in ("logaddexp", "nextafter") else (x,)
    got = host(op(*(xp.asarray(a) for a in args)))
    with np.errstate(invalid="ignore"):  # the infinities are there on purpose: NumPy's answer for them is wanted
        want = ref(*args)
    if name == "nextafter":
        np.testing.assert_array_equal(got, want)
    else:
        eps = float(np.finfo(dtype).eps)  # CUDA's and NumPy's math each within a few ulp (tanf: 4)
        np.testing.assert_allclose(got, want, rtol=16 * eps, atol=16 * eps)  # atol: log2/log10 near x = 1


def test_the_array_api_operators_match_numpy(rng: np.random.Generator) -> None:
    a, b = rng.integers(-100, 100, 77).astype(np.int16), rng.integers(0, 15, 77).astype(np.int16)
    da, db = xp.asarray(a), xp.asarray(b)
    for got, want in [(~da, ~a), (+da, a), (da & db, a & b), (da | 3, a | 3), (5 ^ da, 5 ^ a)]:
        np.testing.assert_array_equal(host(got), want)
    np.testing.assert_array_equal(host(da << db), a << b)
    np.testing.assert_array_equal(host(da >> db), a >> b)


def test_the_cupy_spelled_cg_solver_matches_numpy() -> None:
    path = Path(__file__).resolve().parents[1] / "examples" / "cg_solver.py"
    spec = importlib.util.spec_from_file_location("cg_solver_example", path)
    assert spec is not None and spec.loader is not None
    cg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cg)
    a, b = cg.spd_system(257, np.float64)
    want = cg.cg(a, b, np.zeros(257), 30)
    got = cg.cg(xp.asarray(a), xp.asarray(b), xp.zeros(257), 30)
    assert got.shape == (257,)
    np.testing.assert_allclose(host(got), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("axis", [-1, 0])
def test_sort_and_argsort_are_numpys_stable_sort(rng: np.random.Generator, dtype: Any, axis: int) -> None:
    a = rng.integers(0, 9, (37, 300)).astype(dtype)  # many ties: stability shows
    if np.dtype(dtype).kind == "f":
        a[rng.random(a.shape) < 0.05] = np.nan
    d = xp.asarray(a)
    np.testing.assert_array_equal(host(xp.sort(d, axis=axis)), np.sort(a, axis=axis, kind="stable"))
    np.testing.assert_array_equal(host(xp.argsort(d, axis=axis)), np.argsort(a, axis=axis, kind="stable"))


def test_descending_argsort_keeps_equal_elements_in_order(rng: np.random.Generator) -> None:
    a = rng.integers(0, 5, 1000).astype(np.int32)
    want = sorted(range(a.size), key=lambda i: a[i], reverse=True)  # Python's reverse sort is stable
    np.testing.assert_array_equal(host(xp.argsort(xp.asarray(a), descending=True)), want)


def test_unique_functions_match_numpy(rng: np.random.Generator) -> None:
    a = rng.integers(-3, 4, (6, 7)).astype(np.float32)
    values, indices, inverse, counts = np.unique(a, return_index=True, return_inverse=True, return_counts=True)
    got = xp.unique_all(xp.asarray(a))
    np.testing.assert_array_equal(host(got.values), values)
    np.testing.assert_array_equal(host(got.indices), indices)
    np.testing.assert_array_equal(host(got.counts), counts)
    np.testing.assert_array_equal(host(got.inverse_indices), inverse.reshape(a.shape))
    np.testing.assert_array_equal(host(xp.unique_values(xp.asarray(a))), values)
    np.testing.assert_array_equal(host(xp.unique_counts(xp.asarray(a)).counts), counts)


def test_each_nan_is_its_own_unique_value() -> None:
    got = xp.unique_counts(xp.asarray(np.array([np.nan, 1.0, np.nan, 1.0])))
    np.testing.assert_array_equal(host(got.values), [1.0, np.nan, np.nan])
    np.testing.assert_array_equal(host(got.counts), [2, 1, 1])


def test_take_take_along_axis_and_nonzero_match_numpy(rng: np.random.Generator) -> None:
    a = rng.standard_normal((4, 9, 3)).astype(np.float32)
    d = xp.asarray(a)
    idx = np.array([8, 0, -1, 3, 3])
    np.testing.assert_array_equal(host(xp.take(d, xp.asarray(idx), axis=1)), np.take(a, idx, axis=1))
    along = rng.integers(0, 9, (4, 5, 3))
    np.testing.assert_array_equal(
        host(xp.take_along_axis(d, xp.asarray(along), axis=1)), np.take_along_axis(a, along, 1)
    )
    m = (rng.random((5, 6, 7)) < 0.3).astype(np.int16)
    for got, want in zip(xp.nonzero(xp.asarray(m)), np.nonzero(m)):
        np.testing.assert_array_equal(host(got), want)


def test_linalg_extras_match_numpy(rng: np.random.Generator) -> None:
    a = rng.standard_normal((2, 4, 5))
    d = xp.asarray(a)
    for k in (-2, 0, 3):
        np.testing.assert_array_equal(host(xp.linalg.diagonal(d, offset=k)), np.diagonal(a, k, -2, -1))
        np.testing.assert_allclose(host(xp.linalg.trace(d, offset=k)), np.trace(a, k, -2, -1), rtol=1e-12, atol=1e-12)
    u, v = rng.standard_normal((5, 3)), rng.standard_normal(3)
    np.testing.assert_allclose(
        host(xp.linalg.cross(xp.asarray(u), xp.asarray(v))), np.cross(u, v), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(host(xp.linalg.outer(xp.asarray(v), xp.asarray(u[0]))), np.outer(v, u[0]))
    for order in (1, 2, 3, np.inf, -np.inf, 0):
        want = np.linalg.norm(a.reshape(-1), ord=order)
        np.testing.assert_allclose(host(xp.linalg.vector_norm(d, ord=order)), want, rtol=1e-12)
    m = rng.standard_normal((3, 4, 4)) / 2
    np.testing.assert_allclose(
        host(xp.linalg.matrix_power(xp.asarray(m), 5)), np.linalg.matrix_power(m, 5), rtol=1e-10, atol=1e-12
    )
