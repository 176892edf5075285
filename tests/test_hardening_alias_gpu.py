"""Scans and reductions whose ``out=`` overlaps an input (issue 40, security item 8) on the GPU:
the results NumPy gives for the same values unaliased, where blocks raced over the overlap.
Small integers in float32, so every sum is exact whatever the order of additions."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.gpu


def values(shape: int | tuple[int, ...]) -> np.ndarray:
    return (np.arange(np.prod(shape)) % 7).astype(np.float32).reshape(shape)


@pytest.mark.parametrize("n", [40, 1 << 20], ids=["lines", "lookback"])
def test_a_scan_into_its_input_shifted_by_one_gives_the_unaliased_result(
    fresh_device_session: kd.Session, n: int
) -> None:
    host = values(n)
    x = fresh_device_session.to_device(host)
    kd.ops.cumsum(x[:-1], out=x[1:])
    expected = host.copy()
    expected[1:] = np.cumsum(host[:-1])
    np.testing.assert_array_equal(x.to_host(), expected)


def test_an_exclusive_scan_into_its_input_shifted_back_gives_the_unaliased_result(
    fresh_device_session: kd.Session,
) -> None:
    host = values(1 << 20)
    x = fresh_device_session.to_device(host)
    kd.ops.cumsum(x[1:], out=x[:-1], exclusive=True)
    expected = host.copy()
    expected[:-1] = np.concatenate([[0], np.cumsum(host[1:-1])])
    np.testing.assert_array_equal(x.to_host(), expected)


def test_a_scan_into_exactly_its_input_gives_numpys_result(fresh_device_session: kd.Session) -> None:
    host = values(1 << 20)
    x = fresh_device_session.to_device(host)
    kd.ops.cumsum(x, out=x)
    np.testing.assert_array_equal(x.to_host(), np.cumsum(host))


def test_a_reduction_into_a_row_of_its_input_gives_the_unaliased_result(fresh_device_session: kd.Session) -> None:
    host = values((64, 4096))
    x = fresh_device_session.to_device(host)
    for _ in range(2):  # a repeated call, which a warm entry of this layout must not take
        expected = x.to_host()
        expected[0] = expected.sum(axis=0)
        kd.ops.sum(x, axis=0, out=x[0])
        np.testing.assert_array_equal(x.to_host(), expected)
