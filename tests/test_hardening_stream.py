"""``stream=`` attacks of the third security review (issue 40, item 1), on the driver double.

A ``stream=`` object that is not a ``kd.Stream`` itself (a look-alike, or a subclass) can run
code when its ``session``, ``_cu`` or ``handle`` is read. Read after the adapter packed the
parameters, such a hook that closed an argument made the launch carry the freed pointer, and one
that re-entered the kernel left the outer launch the inner call's arrays (the shared parameter
buffer). Every call that takes ``stream=`` now accepts only None or an open Stream of its session,
checked on entry before anything is converted or packed, and reads nothing of anything else:
the hook never runs and nothing reaches the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver
from scalar_hooks import Hook

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.errors import ClosedError, InvalidStreamError, WrongSessionError
from kerneldsl.launch import fastpath
from kerneldsl.runtime.stream import Stream

needs_c_path = pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch is not built or is off")


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scale(y: kd.InOut[kd.float32, "n"], x: kd.In[kd.float32, "n"], alpha: kd.Scalar[kd.float32]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i];"


@kd.kernel(grid=kd.cdiv("n", 128), block=128, cooperative=True)
def together(y: kd.Out[kd.float32, "n"], x: kd.In[kd.float32, "n"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {x}[i];"


@kd.kernel(grid=kd.cdiv("n", 128), block=128, cluster=(2, 1))
def clustered(y: kd.Out[kd.float32, "n"], x: kd.In[kd.float32, "n"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {x}[i];"


@pytest.fixture
def drv(isolated_cache: None) -> Iterator[FakeDriver]:
    with installed_driver(FakeDriver(), scale, together, clustered) as fake:
        yield fake


@pytest.fixture
def hook(fake_session: kd.Session) -> Iterator[type[Hook]]:
    """``Hook``, disarmed after the test (before the session closes its streams), fired or not."""
    yield Hook
    Hook.action = None


# --- the hostile streams -------------------------------------------------------------------------

HOOKED = ("session", "_cu", "handle")


class LookAlike:
    """Not a Stream, but answers every attribute as the real stream ``_real`` does; reading
    ``_hooked`` fires the armed Hook first."""

    def __init__(self, real: Stream, hooked: str) -> None:
        self._real = real
        self._hooked = hooked

    def __getattr__(self, name: str) -> Any:
        if name == self._hooked:
            Hook.fire()
        return getattr(self._real, name)


def look_alike(session: kd.Session, hooked: str) -> Any:
    return LookAlike(session.create_stream(), hooked)


def subclass(session: kd.Session, hooked: str) -> Any:
    """A real stream of ``session``, made as a subclass of Stream whose ``hooked`` member fires the
    armed Hook when read. Stream refuses subclasses (see the test below); the refusal is lifted
    for the moment the class is made, to show that the checks do not rely on it."""
    member = getattr(Stream, hooked)

    def read(self: Stream) -> Any:
        Hook.fire()
        return member.__get__(self, type(self))

    def write(self: Stream, value: Any) -> None:
        member.__set__(self, value)

    with pytest.MonkeyPatch.context() as patch:
        patch.delattr(Stream, "__init_subclass__")
        hooked_stream = type("HookedStream", (Stream,), {"__slots__": (), hooked: property(read, write)})
    return hooked_stream(session)


HOSTILE: dict[str, Callable[[kd.Session, str], Any]] = {"look-alike": look_alike, "subclass": subclass}


@pytest.fixture(params=[(kind, attribute) for kind in HOSTILE for attribute in HOOKED], ids="-".join)
def hostile(request: pytest.FixtureRequest, fake_session: kd.Session, hook: type[Hook]) -> Any:
    """Each hostile stream, once per attribute that runs the hook."""
    kind, attribute = request.param
    return HOSTILE[kind](fake_session, attribute)


def launched(drv: FakeDriver) -> tuple[int, int, int]:
    """Launches the driver saw so far: by cuLaunchKernel, cuLaunchKernelEx and the C path."""
    return len(drv.launches), len(drv.ex_launches), drv.c_launches


def arrays(s: kd.Session, n: int = 1024) -> tuple[Any, Any]:
    return s.zeros(n, np.float32), s.zeros(n, np.float32)


def test_stream_cannot_be_subclassed() -> None:
    """The session reads its streams' members while it frees memory (inside a launch, too): a
    subclass's property there could close an argument of the launch under way."""
    with pytest.raises(InvalidStreamError, match="cannot be subclassed"):
        type("HookedStream", (Stream,), {"__slots__": ()})


# --- kernels: the Python path, the C path, cooperative and cluster launches ----------------------


