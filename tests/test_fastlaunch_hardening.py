"""The C launch path against hostile or unusual calls, on the driver double.

Arguments whose conversion runs Python code, tables past the C limits, a half-failed
``configure`` and launch dimensions the driver would refuse: in each case the C path either
launches exactly what the Python path would or leaves the call to the Python path. These
tests are also what ``.ci/asan-run`` runs under AddressSanitizer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from blas_double import install
from conftest import installed_driver
from driver_double import FakeDriver
from scalar_hooks import Hook, HookFloat32, HookInt32

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.errors import ClosedError, KernelDSLError
from kerneldsl.jit.launch_contract import launch_contract
from kerneldsl.jit.specialize import bind_declared
from kerneldsl.launch import fastpath, warm
from kerneldsl.runtime.limits import LAUNCH_LIMITS

pytestmark = pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")

_fastlaunch: Any = fastpath.native()


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scale(y: kd.InOut[kd.float32, "n"], x: kd.In[kd.float32, "n"], alpha: kd.Scalar[kd.float32]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i];"


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def shift(y: kd.InOut[kd.int32, "n"], x: kd.In[kd.int32, "n"], k: kd.Scalar[kd.int32]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {x}[i] + {k};"


@pytest.fixture
def drv(isolated_cache: None) -> Iterator[FakeDriver]:
    fake = FakeDriver()
    fake.snapshot_slots = 4
    with installed_driver(fake, scale, shift):
        yield fake


# --- 1. argument conversions that run Python code ----------------------------------------------


def _forget(kernel: kd.Kernel) -> Callable[[], None]:
    """Drop every reference to the kernel's C entries: the one being tried is then freed."""

    def forget() -> None:
        kernel._forget_launches()
        for bound in kernel._bound.values():
            bound.c_entry.launch = None

    return forget


KERNELS = {"__float__": (scale, np.float32, HookFloat32), "__index__": (shift, np.int32, HookInt32)}


@pytest.mark.parametrize("conversion", KERNELS)
def test_a_conversion_that_forgets_the_launches_does_not_free_the_one_running(
    fake_session: kd.Session, drv: FakeDriver, conversion: str
) -> None:
    kernel, dtype, hooked = KERNELS[conversion]
    y, x = fake_session.zeros(300, dtype), fake_session.zeros(300, dtype)
    kernel(y, x, hooked(3))
    kernel._call(y, x, hooked(3))  # the Python path's parameters, to compare with
    Hook.action = _forget(kernel)
    kernel(y, x, hooked(3))
    assert Hook.action is None and drv.c_launches == 1
    assert drv.param_bytes[-1] == drv.param_bytes[-2]


def _close_session(s: kd.Session, y: kd.DeviceArray, x: kd.DeviceArray) -> None:
    s.close()


def _close_array(s: kd.Session, y: kd.DeviceArray, x: kd.DeviceArray) -> None:
    x.close()


@pytest.mark.parametrize("conversion", KERNELS)
@pytest.mark.parametrize("close", [_close_session, _close_array])
def test_a_conversion_that_closes_what_the_call_uses_gets_the_closed_error(
    fake_session: kd.Session, drv: FakeDriver, conversion: str, close: Callable[..., None]
) -> None:
    kernel, dtype, hooked = KERNELS[conversion]
    y, x = fake_session.zeros(300, dtype), fake_session.zeros(300, dtype)
    kernel(y, x, hooked(3))
    Hook.action = lambda: close(fake_session, y, x)
    with pytest.raises(ClosedError):
        kernel(y, x, hooked(3))
    assert Hook.action is None and drv.c_launches == 0


