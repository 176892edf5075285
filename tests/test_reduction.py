"""Reduction code generation on CPU: every stage compiles for int and float types (a representative
subset: every reducer for int32/float32, the integer and 16-bit float accumulators, bool, uint64),
the structure is deterministic (no atomics), and axis handling follows NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.kernels import BLOCK
from kerneldsl.array.reduction import DIRECT_MAX, ROWS_BLOCK_MIN, extents, normalize_axes
from kerneldsl.array.reduction.strategy import column_down

ARCH = "sm_90"
REDUCERS = ("sum", "prod", "min", "max", "mean", "argmax", "argmin", "norm")


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):
    yield


@pytest.mark.parametrize("name", REDUCERS)
@pytest.mark.parametrize("dt", [np.int32, np.float32], ids=["int32", "float32"])
def test_every_stage_compiles(name: str, dt: type) -> None:
    r = getattr(ops, name)
    direct = r.inspect(np.ones(100, dt), arch=ARCH)
    single = r.inspect(np.ones(DIRECT_MAX + 1, dt), arch=ARCH)
    rows = r.inspect(np.ones((3, 40), dt), axis=1, arch=ARCH)
    columns = r.inspect(np.ones((3, 40), dt), axis=0, arch=ARCH)
    stages = [b.decisions.stage for b in (direct, single, rows, columns)]
    assert stages == ["direct", "partial", "rows", "columns"]
    assert all(b.cubin for b in (direct, single, rows, columns))


@pytest.mark.parametrize("name", REDUCERS)
def test_the_only_atomic_elects_the_last_block(name: str) -> None:
    for b in (getattr(ops, name).inspect(np.ones(n, np.float32), arch=ARCH) for n in (100, DIRECT_MAX + 1)):
        assert b.cuda_source.count("atomic") == b.cuda_source.count("atomicAdd(kdticket, 1u)")


@pytest.mark.parametrize("dt", [np.bool_, np.int8, np.uint64, np.float16, np.float64, np.uint16])
def test_other_dtypes_compile(dt: type) -> None:
    for name in ("sum", "max", "argmax", "mean"):
        r = getattr(ops, name)
        assert r.inspect(np.ones(DIRECT_MAX + 1, dt), arch=ARCH).cubin
        assert r.inspect(np.ones((5, ROWS_BLOCK_MIN), dt), axis=-1, arch=ARCH).cubin


@pytest.mark.parametrize(
    ("name", "dt", "acc"),
    [
        ("sum", np.float16, np.float32),
        ("sum", np.int8, np.int64),
        ("sum", np.uint8, np.uint64),
        ("mean", np.int16, np.float64),
        ("sum", np.float32, np.float32),
        ("max", np.float64, np.float64),
    ],
)
def test_accumulation_types_are_documented_ones(name: str, dt: type, acc: type) -> None:
    assert getattr(ops, name).inspect(np.ones(10, dt), arch=ARCH).decisions.accumulation == np.dtype(acc)


def test_full_reduction_uses_vector_loads_when_aligned() -> None:
    assert ops.sum.inspect(np.ones(1 << 20, np.float32), arch=ARCH).decisions.vector_width == 4


def test_rows_use_a_block_for_long_rows_and_part_of_a_warp_for_short_ones() -> None:
    short = ops.sum.inspect(np.ones((4, 100), np.float32), axis=1, arch=ARCH).decisions
    long = ops.sum.inspect(np.ones((4, ROWS_BLOCK_MIN), np.float32), axis=1, arch=ARCH).decisions
    assert (short.stage, short.group) == ("rows", 8)  # 25 loads of 4 floats: up to SHORT_ROW_LOADS per lane
    assert (long.stage, long.group) == ("rows", 256)


def _shape(*dims: int) -> np.ndarray:
    """An array of any shape that costs no memory: the planner reads only shape and dtype."""
    return np.lib.stride_tricks.as_strided(np.ones(1, np.float32), dims, [0] * len(dims))


def test_few_long_rows_split_each_row_over_blocks() -> None:
    step = ops.sum.strategy(_shape(16, 1 << 22), axis=1, multiprocessors=132)
    assert (step.variant.stage, step.variant.split) == ("rows", True)
    assert step.splits * 16 >= 132 * 4 and step.tickets == 16


def test_many_short_rows_give_each_row_a_few_lanes() -> None:
    step = ops.sum.strategy(_shape(1 << 22, 64), axis=1)
    assert (step.variant.stage, step.variant.lanes, step.variant.vector) == ("rows", 4, True)


def test_a_row_of_a_few_vectors_is_one_lanes_work() -> None:
    step = ops.sum.strategy(_shape(1 << 22, 16), axis=1)
    assert (step.variant.stage, step.variant.lanes, step.variant.vector) == ("rows", 1, True)


def test_a_leading_axis_reduces_as_coalesced_columns_split_over_blocks() -> None:
    step = ops.sum.strategy(_shape(8192, 8192), axis=0, multiprocessors=132)
    assert (step.variant.stage, step.variant.lanes, step.variant.split) == ("columns", 32, True)
    assert step.splits > 1


def test_short_leading_axis_needs_no_split() -> None:
    step = ops.sum.strategy(_shape(16, 1 << 22), axis=0)
    assert (step.variant.stage, step.variant.split) == ("columns", False)


def test_narrow_columns_put_the_rest_of_the_block_down_the_reduced_axis() -> None:
    step = ops.sum.strategy(_shape(1 << 22, 16), axis=0)
    assert (step.variant.lanes, step.variant.vector, step.variant.split) == (4, True, True)


@pytest.mark.parametrize(("columns", "lanes", "vector"), [(13, 13, True), (3, 3, True), (12, 3, True), (31, 31, True)])
def test_columns_narrower_than_a_warp_take_exactly_their_units_across(columns: int, lanes: int, vector: bool) -> None:
    step = ops.sum.strategy(_shape(1 << 20, columns), axis=0)
    assert (step.variant.stage, step.variant.lanes, step.variant.vector) == ("columns", lanes, vector)
    assert lanes * column_down(lanes) <= BLOCK < 2 * lanes * column_down(lanes)  # a power of two of rows


def test_middle_axis_is_a_columns_reduction_with_an_outer_extent() -> None:
    assert extents((256, 1024, 256), (1,)) == extents((256, 1, 1024, 256), (2,))
    assert ops.sum.strategy(_shape(256, 1024, 256), axis=1).variant.stage == "columns"


def test_interleaved_axes_read_segments_along_the_innermost_reduced_axis() -> None:
    assert extents((4, 5, 6), (0, 2)).gather == (0, 2)
    step = ops.sum.strategy(_shape(4, 5, 6), axis=(0, 2))
    assert step.variant.stage == "segments" and step.variant.groups == (1, 1)


def test_axes_of_extent_one_do_not_interleave() -> None:
    assert extents((4, 1, 6), (0, 2)) == extents((24,), (0,))
    assert ops.sum.strategy(_shape(4, 1, 6), axis=(0, 2)).variant.stage == "direct"


def test_unaligned_rows_fall_back_to_scalar_loads() -> None:
    assert not ops.sum.strategy(_shape(8, 4098), axis=1).variant.vector


def test_wide_accumulators_keep_columns_scalar() -> None:
    assert not ops.sum.strategy(np.ones((64, 64), np.int8), axis=0).variant.vector


def test_axis_normalization() -> None:
    assert normalize_axes(None, 2, "sum") is None
    assert normalize_axes(-1, 2, "sum") == (1,)
    assert normalize_axes((2, 0), 3, "sum") == (0, 2)
    with pytest.raises(np.exceptions.AxisError):
        normalize_axes(2, 2, "sum")
    with pytest.raises(ValueError, match="duplicate"):
        normalize_axes((0, -2), 2, "sum")
    with pytest.raises(TypeError):
        normalize_axes(1.0, 2, "sum")
    with pytest.raises(TypeError, match="not a tuple"):
        normalize_axes((0, 1), 2, "argmax", single=True)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), (1, 2), -1])
def test_result_shapes_follow_numpy(axis: object, keepdims: bool) -> None:
    x = np.ones((2, 3, 4), np.float32)
    assert ops.sum._plan((x,), axis, None, keepdims).shape == np.sum(x, axis=axis, keepdims=keepdims).shape


def test_keepdims_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="keepdims"):
        ops.sum(np.ones(3, np.float32), keepdims="yes")


@pytest.mark.parametrize(
    ("shape", "axis"), [((4, 5, 6), (0, 2)), ((16, 1 << 22), 1), ((8192, 8192), 0), ((1 << 22, 16), 0), ((4, 4098), 1)]
)
@pytest.mark.parametrize("name", ["sum", "argmax", "mean"])
def test_every_strategy_compiles(shape: tuple[int, ...], axis: object, name: str) -> None:
    if name == "argmax" and isinstance(axis, tuple):
        return
    assert getattr(ops, name).inspect(_shape(*shape), axis=axis, arch=ARCH).cubin


def test_middle_axis_of_3d_compiles() -> None:
    b = ops.argmax.inspect(np.ones((3, 4, 5), np.float32), axis=1, arch=ARCH)
    assert b.decisions.stage == "slabs" and b.cubin  # slabs of 4 x 5 values (see test_reduction_layouts)


def test_user_reduction() -> None:
    sumsq = kd.reduction(map="x * x", reduce="a + b", identity="0", post="sqrt(r)", name="l2")
    src = sumsq.inspect(np.ones(100, np.float32), arch=ARCH).cuda_source
    assert "auto kdpre = [](kdA x) -> kdA { return x * x; };" in src
    assert "sqrt(r)" in src
    absmax = kd.reduction(map="x < 0 ? -x : x", reduce="a > b ? a : b", identity="min", dtype=np.float64)
    b = absmax.inspect(np.ones((4, 8), np.float32), axis=0, arch=ARCH)
    assert b.specialization.element_type("kdout").name == "float64"


def test_long_innermost_scans_take_the_single_pass_look_back() -> None:
    step = ops.cumsum.strategy(_shape(1 << 28))
    assert step.variant.stage == "lookback" and step.tiles == (1 << 28) // (256 * 32)


def test_short_or_outer_axis_scans_walk_lines() -> None:
    assert ops.cumsum.strategy(_shape(1 << 20, 16), axis=1).variant.stage == "lines"
    assert ops.cumsum.strategy(_shape(100, 300), axis=0).variant.stage == "lines"


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dt", [np.float32, np.int8, np.float16, np.float64, np.bool_])
def test_every_scan_compiles(dt: type, exclusive: bool) -> None:
    for shape, axis in [((5000,), None), ((30, 20), 0)]:
        for scan in (ops.cumsum, ops.cumprod):
            assert scan.inspect(np.ones(shape, dt), axis=axis, exclusive=exclusive, arch=ARCH).cubin


def test_scan_result_dtypes_follow_numpy_cumsum() -> None:
    for dt in (np.int8, np.uint8, np.bool_, np.float16, np.int32):
        assert ops.cumsum._plan((np.ones(3, dt),), None, None, False).dtype == np.cumsum(np.ones(3, dt)).dtype


def test_scan_over_none_flattens_like_numpy() -> None:
    assert ops.cumsum._plan((np.ones((3, 4), np.float32),), None, None, False).shape == (12,)


def test_a_scan_takes_one_axis() -> None:
    with pytest.raises(TypeError, match="not a tuple"):
        ops.cumsum(np.ones((2, 2), np.float32), axis=(0, 1))


def test_a_scan_cannot_be_fused() -> None:
    @kd.fuse
    def f(x):  # type: ignore[no-untyped-def]
        return ops.cumsum(x)

    with pytest.raises(kd.errors.FusionError, match="cannot be fused"):
        f(np.ones(4, np.float32))


@pytest.mark.parametrize(("shape", "axis"), [((16, 1 << 14), 1), ((4096, 64), 0), ((4, 5, 6), (0, 2))])
def test_a_warm_device_reduction_launches_the_grid_its_strategy_planned(drv: FakeDriver, shape, axis) -> None:  # type: ignore[no-untyped-def]
    s = kd.Session(0)
    x = s.zeros(shape, np.float32)
    ops.sum(x, axis=axis)
    ops.sum(x, axis=axis)
    planned = ops.sum.strategy(np.zeros(shape, np.float32), axis=axis, multiprocessors=132)
    assert drv.launches[-1][1] == (planned.blocks, 1, 1)


def test_a_warm_scan_launches_one_block_per_tile(drv: FakeDriver) -> None:
    s = kd.Session(0)
    y = s.zeros(1 << 20, np.float32)
    ops.cumsum(y)
    ops.cumsum(y)
    assert drv.launches[-1][1] == (ops.cumsum.strategy(np.zeros(1 << 20, np.float32)).tiles, 1, 1)


class _SixteenSMs(FakeDriver):
    """A device double with 16 SMs: plans that size grids by the SM count differ from an H200's."""

    def cuDeviceGetAttribute(self, attr, dev):
        if attr == self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
            return self._r(self._enter("cuDeviceGetAttribute"), 16)
        return super().cuDeviceGetAttribute(attr, dev)


