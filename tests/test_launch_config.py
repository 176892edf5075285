"""Launch configurations are checked before the launch: a LaunchConfigError names the dimension and
the limit; dynamic shared memory above 48 KiB is opted into; an index width always covers the
launch's threads (the driver double counts what reaches the driver)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl.errors import DeclarationError, LaunchConfigError


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];"


@kd.kernel(grid=kd.sym("n") * 4096, block=1024)
def many_threads(y: kd.Out[kd.float32, "n"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = 1.0f;"


@kd.kernel(grid=kd.sym("n") - 100, block=32)
def shrinking(y: kd.Out[kd.float32, "n"]):
    return f"{y}[0] = 0.0f;"


@kd.kernel(grid=1, block=1)
def scalars_only(cycles: kd.Scalar[kd.int64]):
    return "long long start = clock64(); while (clock64() - start < cycles) { }"


@pytest.fixture
def drv() -> Any:
    with installed_driver(FakeDriver(), saxpy, many_threads, shrinking, tiled, scalars_only) as fake:
        yield fake


def _pair(s: kd.Session, n: int = 256) -> tuple[Any, Any]:
    return s.zeros(n, np.float32), s.zeros(n, np.float32)


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ({"block": 2048}, "block.x = 2048 is outside 0..1024"),
        ({"block": (32, 32, 2)}, "has 2048 threads"),
        ({"block": (1, 1, 65)}, "block.z = 65 is outside 0..64"),
        ({"grid": (1, 70000)}, "grid.y = 70000 is outside 0..65535"),
        ({"grid": 2**31}, "grid.x = 2147483648 is outside 0..2147483647"),
        ({"shared": 1.5}, "shared = 1.5 must be a non-negative int"),
        ({"shared": -4}, "shared = -4 must be a non-negative int"),
    ],
)
def test_a_launch_past_a_limit_is_refused_before_the_driver_sees_it(
    fake_session: kd.Session, drv: FakeDriver, override: dict[str, Any], names: str
) -> None:
    dy, dx = _pair(fake_session)
    with pytest.raises(LaunchConfigError, match=names) as info:
        saxpy(dy, dx, np.float32(1), **override)
    assert not drv.launches and not fake_session.poisoned
    assert info.value.kernel == "saxpy" and str(info.value).startswith("kernel 'saxpy': ")


def test_a_computed_block_past_the_limit_is_refused_naming_the_kernel(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    y = fake_session.zeros(256, np.float32)
    tiled(y)  # 16 x 16 threads
    with pytest.raises(LaunchConfigError, match=r"^kernel 'tiled': block \(64, 64, 1\) has 4096 threads") as info:
        tiled(y, TILE=64)
    assert info.value.kernel == "tiled" and len(drv.launches) == 1


@pytest.mark.parametrize(
    ("block", "names"),
    [
        ((64, 32), r"block \(64, 32\) has 2048 threads; a block holds 1..1024"),
        (2048, "block.x = 2048 is outside 0..1024"),
        ((1, 1, 65), "block.z = 65 is outside 0..64"),
        ((64, 32, "TILE"), r"block \(64, 32, TILE\) has at least 2048 threads"),
        ((0, 32), r"block \(0, 32\) has 0 threads"),
    ],
)
def test_a_block_of_integers_past_the_limit_is_refused_at_declaration(block: Any, names: str) -> None:
    def k(y: kd.Out[kd.float32, "n"], TILE: kd.Const[int] = 1) -> str:
        return ""

    with pytest.raises(DeclarationError, match=names) as info:
        kd.kernel(grid=1, block=block)(k)
    assert info.value.kernel == "k"


def test_a_grid_axis_of_an_integer_past_its_limit_is_refused_at_declaration() -> None:
    def k(y: kd.Out[kd.float32, "n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="grid.y = 70000 is outside 0..65535"):
        kd.kernel(grid=(1, 70000), block=1)(k)


def test_a_block_with_a_computed_axis_is_checked_at_the_call() -> None:
    def k(y: kd.Out[kd.float32, "n"], TILE: kd.Const[int] = 1) -> str:
        return ""

    assert kd.kernel(grid=1, block=(32, 32, "TILE"))(k).signature.block[2].symbols() == {"TILE"}


def test_a_computed_negative_grid_is_refused(fake_session: kd.Session, drv: FakeDriver) -> None:
    with pytest.raises(LaunchConfigError, match="grid.x = -90"):
        shrinking(fake_session.zeros(10, np.float32))
    assert not drv.launches


def test_shared_memory_above_48_kib_is_opted_into_once(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    for _ in range(2):
        saxpy(dy, dx, np.float32(1), shared=64 * 1024)
    assert drv.count("cuFuncSetAttribute") == 1 and list(drv.function_attributes.values()) == [64 * 1024]
    assert [launch[3] for launch in drv.launches] == [64 * 1024, 64 * 1024]


def test_shared_memory_past_the_device_limit_is_refused(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    with pytest.raises(LaunchConfigError, match="exceeds the 232448 bytes a block may use"):
        saxpy(dy, dx, np.float32(1), shared=240 * 1024)
    assert not drv.launches


def test_a_launch_with_more_threads_than_int32_numbers_takes_the_64_bit_build(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    y = fake_session.zeros(1024, np.float32)  # 32-bit extents, but 1024 * 4096 blocks of 1024 threads
    many_threads(y)
    many_threads(y)
    assert len(drv.launches) == 2
    (narrow,) = [b for b in many_threads._bound.values() if b.session is fake_session]
    assert narrow.build.index_bits == 32 and narrow.wide is not None and narrow.wide.build.index_bits == 64
    assert drv.launches[0][0] == drv.launches[1][0] == narrow.wide.function


def test_a_launch_that_fits_keeps_the_32_bit_build(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1), grid=2**23, block=256)  # exactly 2**31 threads: one too many
    saxpy(dy, dx, np.float32(1), grid=2**23 - 1, block=256)
    (bound,) = [b for b in saxpy._bound.values() if b.session is fake_session]
    assert [launch[0] for launch in drv.launches] == [bound.wide.function, bound.function]


def test_a_kernel_without_arrays_launches_in_its_streams_session(fake_session: kd.Session, drv: FakeDriver) -> None:
    scalars_only(1)  # bound in the default session first
    with kd.Session(0) as other:
        stream = other.create_stream()
        scalars_only(1, stream=stream)
        assert drv.launches[-1][4] == stream._cu


@kd.kernel(grid=kd.cdiv("n", 384), block=384)
def total(x: kd.In[kd.float32, "n"]):
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; (void)i;"


@kd.kernel(grid=1, block=(kd.sym("TILE"), kd.sym("TILE")))
def tiled(y: kd.Out[kd.float32, "n"], TILE: kd.Const[int] = 16):
    return f"{y}[threadIdx.y * TILE + threadIdx.x] = 0.0f;"


@pytest.mark.parametrize(
    ("kernel", "keywords", "names"),
    [
        (saxpy, {"block": 2048}, "block.x = 2048 is outside 0..1024"),
        (tiled, {"TILE": 64}, r"block \(64, 64, 1\) has 4096 threads"),
        (saxpy, {"shared": -4}, "shared = -4 must be a non-negative int"),
    ],
)
def test_inspect_refuses_a_launch_a_call_would_refuse(kernel: Any, keywords: dict[str, Any], names: str) -> None:
    n = 256
    args = (np.zeros(n, np.float32),) if kernel is tiled else (np.zeros(n, np.float32), np.zeros(n, np.float32), 1.0)
    with pytest.raises(LaunchConfigError, match=names) as info:
        kernel.inspect(*args, arch="sm_90", **keywords)
    assert info.value.kernel == kernel.__name__ and str(info.value).startswith(f"kernel {kernel.__name__!r}: ")


def test_inspect_takes_the_64_bit_build_when_the_grid_has_more_threads_than_int32_numbers() -> None:
    x = np.broadcast_to(np.float32(0), (2**31 - 1,))  # extents fit int32; cdiv(n, 384) * 384 threads do not
    assert total.inspect(x, arch="sm_90").index_bits == 64


def test_inspect_keeps_the_32_bit_build_for_a_launch_that_fits() -> None:
    x = np.broadcast_to(np.float32(0), (2**31 - 385,))
    assert total.inspect(x, arch="sm_90").index_bits == 32


def test_inspect_returns_the_build_the_call_ran(fake_session: kd.Session, drv: FakeDriver) -> None:
    y = fake_session.zeros(1024, np.float32)
    many_threads(y)
    (narrow,) = [b for b in many_threads._bound.values() if b.session is fake_session]
    assert many_threads.inspect(y) is narrow.wide.build


def test_inspect_applies_grid_and_block_overrides_as_a_call_does() -> None:
    y, x = np.zeros(256, np.float32), np.zeros(256, np.float32)
    assert saxpy.inspect(y, x, 1.0, arch="sm_90", grid=2**23, block=256).index_bits == 64
    assert saxpy.inspect(y, x, 1.0, arch="sm_90", grid=2**23 - 1, block=256).index_bits == 32
