"""Runtime on a real GPU: transfers, launches, failure paths, interop, soak. Run with ``-m gpu``."""

from __future__ import annotations

import ctypes
import gc
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from typing import Any

import numpy as np
import pytest
from conftest import in_threads

from kerneldsl.errors import ForkedProcessError, LaunchConfigError, OutOfMemoryError
from kerneldsl.runtime import Module, Session, as_device_view, driver

pytestmark = pytest.mark.gpu

KERNELS = r"""
extern "C" __global__ void scale(float* x, float a, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
extern "C" __global__ void poke(int* p) { *p = 1; }
extern "C" __global__ void noop() {}
"""


def compile_cubin(source: str, arch: str) -> bytes:
    """NVRTC source -> cubin for ``arch`` (e.g. 'sm_90')."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernels.cu", 0, [], [])
    assert not err, err
    opts = [f"--gpu-architecture={arch}".encode()]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.decode(errors="replace"))
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
    assert not err, err
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


class Params:
    """A ``void*[]`` kernel-parameter array over ctypes values; keep it alive until the launch."""

    def __init__(self, *values: Any) -> None:
        self.values = values
        self.array = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        self.address = ctypes.addressof(self.array)


# Subprocess scripts start with these (imports, helpers, kernel source).
PRELUDE = "\n".join(
    [
        "import ctypes, os, signal, sys, time",
        "from typing import Any",
        "signal.signal(signal.SIGINT, signal.default_int_handler)",
        inspect.getsource(compile_cubin),
        inspect.getsource(Params),
        f"KERNELS = {KERNELS!r}",
    ]
)


def arch() -> str:
    major, minor = driver.compute_capability(0)
    return f"sm_{major}{minor}"


@pytest.fixture(scope="module")
def mod(device_session: Session) -> Module:
    return device_session.load_module(compile_cubin(KERNELS, arch()))


def launch_scale(s: Session, mod: Module, arr: Any, factor: float, stream: Any = None) -> Any:
    p = Params(ctypes.c_void_p(arr.ptr), ctypes.c_float(factor), ctypes.c_uint64(arr.size))
    s.launch(mod.function("scale"), ((arr.size + 255) // 256, 1, 1), (256, 1, 1), 0, stream, p.address)
    return p


def cycles_for(seconds: float) -> int:
    return int(seconds * 2.0e9)  # H200 boost clock is ~1.98 GHz; close enough for a spin


def spin(s: Session, mod: Module, seconds: float, stream: Any = None) -> Any:
    p = Params(ctypes.c_int64(cycles_for(seconds)))
    s.launch(mod.function("spin"), (1, 1, 1), (1, 1, 1), 0, stream, p.address)
    return p


def run_script(body: str) -> subprocess.Popen[str]:
    script = PRELUDE + "\n" + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# -- discovery and transfers ----------------------------------------------------------------------


def test_device_queries() -> None:
    assert driver.driver_available() and driver.device_count() >= 1
    assert driver.driver_version() >= (12, 0)
    assert driver.device_name(0)
    assert driver.compute_capability(0) >= (7, 0)


DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(device_session: Session, dtype: str) -> None:
    rng = np.random.default_rng(1)
    host = (rng.random((37, 41)) * 120).astype(dtype)
    dev = device_session.to_device(host)
    np.testing.assert_array_equal(dev.to_host(), host)
    copy = device_session.copy(dev)
    np.testing.assert_array_equal(copy.to_host(), host)
    other = (rng.random((37, 41)) * 120).astype(dtype)
    dev.copy_from_host(other)
    np.testing.assert_array_equal(dev.to_host(), other)


def test_zero_size_arrays(device_session: Session) -> None:
    z = device_session.to_device(np.empty((0, 7), np.float32))
    assert z.ptr == 0 and z.to_host().shape == (0, 7)
    assert device_session.zeros(0).to_host().shape == (0,)
    assert device_session.copy(z).shape == (0, 7)


def test_zeros_and_non_contiguous(device_session: Session) -> None:
    assert not device_session.zeros((64, 3), np.int32).to_host().any()
    base = np.arange(1000, dtype=np.float64).reshape(20, 50)
    np.testing.assert_array_equal(device_session.to_device(base[::3, 1::2]).to_host(), base[::3, 1::2])


def test_pinned_async_copies(device_session: Session) -> None:
    n = 1 << 20
    st = device_session.create_stream()
    src = device_session.pinned_empty(n, np.float32)
    src.array[:] = np.arange(n, dtype=np.float32)
    dev = device_session.empty(n, np.float32)
    dev.copy_from_host_async(src, st)
    dst = device_session.pinned_empty(n, np.float32)
    dev.copy_to_host_async(dst, st)
    del src  # kept alive by the session until the stream is synchronized
    gc.collect()
    assert st.synchronize()
    np.testing.assert_array_equal(dst.array, np.arange(n, dtype=np.float32))
    assert all(entry[1] is not st for entry in device_session.order.inflight)  # released by the stream sync


# -- launches ---------------------------------------------------------------------------------------


def test_launch_matches_numpy(device_session: Session, mod: Module) -> None:
    host = np.random.default_rng(2).random(100_003).astype(np.float32)
    dev = device_session.to_device(host)
    launch_scale(device_session, mod, dev, 3.0)
    np.testing.assert_allclose(dev.to_host(), host * 3.0, rtol=1e-6)


def test_function_attributes(mod: Module) -> None:
    attrs = mod.function_attributes("scale")
    assert attrs.registers > 0 and attrs.max_threads >= 256


def test_event_timing(device_session: Session, mod: Module) -> None:
    start, end = device_session.create_event(), device_session.create_event()
    start.record()
    spin(device_session, mod, 0.02)
    end.record()
    assert end.synchronize()
    assert 5.0 < end.elapsed_since(start) < 1000.0


def test_stream_wait_orders_streams(device_session: Session, mod: Module) -> None:
    a, b = device_session.create_stream(), device_session.create_stream()
    dev = device_session.to_device(np.ones(1024, np.float32))
    spin(device_session, mod, 0.05, a)
    launch_scale(device_session, mod, dev, 2.0, a)
    done = device_session.create_event(timing=False).record(a)
    b.wait(done)
    launch_scale(device_session, mod, dev, 5.0, b)
    b.synchronize()
    assert (dev.to_host() == 10.0).all()


def test_graph_capture_and_replay(device_session: Session, mod: Module) -> None:
    dev = device_session.to_device(np.ones(4096, np.float32))
    device_session.synchronize()
    with device_session.capture() as g:
        params = [launch_scale(device_session, mod, dev, 2.0) for _ in range(3)]
        g.keep_alive(params)  # the graph copied the values, but keep them anyway
    assert (dev.to_host() == 1.0).all()  # capture does not execute
    g.replay()
    g.replay()
    assert (dev.to_host() == 64.0).all()


# -- failure paths ----------------------------------------------------------------------------------


def test_dropping_an_array_while_a_long_kernel_runs_returns_at_once(device_session: Session, mod: Module) -> None:
    p = spin(device_session, mod, 0.5)
    a = device_session.empty(1 << 20, np.float32)
    start = time.perf_counter()
    a.close()  # a stream-ordered free: no device synchronization
    elapsed = time.perf_counter() - start
    device_session.synchronize()
    assert elapsed < 0.05, elapsed
    del p


def test_the_pool_keeps_freed_memory_until_trimmed(device_session: Session) -> None:
    a = device_session.empty(1 << 30, np.uint8)
    a.close()
    device_session.synchronize()
    assert device_session.memory_info().pool_reserved >= 1 << 30
    again = device_session.empty(1 << 30, np.uint8)  # served from the pool
    again.close()
    device_session.trim()
    assert device_session.memory_info().pool_reserved < 1 << 30


def test_four_threads_allocate_and_free_at_once(device_session: Session) -> None:
    from conftest import in_threads

    def work(k: int) -> None:
        for n in range(1, 200):
            a = device_session.to_device(np.full(n, k, np.int32))
            assert (a.to_host() == k).all()
            a.close()

    in_threads(work)


def test_out_of_memory_keeps_session_usable(device_session: Session) -> None:
    with pytest.raises(OutOfMemoryError) as info:
        device_session.empty(1 << 50, np.uint8)  # 1 PiB
    assert info.value.requested == 1 << 50
    assert device_session.to_device(np.arange(5)).to_host().tolist() == [0, 1, 2, 3, 4]


def test_too_many_threads_is_refused_before_the_launch(device_session: Session, mod: Module) -> None:
    dev = device_session.to_device(np.ones(16, np.float32))
    p = Params(ctypes.c_void_p(dev.ptr), ctypes.c_float(2.0), ctypes.c_uint64(16))
    with pytest.raises(LaunchConfigError, match="block.x = 2048"):
        device_session.launch(mod.function("scale"), (1, 1, 1), (2048, 1, 1), 0, None, p.address)
    assert not device_session.poisoned
    launch_scale(device_session, mod, dev, 2.0)
    assert (dev.to_host() == 2.0).all()


def test_illegal_address_poisons_only_its_process(device_session: Session, mod: Module) -> None:
    proc = run_script(
        """
        import ctypes
        from kerneldsl.errors import SessionPoisonedError, StickyCudaError
        from kerneldsl.runtime import Session, driver
        major, minor = driver.compute_capability(0)
        s = Session(0)
        m = s.load_module(compile_cubin(KERNELS, f"sm_{major}{minor}"))
        p = Params(ctypes.c_void_p(0x8))
        s.launch(m.function("poke"), (1, 1, 1), (1, 1, 1), 0, None, p.address)
        try:
            s.synchronize()
        except StickyCudaError as first:
            try:
                s.empty(4)
            except SessionPoisonedError as later:
                assert later.__cause__ is first
                s.close()
                print("POISONED", first.name)
        """
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.startswith("POISONED CUDA_ERROR_ILLEGAL_ADDRESS"), (out, err)
    dev = device_session.to_device(np.ones(8, np.float32))  # this process is unaffected
    launch_scale(device_session, mod, dev, 4.0)
    assert (dev.to_host() == 4.0).all()


def test_after_an_illegal_address_the_device_is_reset_and_a_new_session_works_or_says_to_restart() -> None:
    proc = run_script(
        """
        import ctypes
        import numpy as np
        import kerneldsl as kd
        from kerneldsl.errors import DeviceInUseError, SessionCloseError, StickyCudaError
        from kerneldsl.runtime import Session, driver
        major, minor = driver.compute_capability(0)
        cubin = compile_cubin(KERNELS, f"sm_{major}{minor}")
        bystander, s = Session(0), Session(0)
        m = s.load_module(cubin)
        p = Params(ctypes.c_void_p(0x8))
        s.launch(m.function("poke"), (1, 1, 1), (1, 1, 1), 0, None, p.address)
        try:
            s.synchronize()
        except StickyCudaError as first:
            print("POISONED", first.name)
        try:
            kd.reset_device(0)
        except DeviceInUseError:
            print("REFUSED while a healthy session is open")
        s.close()
        try:
            bystander.close()  # its first driver call meets the sticky error: it leaks, then the device resets
        except SessionCloseError:
            print("BYSTANDER found the error while closing")
        try:
            fresh = Session(0)
        except kd.errors.SessionPoisonedError as exc:  # the driver keeps the error for the process
            print("RESTART" if "restart the process" in str(exc) else f"UNCLEAR {exc}")
        else:
            m = fresh.load_module(cubin)
            x = fresh.to_device(np.ones(1000, np.float32))
            q = Params(ctypes.c_void_p(x.ptr), ctypes.c_float(3.0), ctypes.c_uint64(1000))
            fresh.launch(m.function("scale"), (4, 1, 1), (256, 1, 1), 0, None, q.address)
            print("RECOVERED", float(x.to_host().sum()))
        """
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.splitlines()[:3] == [
        "POISONED CUDA_ERROR_ILLEGAL_ADDRESS",
        "REFUSED while a healthy session is open",
        "BYSTANDER found the error while closing",
    ], (out, err)
    assert out.splitlines()[3] in ("RECOVERED 3000.0", "RESTART"), (out, err)


def test_ctrl_c_interrupts_a_long_synchronize() -> None:
    proc = run_script(
        """
        import ctypes, sys, os, time
        from kerneldsl.runtime import Session, driver
        major, minor = driver.compute_capability(0)
        s = Session(0)
        m = s.load_module(compile_cubin(KERNELS, f"sm_{major}{minor}"))
        p = Params(ctypes.c_int64(int(10 * 2.0e9)))
        s.launch(m.function("spin"), (1, 1, 1), (1, 1, 1), 0, None, p.address)
        print("READY", flush=True)
        try:
            s.synchronize()
            print("FINISHED", flush=True)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
        os._exit(0)  # skip the exit-time close: the spin kernel is still running
        """
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    time.sleep(0.3)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    line = proc.stdout.readline().strip()
    elapsed = time.perf_counter() - sent
    proc.communicate(timeout=60)
    assert line == "INTERRUPTED"
    assert elapsed < 2.0


def test_forked_child_gets_forked_process_error(device_session: Session) -> None:
    dev = device_session.to_device(np.ones(4, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the driver runs threads
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                dev.to_host()
            except ForkedProcessError:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert dev.to_host().tolist() == [1, 1, 1, 1]


def test_four_threads_launch_and_copy(device_session: Session, mod: Module) -> None:
    def work(k: int) -> None:
        st = device_session.create_stream() if k % 2 else None
        for i in range(50):
            host = np.full(10_000, float(k + i), np.float32)
            dev = device_session.to_device(host)
            launch_scale(device_session, mod, dev, 2.0, st)
            if st is not None:
                st.synchronize()
            np.testing.assert_array_equal(dev.to_host(), host * 2)

    in_threads(work)


# -- interop ------------------------------------------------------------------------------------------


def test_cupy_interop(device_session: Session) -> None:
    cp = pytest.importorskip("cupy")
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    v = as_device_view(x, session=device_session)
    assert v is not None and v.ptr == x.data.ptr and v.shape == (3, 4) and v.device == 0
    dev = device_session.to_device(np.arange(6, dtype=np.int32))
    device_session.synchronize()
    y = cp.asarray(dev)  # via __cuda_array_interface__
    assert y.data.ptr == dev.ptr and y.tolist() == list(range(6))
    z = cp.from_dlpack(dev)
    assert z.data.ptr == dev.ptr and z.tolist() == list(range(6))


def test_torch_interop(device_session: Session) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(10, dtype=torch.float64, device="cuda:0")[::2]
    v = as_device_view(t)
    assert v is not None and v.ptr == t.data_ptr() and v.strides == (16,) and v.device == 0

    class DLPackOnly:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __dlpack__(self, **kw: Any) -> Any:
            return self.inner.__dlpack__(**kw)

        def __dlpack_device__(self) -> Any:
            return self.inner.__dlpack_device__()

    w = as_device_view(DLPackOnly(t), stream=device_session.stream.handle)
    assert w is not None and w.ptr == t.data_ptr() and w.strides == (16,) and w.dtype == np.float64
    dev = device_session.to_device(np.arange(6, dtype=np.float32))
    back = torch.from_dlpack(dev)
    assert back.data_ptr() == dev.ptr and back.tolist() == list(range(6))
    assert torch.as_tensor(dev, device="cuda:0").data_ptr() == dev.ptr


# -- soak and overhead ---------------------------------------------------------------------------------


def test_soak_no_growth(device_session: Session, mod: Module) -> None:
    fn = mod.function("noop")
    p = Params()
    for _ in range(1000):  # warm up every cache and free list
        device_session.launch(fn, (1, 1, 1), (32, 1, 1), 0, None, p.address)
        device_session.empty(1024).close()
    device_session.synchronize()
    gc.collect()
    before = device_session.memory_info()  # this session's pool: other processes share the card
    objects_before = len(gc.get_objects())
    for i in range(100_000):
        device_session.launch(fn, (1, 1, 1), (32, 1, 1), 0, None, p.address)
        if i % 10_000 == 0:
            device_session.synchronize()
    for i in range(10_000):
        a = device_session.empty(4096 if i % 2 else 1 << 20, np.uint8)
        del a
    device_session.synchronize()
    device_session.synchronize()  # drains the sync events queued by the first
    gc.collect()
    after = device_session.memory_info()
    assert after.pool_used <= before.pool_used
    assert after.pool_reserved <= before.pool_reserved + (4 << 20)
    assert len(gc.get_objects()) - objects_before < 200


def test_launch_overhead_close_to_raw(device_session: Session, mod: Module) -> None:
    """Host enqueue cost while a spin kernel holds the stream; printed for the record."""
    d = device_session.api
    fn, k = mod.function("noop"), 500  # below the launch queue depth: no blocking
    p = Params()
    hs = device_session.stream._cu
    cufn = d.CUfunction(fn)

    def session_launches() -> None:
        for _ in range(k):
            device_session.launch(fn, (1, 1, 1), (32, 1, 1), 0, None, p.address)

    def raw_launches() -> None:
        with device_session.activated():
            for _ in range(k):
                d.cuLaunchKernel(cufn, 1, 1, 1, 32, 1, 1, 0, hs, p.address, 0)

    def per_launch(run: Any) -> float:
        times = []
        for _ in range(7):
            spin(device_session, mod, 0.05)
            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) / k)
            device_session.synchronize()
        return sorted(times)[len(times) // 2]

    raw, ours = per_launch(raw_launches), per_launch(session_launches)
    print(f"\nraw cuLaunchKernel {raw * 1e6:.2f} us, Session.launch {ours * 1e6:.2f} us ({ours / raw:.2f}x)")
    assert ours < 2.5 * raw