@pytest.fixture
def lt(drv: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """cuBLAS and cuBLASLt doubles whose matmul is a C function pointer (as in test_blas)."""
    yield install(drv, monkeypatch).lt
    blas.gemm._forget_launches()


class HookAlpha:
    def __float__(self) -> float:
        Hook.fire()
        return 2.0


@pytest.mark.parametrize("forget", [False, True])
def test_a_gemm_alpha_that_closes_the_session_gets_the_closed_error(
    fake_session: kd.Session, lt: Any, forget: bool
) -> None:
    a, b, out = fake_session.zeros((5, 3)), fake_session.zeros((3, 4)), fake_session.zeros((5, 4))
    blas.gemm(a, b, out)
    assert blas.gemm._remembered_launches == 1

    def close() -> None:
        if forget:
            blas.gemm._forget_launches()
        fake_session.close()

    Hook.action = close
    with pytest.raises(ClosedError):
        blas.gemm(a, b, out, alpha=HookAlpha())
    assert Hook.action is None and lt.c_matmuls == 0


# --- 2. tables past the C limits --------------------------------------------------------------------


def _generated_kernel(params: list[str], **decorator: Any) -> kd.Kernel:
    """A kernel with ``params`` (source text), too many to write out."""
    namespace: dict[str, Any] = {"kd": kd}
    exec(f"def wide({', '.join(params)}):\n    return '/* not run */'\n", namespace)
    return kd.kernel(**(decorator or {"grid": kd.cdiv("n", 128), "block": 128}))(namespace["wide"])


def _seventy_scalars(s: kd.Session) -> tuple[kd.Kernel, tuple[Any, ...]]:
    kernel = _generated_kernel(['y: kd.InOut[kd.int32, "n"]'] + [f"k{i}: kd.Scalar[kd.int32]" for i in range(70)])
    return kernel, (s.zeros(8, np.int32), *range(70))


def _seventeen_arrays(s: kd.Session) -> tuple[kd.Kernel, tuple[Any, ...]]:
    kernel = _generated_kernel(['y: kd.Out[kd.float32, "n"]'] + [f'x{i}: kd.In[kd.float32, "n"]' for i in range(16)])
    return kernel, tuple(s.zeros(8, np.float32) for _ in range(17))


@pytest.mark.parametrize("make", [_seventy_scalars, _seventeen_arrays])
def test_a_kernel_past_the_c_limits_launches_once_per_call_from_python(
    fake_session: kd.Session, drv: FakeDriver, make: Callable[[kd.Session], tuple[kd.Kernel, tuple[Any, ...]]]
) -> None:
    kernel, args = make(fake_session)
    try:
        for calls in (1, 2):
            kernel(*args)
            assert len(drv.launches) == calls
        assert drv.c_launches == 0 and kernel._remembered_launches == 0
        (bound,) = kernel._bound.values()
        assert fastpath.launch_table(bound.build.launch_contract) is None
    finally:
        kernel._bound.clear()


def _nested_sum(depth: int) -> Any:
    expr = kd.sym("n")
    for _ in range(depth):
        expr = kd.sym("n") + expr  # right-nested: each level keeps one more operand on the stack
    return expr


PAST_LIMITS = {  # decorator arguments, the array's shape
    "9 dimensions": ({"grid": 1}, (1,) * 9),
    "a 17-deep launch program": ({"grid": _nested_sum(16)}, (4,)),
    "a constant past int64": ({"shared": kd.sym("n") * 2**70}, (4,)),
}


@pytest.mark.parametrize("case", PAST_LIMITS)
def test_other_tables_past_the_c_limits_are_not_made(fake_session: kd.Session, case: str) -> None:
    decorator, shape = PAST_LIMITS[case]
    dims = ", ".join(f'"n{i}"' if i else '"n"' for i in range(len(shape)))
    fill = _generated_kernel([f"y: kd.Out[kd.float32, ({dims},)]"], **decorator)
    assert (
        fastpath.launch_table(launch_contract(fill.specialize(fake_session.zeros(shape, np.float32), arch="sm_90")))
        is None
    )


def test_an_entry_that_cannot_be_made_is_logged_and_the_call_stands(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Any:
        raise ValueError("launch table too large for the C launch path")

    entry = warm.CEntry()
    with caplog.at_level(logging.DEBUG, logger="kerneldsl.launch.warm"):
        warm.remember(fastpath.PythonPathCallable(), entry, broken)
    assert entry.launch is False and "too large" in caplog.text


# --- 3. configure --------------------------------------------------------------------------------------


class Other:
    __slots__ = ("nbytes",)


PADDING = tuple(f"pad{i}" for i in range(40))  # puts the other members past a DeviceArray's end


class NoNbytes:
    __slots__ = (*PADDING, "session", "_closed", "shape", "ptr", "dispatch_tag")


class ForeignNbytes:
    __slots__ = (*PADDING, "session", "_closed", "shape", "ptr", "dispatch_tag")
    nbytes = Other.__dict__["nbytes"]  # a member of another layout


@pytest.mark.parametrize("cls", [NoNbytes, ForeignNbytes])
def test_a_failed_configure_leaves_the_previous_configuration(
    fake_session: kd.Session, drv: FakeDriver, cls: type
) -> None:
    y, x = fake_session.zeros(300, np.float32), fake_session.zeros(300, np.float32)
    scale._call(y, x, np.float32(2))
    try:
        with pytest.raises((AttributeError, TypeError)):
            _fastlaunch.configure(cls)
        scale(y, x, np.float32(2))
    finally:
        _fastlaunch.configure(DeviceArray)
    assert drv.c_launches == 1 and drv.param_bytes[-1] == drv.param_bytes[-2]


# --- 4. launch dimensions the Python path judges ------------------------------------------------


DECLINED = {  # decorator arguments, a size the C path launches, one it must leave to Python
    "block 2048": ({"grid": 1, "block": kd.sym("n")}, 32, 2048),
    "block z 65": ({"grid": 1, "block": (1, 1, kd.sym("n"))}, 64, 65),
    "block of 1056 threads": ({"grid": 1, "block": (32, kd.sym("n"))}, 32, 33),
    "grid y 70000": ({"grid": (1, kd.sym("n")), "block": 1}, 65535, 70000),
    "grid z 70000": ({"grid": (1, 1, kd.sym("n")), "block": 1}, 65535, 70000),
    "grid x 2**31": ({"grid": kd.sym("n") * 2**30, "block": 1}, 1, 2),
    "shared 48 KiB + 4": ({"grid": 1, "block": 1, "shared": kd.sym("n") * 4}, 12288, 12289),
    "2**31 threads, 32-bit indexing": ({"grid": kd.sym("n") * 2**21, "block": 512}, 1, 2),
}


def _sized_kernel(decorator: dict[str, Any]) -> kd.Kernel:
    @kd.kernel(**decorator)
    def sized(y: kd.InOut[kd.float32, "n"]):
        return f"{y}[0] = 0;"

    return sized


@pytest.mark.parametrize("case", DECLINED)
def test_dimensions_cuda_would_refuse_are_left_to_the_python_path(
    fake_session: kd.Session, drv: FakeDriver, case: str
) -> None:
    decorator, good, bad = DECLINED[case]
    kernel = _sized_kernel(decorator)
    drv.snapshot_slots = 0
    try:
        kernel(fake_session.zeros(good, np.float32))
        kernel(fake_session.zeros(good, np.float32))
        assert drv.c_launches == 1 and kernel._remembered_launches == 1  # the entry the next call consults
        with contextlib.suppress(KernelDSLError):  # the Python path's own checks decide
            kernel(fake_session.zeros(bad, np.float32))
        assert drv.c_launches == 1
    finally:
        kernel._bound.clear()


def test_the_c_path_launches_only_within_the_limits_it_was_handed(fake_session: kd.Session, drv: FakeDriver) -> None:
    kernel = _sized_kernel({"grid": 1, "block": kd.sym("n")})
    drv.snapshot_slots = 0
    try:
        kernel(fake_session.zeros(32, np.float32))
        kernel(fake_session.zeros(32, np.float32))
        assert drv.c_launches == 1
        _fastlaunch.set_launch_limits(LAUNCH_LIMITS._replace(block=(16, 1024, 64)))
        kernel(fake_session.zeros(32, np.float32))
        assert drv.c_launches == 1 and len(drv.launches) == 3  # launched, by the Python path
    finally:
        _fastlaunch.set_launch_limits(LAUNCH_LIMITS)
        kernel._bound.clear()


def test_a_malformed_set_of_limits_leaves_the_previous_one(fake_session: kd.Session, drv: FakeDriver) -> None:
    kernel = _sized_kernel({"grid": 1, "block": kd.sym("n")})
    drv.snapshot_slots = 0
    try:
        kernel(fake_session.zeros(32, np.float32))
        with pytest.raises(TypeError, match="3-tuple"):
            _fastlaunch.set_launch_limits(LAUNCH_LIMITS._replace(grid=(1, 1), block=(16, 1024, 64)))
        kernel(fake_session.zeros(32, np.float32))
        assert drv.c_launches == 1
    finally:
        _fastlaunch.set_launch_limits(LAUNCH_LIMITS)
        kernel._bound.clear()


def test_a_64_bit_build_launches_more_threads_from_c(fake_session: kd.Session, drv: FakeDriver) -> None:
    kernel = _sized_kernel({"grid": kd.sym("n") * 2**21, "block": 512})
    drv.snapshot_slots = 0
    try:
        kernel(fake_session.zeros(1, np.float32))
        (bound,) = kernel._bound.values()
        *rest, bits = fastpath.launch_table(bound.build.launch_contract) or ()
        assert bits == 32
        wide = _fastlaunch.Launch(
            table=(*rest, 64),
            session=fake_session,
            guards=(fake_session.zeros(2, np.float32).dispatch_tag,),
            launch=fake_session.entry_point("cuLaunchKernel"),
            function=int(bound.function),
            stream=int(fake_session.stream.handle),
        )
        kernel._forget_launches()
        kernel._remember_launch(wide)
        kernel(fake_session.zeros(2, np.float32))
        assert drv.c_launches == 1 and drv.launches[-1][1:3] == ((2**22, 1, 1), (512, 1, 1))
    finally:
        kernel._bound.clear()
        kernel._forget_launches()


@pytest.mark.parametrize("bits", [32, 64])
def test_the_table_carries_the_index_width(bits: int) -> None:
    spec = bind_declared(scale.signature, {}, {}, "sm_90", bits)
    table = fastpath.launch_table(launch_contract(spec))
    assert table is not None and table[-1] == bits


@pytest.mark.parametrize(
    "extended",
    [
        (0, True, 0, 0, 0, 132),  # no cuLaunchKernelEx entry point
        (1, False, 0, 0, 0, 0),  # neither cooperative nor a cluster
        (1, False, 2, 0, 1, 0),  # a cluster with a zero axis
        (1, True, 0, 0),  # too short
    ],
)
def test_a_malformed_extended_launch_is_refused_when_made(
    fake_session: kd.Session, drv: FakeDriver, extended: Any
) -> None:
    kernel = _sized_kernel({"grid": 1, "block": 32})
    drv.snapshot_slots = 0
    try:
        kernel(fake_session.zeros(32, np.float32))
        (bound,) = kernel._bound.values()
        with pytest.raises((ValueError, TypeError), match="extended"):
            _fastlaunch.Launch(
                table=fastpath.launch_table(bound.build.launch_contract),
                session=fake_session,
                guards=(fake_session.zeros(2, np.float32).dispatch_tag,),
                launch=fake_session.entry_point("cuLaunchKernel"),
                function=int(bound.function),
                stream=int(fake_session.stream.handle),
                extended=extended,
            )
    finally:
        kernel._bound.clear()
