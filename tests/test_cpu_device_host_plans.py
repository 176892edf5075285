"""The CPU device's own plans for kerneldsl's kernels: reductions, fused rows and scans take
stages with no barrier or collective (a thread a run), which the host runs as plain loops;
``KERNELDSL_CPU_PLAN=gpu`` runs the GPU's plans instead. Results are NumPy's either way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.elementwise import HOST_RUN, HOST_RUNS, HOST_TILES
from kerneldsl.array.reduction.axes import memory_order
from kerneldsl.array.reduction.plan import COPY_HOST
from kerneldsl.array.reduction.strategy import HOST_PIECE, extents, host_step
from kerneldsl.jit.host_compile import SIMD_MATH
from kerneldsl.runtime.selection import PLAN_ENV
from kerneldsl.runtime.views import reads_across_rows

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="no host C++ compiler for the CPU device")


@kd.fuse
def softmax(x: Any) -> Any:
    e = kd.ops.exp(x - kd.ops.max(x, axis=-1, keepdims=True))
    return e / kd.ops.sum(e, axis=-1, keepdims=True)


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize(
    ("shape", "axis", "stage"), [((40, 50), 1, "host-rows"), ((40, 50), 0, "host-columns"), ((9,), None, "host-rows")]
)
def test_reductions_take_the_host_stage_of_their_layout(shape: tuple[int, ...], axis: Any, stage: str) -> None:
    assert ops.sum.strategy(np.zeros(shape, np.float32), axis=axis, multiprocessors=2, host=True).variant.stage == stage


def test_a_gathered_layout_keeps_the_gpu_stage_on_the_host() -> None:
    step = ops.sum.strategy(np.zeros((4, 5, 6), np.float32), axis=(0, 2), multiprocessors=2, host=True)
    assert not step.variant.stage.startswith("host-")


@pytest.mark.parametrize(("value_bytes", "lanes"), [(1, 64), (2, 32), (4, 16), (8, 8)])
def test_a_host_row_keeps_a_vector_registers_worth_of_accumulators(value_bytes: int, lanes: int) -> None:
    step = host_step(extents((1 << 20,), (0,)), value_bytes, 2, lambda v: None)  # type: ignore[arg-type,return-value]
    assert step.variant.lanes == lanes


def test_long_runs_split_over_threads_of_at_least_a_piece_each() -> None:
    step = host_step(extents((1 << 22,), (0,)), 4, 2, lambda v: None)  # type: ignore[arg-type,return-value]
    assert step.splits > 1 and (1 << 22) // step.splits >= HOST_PIECE
    assert step.partials == step.splits and step.tickets == 1


def test_a_host_reduction_build_says_its_plan() -> None:
    x = np.zeros((40, 50), np.float32)
    step = ops.sum.strategy(x, axis=1, multiprocessors=2, host=True)
    build = step.kernel.inspect(x, np.empty(40, np.float32), 50, 40, 1, 1, 40, 50, arch="sm_90")
    assert build.decisions.stage == "host-rows" and build.decisions.host_plan
    assert "__syncthreads" not in build.cuda_source and "__shfl" not in build.cuda_source


@pytest.mark.parametrize("shape", [(1 << 20,), (3, 300000), (300000, 3), (5, 70001, 3)])
@pytest.mark.parametrize("op", ["sum", "max", "argmin"])
def test_split_host_reductions_match_numpy(cpu: Any, shape: tuple[int, ...], op: str) -> None:
    x = (np.random.default_rng(3).integers(-64, 64, shape) / 8).astype(np.float32)  # exact sums
    d = cpu.to_device(x)
    for axis in [None, *range(len(shape))] if op != "argmin" else range(len(shape)):
        np.testing.assert_array_equal(
            np.asarray(getattr(ops, op)(d, axis=axis).to_host()), getattr(np, op)(x, axis=axis)
        )


@pytest.mark.parametrize("axis", [0, 1])
def test_host_argmax_returns_the_first_of_ties_and_the_first_nan(cpu: Any, axis: int) -> None:
    x = np.zeros((37, 1000), np.float32)
    x[5, 700] = x[5, 900] = x[20, 3] = 2.0
    x[30, 400] = x[30, 600] = np.nan
    x = x if axis == 1 else np.ascontiguousarray(x.T)
    np.testing.assert_array_equal(ops.argmax(cpu.to_device(x), axis=axis).to_host(), np.argmax(x, axis=axis))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint64", "bool"])
@pytest.mark.parametrize("length", [1, 5, 15, 16, 31, 33, 47, 100])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_host_arg_reductions_of_rows_shorter_and_longer_than_the_lanes_match_numpy(
    cpu: Any, dtype: str, length: int, op: str
) -> None:
    # few distinct values: every row has ties; a float row also has NaNs, -0.0 and infinities
    x = np.random.default_rng(length).integers(-2, 3, (64, length)).astype(dtype)
    if dtype.startswith("float"):
        x[::7, length // 2] = np.nan
        x[1::5, -1] = -0.0
        x[2::9, 0] = np.inf
        x[3::11] = -np.inf
    assert ops.argmax.strategy(x, axis=1, multiprocessors=2, host=True).variant.stage == "host-rows"
    got = getattr(ops, op)(cpu.to_device(x), axis=1).to_host()
    np.testing.assert_array_equal(got, getattr(np, op)(x, axis=1))


@pytest.mark.parametrize("nan", [False, True])
def test_split_host_argmax_of_a_long_line_takes_the_first_best(cpu: Any, nan: bool) -> None:
    x = np.zeros(1 << 20, np.float32)
    x[[70000, 400000, 900000]] = 2.0
    if nan:
        x[[600000, 800000]] = np.nan
    assert ops.argmax.strategy(x, axis=0, multiprocessors=2, host=True).splits > 1
    assert int(ops.argmax(cpu.to_device(x), axis=0).to_host()) == np.argmax(x)


def test_the_gpu_plan_on_request_gives_the_same_sums(cpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x = (np.random.default_rng(4).integers(-64, 64, (300, 700)) / 8).astype(np.float32)
    d = cpu.to_device(x)
    host = ops.sum(d, axis=1).to_host()
    monkeypatch.setenv(PLAN_ENV, "gpu")
    np.testing.assert_array_equal(ops.sum(d, axis=1).to_host(), host)


@pytest.mark.parametrize("shape", [(64, 1000), (300, 37), (5, 4096)])
def test_fused_rows_on_the_host_match_numpy(cpu: Any, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    got = softmax(cpu.to_device(x)).to_host()
    np.testing.assert_allclose(got, numpy_softmax(x.astype(np.float64)), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize(("shape", "axis"), [((1000, 300), 1), ((1000, 300), 0), ((37, 100, 129), 2), ((100000,), 0)])
def test_host_scans_match_numpy(cpu: Any, shape: tuple[int, ...], axis: int) -> None:
    x = (np.random.default_rng(6).integers(-8, 8, shape) / 8).astype(np.float32)
    np.testing.assert_array_equal(ops.cumsum(cpu.to_device(x), axis=axis).to_host(), np.cumsum(x, axis=axis))


BROADCASTS = {
    "a row": ((300, 1031), (1031,)),
    "a column": ((300, 1031), (300, 1)),
    "rows shorter than a run": ((2000, 3), (1, 3)),
    "three axes": ((7, 129, 17), (129, 1)),
}


@pytest.mark.parametrize("shapes", BROADCASTS.values(), ids=BROADCASTS.keys())
def test_broadcast_elementwise_ops_on_the_host_match_numpy(cpu: Any, shapes: tuple[tuple[int, ...], ...]) -> None:
    rng = np.random.default_rng(5)
    a, b = ((rng.integers(-64, 64, s) / 8).astype(np.float32) for s in shapes)  # exact sums
    np.testing.assert_array_equal(ops.add(cpu.to_device(a), cpu.to_device(b)).to_host(), a + b)


def test_a_0d_operand_beside_broadcast_ones_is_read_at_its_one_element_on_the_host(cpu: Any) -> None:
    a = (np.random.default_rng(10).integers(-64, 64, (2, 5, 4)) / 8).astype(np.float32)
    keep = np.tri(5, 4, dtype=bool)
    zero = cpu.to_device(np.array(0.5, np.float32))
    got = ops.where(cpu.to_device(keep), cpu.to_device(a), zero).to_host()
    np.testing.assert_array_equal(got, np.where(keep, a, np.float32(0.5)))


VIEWS = {
    "every other row, every third column": (slice(None, None, 2), slice(None, None, 3)),
    "a block": (slice(3, 200), slice(5, 900)),
    "a reversed row order": (slice(None, None, -1), slice(None)),
}


@pytest.mark.parametrize("index", VIEWS.values(), ids=VIEWS.keys())
def test_strided_elementwise_ops_on_the_host_read_and_write_views_as_numpy(cpu: Any, index: Any) -> None:
    x = (np.random.default_rng(6).integers(-64, 64, (400, 1000)) / 8).astype(np.float32)
    d = cpu.to_device(x)
    view, host_view = d[index], x[index]
    np.testing.assert_array_equal(ops.multiply(view, 2.0).to_host(), host_view * 2)
    np.testing.assert_array_equal(ops.add(view.T, view.T).to_host(), host_view.T * 2)
    ops.negative(view, out=view)
    np.testing.assert_array_equal(d.to_host()[index], -host_view)


def _exact(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Multiples of 1/8 in [-8, 8): sums and negations are exact in every dtype below."""
    values = np.random.default_rng(seed).integers(-64, 64, shape) / 8
    return (values + 1j * values[..., ::-1] if np.dtype(dtype).kind == "c" else values).astype(dtype)


