"""Calls and declarations a newcomer writes: keywords for every parameter, scalar defaults, and a
clear error (never a raw TypeError from inside kerneldsl) for what cannot work."""

from __future__ import annotations

from typing import Any, NewType, TypeVar

import numpy as np
import pytest
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl.errors import BindingError, DeclarationError, InvalidOptionError

T = TypeVar("T")
n = NewType("n", int)


@kd.kernel(grid=kd.cdiv(n, 128), block=128)
def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], alpha: kd.Scalar[T] = 1.0) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) y[i] += alpha * x[i];"


@kd.kernel(grid=1, block=kd.sym("TILE"))
def tiled(y: kd.Out[T, n], TILE: kd.Const[int] = 32) -> str:
    return "y[threadIdx.x % n] = TILE;"


def _host() -> tuple[Any, Any]:
    return np.ones(8, np.float32), np.ones(8, np.float32)


def test_arrays_and_scalars_can_be_passed_by_name() -> None:
    y, x = _host()
    by_name = saxpy.specialize(y=y, x=x, alpha=np.float32(2), arch="sm_90")
    assert by_name == saxpy.specialize(y, x, np.float32(2), arch="sm_90")


def test_a_call_by_name_launches_like_a_positional_one(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        dy, dx = s.zeros(8, np.float32), s.zeros(8, np.float32)
        saxpy(dy, dx, np.float32(2))
        saxpy(alpha=np.float32(2), x=dx, y=dy)
    assert drv.launches[0][:3] == drv.launches[1][:3] and len(drv.launches) == 2


def test_a_scalar_left_out_takes_its_default() -> None:
    y, x = _host()
    assert saxpy.specialize(y, x, arch="sm_90") == saxpy.specialize(y, x, 1.0, arch="sm_90")


def test_an_argument_given_twice_is_named() -> None:
    y, x = _host()
    with pytest.raises(BindingError, match="'y'.*by position and by name"):
        saxpy.specialize(y, x, y=y, arch="sm_90")


def test_a_missing_argument_is_named() -> None:
    with pytest.raises(BindingError, match="'x'.*is missing"):
        saxpy.specialize(np.ones(4, np.float32), arch="sm_90")


def test_an_unhashable_constant_in_a_call_is_a_binding_error(drv: FakeDriver) -> None:
    with kd.Session(0) as s, pytest.raises(BindingError, match="TILE"):
        tiled(s.zeros(4, np.float32), TILE=[32])


def test_an_array_parameter_cannot_have_a_default() -> None:
    with pytest.raises(DeclarationError, match="'x'.*cannot have a default"):

        @kd.kernel()
        def f(y: kd.Out[T, n], x: kd.In[T, n] = None) -> str:  # type: ignore[assignment]
            return ""


def test_a_parameter_named_like_a_generated_stride_is_refused() -> None:
    with pytest.raises(DeclarationError, match="'y_stride0'.*generated stride of array 'y'"):

        @kd.kernel()
        def f(y: kd.Out[T, n], y_stride0: kd.Scalar[kd.int32]) -> str:
            return ""


def test_a_precompile_entry_with_an_unsupported_dtype_fails_at_decoration() -> None:
    with pytest.raises(DeclarationError, match="precompile entry.*clongdouble"):

        @kd.kernel(precompile=[{"T": np.clongdouble}])
        def f(y: kd.Out[T, n]) -> str:
            return ""


def test_options_given_as_one_string_say_they_are_a_list() -> None:
    with pytest.raises(InvalidOptionError, match=r"options=\['--use_fast_math'\]"):

        @kd.kernel(options="--use_fast_math")  # type: ignore[arg-type]
        def f(y: kd.Out[T, n]) -> str:
            return ""