def test_strategy_plans_for_the_sm_count_of_the_device_a_call_runs_on() -> None:
    x = _shape(8192, 8192)
    with installed_driver(_SixteenSMs()):
        planned = ops.sum.strategy(x, axis=0)
        scan = ops.cumsum.strategy(_shape(64, 1 << 20), axis=1)
    assert planned == ops.sum.strategy(x, axis=0, multiprocessors=16)
    assert planned != ops.sum.strategy(x, axis=0, multiprocessors=132)
    assert scan == ops.cumsum.strategy(_shape(64, 1 << 20), axis=1, multiprocessors=16)


def test_strategy_without_a_device_plans_for_the_inspect_sm_count(monkeypatch) -> None:
    from kerneldsl.array.reduction import INSPECT_MULTIPROCESSORS, strategy

    monkeypatch.setattr(strategy.driver, "driver_available", lambda: False)
    x = _shape(8192, 8192)
    assert ops.sum.strategy(x, axis=0) == ops.sum.strategy(x, axis=0, multiprocessors=INSPECT_MULTIPROCESSORS)


@pytest.mark.parametrize(("shape", "axis"), [((5, 0), 0), ((0, 5), 1), ((3, 0, 4), 1), ((0, 7, 9), (0, 2))])
def test_strategy_answers_for_an_empty_result_too(shape, axis) -> None:  # type: ignore[no-untyped-def]
    step = ops.sum.strategy(np.zeros(shape, np.float32), axis=axis, multiprocessors=132)
    assert step.variant.stage in ("rows", "columns", "segments", "lines", "gather", "direct", "partial")
