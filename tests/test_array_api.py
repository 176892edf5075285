"""A DeviceArray programs like an array: operators are kd.ops (reflected and in-place forms too),
host conversion is explicit, and arrays are created the NumPy way (the driver double stands in
for the GPU: these check what runs, the GPU tests check the values)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops

BINARY = [
    (operator.add, ops.add),
    (operator.sub, ops.subtract),
    (operator.mul, ops.multiply),
    (operator.truediv, ops.divide),
    (operator.floordiv, ops.floor_divide),
    (operator.mod, ops.remainder),
    (operator.pow, ops.power),
    (operator.lt, ops.less),
    (operator.le, ops.less_equal),
    (operator.gt, ops.greater),
    (operator.ge, ops.greater_equal),
    (operator.eq, ops.equal),
    (operator.ne, ops.not_equal),
]


@pytest.mark.parametrize(("python", "op"), BINARY, ids=[op.name for _, op in BINARY])
def test_binary_operators_are_the_ops_with_numpys_result(fake_session: kd.Session, python: Any, op: Any) -> None:
    a, b = fake_session.empty((4, 3), np.float32), fake_session.empty(3, np.int16)
    want = python(np.ones((4, 3), np.float32), np.ones(3, np.int16))
    got = python(a, b)
    assert type(got) is kd.DeviceArray and (got.shape, got.dtype) == (want.shape, want.dtype)


def test_a_python_scalar_on_either_side_is_weak(fake_session: kd.Session) -> None:
    a = fake_session.empty(8, np.float16)
    assert (a * 2.5).dtype == np.float16 and (2.5 * a).dtype == np.float16 and (1 - a).dtype == np.float16


def test_in_place_operators_write_into_the_array(fake_session: kd.Session) -> None:
    a = fake_session.empty(8, np.float32)
    before = a
    a += 1.0
    a *= a
    assert a is before


def test_unary_operators(fake_session: kd.Session) -> None:
    a = fake_session.empty(8, np.int32)
    assert ((-a).dtype, abs(a).dtype) == (np.int32, np.int32)


def test_arrays_keep_their_identity_in_the_sessions_books(fake_session: kd.Session) -> None:
    a, b = fake_session.empty(8, np.float32), fake_session.empty(8, np.float32)
    a.close()  # comparison operators are elementwise: closing must not look arrays up by ==
    assert a.closed and not b.closed


def test_numpy_conversion_is_explicit(fake_session: kd.Session) -> None:
    with pytest.raises(TypeError, match=r"to_host\(\)"):
        np.asarray(fake_session.empty(4, np.float32))


def test_sizes_like_numpy(fake_session: kd.Session) -> None:
    a = fake_session.empty((3, 4), np.float64)
    assert (len(a), a.size, a.nbytes, a.itemsize, a.strides) == (3, 12, 96, 8, (32, 8))


def test_creation_functions_make_device_arrays_on_the_given_session(fake_session: kd.Session) -> None:
    made = [
        kd.empty((2, 3), session=fake_session),
        kd.zeros(4, np.int8, session=fake_session),
        kd.ones(3, session=fake_session),
        kd.full((2,), 7, np.int64, session=fake_session),
        kd.arange(5, session=fake_session),
        kd.asarray([1.0, 2.0], session=fake_session),
    ]
    assert all(type(m) is kd.DeviceArray and m.session is fake_session for m in made)
    assert [m.dtype for m in made] == [np.float32, np.int8, np.float32, np.int64, np.arange(5).dtype, np.float64]
    like = kd.full_like(made[3], 1)
    assert (like.shape, like.dtype, like.session) == ((2,), np.int64, fake_session)


def test_asarray_of_a_device_array_is_that_array(fake_session: kd.Session) -> None:
    a = fake_session.empty(4, np.float32)
    assert kd.asarray(a) is a
