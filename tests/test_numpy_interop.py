"""NumPy arrays and scalars on the left of an operator with a DeviceArray: the DeviceArray's
reflected operator runs (on the device), where NumPy would otherwise try to convert it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from driver_double import FakeDriver

import kerneldsl as kd


@pytest.fixture
def d(drv: FakeDriver) -> Iterator[Any]:
    with kd.Session(0) as s:
        yield s.to_device(np.ones(4, np.float32))


@pytest.mark.parametrize(
    "spelling",
    [
        lambda h, d: h + d,
        lambda h, d: h - d,
        lambda h, d: h * d,
        lambda h, d: h / d,
        lambda h, d: h < d,
        lambda h, d: h == d,
    ],
    ids=["add", "subtract", "multiply", "divide", "less", "equal"],
)
def test_a_numpy_array_on_the_left_runs_the_device_arrays_reflected_operator(
    d: Any, drv: FakeDriver, spelling: Any
) -> None:
    before = len(drv.launches) + drv.c_launches
    result = spelling(np.full(4, 2, np.float32), d)
    assert type(result) is kd.DeviceArray
    assert result.session is d.session and result.shape == (4,)
    assert len(drv.launches) + drv.c_launches == before + 1  # one kernel, on the device


def test_a_numpy_scalar_on_the_left_runs_on_the_device(d: Any) -> None:
    assert type(np.float32(2) * d) is kd.DeviceArray


def test_a_numpy_ufunc_called_on_a_device_array_is_refused(d: Any) -> None:
    with pytest.raises(TypeError):
        np.add(np.ones(4, np.float32), d)
