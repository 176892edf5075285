"""Issue 25's launch-path attacks (items 1, 3, 4) on the GPU: the results NumPy gives, or the
refusal, where the review saw device use-after-free, heap overflow or wrong results."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest
from test_hardening_launch import Hook, HookFloat32, foreign, scale

import kerneldsl as kd
from kerneldsl.errors import ClosedError

pytestmark = pytest.mark.gpu


def test_a_scalar_hook_that_closes_an_array_gets_the_closed_error_on_the_gpu(fresh_device_session: kd.Session) -> None:
    y, x = fresh_device_session.zeros(1 << 16, np.float32), fresh_device_session.to_device(np.ones(1 << 16, np.float32))
    scale(y, x, HookFloat32(2), block=128)
    Hook.action = x.close
    with pytest.raises(ClosedError):
        scale(y, x, HookFloat32(3), block=128)
    assert Hook.action is None and (y.to_host() == 2).all()


def test_a_scalar_hook_that_reenters_the_kernel_computes_both_calls_on_the_gpu(
    fresh_device_session: kd.Session,
) -> None:
    n = 1 << 20
    y, x = fresh_device_session.zeros(n, np.float32), fresh_device_session.to_device(np.arange(n, dtype=np.float32))
    small_y, small_x = (
        fresh_device_session.zeros(256, np.float32),
        fresh_device_session.to_device(np.ones(256, np.float32)),
    )
    scale(y, x, HookFloat32(1), block=128)
    Hook.action = lambda: scale(small_y, small_x, HookFloat32(5), block=128)
    scale(y, x, HookFloat32(2), block=128)
    assert Hook.action is None
    np.testing.assert_array_equal(y.to_host(), 2 * np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(small_y.to_host(), np.full(256, 5, np.float32))


@pytest.mark.parametrize("on_stream", [False, True])
def test_an_op_whose_input_overlaps_out_gives_numpys_result(fresh_device_session: kd.Session, on_stream: bool) -> None:
    host = np.arange(9, dtype=np.float32)
    a = fresh_device_session.to_device(host)
    stream = fresh_device_session.create_stream() if on_stream else None
    kd.ops.add(a[:-1], 1, out=a[1:], stream=stream)
    np.add(host[:-1], 1, out=host[1:])
    if stream is not None:
        stream.synchronize()
    np.testing.assert_array_equal(a.to_host(), host)


@pytest.mark.parametrize("on_stream", [False, True])
def test_overlapping_adoptions_of_one_foreign_buffer_give_numpys_result(
    fresh_device_session: kd.Session, on_stream: bool
) -> None:
    host = np.arange(9, dtype=np.float32)
    buffer = fresh_device_session.to_device(host)
    source, target = kd.asarray(foreign(buffer.ptr, 8)), kd.asarray(foreign(buffer.ptr + 4, 8))
    target.session.synchronize()
    for _ in range(3):  # the warm calls too
        stream = target.session.create_stream() if on_stream else None
        kd.ops.add(source, 1, out=target, stream=stream)
        np.add(host[:-1], 1, out=host[1:])
        target.session.synchronize()
        if stream is not None:
            stream.synchronize()
        np.testing.assert_array_equal(buffer.to_host(), host)


def test_views_made_while_the_owner_closes_never_reach_freed_memory(fresh_device_session: kd.Session) -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    made: list[Any] = []
    try:
        for _ in range(500):
            a = fresh_device_session.zeros(1 << 12, np.float32)
            ready = threading.Event()

            def viewer(a: Any = a, ready: threading.Event = ready) -> None:
                ready.set()
                try:
                    while True:
                        made.append(a[1:])
                except ClosedError:
                    pass

            thread = threading.Thread(target=viewer)
            thread.start()
            ready.wait()
            a.close()
            thread.join(timeout=30)
            for v in made:
                with pytest.raises(ClosedError):
                    v.fill_zero()
            made.clear()
    finally:
        sys.setswitchinterval(interval)
    fresh_device_session.synchronize()
