"""The C launch path (``kerneldsl._fastlaunch``) against the Python path, on the driver double.

The double hands out a C function pointer for cuLaunchKernel (a ctypes callback), so the C
path runs exactly as on a GPU: these tests compare what it launches with what the generated
adapter launches, and check that everything unusual goes back to the Python path, which
raises the same typed errors it always did.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.errors import (
    AliasingError,
    BindingError,
    ClosedError,
    LaunchError,
    OutOfMemoryError,
    ScalarConversionError,
    SessionPoisonedError,
    ShapeMismatchError,
    StickyCudaError,
    WrongSessionError,
)
from kerneldsl.jit.codegen import adapter_context, render_inputs
from kerneldsl.jit.launch_contract import launch_contract
from kerneldsl.jit.specialize import bind_declared
from kerneldsl.launch import fastpath
from kerneldsl.launch.fastpath import launch_table
from kerneldsl.runtime import Stream

pytestmark = pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")

SCALAR_TYPES = [
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


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];"


@kd.kernel(
    grid=(kd.cdiv("n", 32), kd.dmin("m", 4) + 1, kd.dmax(kd.sym("m") // 3, 2)),
    block=(32, kd.sym("TILE") - 6),
    shared=kd.sym("m") * 16,
)
def everything(
    out: kd.Out[kd.float32, ("m", "n")],
    a: kd.In[kd.float32, ("m", "n")],
    b: kd.In[kd.int16, "n"],
    c: kd.In[kd.float64, (3, "m")],
    f16: kd.Scalar[kd.float16],
    f32: kd.Scalar[kd.float32],
    f64: kd.Scalar[kd.float64],
    i8: kd.Scalar[kd.int8],
    i64: kd.Scalar[kd.int64],
    u16: kd.Scalar[kd.uint16],
    u64: kd.Scalar[kd.uint64],
    flag: kd.Scalar[kd.bool_],
    TILE: kd.Const[int] = 8,
):
    return "/* the driver double does not run kernels */"


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def per_block(out: kd.Out[kd.float32, kd.cdiv("n", 128)], x: kd.In[kd.float32, "n"]):
    return f"if (threadIdx.x == 0) {out}[blockIdx.x] = {x}[blockIdx.x * 128];"


@pytest.fixture
def drv(isolated_cache: None) -> Iterator[FakeDriver]:
    fake = FakeDriver()
    fake.snapshot_slots = 3
    with installed_driver(fake, saxpy, everything, scale32, per_block):
        yield fake


def _pair(s: kd.Session, n: int = 300) -> tuple[kd.DeviceArray, kd.DeviceArray]:
    return s.zeros(n, np.float32), s.zeros(n, np.float32)


def test_a_plain_device_call_is_remembered_and_the_next_one_launches_from_c(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(2))
    assert (saxpy._remembered_launches, drv.c_launches) == (1, 0)
    saxpy(dy, dx, np.float32(3))
    assert drv.c_launches == 1 and len(drv.launches) == 2


def test_the_c_path_launches_what_the_python_path_launches(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session, 1000)
    saxpy._call(dy, dx, np.float32(2.5))  # the Python path, which also remembers the launch
    saxpy(dy, dx, np.float32(2.5))
    assert drv.c_launches == 1
    python, c = drv.launches[-2:]
    assert python[:5] == c[:5]
    assert drv.param_bytes[-1] == drv.param_bytes[-2]


def _everything_args(s: kd.Session, m: int, n: int, scalars: dict[str, object]) -> tuple[object, ...]:
    out, a = s.zeros((m, n), np.float32), s.zeros((m, n), np.float32)
    b, c = s.zeros(n, np.int16), s.zeros((3, m), np.float64)
    return (out, a, b, c, *scalars.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    m=st.integers(0, 70),
    n=st.integers(1, 200),
    f16=st.floats(width=16),
    f32=st.floats(width=32),
    f64=st.floats(),
    i8=st.integers(-128, 127),
    i64=st.integers(-(2**63), 2**63 - 1),
    u16=st.integers(0, 2**16 - 1),
    u64=st.integers(0, 2**64 - 1),
    flag=st.booleans(),
)
def test_every_scalar_type_and_launch_dimension_matches_the_adapter(
    fake_session: kd.Session, drv: FakeDriver, m: int, n: int, **scalars: object
) -> None:
    drv.snapshot_slots = len(everything.inspect(*_everything_args(fake_session, 1, 1, scalars)).generated.abi)
    args = _everything_args(fake_session, m, n, scalars)
    everything._call(*args)
    before = drv.c_launches
    everything(*args)
    assert drv.c_launches == before + 1
    python, c = drv.launches[-2:]
    assert python[1:4] == c[1:4]
    assert drv.param_bytes[-1] == drv.param_bytes[-2]


def test_an_empty_grid_is_left_to_the_python_path_which_launches_nothing(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    dy, dx = _pair(fake_session, 0)
    saxpy(dy, dx, np.float32(1))
    saxpy(dy, dx, np.float32(1))
    assert drv.c_launches == 0 and not drv.launches


def test_numpy_scalar_types_are_guarded_separately(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    saxpy(dy, dx, 1.0)
    saxpy(dy, dx, 1.0)
    saxpy(dy, dx, np.float32(1))
    assert saxpy._remembered_launches == 2 and drv.c_launches == 2


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_a_scalar_out_of_range_goes_back_to_the_python_error(
    fake_session: kd.Session, drv: FakeDriver, value: int
) -> None:
    @kd.kernel(grid=1, block=1)
    def offset(y: kd.InOut[kd.int32, "n"], k: kd.Scalar[kd.int32]):
        return f"{y}[0] += {k};"

    dy = fake_session.zeros(4, np.int32)
    offset(dy, 1)
    launches = len(drv.launches)
    with pytest.raises(BindingError, match="does not fit"):
        offset(dy, value)
    assert len(drv.launches) == launches


def _closed_array(s: kd.Session, dy: kd.DeviceArray, dx: kd.DeviceArray) -> tuple[object, ...]:
    dx.close()
    return dy, dx


def _closed_session(s: kd.Session, dy: kd.DeviceArray, dx: kd.DeviceArray) -> tuple[object, ...]:
    s.close()
    return dy, dx


REFUSED = {  # what a warm call can go wrong with -> the Python path's error
    "closed array": (_closed_array, ClosedError),
    "closed session": (_closed_session, ClosedError),
    "shape mismatch": (lambda s, dy, dx: (dy, s.zeros(299, np.float32)), ShapeMismatchError),
    "aliased arrays": (lambda s, dy, dx: (dy, dy), AliasingError),
    "another session": (lambda s, dy, dx: (dy, kd.Session(0).zeros(300, np.float32)), WrongSessionError),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_call_the_c_path_cannot_take_gets_the_python_paths_error(
    fake_session: kd.Session, drv: FakeDriver, case: str
) -> None:
    make_args, error = REFUSED[case]
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    args = make_args(fake_session, dy, dx)
    with pytest.raises(error):
        saxpy(*args, np.float32(1))
    assert drv.c_launches == 0


def test_launch_overrides_take_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    saxpy(dy, dx, np.float32(1), grid=5)
    saxpy(dy, dx, alpha=np.float32(1))
    assert drv.c_launches == 0 and drv.launches[-2][1] == (5, 1, 1)


def test_a_call_on_a_stream_is_remembered_for_that_stream(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    stream = fake_session.create_stream()
    saxpy(dy, dx, np.float32(1), stream=stream)
    saxpy(dy, dx, np.float32(1), stream=stream)
    assert drv.c_launches == 1 and drv.launches[-1][4] == stream._cu


def test_stream_none_is_the_session_stream_on_the_c_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    saxpy(dy, dx, np.float32(1), stream=None)
    assert drv.c_launches == 1 and drv.launches[-1][4] == fake_session.stream._cu


def test_another_stream_is_not_taken_by_an_entry_made_for_one(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    first, second = fake_session.create_stream(), fake_session.create_stream()
    saxpy(dy, dx, np.float32(1), stream=first)
    saxpy(dy, dx, np.float32(1), stream=second)
    saxpy(dy, dx, np.float32(1))
    assert drv.c_launches == 0 and [launch[4] for launch in drv.launches[-3:]] == [
        first._cu,
        second._cu,
        fake_session.stream._cu,
    ]


def test_a_closed_stream_is_refused_by_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    stream = fake_session.create_stream()
    saxpy(dy, dx, np.float32(1), stream=stream)
    stream.close()
    with pytest.raises(ClosedError):
        saxpy(dy, dx, np.float32(1), stream=stream)
    assert drv.c_launches == 0


def test_the_c_path_reads_a_streams_closed_flag_where_it_reads_an_arrays() -> None:
    assert Stream._closed is DeviceArray._closed  # one Handle member: one offset in _fastlaunch.c


def test_an_op_on_a_stream_is_remembered_for_that_stream(fake_session: kd.Session, drv: FakeDriver) -> None:
    a, out = fake_session.zeros(16, np.float32), fake_session.zeros(16, np.float32)
    stream = fake_session.create_stream()
    kd.ops.negative(a, out=out, stream=stream)
    assert kd.ops.negative(a, out=out, stream=stream) is out
    assert drv.c_launches == 1 and drv.launches[-1][4] == stream._cu


def test_an_op_allocating_on_a_stream_waits_for_the_session_stream_first(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(16, np.float32)
    stream = fake_session.create_stream()
    first = kd.ops.negative(a, stream=stream)  # kept: its free would wait for the stream too
    mark = len(drv.calls)
    result = kd.ops.negative(a, stream=stream)
    tail = drv.calls[mark:]
    assert tail.index("cuMemAllocFromPoolAsync") < tail.index("cuStreamWaitEvent") < tail.index("cuLaunchKernel")
    assert drv.launches[-1][4] == stream._cu and result.shape == first.shape == (16,)


def test_queued_frees_are_released_by_the_python_path_first(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    doomed = fake_session.zeros(8, np.float32)
    del doomed
    assert fake_session.owned.deferred
    saxpy(dy, dx, np.float32(1))
    assert not fake_session.owned.deferred and drv.c_launches == 0
    saxpy(dy, dx, np.float32(1))
    assert drv.c_launches == 1


def test_launches_during_capture_take_the_python_path_that_keeps_arguments_alive(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    with fake_session.capture() as graph:
        saxpy(dy, dx, np.float32(1))
    assert drv.c_launches == 0
    assert any(isinstance(kept, tuple) and any(k is dy for k in kept) for kept in graph._keep)


def test_a_launch_error_from_the_c_path_is_typed_and_leaves_the_session_usable(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    drv.fail["cuLaunchKernel"] = [1]  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(LaunchError):
        saxpy(dy, dx, np.float32(1))
    assert drv.c_launches == 1
    saxpy(dy, dx, np.float32(1))
    assert drv.c_launches == 2


def test_a_sticky_error_from_the_c_path_poisons_the_session(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    drv.fail["cuLaunchKernel"] = [700]  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(StickyCudaError):
        saxpy(dy, dx, np.float32(1))
    with pytest.raises(SessionPoisonedError):
        saxpy(dy, dx, np.float32(1))


def test_invalid_context_from_the_c_path_is_retried_by_the_python_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    dy, dx = _pair(fake_session)
    saxpy(dy, dx, np.float32(1))
    drv.fail["cuLaunchKernel"] = [201]  # CUDA_ERROR_INVALID_CONTEXT
    saxpy(dy, dx, np.float32(1))
    assert len(drv.launches) == 2


def test_at_most_eight_launches_are_remembered_newest_first(fake_session: kd.Session, drv: FakeDriver) -> None:
    arrays = [_pair(fake_session, n) for n in range(1, 11)]
    dtypes = [np.float32, np.float64]
    for dtype in dtypes:
        for dy, dx in arrays:
            if dy.dtype == dtype:
                saxpy(dy, dx, dtype(1))
    for _ in range(3):
        for t in (np.int32, np.int64, np.int16, np.uint8, np.float16, np.float64, np.int8, np.uint16, np.uint32):
            a = fake_session.zeros(4, t)
            saxpy(a, fake_session.zeros(4, t), t(1))
    assert saxpy._remembered_launches == 8


def test_a_repeated_call_does_not_remember_its_launch_twice(fake_session: kd.Session, drv: FakeDriver) -> None:
    dy, dx = _pair(fake_session)
    for _ in range(3):
        saxpy._call(dy, dx, np.float32(1))
    assert saxpy._remembered_launches == 1


def _saxpy_inputs(s: kd.Session) -> tuple[str, Any]:
    spec = saxpy.specialize(s.zeros(4, np.float32), s.zeros(4, np.float32), np.float32(1), arch="sm_90")
    return spec.arch, render_inputs(spec, saxpy.body)


def test_the_adapter_is_rendered_from_the_launch_contract_the_c_table_is_made_of(fake_session: kd.Session) -> None:
    arch, inputs = _saxpy_inputs(fake_session)
    assert inputs.adapter_context == adapter_context(inputs.launch, arch)
    nargs, arrays, *_ = launch_table(inputs.launch) or ()
    assert (nargs, arrays) == (3, ((0, 1), (1, 1)))


def test_a_change_to_the_launch_contract_changes_both_launch_paths(fake_session: kd.Session) -> None:
    arch, inputs = _saxpy_inputs(fake_session)
    assert inputs.launch.aliases == (("y", "x"),)  # y is written: the two may not overlap
    unchecked = dataclasses.replace(inputs.launch, aliases=())
    assert adapter_context(unchecked, arch)["alias_checks"] == []
    assert (launch_table(inputs.launch) or ())[4] == ((0, 1),) and (launch_table(unchecked) or ())[4] == ()


def test_a_strided_array_has_no_table_and_stays_on_the_python_path() -> None:
    @kd.kernel(grid=1, block=1, strided=("x",))
    def first(y: kd.Out[kd.float32, "n"], x: kd.In[kd.float32, "n"]):
        return f"{y}[0] = {x}[0];"

    contract = launch_contract(bind_declared(first.signature, {}, {}, "sm_90", 32))
    assert [s.source for s in contract.slots] == ["pointer", "pointer", "stride", "symbol"]
    assert launch_table(contract) is None


def test_bfloat16_scalars_have_no_table_and_stay_on_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    bfloat16 = pytest.importorskip("ml_dtypes").bfloat16
    spec = saxpy.specialize(fake_session.zeros(4, bfloat16), fake_session.zeros(4, bfloat16), bfloat16(1), arch="sm_90")
    assert launch_table(launch_contract(spec)) is None


def test_a_malformed_table_is_refused_when_the_launch_is_made(fake_session: kd.Session) -> None:
    from kerneldsl import _fastlaunch

    with pytest.raises(ValueError, match="opcode"):
        _fastlaunch.Launch(
            table=(1, ((0, 1),), (), (), (), ((99, 0),), ((0, 0),), 32),
            session=fake_session,
            guards=(0,),
            launch=1,
            function=1,
            stream=1,
        )


def test_a_computed_extent_is_checked_from_c_after_the_first_call(fake_session: kd.Session, drv: FakeDriver) -> None:
    x = fake_session.zeros(1000, np.float32)
    per_block(fake_session.zeros(8, np.float32), x)
    per_block(fake_session.zeros(8, np.float32), x)
    assert drv.c_launches == 1 and len(drv.launches) == 2
    python, c = drv.launches
    assert python[:4] == c[:4]


def test_a_wrong_computed_extent_on_a_warm_call_gets_the_python_paths_error(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    x = fake_session.zeros(1000, np.float32)
    per_block(fake_session.zeros(8, np.float32), x)
    with pytest.raises(ShapeMismatchError, match=r"axis 0 must be cdiv\(n, 128\) = 8, got 7"):
        per_block(fake_session.zeros(7, np.float32), x)
    assert (len(drv.launches), drv.c_launches) == (1, 0)


def test_a_table_whose_check_names_no_computed_extent_is_refused(fake_session: kd.Session) -> None:
    from kerneldsl import _fastlaunch

    programs = ((1, 1), (0, 0)) * 7
    with pytest.raises(ValueError, match="computed extent"):
        _fastlaunch.Launch(
            table=(1, ((0, 1),), (), ((0, 0, fastpath.CHECK_COMPUTED, 0),), (), programs, ((0, 0),), 32),
            session=fake_session,
            guards=(0,),
            launch=1,
            function=1,
            stream=1,
        )


@pytest.mark.parametrize("stream_object", [object(), 3, "stream"])
def test_a_launch_for_a_stream_that_is_not_a_stream_is_refused(fake_session: kd.Session, stream_object: object) -> None:
    from kerneldsl import _fastlaunch

    with pytest.raises(TypeError, match="stream_object"):
        _fastlaunch.Launch(
            table=(1, ((0, 1),), (), (), (), ((1, 1), (0, 0)) * 7, ((0, 0),), 32),
            session=fake_session,
            guards=(0,),
            launch=1,
            function=1,
            stream=1,
            stream_object=stream_object,
        )


def test_with_kerneldsl_c_launch_0_every_call_takes_the_python_path() -> None:
    code = "import kerneldsl as kd, kerneldsl.launch.fastpath as f; print(f.ENABLED, kd.Kernel.__mro__[1].__name__)"
    env = {**os.environ, "KERNELDSL_C_LAUNCH": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    assert out.stdout.split() == ["False", "PythonPathCallable"]


def test_an_op_with_out_runs_from_c_after_its_first_call_and_returns_out(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a, b, out = (fake_session.zeros((4, 8), np.float32) for _ in range(3))
    assert kd.ops.add(a, b, out=out) is out
    assert kd.ops.add(a, b, out=out) is out
    assert drv.c_launches == 1
    python, c = drv.launches[-2:]
    assert python[:5] == c[:5] and drv.param_bytes[-1] == drv.param_bytes[-2]


def test_ops_the_c_path_cannot_check_take_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    a, row, out = (
        fake_session.zeros((4, 8), np.float32),
        fake_session.zeros(8, np.float32),
        fake_session.zeros((4, 8), np.float32),
    )
    before = kd.ops.add._remembered_launches, kd.ops.multiply._remembered_launches
    for _ in range(2):
        kd.ops.add(a, row, out=out)  # broadcasting: the op's Python path checks shapes and aliasing
        kd.ops.multiply(a, row)  # the same without out=
    assert (kd.ops.add._remembered_launches, kd.ops.multiply._remembered_launches) == before
    drv.c_launches = 0
    kd.ops.subtract(a, a, out=out)
    with pytest.raises(ValueError, match="shape"):
        kd.ops.subtract(a, fake_session.zeros((4, 7), np.float32), out=out)
    assert drv.c_launches == 0


def test_an_op_without_out_allocates_its_result_from_c_after_its_first_call(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a, b = (fake_session.zeros((4, 8), np.float32) for _ in range(2))
    first = kd.ops.add(a, b)
    mark = len(drv.calls)
    second = kd.ops.add(a, b)
    assert drv.c_launches == 1 and type(second) is kd.DeviceArray
    assert (second.shape, second.dtype, second.session) == (first.shape, first.dtype, fake_session)
    assert second.ptr != first.ptr and second.ptr in drv.mem
    tail = drv.calls[mark:]
    assert tail.index("cuMemAllocFromPoolAsync") < tail.index("cuLaunchKernel")
    python, c = drv.launches[-2:]
    assert python[:5] == c[:5] and drv.param_bytes[-1][:16] == drv.param_bytes[-2][:16]


def test_a_result_allocated_from_c_is_freed_like_any_dropped_array(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    ptr = kd.ops.negative(a).ptr  # from C, dropped at once: its free is queued, not done
    assert drv.c_launches == 1 and list(fake_session.owned.deferred) == [("mem", ptr)] and ptr in drv.mem
    kept = kd.ops.negative(a)  # the C path's allocation frees what was queued first
    assert drv.c_launches == 2 and ptr not in drv.mem and not fake_session.owned.deferred and kept.ptr in drv.mem


def _slot_values(a: DeviceArray) -> dict[str, object]:
    names = {n for cls in type(a).__mro__ for n in getattr(cls, "__slots__", ())} - {"__weakref__"}
    return {n: getattr(a, n) for n in names - {"ptr", "_raw", "_ref"}}


def test_a_result_allocated_in_c_is_an_owning_array_like_the_python_allocators(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    allocs = drv.c_allocs
    made = kd.ops.negative(a)
    python = DeviceArray(fake_session, 64, np.float32)
    assert drv.c_allocs == allocs + 1 and drv.c_launches == 1
    assert _slot_values(made) == _slot_values(python) and not made.closed
    assert made._raw == made.ptr and made.ptr in drv.mem
    assert fake_session.owned.handles[id(made._ref)] == (made._ref, "mem", made.ptr)
    made.close()
    assert made.ptr not in drv.mem and id(made._ref) not in fake_session.owned.handles


def test_empty_makes_its_array_in_c_like_the_constructor(fake_session: kd.Session, drv: FakeDriver) -> None:
    made = fake_session.empty((4, 8), np.float16)
    python = DeviceArray(fake_session, (4, 8), np.float16)
    assert drv.c_allocs == 1 and _slot_values(made) == _slot_values(python)
    assert fake_session.owned.handles[id(made._ref)] == (made._ref, "mem", made.ptr) and made.ptr in drv.mem


@pytest.mark.parametrize("shape", [[4, 8], 0, (3, 0)], ids=["list", "zero-size", "zero-size 2-d"])
def test_empty_leaves_unhashable_and_zero_size_shapes_to_the_constructor(
    fake_session: kd.Session, drv: FakeDriver, shape: object
) -> None:
    made = fake_session.empty(shape, np.float32)
    assert drv.c_allocs == 0 and made.shape == np.empty(shape).shape


def test_empty_during_a_capture_takes_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    fake_session.empty(8, np.float32)
    with fake_session.capture():
        fake_session.empty(8, np.float32)
    assert drv.c_allocs == 1 and drv.count("cuMemAllocFromPoolAsync") == 2


def test_empty_on_a_closed_session_raises_closed_error(drv: FakeDriver) -> None:
    s = kd.Session(0)
    s.empty(8, np.float32)
    s.close()
    with pytest.raises(ClosedError):
        s.empty(8, np.float32)
    assert drv.c_allocs == 1


def test_closing_the_session_frees_and_closes_arrays_made_in_c(drv: FakeDriver) -> None:
    s = kd.Session(0)
    made = s.empty(64, np.float32)
    ptr = made.ptr
    s.close()
    assert drv.c_allocs == 1 and ptr not in drv.mem and made.closed
    with pytest.raises(ClosedError):
        made.to_host()


def test_an_allocator_refuses_a_template_of_another_session(fake_session: kd.Session, drv: FakeDriver) -> None:
    with kd.Session(0) as other:
        with pytest.raises(TypeError, match="template"):
            fake_session.native_allocator().make(other.template(8, np.float32))


def test_a_template_owns_no_memory_and_is_refused_as_an_operand(fake_session: kd.Session, drv: FakeDriver) -> None:
    template = DeviceArray.template(fake_session, (4, 8), np.float32)
    assert (template.ptr, template.nbytes, template.closed) == (0, 128, True)
    with pytest.raises(ClosedError):
        kd.ops.negative(template)


def test_results_allocated_in_c_free_the_queued_memory_in_c(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = fake_session.zeros(64, np.float32)
    for _ in range(4):
        kd.ops.negative(a)  # each result dropped at once: its free is queued
    assert drv.c_frees == 3 and len(fake_session.owned.deferred) == 1  # the last one's is still queued


def test_with_a_second_stream_queued_frees_take_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = fake_session.zeros(64, np.float32)
    stream = fake_session.create_stream()
    kd.ops.negative(a)
    kd.ops.negative(a)  # from C, queued
    waits = drv.count("cuStreamWaitEvent")
    kd.ops.negative(a)
    assert drv.c_frees == 0 and drv.count("cuStreamWaitEvent") == waits + 1  # freed after `stream`'s work
    assert drv.c_launches == 2 and not stream.closed  # the stream lives on: frees keep waiting for it


def test_a_synchronize_after_finished_work_leaves_nothing_queued_so_the_next_launch_stays_in_c(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    launches = drv.c_launches
    fake_session.synchronize()  # the fake's work is done when queued, as the CPU device's is
    assert not fake_session.owned.deferred and drv.count("cuEventCreate") == drv.count("cuEventDestroy")
    kd.ops.negative(a)
    assert drv.c_launches == launches + 1


def test_queued_frees_of_other_kinds_take_the_python_path(fake_session: kd.Session, drv: FakeDriver) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    dropped = fake_session.create_event()
    del dropped  # its finalizer queues it for destruction
    gc.collect()
    assert [kind for kind, _ in fake_session.owned.deferred] == ["event"]
    destroyed, allocs = drv.count("cuEventDestroy"), drv.c_allocs
    kept = kd.ops.negative(a)
    assert drv.c_allocs == allocs and drv.count("cuEventDestroy") > destroyed and not fake_session.owned.deferred
    kd.ops.negative(a)
    assert drv.c_allocs == allocs + 1 and kept.ptr in drv.mem


def test_with_another_context_current_the_result_comes_from_the_python_allocator(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    allocs = drv.c_allocs
    drv.cuCtxPushCurrent(0xC0FFEE)  # someone else's context on this thread
    try:
        result = kd.ops.negative(a)
    finally:
        drv.cuCtxPopCurrent()
    assert drv.c_allocs == allocs and drv.c_launches == 1 and result.ptr in drv.mem


def test_a_free_failing_in_c_goes_back_to_the_queue_for_the_python_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    kept = kd.ops.negative(a)
    allocs = drv.c_allocs
    ptr = kd.ops.negative(a).ptr  # from C, queued
    frees, c_frees = drv.count("cuMemFreeAsync"), drv.c_frees
    drv.fail_next("cuMemFreeAsync", 1)  # CUDA_ERROR_INVALID_VALUE once: the Python path frees it again
    result = kd.ops.negative(a)
    assert drv.count("cuMemFreeAsync") == frees + 2 and ptr not in drv.mem and not fake_session.owned.deferred
    assert drv.c_frees == c_frees and drv.c_allocs == allocs + 1 and {kept.ptr, result.ptr} <= drv.mem.keys()


def test_a_driver_without_a_pool_entry_point_allocates_through_python(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    drv.c_entries_off = frozenset({b"cuMemAllocFromPoolAsync"})
    a = fake_session.zeros(64, np.float32)
    for _ in range(3):
        kd.ops.negative(a)
    assert drv.c_launches == 2 and drv.c_allocs == 0 and drv.c_frees == 0


def test_an_allocating_op_declined_by_c_after_allocating_frees_that_result(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    drv.fail["cuLaunchKernel"] = [201]  # CUDA_ERROR_INVALID_CONTEXT: the C path declines, Python retries
    result = kd.ops.negative(a)
    assert result.ptr in drv.mem and len(drv.launches) == 2  # the first call's and the Python path's
    assert drv.count("cuMemAllocFromPoolAsync") == 4  # a, the first result, the declined one, result
    assert drv.count("cuMemFreeAsync") == 2 and not fake_session.owned.deferred  # the first result and the declined one


def test_an_allocation_failing_in_the_c_path_raises_the_python_paths_error(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    kd.ops.negative(a)
    allocs = drv.c_allocs
    drv.fail_next("cuMemAllocFromPoolAsync", 2, 2, 2)  # out of memory in C, in Python, and after the trim
    with pytest.raises(OutOfMemoryError):
        kd.ops.negative(a)
    assert drv.c_launches == 0 and drv.c_allocs == allocs and drv.count("cuMemPoolTrimTo") == 1


def test_allocating_ops_on_a_stream_or_in_a_capture_take_the_python_path(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    a = fake_session.zeros(64, np.float32)
    stream = fake_session.create_stream()
    for _ in range(2):
        kd.ops.negative(a, stream=stream)
    kd.ops.negative(a)
    allocations = drv.count("cuMemAllocFromPoolAsync")
    with fake_session.capture():
        kd.ops.negative(a)
    assert drv.c_launches == 0 and drv.count("cuMemAllocFromPoolAsync") == allocations + 1


@pytest.mark.parametrize(
    "options", [{"allocate": object()}, {"allocate": list, "out_keyword": False}], ids=["not callable", "no out="]
)
def test_an_allocating_launch_needs_a_callable_and_an_out_keyword(
    fake_session: kd.Session, options: dict[str, object]
) -> None:
    from kerneldsl import _fastlaunch

    with pytest.raises(ValueError, match="allocate="):
        _fastlaunch.Launch(
            table=(1, ((0, 1),), (), (), (), ((1, 1), (0, 0)) * 7, ((0, 0),), 32),
            session=fake_session,
            guards=(0,),
            launch=1,
            function=1,
            stream=1,
            **{"out_keyword": True, **options},
        )


def test_an_allocating_op_on_a_closed_session_gets_the_python_paths_error(drv: FakeDriver) -> None:
    s = kd.Session(0)
    a = s.zeros(64, np.float32)
    kd.ops.negative(a)
    kd.ops.negative(a)
    s.close()
    allocations = drv.count("cuMemAllocFromPoolAsync")
    with pytest.raises(ClosedError):
        kd.ops.negative(a)
    assert drv.count("cuMemAllocFromPoolAsync") == allocations


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scale32(y: kd.InOut[kd.float32, "n"], alpha: kd.Scalar[kd.float32]):
    return f"index_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] *= {alpha};"


def test_a_numpy_scalar_that_would_round_is_refused_on_every_call(fake_session: kd.Session, drv: FakeDriver) -> None:
    y = fake_session.zeros(8, np.float32)
    scale32(y, np.float64(0.5))  # exact as a float32: launched
    scale32(y, np.float64(0.5))
    with pytest.raises(ScalarConversionError) as info:
        scale32(y, np.float64(0.1))
    assert (info.value.param, info.value.declared, info.value.given) == ("alpha", "float32", "float64")
    assert len(drv.launches) == 2 and drv.c_launches == 0  # such calls stay on the Python path


def test_a_python_float_and_an_exact_numpy_scalar_take_the_c_path_unchecked(
    fake_session: kd.Session, drv: FakeDriver
) -> None:
    y = fake_session.zeros(8, np.float32)
    for value in (0.1, 0.1, np.float32(0.1), np.float32(0.1)):
        scale32(y, value)
    assert len(drv.launches) == 4 and drv.c_launches == 2
    assert not any(b.scalar_checks for b in scale32._bound.values())