def test_a_hostile_stream_that_would_close_an_argument_is_refused_before_the_kernel_reads_it(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    y, x = arrays(fake_session)
    scale(y, x, 2.0)
    before = launched(drv)
    Hook.action = x.close
    with pytest.raises(InvalidStreamError, match="must be a kd.Stream"):
        scale(y, x, 2.0, stream=hostile)
    assert Hook.action is not None and not x.closed  # the hook never ran
    assert launched(drv) == before


def test_a_hostile_stream_that_would_reenter_the_kernel_is_refused_before_the_kernel_reads_it(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    y, x = arrays(fake_session, 1 << 20)
    small_y, small_x = arrays(fake_session, 256)
    scale(y, x, 2.0)
    before = launched(drv)
    Hook.action = lambda: scale(small_y, small_x, 1.0)  # same specialization, same parameter buffer
    with pytest.raises(InvalidStreamError):
        scale(y, x, 2.0, stream=hostile)
    assert Hook.action is not None
    assert launched(drv) == before


def test_a_hostile_stream_is_refused_through_kernel_launch_overrides(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    y, x = arrays(fake_session)
    Hook.action = x.close
    with pytest.raises(InvalidStreamError):
        scale.launch(stream=hostile)(y, x, 2.0)
    assert Hook.action is not None and launched(drv) == (0, 0, 0)


def test_a_hostile_stream_is_refused_before_numpy_arguments_are_copied_in(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    y, x = np.zeros(1024, np.float32), np.ones(1024, np.float32)
    Hook.action = lambda: scale(*arrays(fake_session), 1.0)
    with pytest.raises(InvalidStreamError):
        scale(y, x, 2.0, stream=hostile)
    assert Hook.action is not None and drv.count("cuMemcpyHtoDAsync") == 0 and launched(drv) == (0, 0, 0)


@needs_c_path
def test_a_hostile_stream_declined_by_the_c_path_is_refused_by_the_python_path(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    """The C entry was made for a real stream (the one a look-alike forwards to, for it): the C
    path compares identities, declines, and the Python path refuses."""
    y, x = arrays(fake_session)
    real = hostile._real if type(hostile) is LookAlike else fake_session.create_stream()
    for _ in range(2):
        scale(y, x, 2.0, stream=real)
    scale(y, x, 2.0)
    scale(y, x, 2.0)
    assert drv.c_launches == 2  # both entries made and taken
    before = launched(drv)
    Hook.action = x.close
    with pytest.raises(InvalidStreamError):
        scale(y, x, 2.0, stream=hostile)
    assert Hook.action is not None and launched(drv) == before


@pytest.mark.parametrize("kernel", [together, clustered], ids=["cooperative", "cluster"])
def test_a_hostile_stream_is_refused_before_an_extended_launch_reads_it(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any, kernel: Any
) -> None:
    y, x = arrays(fake_session)
    kernel(y, x)
    before = launched(drv)
    Hook.action = x.close
    with pytest.raises(InvalidStreamError):
        kernel(y, x, stream=hostile)
    assert Hook.action is not None and not x.closed
    assert launched(drv) == before


@pytest.mark.parametrize("value", [0, "stream", 0.5], ids=["int", "str", "float"])
def test_a_stream_that_is_no_stream_at_all_gets_a_typed_error_naming_its_type(
    fake_session: kd.Session, drv: FakeDriver, value: Any
) -> None:
    y, x = arrays(fake_session)
    with pytest.raises(InvalidStreamError, match=type(value).__name__):
        scale(y, x, 2.0, stream=value)
    assert launched(drv) == (0, 0, 0)


@pytest.mark.parametrize("kernel", [scale, together, clustered], ids=["plain", "cooperative", "cluster"])
def test_a_closed_stream_is_refused_before_the_launch(fake_session: kd.Session, drv: FakeDriver, kernel: Any) -> None:
    y, x = arrays(fake_session)
    args = (y, x, 2.0) if kernel is scale else (y, x)
    stream = fake_session.create_stream()
    kernel(*args, stream=stream)
    stream.close()
    before = launched(drv)
    with pytest.raises(ClosedError):
        kernel(*args, stream=stream)
    assert launched(drv) == before


def test_a_stream_of_another_session_is_refused_before_the_launch(fake_session: kd.Session, drv: FakeDriver) -> None:
    y, x = arrays(fake_session)
    with kd.Session(0) as other:
        with pytest.raises(WrongSessionError, match="stream= belongs to session"):
            scale(y, x, 2.0, stream=other.create_stream())
    assert launched(drv) == (0, 0, 0)


def test_the_session_launch_refuses_a_hostile_stream_without_reading_it(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    """The last line of defence, for a launch that reached the session another way: the packed
    launch is refused and the hook does not run."""
    y, x = arrays(fake_session)
    scale(y, x, 2.0)
    bound = next(iter(scale._bound.values()))
    Hook.action = x.close
    with pytest.raises(InvalidStreamError):
        fake_session.launch(bound.function, (8, 1, 1), (128, 1, 1), 0, hostile, 0)
    assert Hook.action is not None and launched(drv) == (1, 0, 0)


# --- kd.ops --------------------------------------------------------------------------------------


def test_an_elementwise_op_refuses_a_hostile_stream_before_its_operands_are_placed(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    a, out = arrays(fake_session)
    real = fake_session.create_stream()
    for _ in range(2):  # the second from C, where that is built
        kd.ops.add(a, 1.0, out=out, stream=real)
    before = launched(drv)
    Hook.action = a.close
    with pytest.raises(InvalidStreamError):
        kd.ops.add(a, 1.0, out=out, stream=hostile)
    with pytest.raises(InvalidStreamError):
        kd.ops.add(np.ones(1024, np.float32), 1.0, stream=hostile)
    assert Hook.action is not None and not a.closed
    assert launched(drv) == before and drv.count("cuMemcpyHtoDAsync") == 0


def test_an_elementwise_op_refuses_a_closed_stream(fake_session: kd.Session, drv: FakeDriver) -> None:
    a, out = arrays(fake_session)
    stream = fake_session.create_stream()
    kd.ops.add(a, 1.0, out=out, stream=stream)
    stream.close()
    before = launched(drv)
    with pytest.raises(ClosedError):
        kd.ops.add(a, 1.0, out=out, stream=stream)
    assert launched(drv) == before


@pytest.mark.parametrize("op", [kd.ops.sum, kd.ops.cumsum], ids=["reduction", "scan"])
def test_a_reduction_or_scan_takes_no_stream_and_never_reads_one(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any, op: Any
) -> None:
    a, _ = arrays(fake_session)
    for _ in range(2):  # warm: the second from C, where that is built
        op(a)
    before = launched(drv)
    Hook.action = a.close
    with pytest.raises(TypeError, match="stream"):
        op(a, stream=hostile)
    assert Hook.action is not None and launched(drv) == before


# --- kd.blas -------------------------------------------------------------------------------------


def gemm_operands(s: kd.Session) -> tuple[Any, Any, Any]:
    return s.zeros((4, 4), np.float32), s.zeros((4, 4), np.float32), s.zeros((4, 4), np.float32)


def test_gemm_refuses_a_hostile_stream_before_it_reads_a_pointer(
    fake_session: kd.Session, lib: Any, hostile: Any
) -> None:
    a, b, out = gemm_operands(fake_session)
    real = fake_session.create_stream()
    for _ in range(2):  # the second from C, where that is built
        blas.gemm(a, b, out, stream=real)
    matmuls = len(lib.lt.matmuls)
    Hook.action = a.close
    with pytest.raises(InvalidStreamError):
        blas.gemm(a, b, out, stream=hostile)
    with pytest.raises(InvalidStreamError):
        blas.gemm(a, b, stream=hostile)
    assert Hook.action is not None and not a.closed and len(lib.lt.matmuls) == matmuls


def test_gemm_batched_and_the_vector_products_refuse_a_hostile_stream(
    fake_session: kd.Session, lib: Any, hostile: Any
) -> None:
    a, b, _ = gemm_operands(fake_session)
    x, y, scalar = (
        fake_session.zeros(4, np.float32),
        fake_session.zeros(4, np.float32),
        fake_session.zeros((), np.float32),
    )
    batched_a, batched_b = fake_session.zeros((1, 4, 4), np.float32), fake_session.zeros((1, 4, 4), np.float32)
    calls = len(lib.calls)
    Hook.action = x.close
    for call in (
        lambda: blas.gemm_batched(batched_a, batched_b, stream=hostile),
        lambda: blas.gemv(a, x, y, stream=hostile),
        lambda: blas.axpy(2.0, x, y, stream=hostile),
        lambda: blas.dot(x, y, scalar, stream=hostile),
        lambda: blas.nrm2(x, scalar, stream=hostile),
    ):
        with pytest.raises(InvalidStreamError):
            call()
    assert Hook.action is not None and not x.closed and len(lib.calls) == calls


def test_gemm_refuses_a_closed_stream(fake_session: kd.Session, lib: Any) -> None:
    a, b, out = gemm_operands(fake_session)
    stream = fake_session.create_stream()
    blas.gemm(a, b, out, stream=stream)
    stream.close()
    matmuls = len(lib.lt.matmuls)
    with pytest.raises(ClosedError):
        blas.gemm(a, b, out, stream=stream)
    assert len(lib.lt.matmuls) == matmuls


# --- copies and events ---------------------------------------------------------------------------


def test_device_copies_and_fills_refuse_a_hostile_stream_before_they_read_a_pointer(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    a, b = arrays(fake_session)
    copies = drv.count("cuMemcpyDtoDAsync"), drv.count("cuMemsetD8Async")
    Hook.action = a.close
    with pytest.raises(InvalidStreamError):
        a.copy_to(b, stream=hostile)
    with pytest.raises(InvalidStreamError):
        a.fill_zero(stream=hostile)
    assert Hook.action is not None and not a.closed
    assert (drv.count("cuMemcpyDtoDAsync"), drv.count("cuMemsetD8Async")) == copies


def test_an_event_refuses_to_record_on_a_hostile_stream(
    fake_session: kd.Session, drv: FakeDriver, hostile: Any
) -> None:
    event = fake_session.create_event()
    Hook.action = event.close
    with pytest.raises(InvalidStreamError):
        event.record(hostile)
    assert Hook.action is not None and not event.closed and drv.count("cuEventRecord") == 0