def _swap_last(a: Any) -> Any:
    """``a`` with its last two axes swapped: a transposed view (unit stride across its rows)."""
    return a.transpose(*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)


# Rows and columns that are and are not multiples of a tile's (16 x 64), a 3-d array, a short tile.
TRANSPOSED_SHAPES = [(37, 70), (300, 1031), (16, 64), (5, 33, 130), (129, 17)]
TRANSPOSED_DTYPES = ["float32", "float16", "float64", "int8", "complex128"]


@pytest.mark.parametrize("dtype", TRANSPOSED_DTYPES)
@pytest.mark.parametrize("shape", TRANSPOSED_SHAPES, ids=str)
def test_a_transposed_operand_on_the_host_is_read_as_numpy_reads_it(
    cpu: Any, shape: tuple[int, ...], dtype: str
) -> None:
    x = _exact(shape, dtype, 11)
    view, host_view = _swap_last(cpu.to_device(x)), _swap_last(x)
    y = _exact(host_view.shape, dtype, 12)
    np.testing.assert_array_equal(ops.negative(view).to_host(), -host_view)
    np.testing.assert_array_equal(ops.add(view, cpu.to_device(y)).to_host(), host_view + y)
    np.testing.assert_array_equal(ops.multiply(view, view).to_host(), host_view * host_view)


