"""Cooperative and cluster launches: declared on ``kd.kernel``, checked when declared and at each
launch, and launched through ``cuLaunchKernelEx`` with the matching attributes (the driver
double records them). Warm calls take the C launch path when block, shared memory and cluster
are constants; a grid the first call's checks do not cover goes back to the adapter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl.errors import DeclarationError, LaunchConfigError
from kerneldsl.jit.signature import Expr
from kerneldsl.launch import fastpath

BODY = "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = 1.0f;"


@kd.kernel(grid=kd.cdiv("n", 128), block=128, cooperative=True)
def together(y: kd.Out[kd.float32, "n"]):
    return BODY.format(y=y)


@kd.kernel(grid=kd.cdiv("n", 128), block=128, cluster=("c", 1))
def clustered(y: kd.Out[kd.float32, "n"], c: kd.Const[int] = 2):
    return BODY.format(y=y)


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def plain(y: kd.Out[kd.float32, "n"]):
    return BODY.format(y=y)


@pytest.fixture
def drv() -> Any:
    with installed_driver(FakeDriver(), together, clustered, plain) as fake:
        yield fake


def test_a_cooperative_kernel_launches_with_the_cooperative_attribute(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    together(fake_session.zeros(1024, np.float32))
    [(_, grid, block, _, stream, attributes)] = drv.ex_launches
    assert (grid, block, attributes) == ((8, 1, 1), (128, 1, 1), {"cooperative": 1})
    assert int(stream) == int(fake_session.raw_stream) and not drv.launches


def test_a_warm_cooperative_call_launches_from_c_with_the_cooperative_attribute(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    together(fake_session.zeros(1024, np.float32))
    together(fake_session.zeros(2048, np.float32))
    assert drv.c_launches == 1 and not drv.launches
    [first, (_, grid, block, _, stream, attributes)] = drv.ex_launches
    assert (grid, block, attributes) == ((16, 1, 1), (128, 1, 1), {"cooperative": 1})
    assert int(stream) == int(fake_session.raw_stream) and first[5] == attributes


def test_a_warm_cooperative_grid_past_co_residency_is_refused_by_the_python_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    drv.blocks_per_sm = 1
    together(fake_session.zeros(1024, np.float32))
    with pytest.raises(LaunchConfigError, match="cannot be co-resident"):
        together(fake_session.zeros(133 * 128, np.float32))
    assert drv.c_launches == 0 and len(drv.ex_launches) == 1 and not fake_session.poisoned


def test_a_warm_cluster_call_launches_from_c_with_its_cluster_dimensions(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    clustered(fake_session.zeros(1024, np.float32))
    clustered(fake_session.zeros(4096, np.float32))
    assert drv.c_launches == 1
    [_, (_, grid, _, _, _, attributes)] = drv.ex_launches
    assert grid == (32, 1, 1) and attributes == {"cluster": (2, 1, 1)}


def test_a_warm_grid_that_is_not_a_multiple_of_the_cluster_is_refused_by_the_python_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    clustered(fake_session.zeros(1024, np.float32))
    with pytest.raises(LaunchConfigError, match="grid.x = 3 is not a multiple of cluster.x = 2"):
        clustered(fake_session.zeros(3 * 128, np.float32))
    assert drv.c_launches == 0 and len(drv.ex_launches) == 1


def test_a_cluster_larger_than_the_device_schedules_is_refused(fake_session: kd.Session, drv: FakeDriver) -> None:
    drv.cluster_blocks = 2  # cuOccupancyMaxPotentialClusterSize's answer for this kernel
    with pytest.raises(LaunchConfigError, match="schedules clusters of at most 2 blocks of this kernel"):
        clustered(fake_session.zeros(1024, np.float32), c=4)
    assert not drv.ex_launches and not fake_session.poisoned


def test_a_cluster_read_from_the_call_shapes_stays_on_the_python_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    @kd.kernel(grid=kd.cdiv("n", 128), block=128, cluster=("m", 1))
    def by_shape(y: kd.Out[kd.float32, "n"], pick: kd.In[kd.float32, "m"]):
        return BODY.format(y=y)

    for _ in range(2):
        by_shape(fake_session.zeros(1024, np.float32), fake_session.zeros(2, np.float32))
    assert len(drv.ex_launches) == 2 and drv.c_launches == 0
    assert drv.ex_launches[1][5] == {"cluster": (2, 1, 1)}


def test_a_cooperative_grid_that_cannot_be_co_resident_is_refused(fake_session: kd.Session, drv: FakeDriver) -> None:
    drv.blocks_per_sm = 1  # the double's device has 132 SMs: 132 blocks fit
    with pytest.raises(LaunchConfigError, match=r"cannot be co-resident.*1 such block\(s\) per SM x 132 SMs = 132"):
        together(fake_session.zeros(133 * 128, np.float32))
    assert not drv.ex_launches and not fake_session.poisoned
    together(fake_session.zeros(132 * 128, np.float32))
    assert len(drv.ex_launches) == 1


def test_a_cluster_kernel_launches_with_its_cluster_dimensions(fake_session: kd.Session, drv: FakeDriver) -> None:
    clustered(fake_session.zeros(1024, np.float32), c=4)
    [(_, grid, _, _, _, attributes)] = drv.ex_launches
    assert grid == (8, 1, 1) and attributes == {"cluster": (4, 1, 1)}


def test_a_grid_that_is_not_a_multiple_of_the_cluster_is_refused(fake_session: kd.Session, drv: FakeDriver) -> None:
    with pytest.raises(LaunchConfigError, match="grid.x = 3 is not a multiple of cluster.x = 2"):
        clustered(fake_session.zeros(3 * 128, np.float32))
    assert not drv.ex_launches


def test_a_computed_cluster_past_the_portable_size_is_refused_at_launch(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    with pytest.raises(LaunchConfigError, match="at most 8"):
        clustered(fake_session.zeros(16 * 128, np.float32), c=16)
    assert not drv.ex_launches


def test_a_cluster_on_a_device_older_than_sm_90_is_refused(fake_session: kd.Session, drv: FakeDriver) -> None:
    fake_session.gpu._facts["COMPUTE_CAPABILITY_MAJOR"] = 8  # the call builds for the device's sm_80
    with pytest.raises(DeclarationError, match="cluster= needs sm_90 or newer; this build is for sm_80"):
        clustered(fake_session.zeros(1024, np.float32))
    assert not drv.ex_launches


def test_a_plain_kernel_still_launches_with_cuLaunchKernel(fake_session: kd.Session, drv: FakeDriver) -> None:
    plain(fake_session.zeros(1024, np.float32))
    assert len(drv.launches) == 1 and not drv.ex_launches


def test_the_c_launch_path_declines_extended_launches() -> None:
    contract = together.inspect(np.zeros(256, np.float32), arch="sm_90").launch_contract
    assert contract.cooperative and contract.extended
    assert fastpath.launch_table(contract) is None


def test_cluster_declared_as_integers_must_hold_one_to_eight_blocks() -> None:
    def body(y: kd.Out[kd.float32, "n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="must hold 1..8 blocks"):
        kd.kernel(grid=16, block=32, cluster=(4, 4))(body)


def test_cluster_may_use_only_defined_symbols() -> None:
    def body(y: kd.Out[kd.float32, "n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match=r"cluster uses \['m'\]"):
        kd.kernel(grid=16, block=32, cluster="m")(body)


def test_cooperative_must_be_a_bool() -> None:
    def body(y: kd.Out[kd.float32, "n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="cooperative must be True or False"):
        kd.kernel(cooperative=1)(body)  # type: ignore[arg-type]


def test_a_cluster_build_for_an_arch_before_sm_90_is_refused() -> None:
    with pytest.raises(DeclarationError, match="cluster= needs sm_90 or newer"):
        clustered.inspect(np.zeros(256, np.float32), arch="sm_80")


def test_the_launch_contract_carries_the_declared_cluster() -> None:
    clustered_contract = clustered.inspect(np.zeros(256, np.float32), arch="sm_90").launch_contract
    plain_contract = plain.inspect(np.zeros(256, np.float32), arch="sm_90").launch_contract
    one = Expr("int", (1,))
    assert clustered_contract.cluster == (Expr("sym", ("c",)), one, one) and clustered_contract.extended
    assert plain_contract.cluster == () and not plain_contract.extended
