"""Calling a kernel, end to end on CPU: real codegen and NVRTC, a driver double that runs saxpy.

The double decodes the packed parameter buffer exactly as the GPU would, so these tests pin
down the adapter's packing, the launch dimensions, the numpy borrowing path (copy in, launch,
copy back, free) and the binding errors that must leave everything untouched.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import in_threads, installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
import kerneldsl.runtime.session as session_module
from kerneldsl.errors import (
    AliasingError,
    BindingError,
    ClosedError,
    DriverNotFoundError,
    LaunchConfigError,
    ReadOnlyArrayError,
    ShapeMismatchError,
    WrongSessionError,
)
from kerneldsl.runtime.staging import MAX_BUFFERS, STAGE_LIMIT


class SaxpyDriver(FakeDriver):
    """Executes every launch as float32 saxpy over the decoded parameters."""

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # type: ignore[no-untyped-def]
        result = super().cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)
        if result[0]:
            return result
        slots = (ctypes.c_void_p * 4).from_address(params)
        (y_ptr,) = struct.unpack("<Q", ctypes.string_at(slots[0], 8))
        (x_ptr,) = struct.unpack("<Q", ctypes.string_at(slots[1], 8))
        (alpha,) = struct.unpack("<f", ctypes.string_at(slots[2], 4))
        (n,) = struct.unpack("<i", ctypes.string_at(slots[3], 4))
        ybuf, yoff = self._locate(y_ptr)
        xbuf, xoff = self._locate(x_ptr)
        y = np.frombuffer(ybuf, np.float32, n, yoff)
        x = np.frombuffer(xbuf, np.float32, n, xoff)
        ybuf[yoff : yoff + 4 * n] = (alpha * x + y).astype(np.float32).tobytes()
        return result


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]):
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
    """


@pytest.fixture
def drv(isolated_cache: None) -> Iterator[SaxpyDriver]:
    with installed_driver(SaxpyDriver(), saxpy) as fake:
        yield fake


