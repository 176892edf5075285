"""kerneldsl.array_api's functions against the standard's rules where the Array API suite found
them short: cumulative dtypes, ``repeat``'s one-count array, ``conj`` of real arrays, ``inv`` and
negative matrix powers, ``__dlpack__``'s CPU export and floor division's infinities (on the
driver double: kernels are enqueued, not run; device memory round-trips)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import array_api as xp
from kerneldsl.dtypes import ELEMENT_TYPES, add_bfloat16
from kerneldsl.errors import OperandDtypeError

BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else np.float32  # float32 twice without ml_dtypes


@pytest.mark.parametrize("function", [xp.cumulative_sum, xp.cumulative_prod], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("given", "dtype", "expected"),
    [
        (np.uint8, np.uint8, np.uint8),
        (np.uint8, np.int8, np.int8),
        (np.int8, np.int16, np.int16),
        (np.float32, np.float64, np.float64),
        (np.uint8, None, np.uint64),
        (np.int16, None, np.int64),
        (np.float32, None, np.float32),
    ],
)
def test_a_cumulative_result_has_the_dtype_asked_for_else_the_standards_default(
    fake_session: kd.Session, function: Any, given: Any, dtype: Any, expected: Any
) -> None:
    x = fake_session.empty((3, 5), given)
    assert function(x, axis=1, dtype=dtype).dtype == expected
    assert function(x, axis=0, dtype=dtype, include_initial=True).dtype == expected


@pytest.mark.parametrize("function", [xp.cumulative_sum, xp.cumulative_prod], ids=lambda f: f.__name__)
def test_include_initial_adds_one_element_along_the_axis(fake_session: kd.Session, function: Any) -> None:
    assert function(fake_session.empty((0,), np.uint8), dtype=xp.uint8, include_initial=True).shape == (1,)
    assert function(fake_session.empty((2, 4), np.int32), axis=-2, include_initial=True).shape == (3, 4)


def test_repeat_takes_an_array_of_one_count_for_every_element(fake_session: kd.Session) -> None:
    one = xp.asarray(np.array([3], np.int8), device=fake_session)
    assert xp.repeat(fake_session.empty((2, 4), np.float32), one, axis=1).shape == (2, 12)
    assert xp.repeat(fake_session.empty((2, 4), np.float32), one).shape == (24,)
    assert xp.repeat(fake_session.empty((0,), np.bool_), one, axis=0).shape == (0,)


def test_repeat_refuses_counts_of_another_length(fake_session: kd.Session) -> None:
    with pytest.raises(ValueError, match=r"shape \(1,\) or \(3,\)"):
        xp.repeat(
            fake_session.empty((2, 3), np.float32), xp.asarray(np.array([1, 2], np.int64), device=fake_session), axis=1
        )


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_conj_of_a_real_array_is_a_new_array_of_its_dtype(fake_session: kd.Session, dtype: Any) -> None:
    x = fake_session.empty((2, 3), dtype)
    got = xp.conj(x)
    assert (got.shape, got.dtype) == ((2, 3), np.dtype(dtype)) and got is not x


def test_conj_refuses_a_bool_array(fake_session: kd.Session) -> None:
    with pytest.raises(OperandDtypeError, match="numeric"):
        xp.conj(fake_session.empty(3, np.bool_))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_inv_keeps_the_stack_shape_and_dtype(fake_session: kd.Session, dtype: Any) -> None:
    got = xp.linalg.inv(fake_session.empty((2, 3, 5, 5), dtype))
    assert (got.shape, got.dtype) == ((2, 3, 5, 5), np.dtype(dtype))
    assert xp.linalg.inv(fake_session.empty((0, 0), dtype)).shape == (0, 0)


def test_inv_refuses_integer_and_non_square_arrays(fake_session: kd.Session) -> None:
    with pytest.raises(OperandDtypeError, match="floating"):
        xp.linalg.inv(fake_session.empty((3, 3), np.int32))
    with pytest.raises(ValueError, match="square"):
        xp.linalg.inv(fake_session.empty((3, 4), np.float32))


def test_a_negative_matrix_power_is_the_inverse(fake_session: kd.Session) -> None:
    got = xp.linalg.matrix_power(fake_session.empty((4, 3, 3), np.float32), -1)
    assert (got.shape, got.dtype) == ((4, 3, 3), np.float32)


def test_matrix_power_one_is_a_copy(fake_session: kd.Session) -> None:
    x = fake_session.empty((3, 3), np.float64)
    got = xp.linalg.matrix_power(x, 1)
    assert got is not x and got.shape == (3, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_the_gauss_jordan_kernel_compiles_for_sm_90(dtype: Any) -> None:
    from kerneldsl.array_api import _inverse

    stack = np.ones((3, 7, 7), dtype)
    build = _inverse._gauss_jordan.inspect(stack, np.empty_like(stack), np.empty((3, 7), dtype), arch="sm_90")
    assert build.cubin


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_floor_divide_compiles_for_every_float_dtype(dtype: Any) -> None:
    """Its infinite-operand branch uses the prelude's ``kd_isinf``, which every float dtype has."""
    assert kd.ops.floor_divide.inspect(np.ones(9, dtype), np.ones(9, dtype), arch="sm_90").cubin


class _Capsule:
    """Hands numpy a capsule made beforehand (numpy's from_dlpack asks ``__dlpack__`` for one)."""

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


@pytest.mark.parametrize("copy", [None, True])
def test_dlpack_to_the_cpu_exports_a_host_copy(fake_session: kd.Session, copy: Any) -> None:
    a = np.arange(12, dtype=np.int16).reshape(3, 4)
    x = xp.asarray(a, device=fake_session)
    capsule = x.__dlpack__(dl_device=(1, 0), copy=copy, max_version=(1, 0))
    np.testing.assert_array_equal(np.from_dlpack(_Capsule(capsule, (1, 0))), a)


def test_dlpack_to_the_cpu_without_a_copy_is_a_buffer_error(fake_session: kd.Session) -> None:
    with pytest.raises(BufferError, match="copy"):
        fake_session.empty(3, np.float32).__dlpack__(dl_device=(1, 0), copy=False)


def test_dlpack_to_another_cuda_device_is_a_buffer_error(fake_session: kd.Session) -> None:
    with pytest.raises(BufferError, match="cannot export"):
        fake_session.empty(3, np.float32).__dlpack__(dl_device=(2, 5))
