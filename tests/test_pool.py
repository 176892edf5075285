"""Device memory comes from the session's stream-ordered pool: allocation and free are ordered on
the session stream and never synchronize; a request that does not fit trims and retries; the pool
can be capped, measured and trimmed, and is destroyed last (the driver double keeps the books)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_threads
from driver_double import FakeDriver

from kerneldsl.errors import OutOfMemoryError
from kerneldsl.runtime import Session

MiB = 1 << 20


def test_arrays_come_from_the_pool_on_the_session_stream(drv: FakeDriver) -> None:
    with Session(0) as s:
        mark = len(drv.calls)
        a = s.empty(1024, np.float32)
        assert drv.calls[mark:].count("cuMemAllocFromPoolAsync") == 1 and "cuMemAlloc" not in drv.calls
        assert a.ptr in drv.mem


def test_dropping_an_array_frees_it_in_stream_order_without_a_sync(drv: FakeDriver) -> None:
    with Session(0) as s:
        a = s.empty(1024, np.float32)
        mark = len(drv.calls)
        a.close()
        assert drv.calls[mark:] == [
            c for c in drv.calls[mark:] if c not in ("cuStreamSynchronize", "cuEventQuery", "cuCtxSynchronize")
        ]
        assert "cuMemFreeAsync" in drv.calls[mark:]


def test_a_request_that_does_not_fit_trims_the_pool_and_retries(drv: FakeDriver) -> None:
    drv.total_memory = 100 * MiB
    with Session(0) as s:
        s.empty(60 * MiB, np.uint8).close()  # 60 MiB stay reserved in the pool
        b = s.empty(70 * MiB, np.uint8)
        assert drv.count("cuMemPoolTrimTo") == 1 and b.nbytes == 70 * MiB


def test_a_request_that_does_not_fit_after_the_trim_names_its_size(drv: FakeDriver) -> None:
    drv.total_memory = 100 * MiB
    with Session(0) as s, pytest.raises(OutOfMemoryError, match=str(200 * MiB)):
        s.empty(200 * MiB, np.uint8)


def test_the_pool_limit_caps_what_a_session_holds(drv: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    with Session(0, pool_limit=8 * MiB) as s:
        kept = s.empty(6 * MiB, np.uint8)
        with pytest.raises(OutOfMemoryError):
            s.empty(4 * MiB, np.uint8)
        kept.close()
    monkeypatch.setenv("KERNELDSL_POOL_LIMIT", str(2 * MiB))
    with Session(0) as s, pytest.raises(OutOfMemoryError):
        s.empty(3 * MiB, np.uint8)


def test_a_pool_limit_that_is_not_a_positive_size_is_refused(drv: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="positive"):
        Session(0, pool_limit=0)
    monkeypatch.setenv("KERNELDSL_POOL_LIMIT", "lots")
    with pytest.raises(ValueError, match="KERNELDSL_POOL_LIMIT"):
        Session(0)


def test_memory_info_reports_what_the_pool_holds_and_trim_returns_it(drv: FakeDriver) -> None:
    with Session(0) as s:
        a, b = s.empty(MiB, np.uint8), s.empty(2 * MiB, np.uint8)
        b.close()
        info = s.memory_info()
        assert (info.pool_used, info.pool_reserved) == (MiB, 3 * MiB) and info.total == drv.total_memory
        s.trim()
        assert s.memory_info().pool_reserved == MiB
        a.close()


def test_memory_used_on_another_stream_is_freed_after_that_stream(drv: FakeDriver) -> None:
    with Session(0) as s:
        other = s.create_stream()
        a = s.empty(16, np.float32)
        mark = len(drv.calls)
        a.close()
        tail = drv.calls[mark:]
        assert tail.index("cuStreamWaitEvent") < tail.index("cuMemFreeAsync") and not other.closed


def test_closing_destroys_the_pool_after_the_last_free(drv: FakeDriver) -> None:
    s = Session(0)
    s.empty(16, np.float32)
    s.close()
    assert drv.calls.index("cuMemPoolDestroy") > max(i for i, c in enumerate(drv.calls) if c == "cuMemFreeAsync")
    assert not drv.pools


def test_four_threads_allocate_at_once(drv: FakeDriver) -> None:
    with Session(0) as s:
        arrays: list[object] = []
        in_threads(lambda k: arrays.extend(s.empty(1000 + k, np.float32) for _ in range(50)))
        assert len({a.ptr for a in arrays}) == 200  # type: ignore[attr-defined]


def test_an_array_closed_during_a_capture_is_freed_after_it(drv: FakeDriver) -> None:
    with Session(0) as s:
        a = s.empty(16, np.float32)
        with s.capture():
            s.launch(3, (1, 1, 1), (32, 1, 1), 0, None, 0)
            a.close()
            assert drv.count("cuMemFreeAsync") == 0  # a free node would free it at every replay
        s.synchronize()
        assert drv.count("cuMemFreeAsync") == 1


def test_a_graph_frees_what_it_allocated_before_each_relaunch(drv: FakeDriver) -> None:
    auto_free = int(drv.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
    with Session(0) as s:
        with s.capture():
            s.empty(16, np.float32)  # an allocation node: each replay allocates it again
        assert drv.instantiate_flags == [auto_free]
