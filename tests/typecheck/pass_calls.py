"""Calls that type-check, and the types they have."""

from __future__ import annotations

from typing import Any

import numpy as np
from typing_extensions import assert_type

import kerneldsl as kd
from kerneldsl.distributed.handles import RemoteArray, RemoteFuture

from .kernels import block_sums, saxpy, tuned_saxpy

HostArray = np.ndarray[Any, Any]


def host(y: np.ndarray, x: np.ndarray) -> None:
    assert_type(saxpy(y, x, np.float32(2.0)), None)
    assert_type(saxpy(y, x, 2.0, TILE=128), None)
    assert_type(saxpy(y=y, x=x, alpha=2), None)
    assert_type(block_sums(np.zeros(4, np.float32), x), None)


def device(s: kd.Session, y: np.ndarray) -> None:
    dy, dx = s.to_device(y), s.to_device(y)
    assert_type(dy, kd.DeviceArray)  # a session's factories make the array layer's arrays
    assert_type(s.empty((4, 4))[1:].T, kd.DeviceArray)
    assert_type(kd.default_session().zeros(4), kd.DeviceArray)
    with kd.Session(device=0) as opened:
        assert_type(opened, kd.Session)
        assert_type(opened.copy(dy), kd.DeviceArray)
    assert_type(saxpy(dy, dx, np.float32(2.0)), None)
    assert_type(saxpy.launch(grid=7, block=128, stream=s.create_stream())(dy, dx, 2.0), None)
    saxpy(dy, dx, 2.0, grid=7, block=128)  # the keyword spelling runs and type-checks (loosely)


def tuned(y: np.ndarray, x: np.ndarray) -> None:
    assert_type(tuned_saxpy(y, x, 2.0), None)
    assert_type(tuned_saxpy.explain(y, x, 2.0), str)
    assert_type(tuned_saxpy.tune(y, x, 2.0).ms, float)
    assert_type(tuned_saxpy.kernel.occupancy(y, x, 2.0, block=128).blocks_per_sm, int)


def remote(ry: RemoteArray, rx: RemoteArray) -> None:
    assert_type(saxpy(ry, rx, np.float32(2.0)), RemoteFuture)
    saxpy(ry, rx, 2.0).result()


def ops(d: kd.DeviceArray, r: RemoteArray) -> None:
    y = np.ones(4, np.float32)
    assert_type(kd.ops.add(y, 1.0), HostArray)
    assert_type(kd.ops.add(kd.ops.sin(d), 1.0), kd.DeviceArray)
    assert_type(kd.ops.add(d, y), kd.DeviceArray)
    assert_type(kd.ops.multiply(r, 2.0), RemoteArray)
    assert_type(kd.ops.sum(d, axis=0), kd.DeviceArray)
    assert_type(kd.ops.sum(y), HostArray)
    assert_type(kd.ops.sum(r), RemoteArray)
    assert_type(kd.ops.cumsum(d), kd.DeviceArray)
    assert_type(kd.ops.astype(y, np.float16), HostArray)
    assert_type(kd.ops.dot(d, d), kd.DeviceArray)
    kd.ops.sum(d).to_host()


def redeclared() -> None:
    again = kd.kernel(grid=1, block=1, options=["-Xptxas=-v"])(saxpy.body)
    assert_type(again(np.ones(4), np.ones(4), 1.0), None)


def matmul(d: kd.DeviceArray) -> None:
    y = np.ones((4, 4), np.float32)
    assert_type(d @ d, kd.DeviceArray)
    assert_type(d @ y, kd.DeviceArray)
    assert_type(kd.matmul(d, d), kd.DeviceArray)
    assert_type(kd.matmul(d, y, out=d), kd.DeviceArray)
    assert_type(kd.matmul(y, d), kd.DeviceArray)
    d @= d


def array_methods(d: kd.DeviceArray) -> None:
    assert_type(d.sum(axis=(0, 1), keepdims=True), kd.DeviceArray)
    assert_type(d.mean(dtype=np.float64), kd.DeviceArray)
    assert_type(d.std(ddof=1), kd.DeviceArray)
    assert_type(d.argmax(axis=-1), kd.DeviceArray)
    assert_type(d.any(), kd.DeviceArray)
    assert_type(d.cumsum(axis=0, dtype=np.int64), kd.DeviceArray)
    assert_type(d.mT, kd.DeviceArray)
    assert_type(d.to_device(0), kd.DeviceArray)
    assert_type(d.item(), Any)
    assert_type(float(d.sum()), float)
    assert_type(d.device, int | str)


def random_draws(s: kd.Session) -> None:
    assert_type(kd.random.normal((4, 4), seed=1, session=s), kd.DeviceArray)
    assert_type(kd.random.uniform(8, dtype=np.float64), kd.DeviceArray)
    assert_type(kd.random.Generator(3).integers(8, 0, 10, dtype=np.int32, session=s), kd.DeviceArray)