def test_device_call_packs_pointers_scalar_and_extent(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.to_device(np.ones(300, np.float32)), fake_session.to_device(np.arange(300, dtype=np.float32))
    saxpy(dy, dx, np.float32(2.0))
    np.testing.assert_array_equal(dy.to_host(), 1 + 2 * np.arange(300, dtype=np.float32))


def test_warm_device_call_switches_no_context(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(16, np.float32), fake_session.zeros(16, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    pushes = drv.pushes
    saxpy(dy, dx, np.float32(1.0))
    assert drv.pushes == pushes


def test_device_call_computes_grid_from_shape_symbols(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(300, np.float32), fake_session.zeros(300, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    assert drv.launches[-1][1:3] == ((3, 1, 1), (128, 1, 1))


def test_grid_and_block_overrides_replace_the_declared_ones(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(300, np.float32), fake_session.zeros(300, np.float32)
    saxpy(dy, dx, np.float32(1.0), grid=7, block=(64, 1))
    assert drv.launches[-1][1:3] == ((7, 1, 1), (64, 1, 1))


def test_launch_applies_the_overrides_a_call_takes_as_keywords(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(300, np.float32), fake_session.zeros(300, np.float32)
    saxpy.launch(grid=7, block=(64, 1))(dy, dx, np.float32(1.0))
    assert drv.launches[-1][1:3] == ((7, 1, 1), (64, 1, 1))


def test_device_call_runs_on_the_session_stream_without_copies(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(16, np.float32), fake_session.zeros(16, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    mark = len(drv.calls)
    saxpy(dy, dx, np.float32(1.0))
    assert "cuMemcpyHtoDAsync" not in drv.calls[mark:] and "cuMemAllocFromPoolAsync" not in drv.calls[mark:]
    assert drv.launches[-1][4] == fake_session.stream._cu


def test_numpy_call_copies_in_launches_and_copies_back(drv: SaxpyDriver) -> None:
    y, x = np.ones(50, np.float32), np.arange(50, dtype=np.float32)
    saxpy(y, x, np.float32(3.0))
    np.testing.assert_array_equal(y, 1 + 3 * np.arange(50, dtype=np.float32))
    np.testing.assert_array_equal(x, np.arange(50, dtype=np.float32))


def test_numpy_call_frees_its_temporaries(drv: SaxpyDriver) -> None:
    y, x = np.ones(50, np.float32), np.ones(50, np.float32)
    saxpy(y, x, np.float32(1.0))
    saxpy(y, x, np.float32(1.0))  # the session's staging buffer is made by its second host call
    before = len(drv.mem)
    saxpy(y, x, np.float32(1.0))
    kd.default_session().synchronize()
    assert len(drv.mem) == before


def test_a_small_numpy_call_is_its_copies_launch_and_one_wait_through_reused_buffers(drv: SaxpyDriver) -> None:
    y, x = np.ones(1024, np.float32), np.arange(1024, dtype=np.float32)
    saxpy(y, x, np.float32(1.0))  # binds, copying directly
    saxpy(y, x, np.float32(1.0))  # makes the session's first staging buffers
    mark = len(drv.calls)
    saxpy(y, x, np.float32(1.0))
    calls = [c for c in drv.calls[mark:] if not c.startswith("cuCtx")]
    assert calls == [
        "cuMemcpyHtoDAsync",
        "cuMemcpyHtoDAsync",
        "cuLaunchKernel",
        "cuMemcpyDtoHAsync",
        "cuEventRecord",
        "cuEventQuery",
    ]
    np.testing.assert_array_equal(y, 1 + 3 * np.arange(1024, dtype=np.float32))


def test_a_staged_call_enqueues_its_copies_and_launch_under_one_activation(drv: SaxpyDriver) -> None:
    y, x = np.ones(64, np.float32), np.ones(64, np.float32)
    saxpy(y, x, np.float32(1.0))
    saxpy(y, x, np.float32(1.0))
    mark = len(drv.calls)
    saxpy(y, x, np.float32(1.0))
    assert drv.calls[mark:].count("cuCtxGetCurrent") == 2  # the enqueueing, and the event query


def test_a_sessions_first_host_call_copies_directly_without_pinning(drv: SaxpyDriver) -> None:
    y = np.ones(64, np.float32)
    saxpy(y, np.ones(64, np.float32), np.float32(1.0))
    assert drv.count("cuMemHostAlloc") == 0 and (y == 2).all()


def test_calls_of_different_shapes_take_turns_in_one_staging_buffer(drv: SaxpyDriver) -> None:
    for n in (8, 16, 8, 3, 16):
        y, x = np.ones(n, np.float32), np.arange(n, dtype=np.float32)
        saxpy(y, x, np.float32(2.0))
        np.testing.assert_array_equal(y, 1 + 2 * np.arange(n, dtype=np.float32))
    assert drv.count("cuMemHostAlloc") == 1


def test_a_strided_read_only_input_is_staged_in_c_order(drv: SaxpyDriver) -> None:
    y, x = np.ones(16, np.float32), np.arange(32, dtype=np.float32)[::2]
    x.flags.writeable = False
    saxpy(y, x, np.float32(1.0))
    np.testing.assert_array_equal(y, 1 + np.arange(0, 32, 2, dtype=np.float32))


def test_a_large_numpy_call_copies_directly_without_staging(drv: SaxpyDriver) -> None:
    n = STAGE_LIMIT // 4
    y, x = np.ones(n, np.float32), np.ones(n, np.float32)
    saxpy(y, x, np.float32(1.0))
    assert drv.count("cuMemHostAlloc") == 0 and (y == 2).all()


def test_a_numpy_call_on_a_stream_copies_directly(drv: SaxpyDriver) -> None:
    y, x = np.ones(8, np.float32), np.ones(8, np.float32)
    saxpy(y, x, np.float32(1.0), stream=kd.default_session().create_stream())
    assert drv.count("cuMemHostAlloc") == 0 and (y == 2).all()


def test_the_staging_buffers_are_freed_at_close(drv: SaxpyDriver) -> None:
    s = kd.default_session()
    for _ in range(2):
        saxpy(np.ones(8, np.float32), np.ones(8, np.float32), np.float32(1.0))
    assert drv.count("cuMemHostAlloc") == 1
    s.close()
    assert drv.count("cuMemFreeHost") == 1 and not drv.host and not drv.mem


def test_a_bigger_call_replaces_a_staging_buffer_that_is_too_small(drv: SaxpyDriver) -> None:
    for _ in range(2):
        saxpy(np.ones(8, np.float32), np.ones(8, np.float32), np.float32(1.0))
    big = STAGE_LIMIT // 8
    y = np.ones(big, np.float32)
    saxpy(y, np.ones(big, np.float32), np.float32(1.0))
    assert (drv.count("cuMemHostAlloc"), drv.count("cuMemFreeHost")) == (2, 1) and (y == 2).all()


def test_threads_staging_at_once_share_a_bounded_set_of_buffers(drv: SaxpyDriver) -> None:
    def work(k: int) -> None:
        for _ in range(20):
            y, x = np.full(64, k, np.float32), np.ones(64, np.float32)
            saxpy(y, x, np.float32(2.0))
            assert (y == k + 2).all()

    in_threads(work, count=6)
    assert 1 <= drv.count("cuMemHostAlloc") <= MAX_BUFFERS


def test_a_staging_buffer_whose_wait_was_interrupted_is_not_lent_again(drv: SaxpyDriver) -> None:
    y, x = np.ones(8, np.float32), np.ones(8, np.float32)
    saxpy(y, x, np.float32(1.0))

    def interrupt() -> None:
        drv.on_query = None
        raise KeyboardInterrupt

    drv.on_query = interrupt
    with pytest.raises(KeyboardInterrupt):
        saxpy(y, x, np.float32(1.0))
    saxpy(y, x, np.float32(1.0))
    assert drv.count("cuMemHostAlloc") == 2


def test_a_session_closed_during_a_staged_call_leaves_the_host_output_alone(drv: SaxpyDriver) -> None:
    y, x = np.ones(8, np.float32), np.ones(8, np.float32)
    saxpy(y, x, np.float32(1.0))
    session = kd.default_session()

    def close() -> None:
        drv.on_query = None
        session.close()  # frees the staging buffer the call copied its result into

    drv.on_query = close
    with pytest.raises(ClosedError):
        saxpy(y, x, np.float32(1.0))
    np.testing.assert_array_equal(y, np.full(8, 2, np.float32))


def test_read_only_output_is_refused_before_any_copy(drv: SaxpyDriver) -> None:
    y, x = np.ones(8, np.float32), np.ones(8, np.float32)
    y.flags.writeable = False
    saxpy(np.ones(8, np.float32), x, np.float32(1.0))
    mark = len(drv.calls)
    with pytest.raises(ReadOnlyArrayError, match="'y'"):
        saxpy(y, x, np.float32(1.0))
    assert "cuMemAllocFromPoolAsync" not in drv.calls[mark:] and "cuLaunchKernel" not in drv.calls[mark:]


def test_aliased_host_arrays_are_refused(drv: SaxpyDriver) -> None:
    y = np.ones(8, np.float32)
    with pytest.raises(AliasingError):
        saxpy(y, y, np.float32(1.0))
    np.testing.assert_array_equal(y, np.ones(8, np.float32))


def test_aliased_device_arrays_are_refused(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy = fake_session.zeros(8, np.float32)
    with pytest.raises(AliasingError):
        saxpy(dy, dy, np.float32(1.0))


def test_strided_output_is_refused_with_a_way_out(drv: SaxpyDriver) -> None:
    y = np.ones(16, np.float32)[::2]
    with pytest.raises(BindingError, match="ascontiguousarray"):
        saxpy(y, np.ones(8, np.float32), np.float32(1.0))


def test_strided_input_is_materialized(drv: SaxpyDriver) -> None:
    y, x = np.zeros(8, np.float32), np.arange(16, dtype=np.float32)[::2]
    saxpy(y, x, np.float32(1.0))
    np.testing.assert_array_equal(y, np.arange(16, dtype=np.float32)[::2])


def test_shape_conflict_on_the_warm_path_names_the_parameter(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(8, np.float32), fake_session.zeros(8, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    with pytest.raises(ShapeMismatchError, match="'x'"):
        saxpy(dy, fake_session.zeros(9, np.float32), np.float32(1.0))


def test_arguments_from_two_sessions_are_refused(drv: SaxpyDriver) -> None:
    with kd.Session(0) as a, kd.Session(0) as b:
        with pytest.raises(WrongSessionError):
            saxpy(a.zeros(8, np.float32), b.zeros(8, np.float32), np.float32(1.0))


def test_closed_array_is_refused(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(8, np.float32), fake_session.zeros(8, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    dx.close()
    with pytest.raises(ClosedError):
        saxpy(dy, dx, np.float32(1.0))


def test_scalar_out_of_range_is_a_binding_error(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    @kd.kernel(grid=1, block=1)
    def fill(y: kd.Out[kd.int8, "n"], v: kd.Scalar[kd.int8]):
        return f"{y}[0] = {v};"

    with pytest.raises(BindingError, match="does not fit"):
        fill(fake_session.zeros(4, np.int8), 1000)


def test_warm_call_reuses_the_loaded_kernel(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(8, np.float32), fake_session.zeros(8, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    mark = len(drv.calls)
    for _ in range(3):
        saxpy(dy, dx, np.float32(1.0))
    assert drv.calls[mark:].count("cuModuleLoadData") == 0
    assert drv.calls[mark:].count("cuLaunchKernel") == 3


def test_graph_capture_keeps_kernel_arguments_alive(fake_session: kd.Session, drv: SaxpyDriver) -> None:
    dy, dx = fake_session.zeros(8, np.float32), fake_session.zeros(8, np.float32)
    saxpy(dy, dx, np.float32(1.0))
    with fake_session.capture() as graph:
        saxpy(dy, dx, np.float32(1.0))
    assert any(any(k is dx for k in kept) for kept in graph._keep if isinstance(kept, tuple))


def test_numpy_subclass_arrays_take_the_borrowing_path(drv: SaxpyDriver) -> None:
    class Tagged(np.ndarray):
        pass

    y = np.ones(8, np.float32).view(Tagged)
    saxpy(y, np.ones(8, np.float32), np.float32(1.0))
    np.testing.assert_array_equal(np.asarray(y), np.full(8, 2.0, np.float32))


def test_explain_names_the_component_that_missed(isolated_cache: None) -> None:
    y, x = np.ones(8, np.float32), np.ones(8, np.float32)
    assert saxpy.explain(y, x, np.float32(1.0), arch="sm_80").startswith("miss: no entries")
    saxpy.inspect(y, x, np.float32(1.0), arch="sm_80")
    assert saxpy.explain(y, x, np.float32(1.0), arch="sm_80") == "hit"
    assert "arch ('sm_80' -> 'sm_90')" in saxpy.explain(y, x, np.float32(1.0), arch="sm_90")


@kd.kernel(grid=(kd.cdiv("n", kd.sym("TILE")), kd.cdiv("m", kd.sym("TILE"))), block=(kd.sym("TILE"), kd.sym("TILE")))
def matmul(C: kd.Out["T", "m", "n"], A: kd.In["T", "m", "k"], B: kd.In["T", "k", "n"], TILE: kd.Const[int] = 16):
    return f"index_t r = blockIdx.y * TILE + threadIdx.y, c = blockIdx.x * TILE + threadIdx.x; {C}[r * n + c] = 0;"


class NoDriverLibrary(FakeDriver):
    """A machine without libcuda: initialising the driver fails as the bindings do there."""

    def cuInit(self, flags: int) -> tuple:  # type: ignore[type-arg]
        from cuda.pathfinder import DynamicLibNotFoundError

        raise DynamicLibNotFoundError('"cuda" is an NVIDIA driver library')


@pytest.fixture
def no_driver(isolated_cache: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No libcuda, and no CPU device either (its compiler is missing): a call has nowhere to run
    (nor a default session an earlier test of this process opened)."""
    monkeypatch.setenv("KERNELDSL_HOST_CXX", "/nonexistent/c++")
    monkeypatch.delenv("KERNELDSL_DEVICE", raising=False)
    monkeypatch.setattr(session_module, "_defaults", {})
    with installed_driver(NoDriverLibrary(), matmul):
        yield


def _matmul_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((4, 5), np.float32), np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"B": np.ones((5, 6))}, BindingError),
        ({"B": np.ones((5, 6), np.float32)}, ShapeMismatchError),
        ({"TILE": "x"}, BindingError),
        ({"TILE": 64}, LaunchConfigError),
        ({"block": 2048}, LaunchConfigError),
    ],
)
def test_a_wrong_call_without_a_driver_raises_its_own_error_as_inspect_does(
    no_driver: None, change: dict[str, Any], error: type[Exception]
) -> None:
    C, A, B = _matmul_arrays()
    args = (C, A, change.pop("B", B))
    with pytest.raises(error) as inspected:
        matmul.inspect(*args, arch="sm_90", **change)
    with pytest.raises(error) as called:
        matmul(*args, **change)
    assert str(called.value) == str(inspected.value)
    assert not isinstance(called.value, DriverNotFoundError) and called.value.__cause__ is None


def test_a_right_call_without_a_driver_says_the_driver_is_missing(no_driver: None) -> None:
    with pytest.raises(DriverNotFoundError):
        matmul(*_matmul_arrays())
