"""kerneldsl.array_api, the Array API namespace: its names, dtype functions and the shapes and
dtypes its functions give (on the driver double: kernels are enqueued, not run)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import array_api as xp
from kerneldsl.errors import ViewError

SKIPS = Path(__file__).resolve().parents[1] / ".ci" / "array-api-skips.txt"
COMPLEX_SKIPS = SKIPS.with_name("array-api-complex-skips.txt")


def test_the_namespace_is_the_2024_12_revision_with_its_constants_and_dtypes() -> None:
    assert xp.__array_api_version__ == "2024.12"
    assert (xp.e, xp.pi, xp.newaxis) == (math.e, math.pi, None)
    assert math.isinf(xp.inf) and math.isnan(xp.nan)
    assert xp.float32 == np.float32 and xp.bool == np.bool_ and xp.uint64 == np.uint64


def test_the_standards_names_are_bound_to_the_ops_table() -> None:
    assert xp.acos is kd.ops.arccos and xp.pow is kd.ops.power and xp.bitwise_invert is kd.ops.invert
    assert xp.atan2 is kd.ops.arctan2 and xp.bitwise_left_shift is kd.ops.left_shift
    assert {"tan", "log2", "log10", "logaddexp", "nextafter"} <= set(kd.ops.TABLE)


def test_finfo_and_iinfo_give_python_numbers() -> None:
    f = xp.finfo(xp.float32)
    assert type(f.eps) is float and f.bits == 32 and f.dtype == np.float32
    assert f.smallest_normal == float(np.finfo(np.float32).smallest_normal)
    i = xp.iinfo(xp.int8)
    assert (type(i.max), i.max, i.min, i.bits) == (int, 127, -128, 8)


@pytest.mark.parametrize(
    ("dtype", "kind", "expected"),
    [
        (np.int8, "signed integer", True),
        (np.uint8, "signed integer", False),
        (np.uint8, "integral", True),
        (np.float32, "real floating", True),
        (np.float32, ("bool", "integral"), False),
        (np.bool_, "numeric", False),
        (np.float64, np.float64, True),
    ],
)
def test_isdtype_follows_the_standards_kinds(dtype: Any, kind: Any, expected: bool) -> None:
    assert xp.isdtype(np.dtype(dtype), kind) is expected


def test_isdtype_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown dtype kind"):
        xp.isdtype(xp.int8, "integer")


def test_result_type_takes_python_scalars_as_weak() -> None:
    assert xp.result_type(xp.int8, 1) == np.int8
    assert xp.result_type(xp.float32, 1.0, xp.int8) == np.float32
    assert xp.result_type(xp.uint8, xp.int8) == np.int16
    with pytest.raises(ValueError):
        xp.result_type(1, 2.0)


def test_can_cast_is_safe_casting() -> None:
    assert xp.can_cast(xp.int8, xp.int16) and not xp.can_cast(xp.int16, xp.int8)
    assert not xp.can_cast(xp.float64, xp.float32)


def test_the_inspection_namespace_reports_the_default_dtypes() -> None:
    info = xp.__array_namespace_info__()
    assert info.default_dtypes()["real floating"] == np.float64
    assert info.default_dtypes()["indexing"] == np.int64
    assert set(info.dtypes(kind="unsigned integer")) == {"uint8", "uint16", "uint32", "uint64"}


def test_creation_defaults_to_float64(fake_session: kd.Session) -> None:
    for made in (
        xp.zeros(3, device=fake_session),
        xp.ones((2, 2), device=fake_session),
        xp.empty(4, device=fake_session),
        xp.eye(3, device=fake_session),
    ):
        assert made.dtype == np.float64
    assert xp.full(3, 7, device=fake_session).dtype == np.int64
    assert xp.arange(5, device=fake_session).shape == (5,) and xp.arange(1, 10, 3, device=fake_session).shape == (3,)
    assert xp.linspace(0, 1, 7, device=fake_session).shape == (7,)


def test_asarray_copy_rules(fake_session: kd.Session) -> None:
    a = fake_session.empty(3, np.float32)
    assert xp.asarray(a) is a and xp.asarray(a, copy=True) is not a
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray(a, dtype=xp.float64, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray([1.0, 2.0], copy=False)


def test_astype_without_copy_returns_the_array_itself(fake_session: kd.Session) -> None:
    a = fake_session.empty(3, np.float32)
    assert xp.astype(a, xp.float32, copy=False) is a
    assert xp.astype(a, xp.float32).dtype == np.float32 and xp.astype(a, xp.float32) is not a
    assert xp.astype(a, xp.int16).dtype == np.int16


def test_reshape_copies_only_where_a_view_cannot_express_it(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    assert xp.reshape(a, (24,)).base is a
    with pytest.raises(ViewError):
        xp.reshape(a.T, (24,), copy=False)
    assert xp.reshape(a.T, (24,)).base is not a


def test_manipulation_shapes(fake_session: kd.Session) -> None:
    a = fake_session.empty((2, 3), np.float32)
    assert xp.permute_dims(a, (1, 0)).shape == (3, 2)
    assert [b.shape for b in xp.broadcast_arrays(a, fake_session.empty(3, np.float32))] == [(2, 3), (2, 3)]
    assert xp.tile(a, (2, 1, 2)).shape == (2, 2, 6)
    assert xp.repeat(a, 3, axis=1).shape == (2, 9)
    assert xp.repeat(a, 2).shape == (12,)
    assert xp.roll(a, 1, axis=1).shape == (2, 3) and xp.roll(a, -4).shape == (2, 3)
    assert [u.shape for u in xp.unstack(a, axis=1)] == [(2,), (2,), (2,)]
    assert xp.concat([a, a], axis=None).shape == (12,)


def test_permute_dims_refuses_what_is_not_a_permutation(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError, match="permutation"):
        xp.permute_dims(fake_session.empty((2, 3), np.float32), (0, 0))


def test_statistics_and_searching_dtypes(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 5), np.int8)
    assert xp.count_nonzero(a, axis=1).dtype == np.int64 and xp.count_nonzero(a, axis=1).shape == (4,)
    assert xp.sum(a).dtype == np.int64
    assert xp.cumulative_sum(a, axis=1, include_initial=True).shape == (4, 6)
    assert xp.searchsorted(fake_session.empty(5, np.float32), fake_session.empty((2, 3), np.float32)).dtype == np.int64
    assert xp.searchsorted(fake_session.empty(5, np.float32), 1.5).shape == ()
    with pytest.raises(ValueError, match="axis must be given"):
        xp.cumulative_sum(a)


def test_linear_algebra_keeps_the_promoted_dtype(fake_session: kd.Session) -> None:
    a, b = fake_session.empty((2, 3, 4), np.int16), fake_session.empty((4, 5), np.int16)
    product = xp.matmul(a, b)
    assert (product.shape, product.dtype) == ((2, 3, 5), np.int16)
    assert xp.matmul(fake_session.empty(4, np.int32), b).shape == (5,)
    assert xp.vecdot(a, fake_session.empty(4, np.int8)).dtype == np.int16
    assert xp.vecdot(a, fake_session.empty(4, np.int8)).shape == (2, 3)
    assert xp.tensordot(a, b, axes=1).shape == (2, 3, 5)
    assert xp.tensordot(a, fake_session.empty((3, 4), np.int16), axes=([1, 2], [0, 1])).shape == (2,)
    assert xp.linalg.matrix_transpose(a).shape == (2, 4, 3)


def test_vecdot_refuses_different_extents_on_the_axis(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError):
        xp.vecdot(fake_session.empty((2, 3), np.float32), fake_session.empty((2, 4), np.float32))


def test_the_array_api_operators_beyond_numpys_arithmetic_are_ops(fake_session: kd.Session) -> None:
    a = fake_session.empty(3, np.int32)
    assert (~a).dtype == np.int32 and (+a).shape == (3,)
    assert (a & 1).dtype == np.int32 and (1 | a).dtype == np.int32 and (a ^ a).dtype == np.int32
    assert (a << 2).dtype == np.int32 and (a >> 1).dtype == np.int32
    b = a
    b &= 3
    assert b is a


def test_the_skip_list_names_only_functions_the_namespace_does_not_have() -> None:
    """A skip is for a function not implemented: never an implemented one skipped silently."""
    names = [
        line.split("[", 1)[1].rstrip("]\n") for line in SKIPS.read_text().splitlines() if "test_has_names[" in line
    ]
    assert names
    for entry in names:
        category, name = entry.split("-", 1)
        home = xp.linalg if category == "linalg" else (xp.asarray if category == "array_method" else xp)
        if category == "array_method":
            assert not hasattr(kd.DeviceArray, name), name
        else:
            assert not hasattr(home, name), name


def test_the_complex_runs_skips_each_follow_their_reason() -> None:
    lines = COMPLEX_SKIPS.read_text().splitlines()
    ids = [k for k, line in enumerate(lines) if line.startswith("array_api_tests/")]
    assert ids
    assert all(lines[k - 1].startswith("# ") for k in ids)


def test_complex_does_not_cast_to_real_as_the_standard_says() -> None:
    assert not xp.can_cast(xp.complex64, xp.float64)  # the suite, under ARRAY_API_COMPLEX=1, expects True
    assert xp.can_cast(xp.float32, xp.complex64)


def test_the_gather_kernels_compile_for_sm_90() -> None:
    from kerneldsl.array_api import _gather

    idx = np.zeros(6, np.int64)
    assert _gather._take.inspect(np.ones(12, np.float32), idx[:3], np.empty(6, np.float32), 4, 1, arch="sm_90").cubin
    assert _gather._take_along.inspect(np.ones(12, np.uint8), idx, np.empty(6, np.uint8), 4, 2, 1, arch="sm_90").cubin
    dims = np.array([3, 4], np.int64)
    assert _gather._coordinates.inspect(np.ones(12, np.int64), dims, np.empty(8, np.int64), 4, arch="sm_90").cubin


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.int8, np.uint64, np.float32, np.float64], ids=lambda d: np.dtype(d).name
)
def test_the_merge_pass_compiles_for_every_key_dtype(dtype: Any) -> None:
    from kerneldsl.array_api import _sort

    keys, index = np.ones(12, dtype), np.zeros(12, np.int64)
    build = _sort._merge.inspect(keys, index, np.empty_like(keys), np.empty_like(index), 4, 1, 0, arch="sm_90")
    assert build.cubin


def test_the_sorting_set_and_gather_functions_give_the_standards_shapes(fake_session: kd.Session) -> None:
    a = fake_session.empty((3, 5), np.float32)
    assert xp.sort(a, axis=0).shape == (3, 5) and xp.sort(a).dtype == np.float32
    assert (xp.argsort(a, descending=True).shape, xp.argsort(a).dtype) == ((3, 5), np.int64)
    assert xp.take(a, xp.asarray([0, 2, 2, 1], device=fake_session), axis=1).shape == (3, 4)
    assert xp.take_along_axis(a, fake_session.empty((3, 2), np.int64), axis=1).shape == (3, 2)
    assert xp.linalg.diagonal(a, offset=1).shape == (3,) and xp.linalg.diagonal(a, offset=-2).shape == (1,)
    assert xp.linalg.outer(fake_session.empty(3, np.int8), fake_session.empty(4, np.int8)).shape == (3, 4)
    assert xp.linalg.cross(fake_session.empty((2, 3), np.float32), fake_session.empty(3, np.float32)).shape == (2, 3)
    assert xp.linalg.vector_norm(a, axis=1, keepdims=True).shape == (3, 1)


def test_diagonal_is_a_view_with_the_summed_stride(fake_session: kd.Session) -> None:
    a = fake_session.empty((2, 4, 5), np.float32)
    d = xp.linalg.diagonal(a, offset=1)
    assert d.base is a and d.shape == (2, 4) and d.strides == (80, 24)


def test_nonzero_of_a_0d_array_is_refused(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError, match="0-d"):
        xp.nonzero(fake_session.empty((), np.float32))


def test_take_refuses_float_indices(fake_session: kd.Session) -> None:
    with pytest.raises(TypeError, match="integer dtype"):
        xp.take(fake_session.empty(5, np.float32), fake_session.empty(2, np.float32), axis=0)


def test_the_arrays_bench_has_the_numpy_code_sections() -> None:
    import argparse

    from kerneldsl.bench import arrays_bench

    assert {"cg", "matmul", "roundtrip"} <= set(arrays_bench.SECTIONS)
    parser = argparse.ArgumentParser()
    arrays_bench.add_arguments(parser)
    assert parser.parse_args(["--only", "cg", "--only", "roundtrip"]).only == ["cg", "roundtrip"]
