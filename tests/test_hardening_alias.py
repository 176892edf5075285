"""Scans and reductions whose ``out=`` overlaps an input (issue 40, security item 8), on the driver
double: ``kd.ops.cumsum(x[:-1], out=x[1:])`` ran over the overlap in place, its blocks racing.
An input that overlaps ``out=`` is read from a copy, as elementwise ops read theirs, on the full
path and on the warm one. What the driver saw is the evidence: the copy, and which buffer the
kernel read (its first parameter)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.ndarray import DeviceArray

LOOKBACK, LINES = 1000, 40  # lengths scanned by each stage (one thread a line up to LINES_MAX)


@pytest.fixture
def drv(isolated_cache: None) -> Iterator[FakeDriver]:
    """The driver double, recording each launch's first parameter slot (the input a scan or a
    reduction reads)."""
    fake = FakeDriver()
    fake.snapshot_slots = 1
    with installed_driver(fake) as installed:
        yield installed


def reads_inside(drv: FakeDriver, a: DeviceArray) -> bool:
    """Whether the last launch read its input from the bytes of ``a``."""
    low, high = a.byte_span()
    return low <= int.from_bytes(drv.param_bytes[-1][:8], "little") < high


def copies(drv: FakeDriver) -> int:
    return drv.count("cuMemcpyDtoDAsync")


@pytest.mark.parametrize(("stage", "n"), [("lookback", LOOKBACK), ("lines", LINES)])
def test_a_scan_whose_input_overlaps_out_at_other_elements_reads_a_copy(
    fake_session: kd.Session, drv: FakeDriver, stage: str, n: int
) -> None:
    x = fake_session.zeros(n, np.float32)
    assert ops.cumsum.strategy(x[:-1]).variant.stage == stage
    ops.cumsum(x[:-1], out=x[1:])
    assert copies(drv) == 1 and not reads_inside(drv, x)


def test_an_exclusive_scan_of_an_overlapping_input_reads_a_copy(fake_session: kd.Session, drv: FakeDriver) -> None:
    x = fake_session.zeros(LOOKBACK, np.float32)
    ops.cumsum(x[1:], out=x[:-1], exclusive=True)
    assert copies(drv) == 1 and not reads_inside(drv, x)


def test_a_scan_into_exactly_its_input_runs_in_place(fake_session: kd.Session, drv: FakeDriver) -> None:
    """Each element is read before it is written, by the thread that writes it."""
    x = fake_session.zeros(LOOKBACK, np.float32)
    for _ in range(2):  # the full path, then the warm one
        ops.cumsum(x, out=x)
        assert copies(drv) == 0 and reads_inside(drv, x)


def test_a_warm_scan_entry_left_by_separate_arrays_does_not_take_an_overlapping_call(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a, b, x = (fake_session.zeros(LOOKBACK, np.float32) for _ in range(3))
    ops.cumsum(a[:-1], out=b[1:])  # leaves the warm entry of this layout
    ops.cumsum(a[:-1], out=b[1:])
    assert copies(drv) == 0
    for call in range(1, 3):
        ops.cumsum(x[:-1], out=x[1:])
        assert copies(drv) == call and not reads_inside(drv, x)


def test_a_reduction_into_a_row_of_its_input_reads_a_copy(fake_session: kd.Session, drv: FakeDriver) -> None:
    x = fake_session.zeros((4, 256), np.float32)
    ops.sum(x, axis=0, out=x[0])
    assert copies(drv) == 1 and not reads_inside(drv, x)


def test_a_reduction_of_a_view_read_in_place_into_an_overlapping_out_reads_a_copy(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    x = fake_session.zeros((64, 64), np.float32)
    ops.sum(x[:, :32], axis=1, out=x[0])  # the row sums of the left half, into the first row
    assert not reads_inside(drv, x)  # a copy kernel made the copy of the view


def test_a_warm_reduction_entry_left_by_separate_arrays_does_not_take_an_overlapping_call(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a, b, x = (fake_session.zeros((4, 256), np.float32) for _ in range(3))
    ops.sum(a, axis=0, out=b[0])  # leaves the warm entry of this layout
    ops.sum(a, axis=0, out=b[0])
    assert copies(drv) == 0
    for call in range(1, 3):
        ops.sum(x, axis=0, out=x[0])
        assert copies(drv) == call and not reads_inside(drv, x)


def test_a_dot_product_into_one_of_its_operands_reads_a_copy(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = fake_session.zeros(256, np.float32)
    ops.dot(a, fake_session.zeros(256, np.float32), out=a[3:4].reshape(()))
    assert copies(drv) == 1 and not reads_inside(drv, a)
