"""DeviceArray's NumPy methods and protocol, decided on the host: result dtypes and shapes as
NumPy's, the kd.ops plan each method runs, argument checks before any launch, and the scalar
conversions' rules and errors (the driver double stands in for the GPU; the GPU tests check
the values)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array import dtype_variants
from kerneldsl.errors import ArrayScalarError, ArraySizeError, ViewError

REDUCTIONS = ["sum", "prod", "min", "max", "mean", "std", "var", "any", "all"]
DTYPES = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64]


@pytest.mark.parametrize("method", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_reduction_methods_give_numpys_dtype_and_shape(fake_session: kd.Session, method: str, dtype: Any) -> None:
    host = np.ones((3, 4, 5), dtype)
    for axis, keepdims in [(None, False), ((0, -1), True)]:
        want = getattr(host, method)(axis=axis, keepdims=keepdims)
        got = getattr(fake_session.empty((3, 4, 5), dtype), method)(axis=axis, keepdims=keepdims)
        assert type(got) is kd.DeviceArray and (got.shape, got.dtype) == (np.shape(want), want.dtype)


@pytest.mark.parametrize("method", ["sum", "prod", "mean", "cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.float16, np.float32, np.float64, np.bool_])
def test_dtype_argument_gives_numpys_result_dtype(fake_session: kd.Session, method: str, dtype: Any) -> None:
    want = getattr(np.ones((4, 6), np.int16), method)(axis=0, dtype=dtype)
    assert getattr(fake_session.empty((4, 6), np.int16), method)(axis=0, dtype=dtype).dtype == want.dtype


@pytest.mark.parametrize("method", ["std", "var"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("value", [np.int16, np.float16, np.float64])
def test_variance_dtype_argument_gives_numpys_result_dtype(
    fake_session: kd.Session, method: str, dtype: Any, value: Any
) -> None:
    want = getattr(np.ones((4, 6), value), method)(axis=0, dtype=dtype)
    assert getattr(fake_session.empty((4, 6), value), method)(axis=0, dtype=dtype).dtype == want.dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_var_and_std_dtypes_are_numpys_computed_in_a_float(dtype: Any) -> None:
    result, compute = dtype_variants.variance_dtypes(np.dtype(dtype), None)
    assert result == np.var(np.ones(3, dtype)).dtype
    assert compute == (np.float32 if dtype == np.float16 else result)


def test_argmin_argmax_give_int64_indices_along_one_axis(fake_session: kd.Session) -> None:
    a = fake_session.empty((3, 4, 5), np.float32)
    assert (a.argmax().shape, a.argmin(axis=-1).shape, a.argmax(axis=1, keepdims=True).shape) == ((), (3, 4), (3, 1, 5))
    assert a.argmax(axis=0).dtype == np.int64
    with pytest.raises(TypeError, match="tuple"):
        a.argmin(axis=(0, 1))


@pytest.mark.parametrize("method", ["cumsum", "cumprod"])
def test_scans_are_flat_without_an_axis_and_keep_the_shape_with_one(fake_session: kd.Session, method: str) -> None:
    a = fake_session.empty((3, 4), np.int8)
    assert getattr(a, method)().shape == (12,) and getattr(a, method)(axis=-1).shape == (3, 4)
    assert getattr(a, method)().dtype == getattr(np.ones(1, np.int8), method)().dtype


@pytest.mark.parametrize(
    ("method", "op"), [("sum", ops.sum), ("max", ops.max), ("mean", ops.mean), ("argmax", ops.argmax)]
)
def test_a_method_runs_the_kd_ops_kernel(drv: FakeDriver, fake_session: kd.Session, method: str, op: Any) -> None:
    a = fake_session.empty((16, 300), np.float32)
    getattr(a, method)(axis=1)
    by_method = drv.launches[-1][0]
    op(a, axis=1)
    assert drv.launches[-1][0] == by_method


def test_a_dtype_the_op_uses_anyway_is_the_op_itself() -> None:
    assert dtype_variants.typed(ops.sum, np.dtype(np.int8), np.int64) is ops.sum
    assert dtype_variants.typed(ops.sum, np.dtype(np.float16), np.float16) is ops.sum
    assert dtype_variants.typed(ops.sum, np.dtype(np.int8), np.int8) is not ops.sum


def test_each_dtype_variant_is_made_once() -> None:
    assert dtype_variants.typed(ops.sum, np.dtype(np.int8), np.int16) is dtype_variants.typed(
        ops.sum, np.dtype(np.int32), np.int16
    )


def test_a_dtype_variant_accumulates_in_float32_for_float16() -> None:
    variant = dtype_variants.typed(ops.sum, np.dtype(np.int32), np.float16)
    assert variant.reducer.accumulate(np.dtype(np.int32)) == np.float32
    assert variant.reducer.result(np.dtype(np.int32)) == np.float16


def test_out_is_the_result(fake_session: kd.Session) -> None:
    a, out = fake_session.empty((3, 4), np.float32), fake_session.empty(4, np.float64)
    assert a.sum(axis=0, out=out) is out and a.std(axis=0, out=out) is out


def test_var_checks_out_before_launching(drv: FakeDriver, fake_session: kd.Session) -> None:
    a = fake_session.empty((3, 4), np.float32)
    before = len(drv.launches)
    with pytest.raises(ValueError, match="shape"):
        a.var(axis=0, out=fake_session.empty(3, np.float32))
    with pytest.raises(TypeError, match="same_kind"):
        a.var(axis=0, out=fake_session.empty(4, np.int32))
    assert len(drv.launches) == before


def test_var_rejects_an_axis_out_of_range(fake_session: kd.Session) -> None:
    with pytest.raises(np.exceptions.AxisError):
        fake_session.empty((3, 4), np.float32).var(axis=2)


def test_ddof_and_correction_are_one_argument(fake_session: kd.Session) -> None:
    a = fake_session.empty(5, np.float32)
    assert a.var(correction=1).shape == ()
    with pytest.raises(ValueError, match="simultaneously"):
        a.std(ddof=1, correction=1)
    with pytest.raises(TypeError, match="ddof"):
        a.var(ddof="1")


def test_min_of_an_empty_reduction_is_numpys_error(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError, match="zero-size"):
        fake_session.empty((0, 3), np.float32).min()


def test_any_and_all_of_nothing_are_their_identities_in_shape(fake_session: kd.Session) -> None:
    a = fake_session.empty((0, 3), np.float32)
    assert (a.any(axis=0).shape, a.all(axis=0).dtype) == ((3,), np.bool_)


# -- the scalar protocol ---------------------------------------------------------------------------


@pytest.mark.parametrize("convert", [float, int, operator.index], ids=["float", "int", "index"])
@pytest.mark.parametrize("shape", [(2,), (1,), (0,), (1, 1)])
def test_only_0d_arrays_convert_to_python_scalars(
    fake_session: kd.Session, convert: Any, shape: tuple[int, ...]
) -> None:
    with pytest.raises(ArrayScalarError, match="only") as caught:
        convert(fake_session.empty(shape, np.int32))
    assert isinstance(caught.value, TypeError)


def test_0d_arrays_convert_to_their_value(fake_session: kd.Session) -> None:
    z = fake_session.zeros((), np.int32)
    assert (float(z), int(z), bool(z), operator.index(z), z.item()) == (0.0, 0, False, 0, 0)
    assert type(fake_session.zeros((), np.float32).item()) is float


def test_index_takes_integer_arrays_only(fake_session: kd.Session) -> None:
    with pytest.raises(ArrayScalarError, match="integer scalar arrays"):
        operator.index(fake_session.zeros((), np.float32))


@pytest.mark.parametrize(("shape", "message"), [((2,), "more than one element"), ((0,), "empty array")])
def test_truth_of_other_than_one_element_is_numpys_value_error(
    fake_session: kd.Session, shape: Any, message: str
) -> None:
    with pytest.raises(ArraySizeError, match=message) as caught:
        bool(fake_session.empty(shape, np.float32))
    assert isinstance(caught.value, ValueError)


def test_truth_of_one_element_of_any_rank(fake_session: kd.Session) -> None:
    assert bool(fake_session.zeros((1, 1), np.float32)) is False


def test_item_of_several_elements_needs_an_index(fake_session: kd.Session) -> None:
    a = fake_session.zeros((2, 3), np.int16)
    with pytest.raises(ArraySizeError, match="size 1"):
        a.item()
    assert (a.item(5), a.item(-1), a.item(1, 2), a.item((0, 1))) == (0, 0, 0, 0)
    with pytest.raises(IndexError):
        a.item(6)


def test_len_of_a_0d_array_is_a_type_error(fake_session: kd.Session) -> None:
    assert len(fake_session.empty((3, 2), np.float32)) == 3
    with pytest.raises(TypeError, match="0-d"):
        len(fake_session.empty((), np.float32))


# -- the Array API protocol ------------------------------------------------------------------------


def test_the_array_namespace_is_kerneldsl_array_api(fake_session: kd.Session) -> None:
    a = fake_session.empty(3, np.float32)
    assert a.__array_namespace__() is kd.array_api
    assert a.__array_namespace__(api_version="2024.12") is kd.array_api
    with pytest.raises(kd.errors.InvalidOptionError, match="2019.01"):
        a.__array_namespace__(api_version="2019.01")


def test_mT_swaps_the_last_two_axes_as_a_view(fake_session: kd.Session) -> None:
    a = fake_session.empty((2, 3, 4), np.float32)
    t = a.mT
    assert (t.shape, t.base is a, t.strides) == ((2, 4, 3), True, (48, 4, 16))
    with pytest.raises(ViewError, match="ndim < 2"):
        fake_session.empty(3, np.float32).mT  # noqa: B018


def test_device_is_the_ordinal_and_to_device_there_is_the_array(fake_session: kd.Session) -> None:
    a = fake_session.empty(3, np.float32)
    assert a.device == 0 and a.to_device(0) is a and a.to_device(fake_session) is a


def test_to_device_of_another_session_copies(fake_session: kd.Session) -> None:
    a = fake_session.zeros(3, np.float32)
    with kd.Session(0) as other:
        moved = a.to_device(other)
        assert moved.session is other and (moved.shape, moved.dtype) == (a.shape, a.dtype)


def test_to_device_rejects_other_kinds(fake_session: kd.Session) -> None:
    with pytest.raises(TypeError, match="ordinal"):
        fake_session.empty(3, np.float32).to_device("cuda:0")  # type: ignore[arg-type]
