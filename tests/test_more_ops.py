"""The ops NumPy users reach for beyond arithmetic (kd.ops rows: rounding, predicates, logic,
bits, inverse and hyperbolic functions) and array manipulation (kd.concatenate, kd.stack,
kd.broadcast_to, kd.flip, ...), on CPU: result dtypes against NumPy's own, typed errors, and
what the manipulation functions make on the driver double. Every row also compiles for sm_90 for
every dtype it accepts in tests/test_ops.py (which walks the whole table)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.dtypes import all_element_types
from kerneldsl.errors import OperandDtypeError, WrongSessionError

DTYPES = [et.numpy for et in all_element_types().values() if et.kind != "c"]  # complex: test_complex_arrays.py
NEW = (
    "log1p expm1 sinh cosh arcsinh arccosh arctanh arcsin arccos arctan arctan2 hypot copysign deg2rad rad2deg "
    "fmod fmax fmin reciprocal positive sign floor ceil trunc rint round isnan isinf isfinite signbit "
    "logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor invert left_shift right_shift"
).split()
ALIASES = {
    "around": "round",
    "bitwise_not": "invert",
    "bitwise_invert": "invert",
    "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift",
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "atan2": "arctan2",
    "asinh": "arcsinh",
    "acosh": "arccosh",
    "atanh": "arctanh",
    "pow": "power",
    "mod": "remainder",
}


def _numpy_dtype(func: Any, dts: list[np.dtype]) -> np.dtype:
    with np.errstate(all="ignore"):
        return np.asarray(func(*(np.empty(0, d) for d in dts))).dtype


@pytest.mark.parametrize("name", NEW)
def test_each_new_op_is_a_row_with_numpys_result_dtype_for_every_dtype(name: str) -> None:
    op = ops.TABLE[name]
    for dt in DTYPES:
        dts = [dt] * len(op.params)
        try:
            want = _numpy_dtype(getattr(np, name), dts)
        except TypeError:
            with pytest.raises(OperandDtypeError):
                op.resolve(dts)
            continue
        assert op.resolve(dts)[0] == want, dt


@pytest.mark.parametrize("name", ["arctan2", "hypot", "copysign", "fmod", "fmax", "left_shift", "logical_xor"])
def test_binary_new_ops_promote_mixed_dtypes_like_numpy(name: str) -> None:
    op = ops.TABLE[name]
    for a, b in [(np.int8, np.uint8), (np.int16, np.float16), (np.int32, np.float32), (np.uint64, np.int64)]:
        dts = [np.dtype(a), np.dtype(b)]
        try:
            want = _numpy_dtype(getattr(np, name), dts)
        except TypeError:
            with pytest.raises(OperandDtypeError):
                op.resolve(dts)
            continue
        assert op.resolve(dts)[0] == want, (a, b)


def test_erf_and_erfc_follow_the_float_functions_dtype_rule() -> None:
    for dt in DTYPES:
        assert ops.erf.resolve([dt])[0] == ops.sin.resolve([dt])[0] == ops.erfc.resolve([dt])[0]


def test_predicates_read_their_operand_in_its_own_dtype() -> None:
    for name in ("isnan", "isinf", "isfinite", "signbit"):
        assert ops.TABLE[name].resolve([np.dtype(np.float16)]) == (np.dtype(bool), (np.dtype(np.float16),))
        assert ops.TABLE[name].resolve([np.dtype(np.int32)]) == (np.dtype(bool), (np.dtype(np.int32),))


def test_bitwise_ops_of_floats_raise_a_typed_error_naming_the_op() -> None:
    with pytest.raises(OperandDtypeError, match=r"kd\.ops\.bitwise_and .*float32"):
        ops.bitwise_and(np.ones(2, np.float32), np.ones(2, np.float32))
    with pytest.raises(OperandDtypeError, match=r"kd\.ops\.invert"):
        ops.invert.resolve([np.dtype(np.float64)])
    with pytest.raises(TypeError):  # still a TypeError, as NumPy's
        ops.left_shift.resolve([np.dtype(np.float16), np.dtype(np.int8)])


def test_sign_and_positive_of_bools_are_refused_as_numpy_does() -> None:
    for op in (ops.sign, ops.positive):
        with pytest.raises(OperandDtypeError):
            op.resolve([np.dtype(bool)])


def test_an_unsupported_result_dtype_still_names_the_element_type() -> None:
    with pytest.raises(OperandDtypeError, match="kd.ops.fmax is not defined for complex64 operands"):
        ops.fmax.resolve([np.dtype(np.complex64), np.dtype(np.float32)])


@pytest.mark.parametrize(("alias", "row"), sorted(ALIASES.items()))
def test_numpy_2_aliases_are_the_rows(alias: str, row: str) -> None:
    assert getattr(ops, alias) is ops.TABLE[row] and alias in ops.__all__


def test_round_takes_no_decimals() -> None:
    with pytest.raises(TypeError, match="takes 1 operand"):
        ops.round(np.ones(2), 2)


def test_the_new_ops_run_on_numpy_operands_through_numpy_results_type() -> None:
    assert ops.isnan.resolve([np.dtype(np.float32)])[0] == np.dtype(bool)
    assert ops.floor.resolve([np.dtype(np.int16)])[0] == np.dtype(np.int16)  # NumPy 2 keeps integers


# --- manipulation ------------------------------------------------------------------------------------


def test_broadcast_to_is_a_view_with_zero_strides_on_new_and_extent_1_axes(fake_session: kd.Session) -> None:
    a = fake_session.empty((3, 1), np.float32)
    b = kd.broadcast_to(a, (2, 3, 4))
    want = np.broadcast_to(np.empty((3, 1), np.float32), (2, 3, 4))
    assert type(b) is kd.DeviceArray and b.base is a and b.ptr == a.ptr
    assert (b.shape, b.strides) == (want.shape, want.strides)


def test_broadcast_to_refuses_shapes_numpy_refuses(fake_session: kd.Session) -> None:
    a = fake_session.empty((3, 2), np.float32)
    for shape in ((3, 3), (2,), (-1, 2)):
        with pytest.raises(ValueError):
            np.broadcast_to(np.empty((3, 2)), shape)
        with pytest.raises(ValueError):
            kd.broadcast_to(a, shape)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
def test_flip_is_a_view_with_numpys_negative_strides_and_offset(fake_session: kd.Session, axis: Any) -> None:
    a = fake_session.empty((2, 3, 4), np.int16)
    want = np.flip(np.empty((2, 3, 4), np.int16), axis)
    base = np.empty((2, 3, 4), np.int16)
    got = kd.flip(a, axis)
    assert (got.shape, got.strides) == (want.shape, want.strides) and got.base is a
    assert got.ptr - a.ptr == np.flip(base, axis).__array_interface__["data"][0] - base.__array_interface__["data"][0]


def test_flip_refuses_a_repeated_or_out_of_range_axis(fake_session: kd.Session) -> None:
    a = fake_session.empty((2, 3), np.float32)
    with pytest.raises(ValueError, match="repeated axis"):
        kd.flip(a, (0, 0))
    with pytest.raises(IndexError):
        kd.flip(a, 2)


def test_expand_dims_squeeze_and_moveaxis_are_numpys_views(fake_session: kd.Session) -> None:
    a, h = fake_session.empty((2, 1, 3, 4), np.float64), np.empty((2, 1, 3, 4), np.float64)
    for got, want in (
        (kd.expand_dims(a, (0, -1)), np.expand_dims(h, (0, -1))),
        (kd.squeeze(a), np.squeeze(h)),
        (kd.squeeze(a, 1), np.squeeze(h, 1)),
        (kd.moveaxis(a, 0, -1), np.moveaxis(h, 0, -1)),
        (kd.moveaxis(a, (0, 3), (2, 0)), np.moveaxis(h, (0, 3), (2, 0))),
    ):
        assert (got.shape, got.strides) == (want.shape, want.strides) and got.base is a


def test_moveaxis_needs_as_many_sources_as_destinations(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError, match="same number"):
        kd.moveaxis(fake_session.empty((2, 3)), (0, 1), 0)


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_concatenate_has_numpys_shape_and_promoted_dtype(fake_session: kd.Session, axis: Any) -> None:
    shapes = [(2, 3), (2, 3)]
    a, b = fake_session.empty(shapes[0], np.int16), fake_session.empty(shapes[1], np.float32)
    want = np.concatenate([np.empty(shapes[0], np.int16), np.empty(shapes[1], np.float32)], axis)
    got = kd.concatenate([a, b], axis)
    assert type(got) is kd.DeviceArray and (got.shape, got.dtype) == (want.shape, want.dtype)


def test_concatenate_uploads_numpy_inputs_and_joins_uneven_extents(fake_session: kd.Session) -> None:
    got = kd.concatenate([fake_session.empty((2, 3), np.uint8), np.zeros((2, 5), np.uint8)], axis=1)
    assert type(got) is kd.DeviceArray and (got.shape, got.dtype) == ((2, 8), np.uint8)


def test_concatenate_of_numpy_arrays_is_numpys() -> None:
    got = kd.concatenate([np.ones(2), np.zeros(3)])
    assert type(got) is np.ndarray and got.tolist() == [1, 1, 0, 0, 0]


def test_concatenate_refuses_what_numpy_refuses(fake_session: kd.Session) -> None:
    a = fake_session.empty((2, 3), np.float32)
    with pytest.raises(ValueError, match="along dimension 1"):
        kd.concatenate([a, fake_session.empty((2, 4), np.float32)], 0)
    with pytest.raises(ValueError, match="dimension"):
        kd.concatenate([a, fake_session.empty(3, np.float32)])
    with pytest.raises(ValueError, match="zero-dimensional"):
        kd.concatenate([fake_session.empty((), np.float32), fake_session.empty((), np.float32)])
    with pytest.raises(ValueError, match="at least one"):
        kd.concatenate([])
    with pytest.raises(TypeError, match="Cannot cast"):
        kd.concatenate([a, a], dtype=np.int32)
    with pytest.raises(TypeError, match="both"):
        kd.concatenate([a, a], out=fake_session.empty((4, 3), np.float32), dtype=np.float32)


def test_concatenate_writes_into_out_with_a_same_kind_cast(fake_session: kd.Session) -> None:
    out = fake_session.empty((4, 3), np.float64)
    assert kd.concatenate([fake_session.empty((2, 3), np.float32), fake_session.empty((2, 3), np.int8)], out=out) is out
    with pytest.raises(TypeError, match="Cannot cast"):
        kd.concatenate([fake_session.empty((2, 3), np.float32)] * 2, out=fake_session.empty((4, 3), np.int32))
    with pytest.raises(ValueError, match="wrong shape"):
        kd.concatenate([fake_session.empty((2, 3), np.float32)] * 2, out=fake_session.empty((4, 4), np.float32))
    with pytest.raises(TypeError, match="DeviceArray"):
        kd.concatenate([fake_session.empty((2, 3), np.float32)] * 2, out=np.empty((4, 3), np.float32))


def test_concatenate_refuses_arrays_of_two_sessions(fake_session: kd.Session) -> None:
    with kd.Session(0) as other, pytest.raises(WrongSessionError):
        kd.concatenate([fake_session.empty(2), other.empty(2)])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_adds_the_axis_numpy_adds(fake_session: kd.Session, axis: int) -> None:
    parts = [fake_session.empty((2, 3), np.int32) for _ in range(3)]
    want = np.stack([np.empty((2, 3), np.int32)] * 3, axis)
    got = kd.stack(parts, axis)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)


def test_stack_needs_one_shape(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError, match="same shape"):
        kd.stack([fake_session.empty(2), fake_session.empty(3)])


def test_an_operand_in_the_other_byte_order_is_refused_naming_the_conversion() -> None:
    swapped = np.arange(8, dtype=np.dtype(np.float32).newbyteorder())
    with pytest.raises(OperandDtypeError, match=r"byte order.*newbyteorder\('='\)"):
        ops.add(swapped, swapped)


@pytest.mark.parametrize(
    "layout", [lambda a: a, lambda a: a.T, lambda a: a[:, ::2]], ids=["contiguous", "transposed", "strided"]
)
def test_an_upload_in_the_other_byte_order_keeps_the_values(fake_session: Any, layout: Any) -> None:
    swapped = layout(np.arange(12, dtype=np.dtype(np.int64).newbyteorder()).reshape(3, 4))
    uploaded = fake_session.to_device(swapped)
    assert uploaded.dtype == np.int64
    np.testing.assert_array_equal(uploaded.to_host(), layout(np.arange(12).reshape(3, 4)))