@pytest.mark.parametrize("shape", TRANSPOSED_SHAPES, ids=str)
def test_a_row_or_a_column_broadcast_beside_a_transposed_operand_matches_numpy(
    cpu: Any, shape: tuple[int, ...]
) -> None:
    x = _exact(shape, "float32", 13)
    view, host_view = _swap_last(cpu.to_device(x)), _swap_last(x)
    row, column = _exact(host_view.shape[-1:], "float32", 14), _exact(host_view.shape[:-1] + (1,), "float32", 15)
    np.testing.assert_array_equal(ops.add(view, cpu.to_device(row)).to_host(), host_view + row)
    np.testing.assert_array_equal(ops.subtract(view, cpu.to_device(column)).to_host(), host_view - column)


def test_a_transposed_operand_with_its_rows_reversed_matches_numpy(cpu: Any) -> None:
    x = _exact((300, 1031), "float32", 16)
    view = cpu.to_device(x)[::-1].T  # a stride of -1 across the result's rows
    np.testing.assert_array_equal(ops.negative(view).to_host(), -x[::-1].T)


@pytest.mark.parametrize("shape", TRANSPOSED_SHAPES, ids=str)
def test_a_result_written_into_a_transposed_view_on_the_host_matches_numpy(cpu: Any, shape: tuple[int, ...]) -> None:
    x = _exact(shape, "float32", 17)
    out = cpu.to_device(np.zeros_like(x))
    ops.negative(_swap_last(cpu.to_device(x)), out=_swap_last(out))
    np.testing.assert_array_equal(out.to_host(), -x)


