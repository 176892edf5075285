"""Runtime ownership and failure model, on CPU, against the recording driver double."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import in_threads
from driver_double import FakeDriver

from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.errors import (
    ClosedError,
    CudaError,
    DriverNotFoundError,
    ForkedProcessError,
    LaunchError,
    NoDeviceError,
    OutOfMemoryError,
    SessionCloseError,
    SessionPoisonedError,
    StickyCudaError,
    WrongSessionError,
)
from kerneldsl.runtime import (
    Session,
    as_device_view,
    default_session,
    driver,
    interop,
    open_sessions,
    session_registry,
    use_driver,
)
from kerneldsl.runtime.interop import DLManagedTensor

ILLEGAL_ADDRESS = 700
OUT_OF_RESOURCES = 701


def after(calls: list[str], mark: int) -> list[str]:
    return calls[mark:]


# -- driver: error mapping and discovery -----------------------------------------------------------


def test_error_constants_match_the_bindings() -> None:
    from cuda.bindings.driver import CUresult

    assert driver.ERROR_OUT_OF_MEMORY == CUresult.CUDA_ERROR_OUT_OF_MEMORY
    assert driver.ERROR_NOT_READY == CUresult.CUDA_ERROR_NOT_READY
    assert driver.ERROR_NO_DEVICE == CUresult.CUDA_ERROR_NO_DEVICE
    names = {CUresult(c).name for c in driver.STICKY_ERRORS}
    assert names == {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_LAUNCH_FAILED",
    }


def test_check_maps_results_to_exceptions(drv: FakeDriver) -> None:
    from cuda.bindings.driver import CUresult

    assert driver.check("cuX", (CUresult(0),)) is None
    assert driver.check("cuX", (CUresult(0), 7)) == 7
    assert driver.check("cuX", (CUresult(0), 7, 8)) == (7, 8)
    with pytest.raises(OutOfMemoryError) as oom:
        driver.check("cuMemAllocFromPoolAsync", (CUresult(2), 0), requested=123)
    assert oom.value.requested == 123 and oom.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert isinstance(oom.value, MemoryError)
    with pytest.raises(StickyCudaError) as sticky:
        driver.check("cuMemcpyDtoHAsync", (CUresult(ILLEGAL_ADDRESS),))
    assert (sticky.value.code, sticky.value.api) == (700, "cuMemcpyDtoHAsync")
    assert isinstance(driver.error("cuLaunchKernel", OUT_OF_RESOURCES, launch=True), LaunchError)
    assert isinstance(driver.error("cuLaunchKernel", 1, launch=True), LaunchError)
    plain = driver.error("cuStreamCreate", 1)
    assert type(plain) is CudaError and "CUDA_ERROR_INVALID_VALUE" in str(plain)


def test_missing_driver_library_is_reported() -> None:
    from cuda.pathfinder import DynamicLibNotFoundError

    class NoLib(FakeDriver):
        def cuInit(self, flags: int) -> tuple:
            raise DynamicLibNotFoundError('"cuda" is an NVIDIA driver library')

    with use_driver(NoLib()):
        with pytest.raises(DriverNotFoundError, match="NVIDIA display driver"):
            Session(0)
        assert driver.driver_available() is False


def test_no_device() -> None:
    with use_driver(FakeDriver(devices=0)):
        assert driver.driver_available() is False
        with pytest.raises(NoDeviceError):
            Session(0)
    fake = FakeDriver()
    fake.fail_next("cuInit", driver.ERROR_NO_DEVICE)
    with use_driver(fake):
        assert driver.device_count() == 0
    with use_driver(FakeDriver(devices=1)):
        with pytest.raises(NoDeviceError, match="no CUDA device 3"):
            Session(3)


def test_device_queries(drv: FakeDriver) -> None:
    assert driver.driver_available()
    assert driver.device_count() == 1
    assert driver.driver_version() == (13, 0)
    assert driver.device_name(0) == "Fake GPU"
    assert driver.compute_capability(0) == (9, 0)
    assert drv.count("cuInit") == 1


# -- session lifecycle -----------------------------------------------------------------------------


def test_session_records_identity_and_states(drv: FakeDriver) -> None:
    seen: list[str] = []
    s1, s2 = Session(0), Session(0)
    assert s2.session_id > s1.session_id and s1.pid == os.getpid() and s1.device == 0 and s1.state == "open"
    assert drv.primary_refs[0] == 2
    original = drv.cuStreamDestroy

    def spy(h: int) -> tuple:
        seen.append(s1.state)
        return original(h)

    drv.cuStreamDestroy = spy  # type: ignore[method-assign]
    s1.close()
    assert seen == ["closing"] and s1.state == "closed" and s1.closed
    assert drv.primary_refs[0] == 1
    s2.close()
    assert drv.primary_refs[0] == 0 and not drv.streams and not drv.events


def test_close_is_idempotent(drv: FakeDriver) -> None:
    s = Session(0)
    s.close()
    n = len(drv.calls)
    s.close()
    assert len(drv.calls) == n


def test_closed_error_for_every_handle_kind(drv: FakeDriver) -> None:
    s = Session(0)
    a = s.to_device(np.arange(4, dtype=np.float32))
    p = s.pinned_empty(4, np.float32)
    st = s.create_stream()
    ev = s.create_event()
    mod = s.load_module(b"cubin")
    with s.capture() as g:
        pass
    s.close()
    ops = [
        a.to_host,
        lambda: a.__cuda_array_interface__,
        lambda: p.array,
        st.synchronize,
        ev.record,
        ev.query,
        lambda: mod.function("k"),
        g.replay,
        lambda: s.empty(3),
        s.synchronize,
        lambda: s.launch(1, (1, 1, 1), (1, 1, 1), 0, None, 0),
    ]
    for op in ops:
        with pytest.raises(ClosedError):
            op()
    n = len(drv.calls)
    for h in (a, p, st, ev, mod, g):
        assert h.closed
        h.close()  # closing a child after its session: a no-op
    assert len(drv.calls) == n


def test_closing_one_handle_then_using_it(fake_session: Session, drv: FakeDriver) -> None:
    a = fake_session.empty(8)
    a.close()
    assert drv.count("cuMemFreeAsync") == 1
    with pytest.raises(ClosedError, match="DeviceArray was closed"):
        a.to_host()
    a.close()
    assert drv.count("cuMemFreeAsync") == 1
    with pytest.raises(ValueError):
        fake_session.stream.close()


def test_wrong_session(drv: FakeDriver) -> None:
    with Session(0) as s1, Session(0) as s2:
        a, b = s1.empty(4), s2.empty(4)
        with pytest.raises(WrongSessionError, match="session"):
            a.copy_to(b)
        with pytest.raises(WrongSessionError):
            s1.launch(1, (1, 1, 1), (1, 1, 1), 0, s2.stream, 0)
        e1, e2 = s1.create_event(), s2.create_event()
        with pytest.raises(WrongSessionError):
            e1.elapsed_since(e2)
        with pytest.raises(WrongSessionError):
            a.copy_from_host_async(s2.pinned_empty(4), None)


def test_default_session_is_shared_and_renewed(drv: FakeDriver) -> None:
    s = default_session()
    assert default_session(0) is s
    s.close()
    s2 = default_session()
    assert s2 is not s and s2.state == "open"


# -- context activation ----------------------------------------------------------------------------


def test_push_pop_balanced_and_caller_context_restored(fake_session: Session, drv: FakeDriver) -> None:
    drv._stack().append(0xCA11E4)  # the caller's own current context
    before = list(drv._stack())
    ops = [
        lambda: fake_session.to_device(np.ones(3)),
        lambda: fake_session.zeros(5).to_host(),
        lambda: fake_session.launch(1, (1, 1, 1), (1, 1, 1), 0, None, 0),
        fake_session.synchronize,
        lambda: fake_session.create_event().record().query(),
        lambda: fake_session.load_module(b"x").function("k"),
        fake_session.memory_info,
    ]
    for op in ops:
        op()
        assert drv._stack() == before
    with pytest.raises(OutOfMemoryError):
        fake_session.empty(1 << 40)
    assert drv._stack() == before
    assert drv.pushes == drv.pops
    drv._stack().clear()


def test_ops_fail_without_activation_in_the_double(drv: FakeDriver) -> None:
    # the double refuses context-bound calls with no current context: it checks the checker
    assert drv.cuMemAllocFromPoolAsync(8, 0, 0)[0] == 201


# -- deferred frees and keep-alive -----------------------------------------------------------------


def test_dropped_buffer_is_freed_at_the_next_call_not_by_the_finalizer(fake_session: Session, drv: FakeDriver) -> None:
    a = fake_session.empty(16)
    ptr = a.ptr
    del a
    gc.collect()
    assert drv.count("cuMemFreeAsync") == 0 and ptr in drv.mem
    assert list(fake_session.owned.deferred) == [("mem", ptr)]
    mark = len(drv.calls)
    fake_session.empty(4)
    assert after(drv.calls, mark).index("cuMemFreeAsync") < after(drv.calls, mark).index("cuMemAllocFromPoolAsync")
    assert ptr not in drv.mem


def test_dropped_objects_of_every_kind_are_queued(fake_session: Session, drv: FakeDriver) -> None:
    objs = [fake_session.create_event(), fake_session.create_stream(), fake_session.pinned_empty(3)]
    del objs
    gc.collect()
    assert sorted(k for k, _ in fake_session.owned.deferred) == ["event", "host", "stream"]
    fake_session.synchronize()
    assert not fake_session.owned.deferred or all(k == "event" for k, _ in fake_session.owned.deferred)
    assert drv.count("cuStreamDestroy") == 1 and drv.count("cuMemFreeHost") == 1


def test_interrupted_sync_keeps_host_buffer_until_a_later_sync(fake_session: Session, drv: FakeDriver) -> None:
    a = fake_session.empty(1000, np.float64)
    host = np.arange(1000, dtype=np.float64)
    drv.pending_queries = 10**9

    def interrupt() -> None:
        if drv.count("cuEventQuery") > 3:
            drv.on_query = None
            raise KeyboardInterrupt

    drv.on_query = interrupt
    with pytest.raises(KeyboardInterrupt):
        a.copy_from_host(host)
    assert any(entry[2] is host for entry in fake_session.order.inflight)
    assert drv.pushes == drv.pops
    drv.pending_queries = 0
    fake_session.synchronize()
    assert not fake_session.order.inflight


def test_synchronize_polls_until_done(fake_session: Session, drv: FakeDriver) -> None:
    drv.pending_queries = 5
    assert fake_session.synchronize() is True
    assert drv.count("cuEventQuery") == 6
    drv.pending_queries = 10**9
    assert fake_session.synchronize(timeout=0.01) is False
    drv.pending_queries = 0


def test_pinned_async_copy_keeps_pinned_alive_until_stream_sync(fake_session: Session, drv: FakeDriver) -> None:
    pinned = fake_session.pinned_empty((2, 3), np.int32)
    pinned.array[...] = np.arange(6).reshape(2, 3)
    dev = fake_session.empty((2, 3), np.int32)
    st = fake_session.create_stream()
    dev.copy_from_host_async(pinned, st)
    out = fake_session.pinned_empty((2, 3), np.int32)
    dev.copy_to_host_async(out, st)
    assert len(fake_session.order.inflight) == 2
    st.synchronize()
    assert not fake_session.order.inflight
    np.testing.assert_array_equal(out.array, np.arange(6).reshape(2, 3))


def test_pinned_view_keeps_memory_alive(fake_session: Session, drv: FakeDriver) -> None:
    view = fake_session.pinned_empty(4, np.float32).array
    gc.collect()
    view[:] = 1.5  # the PinnedArray is alive through the view's base
    assert drv.count("cuMemFreeHost") == 0 and not fake_session.owned.deferred


# -- close ---------------------------------------------------------------------------------------------


def test_close_order(drv: FakeDriver) -> None:
    s = Session(0)
    keep = [s.empty(4), s.create_event(), s.load_module(b"m"), s.create_stream(), s.pinned_empty(2)]
    dropped = s.empty(8)
    del dropped
    gc.collect()
    mark = len(drv.calls)
    s.close()
    log = [c for c in after(drv.calls, mark) if not c.startswith("cuCtx")]
    sync_end = max(i for i, c in enumerate(log) if c == "cuEventQuery")
    assert "cuEventRecord" in log[:sync_end]
    # the sync events of the two streams, destroyed as soon as they completed; then the deferred
    # dropped buffer; then events, buffers, modules, streams, ctx
    assert log[sync_end + 1 : sync_end + 3] == ["cuEventDestroy", "cuEventDestroy"]
    tail = log[sync_end + 3 :]
    assert tail[0] == "cuMemFreeAsync"
    expected_order = [
        "cuEventDestroy",
        "cuMemFreeAsync",
        "cuMemFreeHost",
        "cuModuleUnload",
        "cuStreamDestroy",
        "cuDevicePrimaryCtxRelease",
    ]
    firsts = [tail.index(c, 1) for c in expected_order]
    assert firsts == sorted(firsts)
    assert tail[-1] == "cuDevicePrimaryCtxRelease"
    assert not drv.mem and not drv.host and not drv.modules and not drv.streams and not drv.events
    del keep


def test_close_collects_errors(drv: FakeDriver) -> None:
    s = Session(0)
    s.empty(4), s.empty(4)
    keep = [s.empty(4), s.empty(4)]
    gc.collect()
    drv.fail_next("cuMemFreeAsync", 1, 1)
    drv.fail_next("cuStreamDestroy", 400)
    with pytest.raises(SessionCloseError) as info:
        s.close()
    assert len(info.value.errors) == 3
    assert all(isinstance(e, CudaError) for e in info.value.errors)
    assert info.value.__cause__ is info.value.errors[0]
    assert s.closed and drv.primary_refs[0] == 0
    assert drv.count("cuMemFreeAsync") == 4
    del keep


# -- failures --------------------------------------------------------------------------------------------


def test_sticky_error_poisons_the_session(drv: FakeDriver) -> None:
    s = Session(0)
    a = s.to_device(np.ones(4, np.float32))
    drv.fail_next("cuLaunchKernel", ILLEGAL_ADDRESS)
    with pytest.raises(StickyCudaError) as first:
        s.launch(1, (1, 1, 1), (1, 1, 1), 0, None, 0)
    drv.sticky = ILLEGAL_ADDRESS
    assert s.poisoned
    n = len(drv.calls)
    for op in (lambda: s.empty(2), a.to_host, s.synchronize, lambda: s.launch(1, (1, 1, 1), (1, 1, 1), 0, None, 0)):
        with pytest.raises(SessionPoisonedError) as later:
            op()
        assert later.value.__cause__ is first.value
    assert len(drv.calls) == n  # refused before reaching the driver
    s.close()  # leaks instead of freeing into a dead context; no error for the old poison
    assert drv.count("cuMemFreeAsync") == 0 and drv.count("cuStreamDestroy") == 0
    assert drv.primary_refs[0] == 0
    drv.sticky = None


def test_sticky_error_found_by_a_sync(fake_session: Session, drv: FakeDriver) -> None:
    drv.fail_next("cuEventQuery", ILLEGAL_ADDRESS)
    with pytest.raises(StickyCudaError):
        fake_session.synchronize()
    with pytest.raises(SessionPoisonedError):
        fake_session.empty(1)
    assert drv.pushes == drv.pops


def test_launch_error_keeps_the_session_usable(fake_session: Session, drv: FakeDriver) -> None:
    drv.fail_next("cuLaunchKernel", OUT_OF_RESOURCES)
    with pytest.raises(LaunchError, match="LAUNCH_OUT_OF_RESOURCES"):
        fake_session.launch(7, (1, 1, 1), (1024, 1, 1), 0, None, 0)
    fake_session.launch(7, (2, 1, 1), (128, 1, 1), 16, None, 1234)
    assert drv.launches[-1] == (7, (2, 1, 1), (128, 1, 1), 16, fake_session.stream.handle, 1234)
    assert not fake_session.poisoned


def test_out_of_memory_names_the_size_and_keeps_the_session(fake_session: Session, drv: FakeDriver) -> None:
    with pytest.raises(OutOfMemoryError, match=str(8 << 40)) as info:
        fake_session.empty(1 << 40, np.float64)
    assert info.value.requested == 8 << 40
    assert fake_session.to_device(np.arange(3)).to_host().tolist() == [0, 1, 2]


def test_bad_cubin_raises_cuda_error(fake_session: Session) -> None:
    with pytest.raises(CudaError, match="cuModuleLoadData"):
        fake_session.load_module(b"BAD image")
    with pytest.raises(CudaError, match="NOT_FOUND"):
        fake_session.load_module(b"ok").function("missing")


# -- fork, threads, exit -----------------------------------------------------------------------------


def _in_forked_child(child: Callable[[], bool]) -> bool:
    """What ``child`` returns when run in a forked child process (False if it raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child() else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    status = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    return status == b"\x00"


def test_forked_child_gets_forked_process_error_without_touching_the_driver(
    fake_session: Session, drv: FakeDriver
) -> None:
    a = fake_session.to_device(np.ones(4))

    def child() -> bool:
        n = len(drv.calls)
        failures = 0
        for op in (
            a.to_host,
            fake_session.synchronize,
            lambda: fake_session.empty(1),
            lambda: fake_session.launch(1, (1, 1, 1), (1, 1, 1), 0, None, 0),
        ):
            try:
                op()
            except ForkedProcessError:
                failures += 1
        fake_session.close()
        try:
            Session(0)
        except ForkedProcessError:
            failures += 1
        return failures == 5 and len(drv.calls) == n and fake_session.closed

    assert _in_forked_child(child)
    assert a.to_host().tolist() == [1, 1, 1, 1]  # the parent is unaffected


def test_a_forked_child_gets_no_default_session_of_its_parent(drv: FakeDriver) -> None:
    parent = default_session(0)

    def child() -> bool:  # the default is made anew, which a forked child refuses
        try:
            default_session(0)
        except ForkedProcessError:
            return True
        return False

    refused = _in_forked_child(child)
    parent.close()
    assert refused


def test_four_threads_share_one_session(fake_session: Session, drv: FakeDriver) -> None:
    def work(k: int) -> None:
        for i in range(30):
            a = fake_session.to_device(np.full(16, k * 100 + i, np.int64))
            fake_session.launch(k, (1, 1, 1), (32, 1, 1), 0, None, 0)
            b = fake_session.copy(a)
            assert b.to_host().tolist() == [k * 100 + i] * 16
            if i % 10 == 0:
                fake_session.synchronize()

    in_threads(work)
    assert drv.pushes == drv.pops
    assert len(drv.launches) == 120


def test_atexit_hook_closes_sessions_silently(drv: FakeDriver, capsys: pytest.CaptureFixture[str]) -> None:
    s1, s2 = Session(0), Session(0)
    s2.empty(4)
    drv.fail_next("cuMemFreeAsync", 1)  # a failing close must not raise or print
    session_registry._close_all_at_exit()
    assert s1.closed and s2.closed and not open_sessions()
    assert capsys.readouterr() == ("", "")


def test_atexit_hook_runs_at_interpreter_exit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import atexit, sys
        sys.path.insert(0, {tests!r})
        from driver_double import FakeDriver
        fake = FakeDriver()
        atexit.register(lambda: sys.__stderr__.write("released=%d" % fake.count("cuDevicePrimaryCtxRelease")))
        from kerneldsl.runtime import Session, set_driver
        set_driver(fake)
        s = Session(0)
        a = s.empty(10)
        """
    ).format(tests=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout == "" and proc.stderr == "released=1"


# -- transfers on the double --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", ["bool", "int8", "uint16", "int32", "uint64", "float16", "float32", "float64", "complex64"]
)
def test_round_trip(fake_session: Session, dtype: str) -> None:
    rng = np.random.default_rng(0)
    host = (rng.random((3, 5)) * 100).astype(dtype)
    dev = fake_session.to_device(host)
    assert (dev.shape, dev.dtype, dev.nbytes, dev.size, dev.ndim) == ((3, 5), np.dtype(dtype), host.nbytes, 15, 2)
    assert dev.strides == host.strides
    np.testing.assert_array_equal(dev.to_host(), host)


def test_zero_size_and_non_contiguous(fake_session: Session, drv: FakeDriver) -> None:
    z = fake_session.to_device(np.empty((0, 4), np.float32))
    assert z.ptr == 0 and z.to_host().shape == (0, 4)
    assert fake_session.zeros(0).nbytes == 0 and fake_session.copy(z).shape == (0, 4)
    assert drv.count("cuMemAllocFromPoolAsync") == 0
    base = np.arange(20, dtype=np.int16).reshape(4, 5)
    np.testing.assert_array_equal(fake_session.to_device(base[:, ::2]).to_host(), base[:, ::2])
    np.testing.assert_array_equal(fake_session.to_device(np.float32(2.5)).to_host(), np.float32(2.5))


def test_zeros_like_copy_and_copy_from_host(fake_session: Session) -> None:
    a = fake_session.to_device(np.arange(6, dtype=np.float32))
    z = fake_session.zeros_like(a)
    assert z.to_host().tolist() == [0] * 6
    e = fake_session.empty_like(a)
    a.copy_to(e)
    assert e.to_host().tolist() == list(range(6))
    e.copy_from_host(np.full(6, 9, np.float32))
    out = np.empty(6, np.float32)
    assert e.copy_to_host(out) is out and out.tolist() == [9] * 6
    with pytest.raises(TypeError):
        e.copy_from_host(np.zeros(6, np.float64))
    with pytest.raises(ValueError):
        e.copy_to_host(np.empty(5, np.float32))


# -- streams, events, modules, graphs ----------------------------------------------------------------


def test_stream_and_event_api(fake_session: Session, drv: FakeDriver) -> None:
    st = fake_session.create_stream()
    assert st.__cuda_stream__() == (0, st.handle)
    start, end = fake_session.create_event().record(st), fake_session.create_event().record(st)
    assert end.query() and end.synchronize()
    assert end.elapsed_since(start) == 1.5
    st.wait(end)
    untimed = fake_session.create_event(timing=False).record()
    with pytest.raises(ValueError):
        untimed.elapsed_since(start)


def test_module_functions_are_cached_and_kept_alive(fake_session: Session, drv: FakeDriver) -> None:
    mod = fake_session.load_module(b"cubin")
    f = mod.function("k")
    assert int(f) and mod.function("k") is f
    assert drv.count("cuModuleGetFunction") == 1
    attrs = mod.function_attributes("k")
    assert (attrs.registers, attrs.max_threads, attrs.shared_bytes) == (32, 1024, 0)
    del mod
    gc.collect()
    fake_session.synchronize()
    assert drv.count("cuModuleUnload") == 0  # handed-out CUfunction handles stay valid


def test_graph_capture_and_replay(fake_session: Session, drv: FakeDriver) -> None:
    buf = fake_session.empty(4)
    dropped = fake_session.empty(4)
    with fake_session.capture() as g:
        fake_session.launch(3, (1, 1, 1), (32, 1, 1), 0, None, 0)
        del dropped
        gc.collect()
        fake_session.keep_alive(buf)
        fake_session.launch(3, (1, 1, 1), (32, 1, 1), 0, None, 0)
        assert drv.count("cuMemFreeAsync") == 0  # no frees inside a capture
    assert buf in g._keep
    g.replay()
    g.replay()
    log = drv.calls
    assert log.index("cuStreamBeginCapture") < log.index("cuStreamEndCapture") < log.index("cuGraphInstantiate")
    assert drv.count("cuGraphLaunch") == 2
    g.close()
    assert drv.count("cuGraphExecDestroy") == 1 and drv.count("cuGraphDestroy") == 1


def test_failed_capture_body_ends_capture(fake_session: Session, drv: FakeDriver) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with fake_session.capture():
            raise RuntimeError("boom")
    assert drv.count("cuStreamEndCapture") == 1 and drv.count("cuGraphDestroy") == 1
    assert not fake_session.captures


# -- interchange ---------------------------------------------------------------------------------------


def test_cuda_array_interface(fake_session: Session) -> None:
    a = fake_session.to_device(np.zeros((2, 3), np.float32))
    cai = a.__cuda_array_interface__
    assert cai == {
        "shape": (2, 3),
        "typestr": "<f4",
        "data": (a.ptr, False),
        "strides": None,
        "version": 3,
        "stream": fake_session.stream.handle,
    }


def test_dlpack_capsule_fields(fake_session: Session) -> None:
    a = fake_session.to_device(np.zeros((2, 3), np.int16))
    assert a.__dlpack_device__() == (2, 0)
    capsule = a.__dlpack__(stream=-1)
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert get_name(capsule) == b"dltensor"
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = DLManagedTensor.from_address(get_ptr(capsule, b"dltensor")).dl_tensor
    assert t.data == a.ptr and (t.device.device_type, t.device.device_id) == (2, 0)
    assert t.ndim == 2 and [t.shape[0], t.shape[1]] == [2, 3] and not t.strides
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 16, 1)
    assert len(interop._exports) == 1
    del capsule  # never consumed: the capsule destructor releases the export
    assert not interop._exports


def test_dlpack_round_trip_calls_the_deleter(fake_session: Session, drv: FakeDriver) -> None:
    a = fake_session.to_device(np.ones(5, np.bool_))
    view = interop.from_dlpack(a, stream=fake_session.stream.handle)
    assert view is not None
    assert (view.ptr, view.shape, view.strides, view.dtype, view.device) == (a.ptr, (5,), (1,), np.dtype(bool), 0)
    assert drv.count("cuStreamWaitEvent") == 1  # the consumer stream waits for ours
    assert len(interop._exports) == 1
    del view
    gc.collect()
    assert not interop._exports
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(2, 7))  # another device (the CPU gets a host copy: test_array_api_functions)


def test_as_device_view(fake_session: Session, drv: FakeDriver) -> None:
    a = fake_session.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    v = as_device_view(a)
    assert v is not None and v.owner is a and v.c_contiguous and v.strides == (12, 4)
    assert as_device_view(np.zeros(3)) is None  # numpy speaks DLPack, but from the CPU
    assert as_device_view(object()) is None

    class Foreign:
        __cuda_array_interface__ = {
            "shape": (4, 2),
            "typestr": "<i8",
            "data": (0xABC000, True),
            "strides": (8, 32),
            "version": 2,
        }

    f = Foreign()
    v = as_device_view(f)
    assert v is not None
    assert (v.ptr, v.shape, v.strides, v.readonly, v.device, v.owner) == (0xABC000, (4, 2), (8, 32), True, 0, f)
    assert not v.c_contiguous and drv.count("cuPointerGetAttribute") == 1
    assert as_device_view(f, session=fake_session).device == 0

    class Masked:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (1, False), "version": 3, "mask": object()}

    with pytest.raises(TypeError, match="mask"):
        as_device_view(Masked())


def test_borrow_wraps_foreign_memory_without_owning_it(fake_session: Session, drv: FakeDriver) -> None:
    a = fake_session.to_device(np.arange(4, dtype=np.float32))

    class Foreign:
        __cuda_array_interface__ = {
            "shape": (4,),
            "typestr": "<f4",
            "data": (a.ptr, False),
            "version": 3,
            "stream": 0x777,
        }

    f = Foreign()
    view = as_device_view(f)
    assert view is not None and view.stream == 0x777
    b = DeviceArray.borrow(fake_session, view)
    assert (b.ptr, b.shape, b._owner) == (a.ptr, (4,), f)
    assert drv.count("cuStreamWaitEvent") == 1  # the session stream waits for the producer's
    assert b.to_host().tolist() == [0, 1, 2, 3]
    b.close()
    assert drv.count("cuMemFreeAsync") == 0 and b.closed
    a.close()
    assert drv.count("cuMemFreeAsync") == 1
    with pytest.raises(ValueError, match="C-contiguous"):
        DeviceArray.borrow(fake_session, interop.DeviceView(a.ptr, (2, 2), (4, 16), np.dtype("f4"), 0, False, f))
    with pytest.raises(WrongSessionError):
        DeviceArray.borrow(fake_session, interop.DeviceView(a.ptr, (4,), (4,), np.dtype("f4"), 1, False, f))


def test_dlpack_view_without_consumer_stream_waits_for_the_legacy_stream(fake_session: Session) -> None:
    a = fake_session.to_device(np.ones(3, np.int64))
    assert interop.from_dlpack(a, stream=fake_session.stream.handle).stream is None  # producer ordered it
    assert interop.from_dlpack(a).stream == 1


def test_a_thread_without_context_is_left_with_ours_current(fake_session: Session, drv: FakeDriver) -> None:
    drv._stack().clear()
    fake_session.memory_info()
    assert drv._stack() == [fake_session.context.handle]
    pushes = drv.pushes
    fake_session.memory_info()
    assert drv.pushes == pushes and drv._stack() == [fake_session.context.handle]


def test_another_current_context_is_pushed_over_and_restored(fake_session: Session, drv: FakeDriver) -> None:
    drv._stack()[:] = [0xB0B]
    fake_session.memory_info()
    assert drv._stack() == [0xB0B] and drv.pushes == drv.pops
