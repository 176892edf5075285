"""Launch-path attacks of the second security review (issue 25, items 1-4), on the driver double.

Each test reproduces one attack: a scalar hook that closes an array or re-enters the kernel on
the Python launch path, ``configure()`` from a hook while the C path allocates a result,
operands that overlap ``out=`` by their bytes (on ``stream=``, and as two adoptions of one foreign
buffer), and a view made while its owner closes in another thread. What the driver saw is the
evidence: which pointers each launch carried, and whether a launch followed the free of one.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver
from scalar_hooks import Hook, HookFloat32, HookInt32

import kerneldsl as kd
from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.errors import ClosedError
from kerneldsl.launch import fastpath
from kerneldsl.runtime import memory

SLOTS = 4  # parameter slots each launch records


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scale(y: kd.InOut[kd.float32, "n"], x: kd.In[kd.float32, "n"], alpha: kd.Scalar[kd.float32]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i];"


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def shift(y: kd.InOut[kd.int32, "n"], x: kd.In[kd.int32, "n"], k: kd.Scalar[kd.int32]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {x}[i] + {k};"


@pytest.fixture
def drv(isolated_cache: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDriver]:
    """The driver double, recording in ``record`` every free (its pointer) and every launch (its
    parameter slots), in the order the driver saw them."""
    fake = FakeDriver()
    fake.snapshot_slots = SLOTS
    events: list[tuple[str, tuple[int, ...]]] = []
    free, launch = fake.cuMemFreeAsync, fake.cuLaunchKernel

    def freeing(ptr: int, stream: Any) -> tuple:
        events.append(("free", (int(ptr),)))
        return free(ptr, stream)

    def launching(*args: Any) -> tuple:
        result = launch(*args)
        events.append(("launch", slots(fake.param_bytes[-1])))
        return result

    monkeypatch.setattr(fake, "cuMemFreeAsync", freeing)
    monkeypatch.setattr(fake, "cuLaunchKernel", launching)
    fake.record = events  # type: ignore[attr-defined]
    with installed_driver(fake, scale, shift):
        yield fake


def slots(params: bytes) -> tuple[int, ...]:
    return tuple(int.from_bytes(params[8 * i : 8 * i + 8], "little") for i in range(len(params) // 8))


def launches_after_free(drv: FakeDriver) -> list[tuple[int, ...]]:
    """Launches whose parameters hold a pointer freed before them: device use-after-free."""
    freed: set[int] = set()
    used = []
    for kind, values in drv.record:  # type: ignore[attr-defined]
        if kind == "free":
            freed.update(values)
        elif freed.intersection(values):
            used.append(values)
    return used


KERNELS = {"__float__": (scale, np.float32, HookFloat32), "__index__": (shift, np.int32, HookInt32)}


# --- 1. the Python launch path converts every scalar before it checks anything -----------------


@pytest.mark.parametrize("conversion", KERNELS)
def test_a_scalar_hook_that_closes_an_array_on_the_python_path_gets_the_closed_error(
    fake_session: kd.Session, drv: FakeDriver, conversion: str
) -> None:
    kernel, dtype, hooked = KERNELS[conversion]
    y, x = fake_session.zeros(300, dtype), fake_session.zeros(300, dtype)
    kernel(y, x, hooked(3), block=128)  # block= keeps the call on the Python path; binds this scalar type
    launched = drv.count("cuLaunchKernel")
    Hook.action = x.close
    with pytest.raises(ClosedError):
        kernel(y, x, hooked(3), block=128)
    assert Hook.action is None and drv.count("cuLaunchKernel") == launched
    assert launches_after_free(drv) == []


@pytest.mark.parametrize("conversion", KERNELS)
def test_a_scalar_hook_that_reenters_the_kernel_leaves_the_outer_launch_its_own_arrays(
    fake_session: kd.Session, drv: FakeDriver, conversion: str
) -> None:
    kernel, dtype, hooked = KERNELS[conversion]
    n = 1 << 20
    y, x = fake_session.zeros(n, dtype), fake_session.zeros(n, dtype)
    small_y, small_x = fake_session.zeros(256, dtype), fake_session.zeros(256, dtype)
    kernel(y, x, hooked(2), block=128)
    Hook.action = lambda: kernel(small_y, small_x, hooked(1), block=128)  # same specialization and buffer
    kernel(y, x, hooked(2), block=128)
    (_, inner_grid, *_), (_, outer_grid, *_) = drv.launches[-2:]
    inner, outer = (slots(p) for p in drv.param_bytes[-2:])
    assert Hook.action is None
    assert (inner_grid, inner[0], inner[1], inner[3]) == ((2, 1, 1), small_y.ptr, small_x.ptr, 256)
    assert (outer_grid, outer[0], outer[1], outer[3]) == ((n // 128, 1, 1), y.ptr, x.ptr, n)


# --- 2. configure() from a hook while the C path allocates --------------------------------------


# Members at offsets a DeviceArray does not have: ``nbytes``, the first one allocate_here reads,
# on the first byte past a DeviceArray's end (where AddressSanitizer's redzone is).
PADDING = tuple(f"pad{i}" for i in range((DeviceArray.__basicsize__ - object.__basicsize__) // 8 - 4))


class Decoy:
    """Every member configure() reads, laid out unlike a DeviceArray."""

    __slots__ = (*PADDING, "session", "_closed", "shape", "ptr", "nbytes", "dispatch_tag", "_raw", "_ref")
    kind = "mem"


@pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")
def test_a_configure_from_a_scalar_hook_during_an_allocating_op_leaves_the_call_its_layout(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    native: Any = fastpath.native()
    a = fake_session.zeros(300, np.float32)
    kd.ops.add(a, HookFloat32(1))  # the Python path, which remembers an allocating C entry
    launches, allocs = drv.c_launches, drv.c_allocs
    Hook.action = lambda: native.configure(Decoy)
    try:
        result = kd.ops.add(a, HookFloat32(1))
    finally:
        native.configure(DeviceArray)
    assert Hook.action is None and type(result) is DeviceArray and result.shape == (300,)
    assert (drv.c_launches, drv.c_allocs) == (launches + 1, allocs + 1)  # made and launched in C, as before
    assert slots(drv.param_bytes[-1])[2] == result.ptr


# --- 3. operands that overlap out= are copied on every path, by their bytes ------------------------


def foreign(ptr: int, n: int) -> Any:
    """A CUDA Array Interface object over ``n`` float32 at ``ptr``: what CuPy or PyTorch hand over."""

    class Foreign:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3}

    return Foreign()


def reads_out(drv: FakeDriver, out: DeviceArray) -> bool:
    """Whether the last launch's input pointer (slot 0) lies in the bytes of ``out``'s memory."""
    low, high = out.byte_span()
    return low - 4 <= slots(drv.param_bytes[-1])[0] < high


def test_an_op_on_a_stream_copies_an_input_that_overlaps_out_at_other_elements(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(9, np.float32)
    stream = fake_session.create_stream()
    kd.ops.add(a[:-1], 1, out=a[1:], stream=stream)
    assert drv.count("cuMemcpyDtoDAsync") == 1 and not reads_out(drv, a)


@pytest.mark.parametrize("stream", [False, True])
def test_two_adoptions_of_one_foreign_buffer_that_overlap_are_copied_on_every_call(
    fake_session: kd.Session, drv: FakeDriver, stream: bool
) -> None:
    buffer = fake_session.zeros(9, np.float32)
    source, target = kd.asarray(foreign(buffer.ptr, 8)), kd.asarray(foreign(buffer.ptr + 4, 8))
    on = {"stream": target.session.create_stream()} if stream else {}
    for call in range(3):  # warm calls too: the op's C entries never take operands that may share memory
        kd.ops.add(source, 1, out=target, **on)
        assert drv.count("cuMemcpyDtoDAsync") == call + 1 and not reads_out(drv, buffer)


def test_foreign_operands_adopted_per_call_that_overlap_out_are_copied(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    buffer = fake_session.zeros(9, np.float32)
    kd.ops.add(foreign(buffer.ptr, 8), 1, out=kd.asarray(foreign(buffer.ptr + 4, 8)))
    assert drv.count("cuMemcpyDtoDAsync") == 1 and not reads_out(drv, buffer)


def test_an_operand_that_is_exactly_out_is_not_copied_and_stays_on_the_c_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(8, np.float32)
    kd.ops.add(a, 1, out=a)
    kd.ops.add(a, 1, out=a)
    assert drv.count("cuMemcpyDtoDAsync") == 0
    assert drv.c_launches == (1 if fastpath.ENABLED else 0)


# --- 4. a view is made before its owner closes, or refused ---------------------------------------


def test_a_view_made_while_another_thread_closes_its_owner_is_refused(
    fake_session: kd.Session, drv: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close runs, to its end, in another thread between the view's check and its registration."""
    a = fake_session.zeros(64, np.float32)
    tag = memory._dispatch_tag

    def closing(array: DeviceArray, *rest: Any) -> int:
        if array is not a:
            closer = threading.Thread(target=a.close)
            closer.start()
            closer.join(timeout=10)
        return tag(array, *rest)

    monkeypatch.setattr(memory, "_dispatch_tag", closing)
    with pytest.raises(ClosedError):
        a[1:]
    assert a.closed


ROUNDS = 3000


def test_views_made_while_the_owner_closes_are_all_closed(fake_session: kd.Session, drv: FakeDriver) -> None:
    """Thread A makes views while thread B closes the owner, with a thread switch as often as
    Python allows: every view A got is closed and refuses work."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    start, done = threading.Barrier(2), threading.Barrier(2)
    owner: list[DeviceArray] = []
    made: list[DeviceArray] = []
    failures: list[BaseException] = []

    def viewer() -> None:
        for _ in range(ROUNDS):
            start.wait()
            try:
                while True:
                    made.append(owner[0][1:])
            except ClosedError:
                pass
            except BaseException as exc:
                failures.append(exc)
            done.wait()

    thread = threading.Thread(target=viewer)
    thread.start()
    try:
        for _ in range(ROUNDS):
            owner[:] = [fake_session.zeros(64, np.float32)]
            start.wait()
            owner[0].close()
            done.wait()
            still_open = [v for v in made if not v.closed]
            assert not still_open and not failures
            made.clear()
    finally:
        sys.setswitchinterval(interval)
        start.abort()
        done.abort()
        thread.join(timeout=30)
    with pytest.raises(ClosedError):
        owner[0][1:].fill_zero()
