"""The warm path of reductions on the driver double: a call that ran once leaves a prebuilt launch
(``launch.warm``) that the next call like it takes after one dict lookup, and it accepts and
refuses exactly the calls the full path does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from conftest import launch_outcome as _outcome
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.reduction import REDUCERS, Reduction
from kerneldsl.array.scan import Scan
from kerneldsl.launch import fastpath


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):  # type: ignore[no-untyped-def]
    yield


@pytest.mark.parametrize(
    ("shape", "axis", "keepdims"),
    [((1024,), None, False), ((64, 1024), 1, False), ((1024, 64), 0, True), ((40, 7, 513), (0, 2), False)],
)
def test_a_second_call_takes_the_warm_entry_and_launches_what_the_first_did(drv, shape, axis, keepdims) -> None:  # type: ignore[no-untyped-def]
    s = kd.Session(0)
    x = s.zeros(shape, np.float32)
    r = Reduction(REDUCERS["sum"])
    first = _outcome(drv, lambda: r(x, axis=axis, keepdims=keepdims))
    assert len(r._warm) == 1
    assert _outcome(drv, lambda: r(x, axis=axis, keepdims=keepdims)) == first


@pytest.mark.skipif(not fastpath.ENABLED, reason="the C launch path is off")
@pytest.mark.parametrize(
    ("shape", "axis"),
    [
        ((1024,), None),
        ((64, 1024), 1),
        ((1024, 64), 0),
        ((1001, 7, 513), (0, 2)),  # segments
        ((64, 220, 5), 1),  # flat lines
        ((4099, 13), 0),  # phased columns
        ((93011, 11, 5), 1),  # slabs
    ],
)
def test_a_warm_reduction_launches_from_c_at_the_grid_its_plan_decided(drv, shape, axis) -> None:  # type: ignore[no-untyped-def]
    s = kd.Session(0)
    x = s.zeros(shape, np.float32)
    r = Reduction(REDUCERS["sum"])
    first = _outcome(drv, lambda: r(x, axis=axis))
    r(x, axis=axis)  # the warm entry's first call: through the adapter, then it has a C entry
    before = drv.c_launches
    assert _outcome(drv, lambda: r(x, axis=axis)) == first and drv.c_launches == before + 1


@pytest.mark.skipif(not fastpath.ENABLED, reason="the C launch path is off")
def test_a_warm_scan_launches_from_c(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros(1024, np.float32)
    first = _outcome(drv, lambda: ops.cumsum(x))
    ops.cumsum(x)
    before = drv.c_launches
    assert _outcome(drv, lambda: ops.cumsum(x))[:3] == first[:3] and drv.c_launches > before


def test_a_view_gets_its_own_warm_entry(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    r = Reduction(REDUCERS["sum"])
    r(x, axis=0)
    r(x.T, axis=0)
    first = _outcome(drv, lambda: r(x.T, axis=0))
    assert len(r._warm) == 2 and first[1] == (64,)


def test_out_keeps_its_own_entry_and_is_returned(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x, out = s.zeros((64, 96), np.float32), s.zeros(96, np.float32)
    r = Reduction(REDUCERS["sum"])
    assert r(x, axis=0, out=out) is out
    assert r(x, axis=0, out=out) is out
    assert len(r._warm) == 1


def _calls(s: Any) -> dict[str, Callable[[Reduction], Any]]:
    x = s.zeros((64, 96), np.float32)
    out, wrong, ints = s.zeros(96, np.float32), s.zeros(95, np.float32), s.zeros(96, np.int32)
    closed = s.zeros((64, 96), np.float32)
    closed.close()
    other = kd.Session(0)
    foreign = other.zeros(96, np.float32)
    return {
        "axis 0": lambda r: r(x, axis=0),
        "axis -1 keepdims": lambda r: r(x, axis=-1, keepdims=True),
        "tuple axis": lambda r: r(x, axis=(0, 1)),
        "out": lambda r: r(x, axis=0, out=out),
        "keepdims 1": lambda r: r(x, axis=0, keepdims=1),
        "axis True": lambda r: r(x, axis=True),
        "axis 1.0": lambda r: r(x, axis=1.0),
        "axis repeated": lambda r: r(x, axis=(0, 0)),
        "axis out of range": lambda r: r(x, axis=2),
        "out of a wrong shape": lambda r: r(x, axis=0, out=wrong),
        "out of an unsafe dtype": lambda r: r(x, axis=0, out=ints),
        "numpy out": lambda r: r(x, axis=0, out=np.zeros(96, np.float32)),
        "out of another session": lambda r: r(x, axis=0, out=foreign),
        "closed operand": lambda r: r(closed, axis=0),
    }


CALL_NAMES = [
    "axis 0",
    "axis -1 keepdims",
    "tuple axis",
    "out",
    "keepdims 1",
    "axis True",
    "axis 1.0",
    "axis repeated",
    "axis out of range",
    "out of a wrong shape",
    "out of an unsafe dtype",
    "numpy out",
    "out of another session",
    "closed operand",
]


@pytest.mark.parametrize("name", CALL_NAMES)
def test_the_warm_and_the_full_path_accept_and_refuse_the_same_calls(drv: FakeDriver, name: str) -> None:
    s = kd.Session(0)
    call = _calls(s)[name]
    full = Reduction(REDUCERS["sum"])
    cold = _outcome(drv, lambda: call(full))
    full._warm.clear()
    assert _outcome(drv, lambda: call(full)) == cold  # the full path again
    warm = Reduction(REDUCERS["sum"])
    if cold[0] == "ok":
        call(warm)  # makes the warm entry
    assert _outcome(drv, lambda: call(warm)) == cold
    assert len(warm._warm) == (1 if cold[0] == "ok" else 0)


def test_an_operand_closed_after_its_warm_entry_was_made_is_refused_as_on_the_full_path(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    r = Reduction(REDUCERS["sum"])
    r(x, axis=0)
    x.close()
    warm = _outcome(drv, lambda: r(x, axis=0))
    r._warm.clear()
    assert warm[0] == "error" and _outcome(drv, lambda: r(x, axis=0)) == warm


def test_a_closed_scratch_buffer_sends_the_call_back_to_the_full_path(drv: FakeDriver) -> None:
    from kerneldsl.array.scratch import SCRATCH

    s = kd.Session(0)
    x = s.zeros((16, 1 << 16), np.float32)  # few long rows: split, with partials and tickets
    r = Reduction(REDUCERS["sum"])
    r(x, axis=1)
    (launch,) = r._warm.values()
    assert launch.scratch
    SCRATCH.discard(s, "values", np.dtype(np.float32))
    assert launch((x,), None) is None
    assert _outcome(drv, lambda: r(x, axis=1))[0] == "ok"


def test_ops_sum_has_a_warm_path(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros(1024, np.float32)
    ops.sum(x)
    assert ops.sum._warm.get(next(k for k in ops.sum._warm._entries if k[1] == (1024,))) is not None


@pytest.mark.parametrize(("shape", "axis"), [((1 << 20,), None), ((64, 1024), 0), ((1 << 16, 16), 1)])
def test_a_warm_scan_launches_what_the_first_call_did(drv: FakeDriver, shape, axis) -> None:  # type: ignore[no-untyped-def]
    s = kd.Session(0)
    x = s.zeros(shape, np.float32)
    scan = Scan(replace(REDUCERS["sum"], name="cumsum"))
    first = _outcome(drv, lambda: scan(x, axis=axis))
    assert len(scan._warm) == 1
    assert _outcome(drv, lambda: scan(x, axis=axis)) == first


def test_a_warm_look_back_scan_takes_a_new_epoch_every_call(drv: FakeDriver) -> None:
    from kerneldsl.array.scratch import SCRATCH

    s = kd.Session(0)
    x = s.zeros(1 << 20, np.float32)
    scan = Scan(replace(REDUCERS["sum"], name="cumsum"))
    scan(x)
    epoch = SCRATCH.next_epoch(s)[0]
    scan(x)
    scan(x)
    assert SCRATCH.next_epoch(s)[0] == epoch + 3
