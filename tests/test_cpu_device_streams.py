"""Streams and the memory pool on the CPU device, which runs work as it is enqueued: waiting costs
no event, and a freed block stays with its pool for reuse, as on a GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kerneldsl as kd


@pytest.fixture
def events_created(cpu: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The flags of every event the session's driver creates from now on."""
    created: list[int] = []
    create = cpu.api.cuEventCreate
    monkeypatch.setattr(cpu.api, "cuEventCreate", lambda flags: created.append(flags) or create(flags))
    return created


def test_a_synchronize_records_no_event_and_releases_what_launches_kept_alive(
    cpu: Any, events_created: list[int]
) -> None:
    a = cpu.to_device(np.arange(8, dtype=np.float32))
    kept = object()
    cpu.keep_alive(kept)
    kd.ops.negative(a)
    assert cpu.synchronize() is True
    assert events_created == [] and all(entry[2] is not kept for entry in cpu.order.inflight)


def test_a_stream_synchronize_records_no_event_either(cpu: Any, events_created: list[int]) -> None:
    stream = cpu.create_stream()
    out = kd.ops.negative(cpu.to_device(np.arange(8, dtype=np.float32)), stream=stream)
    events_created.clear()  # (the launch on another stream than the array's orders them with one)
    assert stream.synchronize() is True
    assert events_created == [] and out.to_host().tolist() == [-float(i) for i in range(8)]


def test_ordering_one_stream_after_another_needs_no_event(cpu: Any, events_created: list[int]) -> None:
    stream = cpu.create_stream()
    cpu.order.order(stream._cu, cpu.raw_stream)
    assert events_created == []


def test_a_freed_pool_block_is_kept_for_the_next_allocation_of_its_size(cpu: Any) -> None:
    api, pool, stream = cpu.api, cpu.pool.handle, cpu.raw_stream
    ptr = api.cuMemAllocFromPoolAsync(5 << 20, pool, stream)[1]
    api.cuMemFreeAsync(ptr, stream)
    assert api.kept_blocks(pool, 5 << 20) == 1 and api.allocated_bytes(ptr) == 0
    assert api.cuMemAllocFromPoolAsync(5 << 20, pool, stream)[1] == ptr and api.allocated_bytes(ptr) == 5 << 20
    api.cuMemFreeAsync(ptr, stream)


def test_trimming_the_pool_frees_the_blocks_it_keeps(cpu: Any) -> None:
    api, pool, stream = cpu.api, cpu.pool.handle, cpu.raw_stream
    api.cuMemFreeAsync(api.cuMemAllocFromPoolAsync(3 << 20, pool, stream)[1], stream)
    assert api.kept_blocks(pool, 3 << 20) == 1
    cpu.pool.trim()
    assert api.kept_blocks(pool, 3 << 20) == 0


def test_a_warm_op_allocates_and_frees_its_result_without_the_drivers_python(
    cpu: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = cpu.to_device(np.arange(64, dtype=np.float32))
    for _ in range(3):  # the C launch is remembered, and what earlier tests dropped is freed
        kd.ops.add(a, a)
    calls: list[str] = []
    for name in ("cuMemAllocFromPoolAsync", "cuMemFreeAsync"):
        method = getattr(cpu.api, name)
        monkeypatch.setattr(cpu.api, name, lambda *args, _n=name, _m=method: calls.append(_n) or _m(*args))
    for _ in range(4):
        out = kd.ops.add(a, a)
    assert calls == [] and out.to_host().tolist() == [2.0 * i for i in range(64)]


def test_freeing_memory_the_device_did_not_allocate_is_an_invalid_value(cpu: Any) -> None:
    assert int(cpu.api.cuMemFreeAsync(0x1234, cpu.raw_stream)[0]) == 1
