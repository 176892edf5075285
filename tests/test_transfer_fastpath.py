"""The warm host copies (``runtime.host_copies``: ``kd.asarray`` of a numpy array, ``to_host``,
``copy_to_host`` and ``copy_from_host`` in one call into the C path, large ones through the pinned
pipeline) against the full Python path, on the driver double.

The double hands out C function pointers for cuMemcpyHtoDAsync, cuMemcpyDtoHAsync and
cuStreamQuery, so the C path copies exactly as on a GPU; with them hidden (``c_entries_off``)
every copy takes the full path, which is what the C path must agree with.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl.errors import ClosedError, CudaError, SessionPoisonedError, StickyCudaError
from kerneldsl.launch import fastpath
from kerneldsl.runtime import memory, pinned_pipeline, pool

pytestmark = pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")

COPY_ENTRIES = frozenset({b"cuMemcpyHtoDAsync", b"cuMemcpyDtoHAsync", b"cuStreamQuery"})
ILLEGAL_ADDRESS = 700  # a sticky error


def _full_path_driver() -> FakeDriver:
    fake = FakeDriver()
    fake.c_entries_off = COPY_ENTRIES
    return fake


def _on_both_paths(work: Callable[[kd.Session], Any]) -> tuple[Any, Any, int]:
    """``work(session)`` on a double whose copies the C path makes, then on one where the full
    path makes them; both results, and how many copies the C path made in the first."""
    results = []
    copies = 0
    for fake in (FakeDriver(), _full_path_driver()):
        with installed_driver(fake), kd.Session(0) as session:
            results.append(work(session))
            copies = copies or fake.c_copies
    return results[0], results[1], copies


def _tag_without_session(tag: int) -> tuple[Any, ...]:
    """What a dispatch tag stands for, but the session's id (two sessions' tags differ)."""
    (layout,) = [layout for layout, value in memory._dispatch_tags.items() if value == tag]
    return tuple(layout[1:])


HOST_ARRAYS = {
    "float32 1k": np.arange(1024, dtype=np.float32),
    "float16 odd": np.linspace(-3, 3, 1023).astype(np.float16),
    "bool": np.arange(17) % 3 == 0,
    "int64 2-d": np.arange(-30, 30, dtype=np.int64).reshape(6, 10),
    "uint8 0-d": np.array(7, np.uint8),
    "float64 strided": np.arange(64, dtype=np.float64)[::3],
    "int32 transposed": np.arange(24, dtype=np.int32).reshape(4, 6).T,
    "float32 reversed": np.arange(9, dtype=np.float32)[::-1],
    "read-only": np.frombuffer(bytes(range(32)), np.uint8),
}


@pytest.mark.parametrize("host", list(HOST_ARRAYS.values()), ids=list(HOST_ARRAYS))
def test_a_roundtrip_is_identical_on_both_paths(host: np.ndarray) -> None:
    def roundtrip(session: kd.Session) -> tuple[np.ndarray, tuple[Any, ...]]:
        a = kd.asarray(host, session=session)
        return a.to_host(), (type(a), a.shape, a.dtype, a.strides, _tag_without_session(a.dispatch_tag))

    (fast, fast_layout), (full, full_layout), copies = _on_both_paths(roundtrip)
    assert copies == 2 and fast_layout == full_layout
    assert fast.dtype == full.dtype == host.dtype and fast.shape == full.shape == host.shape
    assert fast.tobytes() == full.tobytes() == np.ascontiguousarray(host).tobytes()
    assert fast.flags.writeable and fast.flags.c_contiguous


@pytest.mark.parametrize("n", [1, 1023, 1 << 16, (1 << 20) + 3])
def test_every_size_copies_pageable_memory_in_one_c_call(fake_session: kd.Session, drv: FakeDriver, n: int) -> None:
    x = np.ones(n, np.uint8)
    kd.asarray(x, session=fake_session).to_host()  # the first upload makes the pool allocator
    before = list(drv.calls)
    a = kd.asarray(x, session=fake_session)
    a.to_host()
    calls = drv.calls[len(before) :]
    assert drv.c_copies == 4 and drv.count("cuEventCreate") == 0
    assert [c for c in calls if c != "cuMemFreeAsync"] == [
        "cuMemAllocFromPoolAsync",
        "cuMemcpyHtoDAsync",
        "cuStreamQuery",
        "cuMemcpyDtoHAsync",
        "cuStreamQuery",
    ]


@pytest.mark.parametrize(
    "host", [HOST_ARRAYS["float16 odd"], np.arange(1023, dtype=np.float64)[::-1]], ids=["C", "reversed"]
)
def test_an_overwrite_from_the_host_is_identical_on_both_paths(host: np.ndarray) -> None:
    def overwrite(session: kd.Session) -> bytes:
        a = kd.asarray(np.zeros(host.shape, host.dtype), session=session)
        a.copy_from_host(host)
        return bytes(a.to_host().tobytes())

    fast, full, copies = _on_both_paths(overwrite)
    assert copies == 3 and fast == full == np.ascontiguousarray(host).tobytes()


def test_an_overwrite_from_the_host_is_one_c_copy(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = kd.asarray(np.zeros(64, np.int32), session=fake_session)
    copies, events = drv.c_copies, drv.count("cuEventCreate")
    a.copy_from_host(np.arange(64, dtype=np.int32))
    assert drv.c_copies == copies + 1 and drv.count("cuEventCreate") == events


def test_an_overwrite_of_a_strided_view_takes_the_full_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = kd.asarray(np.zeros(8, np.float32), session=fake_session)
    with pytest.raises(ValueError, match="shape mismatch"):
        a[::2].copy_from_host(np.ones(5, np.float32))  # judged by the full path, before any copy


def test_a_warm_roundtrip_queues_nothing_that_keeps_launches_off_the_c_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    x = np.ones(256, np.float32)
    (kd.asarray(x, session=fake_session) * 2).to_host()
    launches = drv.c_launches
    (kd.asarray(x, session=fake_session) * 2).to_host()
    assert drv.c_launches == launches + 1 and not any(kind == "event" for kind, _ in fake_session.owned.deferred)


def test_zero_size_arrays_take_the_full_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = kd.asarray(np.empty((3, 0), np.float32), session=fake_session)
    assert a.shape == (3, 0) and a.to_host().shape == (3, 0) and drv.c_copies == 0


def test_without_the_copy_entry_points_copies_take_the_full_path() -> None:
    with installed_driver(_full_path_driver()) as fake, kd.Session(0) as session:
        assert not session.native_allocator().copies
        assert (kd.asarray(np.arange(5), session=session).to_host() == np.arange(5)).all()
        assert fake.c_copies == 0 and fake.count("cuMemcpyHtoDAsync") == fake.count("cuMemcpyDtoHAsync") == 1


def test_a_thread_without_the_context_current_is_activated_and_copies_in_c(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    x = np.arange(8, dtype=np.float32)
    kd.asarray(x, session=fake_session)
    copies: list[int] = []

    def upload() -> None:
        for _ in range(2):
            kd.asarray(x, session=fake_session)
            copies.append(drv.c_copies)

    made_current = drv.count("cuCtxSetCurrent")
    worker = threading.Thread(target=upload)
    worker.start()
    worker.join()
    assert copies == [2, 3] and drv.count("cuCtxSetCurrent") == made_current + 1


def test_after_an_event_wait_the_next_upload_is_made_in_c_again(fake_session: kd.Session, drv: FakeDriver) -> None:
    x = np.arange(12, dtype=np.float32)
    drv.pending_queries = 1
    kd.asarray(x, session=fake_session)  # waited for by the event wait, whose event is queued for destruction
    assert any(kind == "event" for kind, _ in fake_session.owned.deferred)
    copies = drv.c_copies
    kept = kd.asarray(x, session=fake_session)
    assert drv.c_copies == copies + 1 and not fake_session.owned.deferred and kept.ptr in drv.mem


def test_an_unfinished_copy_is_waited_for_by_the_event_wait(fake_session: kd.Session, drv: FakeDriver) -> None:
    x = np.arange(64, dtype=np.int16)
    a = kd.asarray(x, session=fake_session)
    drv.pending_queries = 2
    queries = drv.count("cuEventQuery")
    b = kd.asarray(x, session=fake_session)
    assert drv.c_copies == 2 and drv.count("cuEventQuery") == queries + 3
    drv.pending_queries = 2
    assert (a.to_host() == x).all() and (b.to_host() == x).all()
    assert drv.c_copies == 4 and not fake_session.order.inflight


def test_a_copy_the_driver_refuses_raises_its_error_and_frees_the_array(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    x = np.arange(16, dtype=np.float32)
    a = kd.asarray(x, session=fake_session)
    in_use = drv._in_use()
    drv.fail_next("cuMemcpyHtoDAsync", 1)
    with pytest.raises(CudaError) as info:
        kd.asarray(x, session=fake_session)
    assert info.value.api == "cuMemcpyHtoDAsync" and not fake_session.poisoned
    drv.fail_next("cuMemcpyDtoHAsync", 1)
    with pytest.raises(CudaError) as info:
        a.to_host()
    assert info.value.api == "cuMemcpyDtoHAsync" and not fake_session.poisoned
    fake_session.synchronize()  # drains the queued free of the failed upload's array
    assert drv._in_use() == in_use and (a.to_host() == x).all()


def test_a_sticky_copy_error_poisons_the_session(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = kd.asarray(np.ones(4), session=fake_session)
    drv.fail_next("cuMemcpyDtoHAsync", ILLEGAL_ADDRESS)
    with pytest.raises(StickyCudaError):
        a.to_host()
    assert fake_session.poisoned
    with pytest.raises(SessionPoisonedError):
        kd.asarray(np.ones(4), session=fake_session)


def _without_ids(message: str) -> str:
    return re.sub(r"session \d+", "session N", message)


def test_both_paths_refuse_a_closed_array() -> None:
    def closed_download(session: kd.Session) -> str:
        a = kd.asarray(np.ones(4), session=session)
        a.close()
        with pytest.raises(ClosedError) as info:
            a.to_host()
        return str(info.value)

    fast, full, _ = _on_both_paths(closed_download)
    assert _without_ids(fast) == _without_ids(full)


def test_both_paths_refuse_a_closed_session() -> None:
    def closed_upload(session: kd.Session) -> str:
        kd.asarray(np.ones(4), session=session)
        session.close()
        with pytest.raises(ClosedError) as info:
            kd.asarray(np.ones(4), session=session)
        return str(info.value)

    fast, full, _ = _on_both_paths(closed_upload)
    assert _without_ids(fast) == _without_ids(full)


@pytest.mark.parametrize(
    ("out", "error"),
    [
        (np.empty(8, np.float32)[::2], ValueError),
        (np.empty(4, np.float64), TypeError),
        (np.empty(5, np.float32), ValueError),
        (np.frombuffer(bytearray(16), np.float32).copy().view(np.float32), None),
    ],
    ids=["strided", "dtype", "shape", "writable"],
)
def test_both_paths_judge_a_copy_into_a_host_array_alike(out: np.ndarray, error: type[Exception] | None) -> None:
    def copy_into(session: kd.Session) -> str:
        a = kd.asarray(np.arange(4, dtype=np.float32), session=session)
        target = out.copy() if out.flags.c_contiguous else np.empty(8, np.float32)[::2]
        if error is None:
            return str(a.copy_to_host(target))
        with pytest.raises(error) as info:
            a.copy_to_host(target)
        return str(info.value)

    fast, full, _ = _on_both_paths(copy_into)
    assert fast == full


def test_a_read_only_host_array_is_refused_as_the_output(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = kd.asarray(np.arange(4, dtype=np.float32), session=fake_session)
    out = np.empty(4, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        a.copy_to_host(out)


def test_an_object_dtype_is_refused_before_any_copy(fake_session: kd.Session, drv: FakeDriver) -> None:
    with pytest.raises(TypeError, match="Python objects"):
        kd.asarray(np.array([object()]), session=fake_session)
    assert drv.c_copies == 0


def test_the_c_path_declines_a_template_of_another_session(fake_session: kd.Session, drv: FakeDriver) -> None:
    other = kd.Session(0)
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="template"):
        fake_session.native_allocator().upload(other.template(x.shape, x.dtype), x)
    assert fake_session.native_allocator().download(kd.asarray(x, session=other), np.empty(4, np.float32)) is None


def test_the_spin_budget_is_handed_to_the_c_path(fake_session: kd.Session) -> None:
    assert fake_session.fast_allocation().spin_ns == pool.SPIN_NS > 0


# -- large transfers: the pinned pipeline (chunk sizes shrunk so the double moves little) --------


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunks of 4 KiB, the pipeline from 8 KiB up; the chunk size."""
    monkeypatch.setattr(pinned_pipeline, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(pinned_pipeline, "UPLOAD_MIN_BYTES", 8192)
    monkeypatch.setattr(pinned_pipeline, "DOWNLOAD_MIN_BYTES", 8192)
    return 4096


def test_which_path_a_size_takes(fake_session: kd.Session, drv: FakeDriver, small_chunks: int) -> None:
    kd.asarray(np.ones(4, np.uint8), session=fake_session)
    paths = {}
    for n in (1, 8191, 8192, 5 * small_chunks + 77):
        copies, chunks = drv.c_copies, drv.count("cuMemcpyHtoDAsync")
        kd.asarray(np.ones(n, np.uint8), session=fake_session).to_host()
        paths[n] = "C" if drv.c_copies == copies + 2 else f"{drv.count('cuMemcpyHtoDAsync') - chunks} chunks"
    assert paths == {1: "C", 8191: "C", 8192: "2 chunks", 5 * small_chunks + 77: "6 chunks"}


@pytest.mark.parametrize("n", [8192, 3 * 4096 + 1, 7 * 4096 + 4095], ids=["two chunks", "three", "eight"])
def test_a_pipelined_roundtrip_is_identical_to_the_full_path(
    small_chunks: int, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = np.random.default_rng(n).integers(0, 256, (n // 2, 2), dtype=np.uint8).view(np.int16)[::-1]

    def roundtrip(session: kd.Session) -> np.ndarray:
        back = np.empty(host.shape, host.dtype)
        kd.asarray(host, session=session).copy_to_host(back)
        return back

    with installed_driver(FakeDriver()) as fake, kd.Session(0) as session:
        pipelined = roundtrip(session)
        assert fake.c_copies == 0 and fake.count("cuMemcpyHtoDAsync") == -(-(n // 2 * 2) // small_chunks)
    monkeypatch.setattr(pinned_pipeline, "UPLOAD_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(pinned_pipeline, "DOWNLOAD_MIN_BYTES", 1 << 62)
    with installed_driver(_full_path_driver()), kd.Session(0) as session:
        full = roundtrip(session)
    assert pipelined.tobytes() == full.tobytes() == np.ascontiguousarray(host).tobytes()


def test_a_pipelined_download_waits_for_each_chunk_before_reading_it(
    fake_session: kd.Session, drv: FakeDriver, small_chunks: int
) -> None:
    x = np.arange(5 * small_chunks // 8, dtype=np.float64)
    a = kd.asarray(x, session=fake_session)
    mark = len(drv.calls)
    assert np.array_equal(a.to_host(), x)
    copies = [c for c in drv.calls[mark:] if c in ("cuMemcpyDtoHAsync", "cuEventQuery")]
    assert copies == ["cuMemcpyDtoHAsync"] * 2 + ["cuEventQuery", "cuMemcpyDtoHAsync"] * 3 + ["cuEventQuery"] * 2


def test_a_pipelined_overwrite_from_the_host_lands_whole(
    fake_session: kd.Session, drv: FakeDriver, small_chunks: int
) -> None:
    x = np.random.default_rng(1).integers(0, 256, 3 * small_chunks + 5, dtype=np.uint8)
    a = kd.asarray(np.zeros_like(x), session=fake_session)
    chunks, copies = drv.count("cuMemcpyHtoDAsync"), drv.c_copies
    a.copy_from_host(x)
    assert drv.count("cuMemcpyHtoDAsync") == chunks + 4 and drv.c_copies == copies
    assert np.array_equal(a.to_host(), x)


def test_a_busy_pipeline_leaves_the_transfer_to_the_c_path(
    fake_session: kd.Session, drv: FakeDriver, small_chunks: int
) -> None:
    x = np.ones(3 * small_chunks, np.uint8)
    kd.asarray(x, session=fake_session)
    pipeline = fake_session.vendor_handle(pinned_pipeline.KEY, pinned_pipeline.PinnedPipeline)
    with pipeline.lock:
        copies = drv.c_copies
        assert np.array_equal(kd.asarray(x, session=fake_session).to_host(), x)
    assert drv.c_copies == copies + 2


def test_an_interrupted_pipelined_upload_frees_its_array_and_retires_the_buffers(
    fake_session: kd.Session, drv: FakeDriver, small_chunks: int
) -> None:
    x = np.ones(3 * small_chunks, np.uint8)
    kept = kd.asarray(x, session=fake_session)
    retired = fake_session.vendor_handle(pinned_pipeline.KEY, pinned_pipeline.PinnedPipeline)
    in_use = drv._in_use()

    def interrupt() -> None:
        drv.on_query = None
        raise KeyboardInterrupt

    drv.on_query = interrupt
    with pytest.raises(KeyboardInterrupt):
        kd.asarray(x, session=fake_session)
    assert any(obj is retired for _, _, obj in fake_session.order.inflight)
    assert fake_session.vendor_handle(pinned_pipeline.KEY, pinned_pipeline.PinnedPipeline) is not retired
    fake_session.synchronize()
    assert drv._in_use() == in_use and np.array_equal(kept.to_host(), x)


def test_the_pipeline_buffers_are_freed_at_close(drv: FakeDriver, small_chunks: int) -> None:
    with kd.Session(0) as session:
        kd.asarray(np.ones(2 * small_chunks, np.uint8), session=session)
        assert len(drv.host) == 2
    assert not drv.host
