"""The warm path of fused pipelines through reductions on the driver double: a device call that
ran once leaves a prebuilt launch (``launch.warm``) that the next call like it takes after
one dict lookup, launching from C at the grid its plan decided, and it accepts and refuses
exactly the calls the full path does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl.array.fusion import Fused
from kerneldsl.launch import fastpath


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):  # type: ignore[no-untyped-def]
    yield


def _softmax(x: Any) -> Any:
    m = kd.ops.max(x, axis=-1, keepdims=True)
    e = kd.ops.exp(x - m)
    return e / kd.ops.sum(e, axis=-1, keepdims=True)


def _norm_with_stats(x: Any, w: Any) -> Any:
    mean = kd.ops.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    rstd = 1.0 / kd.ops.sqrt(kd.ops.mean(xc * xc, axis=-1, keepdims=True) + 1e-5)
    return xc * rstd * w, mean, rstd


def _outcome(drv: FakeDriver, call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call did: its results' shapes and dtypes and the launched grids, or its error."""
    before = len(drv.launches)
    try:
        result = call()
    except Exception as e:  # noqa: BLE001  # the error is the outcome compared
        return ("error", type(e), str(e))
    results = result if isinstance(result, tuple) else (result,)
    grids = tuple(launch[1:3] for launch in drv.launches[before:])
    return ("ok", tuple((r.shape, r.dtype) for r in results), grids)


def test_a_second_call_takes_the_warm_entry_and_launches_what_the_first_did(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((300, 1000), np.float32)
    softmax = Fused(_softmax)
    first = _outcome(drv, lambda: softmax(x))
    assert len(softmax._warm) == 1
    assert _outcome(drv, lambda: softmax(x)) == first


@pytest.mark.skipif(not fastpath.ENABLED, reason="the C launch path is off")
def test_a_warm_fused_call_launches_from_c(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((300, 1000), np.float32)
    softmax = Fused(_softmax)
    first = _outcome(drv, lambda: softmax(x))
    softmax(x)  # the warm entry's first call: through the adapter, then it has a C entry
    before = drv.c_launches
    assert _outcome(drv, lambda: softmax(x)) == first and drv.c_launches == before + 1


def test_tuple_outputs_come_back_fresh_from_the_warm_entry(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x, w = s.zeros((64, 4096), np.float32), s.zeros(4096, np.float32)
    norm = Fused(_norm_with_stats)
    first = norm(x, w)
    second = norm(x, w)
    assert len(norm._warm) == 1
    assert [(r.shape, r.dtype) for r in second] == [(r.shape, r.dtype) for r in first]
    assert all(a.ptr != b.ptr for a, b in zip(first, second))


def test_out_keeps_its_own_entry_and_is_returned(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x, out = s.zeros((300, 1000), np.float32), s.zeros((300, 1000), np.float32)
    softmax = Fused(_softmax)
    assert softmax(x, out=out) is out
    assert softmax(x, out=out) is out
    softmax(x)
    assert len(softmax._warm) == 2


def test_numpy_arguments_take_the_full_path_only(drv: FakeDriver) -> None:
    softmax = Fused(_softmax)
    softmax(np.zeros((8, 32), np.float32))
    assert len(softmax._warm) == 0


def _calls(s: Any) -> dict[str, Callable[[Fused], Any]]:
    x = s.zeros((64, 96), np.float32)
    out, wrong, ints = s.zeros((64, 96), np.float32), s.zeros((64, 95), np.float32), s.zeros((64, 96), np.int32)
    closed = s.zeros((64, 96), np.float32)
    closed.close()
    other = kd.Session(0)
    return {
        "plain": lambda f: f(x),
        "a view": lambda f: f(x[:, 1:]),
        "out": lambda f: f(x, out=out),
        "out of a wrong shape": lambda f: f(x, out=wrong),
        "out of another dtype": lambda f: f(x, out=ints),
        "out of another session": lambda f: f(x, out=other.zeros((64, 96), np.float32)),
        "closed operand": lambda f: f(closed),
        "no rows": lambda f: f(s.zeros((0, 96), np.float32)),
        "rows of no elements": lambda f: f(s.zeros((4, 0), np.float32)),
    }


CALL_NAMES = [
    "plain",
    "a view",
    "out",
    "out of a wrong shape",
    "out of another dtype",
    "out of another session",
    "closed operand",
    "no rows",
    "rows of no elements",
]


@pytest.mark.parametrize("name", CALL_NAMES)
def test_the_warm_and_the_full_path_accept_and_refuse_the_same_calls(drv: FakeDriver, name: str) -> None:
    s = kd.Session(0)
    call = _calls(s)[name]
    full = Fused(_softmax)
    cold = _outcome(drv, lambda: call(full))
    full._warm.clear()
    assert _outcome(drv, lambda: call(full)) == cold  # the full path again
    warm = Fused(_softmax)
    if cold[0] == "ok":
        call(warm)  # makes the warm entry where the plan allows one
    assert _outcome(drv, lambda: call(warm)) == cold


def test_an_operand_closed_after_its_warm_entry_was_made_is_refused_as_on_the_full_path(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    softmax = Fused(_softmax)
    softmax(x)
    x.close()
    warm = _outcome(drv, lambda: softmax(x))
    softmax._warm.clear()
    assert warm[0] == "error" and _outcome(drv, lambda: softmax(x)) == warm


def test_a_closed_session_is_refused_as_on_the_full_path(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    softmax = Fused(_softmax)
    softmax(x)
    s.close()
    warm = _outcome(drv, lambda: softmax(x))
    softmax._warm.clear()
    assert warm[0] == "error" and _outcome(drv, lambda: softmax(x)) == warm