@pytest.mark.parametrize("name", ["sin", "exp", "log", "log10", "arctan", "sqrt"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_math_of_a_transposed_view_has_the_bits_of_math_of_a_copy(cpu: Any, name: str, dtype: str) -> None:
    x = np.abs(np.random.default_rng(18).standard_normal((300, 1031)) * 4).astype(dtype)
    function = getattr(ops, name)
    got = function(cpu.to_device(x).T).to_host()
    want = function(cpu.to_device(np.ascontiguousarray(x.T))).to_host()
    np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))


def test_an_op_reading_a_transposed_view_on_the_host_takes_the_tiled_plan(cpu: Any) -> None:
    x = cpu.to_device(np.zeros((30, 40), np.float32))
    out = np.empty((40, 30), np.float32)
    tiled = ops.exp._plan((x.T,), None).kernel_on(cpu).inspect(x.T, out, arch="sm_90").decisions
    rows = (
        ops.exp._plan((x[:, ::2],), None)
        .kernel_on(cpu)
        .inspect(x[:, ::2], np.empty((30, 20), np.float32), arch="sm_90")
        .decisions
    )
    assert tiled.host_plan == HOST_TILES
    assert rows.host_plan == HOST_RUNS["strided"].format(run=HOST_RUN)


@pytest.mark.parametrize(
    ("shape", "strides", "across"),
    [
        ((40, 30), (4, 160), True),  # a transposed matrix
        ((40, 30), (-4, 160), True),  # ... with its rows reversed
        ((2, 40, 30), (4800, 4, 160), True),  # the last two axes of a 3-d array swapped
        ((30, 40), (160, 4), False),  # C-contiguous
        ((30, 20), (160, 8), False),  # every other column
        ((40, 1), (4, 160), False),  # one column: nothing to read across
        ((40, 30), (4, 0), False),  # a broadcast row
    ],
)
def test_a_view_is_read_across_its_rows_where_its_elements_are_adjacent_across_them(
    shape: tuple[int, ...], strides: tuple[int, ...], across: bool
) -> None:
    assert reads_across_rows(shape, strides, 4) is across


def test_a_host_elementwise_build_says_its_plan_and_the_gpus_does_not(cpu: Any) -> None:
    a, b = cpu.to_device(np.zeros((30, 40), np.float32)), cpu.to_device(np.zeros(40, np.float32))
    plan = ops.add._plan((a, b), None)
    out = np.empty((30, 40), np.float32)
    host = plan.kernel_on(cpu).inspect(a, b, out, arch="sm_90").decisions
    gpu = plan.kernel.inspect(a, b, out, arch="sm_90").decisions
    assert host.layout == gpu.layout == "broadcast"
    assert host.host_plan and gpu.host_plan is None


def test_a_flat_elementwise_op_on_the_host_takes_the_vectorized_run(cpu: Any) -> None:
    a = cpu.to_device(np.zeros(1000, np.float32))
    out = np.empty(1000, np.float32)
    plan = ops.exp._plan((a,), None)
    host = plan.kernel_on(cpu).inspect(a, out, arch="sm_90")
    gpu = plan.kernel.inspect(a, out, arch="sm_90")
    assert host.decisions.layout == gpu.decisions.layout == "flat"
    assert host.decisions.host_plan == HOST_RUNS["flat"].format(run=HOST_RUN) and gpu.decisions.host_plan is None
    assert SIMD_MATH in host.options and SIMD_MATH not in gpu.options


def test_the_gpu_elementwise_plan_on_request_runs_on_the_host(cpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = cpu.to_device(np.zeros((30, 40), np.float32)), cpu.to_device(np.ones(40, np.float32))
    plan = ops.add._plan((a, b), None)
    monkeypatch.setenv(PLAN_ENV, "gpu")
    assert plan.kernel_on(cpu) is plan.kernel
    np.testing.assert_array_equal(ops.add(a, b).to_host(), np.ones((30, 40), np.float32))


def test_a_transposed_view_is_read_in_the_order_of_its_memory() -> None:
    assert memory_order((2048, 1024), (4, 8192), 4, (0,)) == ((1, 0), (1,))
    assert memory_order((5, 6, 7), (4, 140, 20), 4, (0,)) == ((1, 2, 0), (2,))


@pytest.mark.parametrize(
    ("shape", "strides", "axes"),
    [
        ((5, 6), (24, 4), (0,)),  # C-contiguous already
        ((5, 6), (4, 40), (0, 1)),  # every axis reduced, in the other order
        ((4, 5, 6), (4, 16, 80), (1,)),  # the kept axes would come out swapped
        ((5, 6), (4, 48), (0,)),  # a transposed slice: not one contiguous block
        ((1, 6), (4, 4), (1,)),  # an extent-1 axis
    ],
)
def test_views_that_are_not_a_permuted_block_or_would_change_order_are_left_as_they_are(
    shape: tuple[int, ...], strides: tuple[int, ...], axes: tuple[int, ...]
) -> None:
    assert memory_order(shape, strides, 4, axes) is None


@pytest.mark.parametrize("op", ["sum", "max", "argmin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_reductions_of_transposed_views_on_the_host_match_numpy(cpu: Any, op: str, axis: int) -> None:
    x = (np.random.default_rng(7).integers(-64, 64, (300, 50, 7)) / 8).astype(np.float32)
    view, host_view = cpu.to_device(x).transpose(2, 0, 1), x.transpose(2, 0, 1)
    np.testing.assert_array_equal(getattr(ops, op)(view, axis=axis).to_host(), getattr(np, op)(host_view, axis=axis))


def test_a_transposed_reduction_keeps_dims_and_writes_out_as_numpy(cpu: Any) -> None:
    x = (np.random.default_rng(8).integers(-64, 64, (200, 30)) / 8).astype(np.float32)
    view = cpu.to_device(x).T
    np.testing.assert_array_equal(ops.sum(view, axis=1, keepdims=True).to_host(), x.T.sum(axis=1, keepdims=True))
    out = cpu.empty(200, np.float32)
    ops.max(view, axis=0, out=out)
    np.testing.assert_array_equal(out.to_host(), x.T.max(axis=0))


IN_PLACE_VIEWS = {  # (a view of a 300 x 400 array, the axis): one stride each for the outer, reduced and inner index
    "rows of a sliced view": (np.s_[::2, 3:300], 1),
    "columns of a sliced view": (np.s_[::2, 3:300], 0),
    "rows of every other column": (np.s_[:, ::2], 1),
    "a whole column": (np.s_[:, 3], None),
}


@pytest.mark.parametrize("op", ["sum", "max", "argmax"])
@pytest.mark.parametrize("case", sorted(IN_PLACE_VIEWS))
def test_a_view_whose_indices_each_step_by_one_stride_is_reduced_in_place_on_the_host(
    cpu: Any, case: str, op: str
) -> None:
    index, axis = IN_PLACE_VIEWS[case]
    x = (np.random.default_rng(9).integers(-64, 64, (300, 400)) / 8).astype(np.float32)
    view = cpu.to_device(x)[index]
    step = getattr(ops, op).strategy(view, axis=axis, multiprocessors=2, host=True)
    assert step.variant.view and step.variant.copy == "" and step.variant.stage.startswith("host-")
    np.testing.assert_array_equal(getattr(ops, op)(view, axis=axis).to_host(), getattr(np, op)(x[index], axis=axis))


def test_a_view_between_two_kept_axes_is_reduced_in_place_on_the_host(cpu: Any) -> None:
    x = (np.random.default_rng(10).integers(-64, 64, (6, 40, 33)) / 8).astype(np.float32)
    view = cpu.to_device(x)[:, 2:-2, :]
    assert ops.sum.strategy(view, axis=1, multiprocessors=2, host=True).variant.stage == "host-columns"
    np.testing.assert_array_equal(ops.sum(view, axis=1).to_host(), x[:, 2:-2, :].sum(axis=1))


def test_views_of_one_shape_and_other_strides_reduce_alike_on_the_host(cpu: Any) -> None:
    x = (np.random.default_rng(11).integers(-64, 64, (300, 400)) / 8).astype(np.float32)
    y = (np.random.default_rng(12).integers(-64, 64, (300, 500)) / 8).astype(np.float32)
    for host in (x, y, x):  # the warm call's strides are the view's, not the first call's
        np.testing.assert_array_equal(
            ops.sum(cpu.to_device(host)[:, 3:303], axis=1).to_host(), host[:, 3:303].sum(axis=1)
        )


def test_a_view_with_kept_axes_of_two_strides_is_reduced_from_a_contiguous_copy_on_the_host(cpu: Any) -> None:
    x = (np.random.default_rng(13).integers(-64, 64, (6, 40, 33)) / 8).astype(np.float32)
    view = cpu.to_device(x)[:, 2:-2, 1:-1]
    assert ops.sum.strategy(view, axis=2, multiprocessors=2, host=True).variant.copy == COPY_HOST
    assert ops.sum.strategy(view, axis=2, multiprocessors=2, host=False).variant.copy == ""
    np.testing.assert_array_equal(ops.sum(view, axis=2).to_host(), x[:, 2:-2, 1:-1].sum(axis=2))


HALF_VIEWS = {
    "every other column": (slice(None), slice(None, None, 2)),
    "a block": (slice(1, -1), slice(3, -5)),
    "a transposed view": None,
}


@pytest.mark.parametrize("name", ["sin", "cos", "exp", "log"])
@pytest.mark.parametrize("index", HALF_VIEWS.values(), ids=HALF_VIEWS.keys())
def test_float16_math_of_a_view_has_the_bits_of_math_of_a_copy(cpu: Any, name: str, index: Any) -> None:
    x = (np.abs(np.random.default_rng(19).standard_normal((300, 1031))) * 4).astype(np.float16)
    x[7, ::97] = [np.inf, np.nan, 0, -0.0, 65504, 6e-8, np.nan, -np.inf, 1, 2, 3]  # through the scalar conversions
    view = cpu.to_device(x).T if index is None else cpu.to_device(x)[index]
    copy = np.ascontiguousarray(x.T if index is None else x[index])
    function = getattr(ops, name)
    want = function(cpu.to_device(copy)).to_host()
    np.testing.assert_array_equal(function(view).to_host().view(np.uint16), want.view(np.uint16))


def test_a_float16_sum_with_a_broadcast_row_is_rounded_once_as_numpys(cpu: Any) -> None:
    rng = np.random.default_rng(20)
    x, row = (rng.standard_normal(s).astype(np.float16) for s in [(300, 1031), (1031,)])
    np.testing.assert_array_equal(ops.add(cpu.to_device(x), cpu.to_device(row)).to_host(), x + row)


@pytest.mark.parametrize("index", HALF_VIEWS.values(), ids=HALF_VIEWS.keys())
def test_a_float16_result_written_into_a_view_matches_one_written_whole(cpu: Any, index: Any) -> None:
    x = (np.random.default_rng(21).standard_normal((300, 1031)) * 4).astype(np.float16)
    out = cpu.to_device(np.zeros((1031, 300) if index is None else (300, 1031), np.float16))
    view = out.T if index is None else out[index]
    source = np.ascontiguousarray(x if index is None else x[index])
    ops.tanh(cpu.to_device(source), out=view)
    want = ops.tanh(cpu.to_device(source)).to_host()
    np.testing.assert_array_equal(view.to_host().view(np.uint16), want.view(np.uint16))


BOOL_VIEWS = {"whole": lambda a: a, "every other column": lambda a: a[:, ::2], "transposed": lambda a: a.T}


@pytest.mark.parametrize("view", BOOL_VIEWS.values(), ids=BOOL_VIEWS.keys())
def test_bool_operands_on_the_host_plans_match_numpy(cpu: Any, view: Any) -> None:
    rng = np.random.default_rng(22)
    mask, other, x = rng.random((300, 1031)) > 0.5, rng.random((300, 1031)) > 0.3, rng.standard_normal((300, 1031))
    m, o = view(cpu.to_device(mask)), view(cpu.to_device(other))
    hm, ho, hx = view(mask), view(other), view(x.astype(np.float32))
    np.testing.assert_array_equal(ops.logical_not(m).to_host(), ~hm)
    np.testing.assert_array_equal(ops.logical_and(m, o).to_host(), hm & ho)
    for dtype in (np.float32, np.int8, np.float16, np.float64):
        np.testing.assert_array_equal(ops.astype(m, dtype).to_host(), hm.astype(dtype))
    picked = ops.where(m, view(cpu.to_device(x.astype(np.float32))), 0.0).to_host()
    np.testing.assert_array_equal(picked, np.where(hm, hx, 0))


INTERLEAVED = [((6, 7, 40), (0, 2)), ((3, 4, 5, 70), (1, 3)), ((3, 4, 5, 70), (0, 2)), ((4, 5, 6, 7, 9), (0, 2, 4))]


@pytest.mark.parametrize(("shape", "axes"), INTERLEAVED, ids=str)
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("dtype", ["float32", "int16", "float16", "bool"])
def test_reductions_over_interleaved_axes_on_the_host_match_numpy(
    cpu: Any, shape: tuple[int, ...], axes: tuple[int, ...], name: str, dtype: str
) -> None:
    x = _exact(shape, dtype, 23) if dtype != "bool" else np.random.default_rng(23).random(shape) > 0.3
    if name == "prod" and dtype != "bool":
        x = np.where(x == 0, 1, np.sign(x)).astype(dtype)  # exact products: +-1
    reduce, numpy = getattr(ops, name), getattr(np, name)
    for keepdims in (False, True):
        got, want = (
            reduce(cpu.to_device(x), axis=axes, keepdims=keepdims).to_host(),
            numpy(x, axis=axes, keepdims=keepdims),
        )
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-3 if dtype == "float16" else 1e-6)


def test_a_reduction_over_interleaved_axes_writes_out_on_the_host(cpu: Any) -> None:
    x = _exact((6, 7, 40), "float32", 24)
    out = cpu.empty(7, np.float32)
    assert ops.max(cpu.to_device(x), axis=(0, 2), out=out) is out
    np.testing.assert_array_equal(out.to_host(), x.max(axis=(0, 2)))


def test_a_user_reduction_over_interleaved_axes_on_the_host_maps_each_value_once(cpu: Any) -> None:
    squares = kd.reduction(map="x * x", reduce="a + b", identity="0", name="squares")
    x = _exact((6, 7, 40), "float32", 25)
    np.testing.assert_allclose(squares(cpu.to_device(x), axis=(0, 2)).to_host(), (x * x).sum(axis=(0, 2)), rtol=1e-6)


# Where the one value that decides a bool reduction lies: the first element, just past a block of
# values the run checks after (the runs' lanes times 64, whatever the lanes), the middle, the last.
DECIDING = [0, 5, 4095, 4096, 70_001, (1 << 20) // 2 + 3, (1 << 20) - 1]


@pytest.mark.parametrize("at", DECIDING)
@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin", "any", "all"])
def test_a_bool_reduction_that_stops_at_its_deciding_value_matches_numpy(cpu: Any, name: str, at: int) -> None:
    for fill in (False, True):
        host = np.full(1 << 20, fill)
        host[at] = not fill
        for h in (host, host.reshape(16, -1)):
            a = cpu.to_device(h)
            for axis in (None, -1):
                got = getattr(a, name)(axis=axis) if name in ("any", "all") else getattr(ops, name)(a, axis=axis)
                np.testing.assert_array_equal(got.to_host(), getattr(np, name)(h, axis=axis))
