"""Reductions over any axis set and over strided views, on CPU: canonical groups, the stage each
layout takes, and a model of the segments / lines index maps run on numpy data from the planned
``Step.args`` (the integers the kernel reads), so every planned launch covers each output's
values exactly once. Views are DeviceArrays on the driver double: their plans are made, not run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from driver_double import FakeDriver
from hypothesis import given, settings
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.reduction.canonical import Group, c_strides, canonicalize
from kerneldsl.array.reduction.plan import COPY_LAYOUTS, COPY_REVERSED
from kerneldsl.array.reduction.strategy import Step, slab_values
from kerneldsl.array.reduction.strided import strided_step

ARCH = "sm_90"


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):  # type: ignore[no-untyped-def]
    yield


def _digits(index: int, extents: list[int]) -> list[int]:
    """The kernel's ``decompose``: C order over ``extents``, the first group takes the rest."""
    out = [0] * len(extents)
    for j in range(len(extents) - 1, 0, -1):
        out[j], index = index % extents[j], index // extents[j]
    if extents:
        out[0] = index
    return out


def _model(step: Step) -> list[list[tuple[int, int]]]:
    """Per output, the (element offset, value index) pairs the planned kernel folds."""
    count, outer, inner, splits, *rest = step.args
    kept, reduced = step.variant.groups
    if step.variant.stage == "segments":
        _, fs, fl, *rest = rest
        others = [rest[3 * j : 3 * j + 3] for j in range(reduced)]
        keeps = [rest[3 * reduced + 2 * j : 3 * reduced + 2 * j + 2] for j in range(kept)]
        folded = []
        for o in range(outer):
            base = sum(d * g[1] for d, g in zip(_digits(o, [g[0] for g in keeps]), keeps))
            pairs = []
            for q in range(count // inner):
                digits = _digits(q, [g[0] for g in others])
                seg = base + sum(d * g[1] for d, g in zip(digits, others))
                log = sum(d * g[2] for d, g in zip(digits, others))
                pairs += [(seg + r * fs, log + r * fl) for r in range(inner)]
            folded.append(pairs)
        return folded
    fs, fo, *rest = rest
    keeps = [rest[3 * j : 3 * j + 3] for j in range(kept)]
    reds = [rest[3 * kept + 2 * j : 3 * kept + 2 * j + 2] for j in range(reduced)]
    folded = [[] for _ in range(outer * inner)]
    for o in range(outer):
        digits = _digits(o, [g[0] for g in keeps])
        base = sum(d * g[1] for d, g in zip(digits, keeps))
        at_out = sum(d * g[2] for d, g in zip(digits, keeps))
        for c in range(inner):
            offsets = [sum(d * g[1] for d, g in zip(_digits(k, [g[0] for g in reds]), reds)) for k in range(count)]
            folded[at_out + c * fo] = [(base + c * fs + off, k) for k, off in enumerate(offsets)]
    return folded


def _check_model(x: np.ndarray, axis: tuple[int, ...], step: Step) -> None:
    span = 1 + sum((d - 1) * s // x.itemsize for d, s in zip(x.shape, x.strides))
    memory = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(x.itemsize,))
    folded = _model(step)
    got = np.array([sum(int(memory[off]) for off, _ in pairs) for pairs in folded])
    np.testing.assert_array_equal(got, np.sum(x, axis=axis, dtype=np.int64).reshape(-1))
    reduced_shape = [x.shape[a] for a in axis]
    for pairs in folded:  # every value's index is its C-order index over the reduced axes
        assert sorted(i for _, i in pairs) == list(range(math.prod(reduced_shape)))


def _planned(x: np.ndarray, axis: tuple[int, ...]) -> Step:
    """The launch planned for ``x``'s layout (no kernel is made: only the decisions)."""
    c = canonicalize(tuple(x.shape), tuple(s // x.itemsize for s in x.strides), axis)
    assert c is not None and not c.plain
    return strided_step(c, 1, 8, False, 132, lambda v: None)  # type: ignore[arg-type, return-value]


# -- canonical groups -----------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "axis"), [((181, 13, 31, 3), (1, 2)), ((100, 220, 5), 1)])
def test_columns_narrower_than_a_warp_take_flat_lines(shape: tuple[int, ...], axis: object) -> None:
    step = ops.sum.strategy(np.ones(shape, np.float32), axis=axis)
    assert (step.variant.stage, step.variant.flat) == ("lines", True)
    assert step.variant.lanes >= 32  # a tile spans outputs of several kept indices, no idle warps


@pytest.mark.parametrize(("shape", "axis"), [((7, 300001, 5), 1), ((100, 300, 5), 1)])
def test_narrow_columns_down_a_long_reduced_extent_take_the_columns_stage(shape: tuple[int, ...], axis: int) -> None:
    step = ops.sum.strategy(np.ones(shape, np.float32), axis=axis)
    assert step.variant.stage == "columns"
    assert step.variant.lanes == shape[-1]  # a warp's threads read whole consecutive rows


@pytest.mark.parametrize(
    ("shape", "dt", "period"),
    [((1154423, 13), np.float16, 8), ((1, 1154423, 13), np.float32, 4), ((1001, 12), np.float16, 2)],
)
def test_columns_no_multiple_of_a_vector_load_vectors_across_a_period_of_rows(
    shape: tuple[int, ...], dt: type, period: int
) -> None:
    step = ops.sum.strategy(np.ones(shape, dt), axis=-2)
    assert (step.variant.stage, step.variant.vector, step.variant.period) == ("columns", True, period)
    assert ops.sum.inspect(np.ones(shape, dt), axis=-2, arch=ARCH).decisions.vector_width == 16 // np.dtype(dt).itemsize


def test_columns_that_carry_an_index_or_broadcast_a_leaf_load_values_unphased() -> None:
    x, row = np.ones((4099, 13), np.float16), np.ones(13, np.float16)
    assert ops.argmax.strategy(x, axis=0).variant.period == 1  # an index per value
    assert ops._dot.strategy(x, row, axis=0).variant.period == 1  # a leaf broadcast down the rows
    assert ops._dot.strategy(x, x, axis=0).variant.period == 8


@pytest.mark.parametrize(
    ("shape", "axis"), [((93011, 11, 5), 1), ((64, 7, 3), 1), ((1000, 3, 40), 1), ((5, 2, 3, 4), (1, 2))]
)
def test_short_slabs_take_the_slabs_stage(shape: tuple[int, ...], axis: object) -> None:
    step = ops.sum.strategy(np.ones(shape, np.float32), axis=axis)
    assert step.variant.stage == "slabs"


def test_a_slabs_tile_holds_whole_slabs_that_make_whole_vectors() -> None:
    step = ops.sum.strategy(np.ones((93011, 11, 5), np.float16), axis=1)
    count, outer, inner, per_tile = step.args
    assert (count, outer, inner) == (11, 93011, 5)
    assert step.variant.vector and per_tile * count * inner % 8 == 0  # every tile starts on a 16-byte vector
    assert per_tile * count * inner <= slab_values(4)  # float16 sums accumulate in float32
    assert step.blocks == -(-outer // per_tile)


@pytest.mark.parametrize(("shape", "per_tile"), [((4001, 17, 33), 8), ((100, 127, 7), 8)])
def test_slabs_too_few_a_tile_for_whole_vectors_take_a_double_tile_that_holds_them(shape, per_tile: int) -> None:  # type: ignore[no-untyped-def]
    step = ops.sum.strategy(np.ones(shape, np.float16), axis=1)  # 7 and 4 slabs would fit a tile, 8 make whole vectors
    assert step.variant.double_tile and step.variant.vector and step.args[3] == per_tile


def test_slabs_too_few_for_whole_vectors_even_in_a_double_tile_read_value_by_value() -> None:
    step = ops.sum.strategy(np.ones((100, 7, 73), np.bool_), axis=1)  # 511 values a slab, 16 make whole vectors
    assert step.variant.stage == "slabs" and not step.variant.vector and not step.variant.double_tile


def test_slabs_that_a_tile_makes_whole_vectors_of_keep_a_single_tile() -> None:
    step = ops.sum.strategy(np.ones((93011, 11, 5), np.float16), axis=1)
    assert step.variant.vector and not step.variant.double_tile


def test_slabs_longer_than_a_tile_allows_take_other_stages() -> None:
    assert ops.sum.strategy(np.ones((64, 220, 5), np.float32), axis=1).variant.stage == "lines"
    assert ops.sum.strategy(np.ones((64, 300, 64), np.float32), axis=1).variant.stage == "columns"


def test_only_a_view_read_in_place_declares_its_leaves_strided(drv: FakeDriver) -> None:
    s = kd.Session(0)
    assert not ops.sum.strategy(s.zeros((1001, 7, 513), np.float32), axis=(0, 2)).variant.view  # the C path takes it
    assert ops.sum.strategy(s.zeros((300, 514), np.float32)[:, ::2], axis=0).variant.view


def test_wide_columns_keep_the_columns_stage() -> None:
    step = ops.sum.strategy(np.ones((64, 11, 512), np.float32), axis=1)
    assert step.variant.stage == "columns" and not step.variant.flat


def test_adjacent_axes_of_one_class_in_one_run_merge() -> None:
    c = canonicalize((4, 5, 6, 7), c_strides((4, 5, 6, 7)), (2, 3))
    assert c is not None and c.groups == (Group(20, 42, False), Group(42, 1, True))


def test_axes_of_extent_one_vanish() -> None:
    c = canonicalize((4, 1, 6), c_strides((4, 1, 6)), (0, 2))
    assert c is not None and c.groups == (Group(24, 1, True),) and c.plain


def test_interleaved_axes_keep_their_logical_order() -> None:
    c = canonicalize((1001, 7, 513), c_strides((1001, 7, 513)), (0, 2))
    assert c is not None and [g.reduced for g in c.groups] == [True, False, True] and not c.plain
    assert c.groups[c.fastest] == Group(513, 1, True)


def test_a_transposed_view_is_not_plain_and_its_fastest_group_is_the_first_axis() -> None:
    c = canonicalize((8192, 8192), (1, 8192), (0,))
    assert c is not None and not c.plain and c.fastest == 0


def test_a_reversed_axis_has_no_canonical_form() -> None:
    assert canonicalize((4, 5), (-5, 1), (0,)) is None


# -- the stage an axis set takes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axis", "stage", "split"),
    [
        ((1001, 7, 513), (0, 2), "segments", True),  # 7 outputs: split over segments
        ((129, 77, 1025), (0, 2), "segments", True),
        ((3, 5, 1000003), (0, 2), "segments", True),  # 3 segments per output: the run is split too
        ((60, 7, 80, 9), (0, 2), "lines", True),  # the fastest axis is kept
        ((40, 7, 30), (0, 2), "segments", False),  # short outputs: a warp's lanes each
    ],
)
def test_interleaved_axis_sets_take_segments_or_lines(shape, axis, stage, split) -> None:  # type: ignore[no-untyped-def]
    step = ops.sum.strategy(np.empty(shape, np.float16), axis=axis)
    assert (step.variant.stage, step.variant.split) == (stage, split)


def test_few_outputs_of_huge_segments_fill_the_gpu() -> None:
    step = ops.sum.strategy(np.empty((3, 5, 1000003), np.float16), axis=(0, 2), multiprocessors=132)
    assert step.blocks >= 132 * 4 and step.args[4] > 1  # kdrsplits: the run itself is split


def test_the_gather_stage_remains_only_for_broadcast_operands() -> None:
    x, row = np.empty((6, 7, 8, 9), np.float32), np.empty(9, np.float32)
    assert ops._dot.strategy(x, x, axis=(0, 2)).variant.stage == "lines"
    assert ops._dot.strategy(x, row, axis=(0, 2)).variant.stage == "gather"


@pytest.mark.parametrize("dt", [np.float16, np.int32, np.bool_, np.float64, np.uint8])
def test_segments_and_lines_compile(dt: type) -> None:
    for shape, axis in (((40, 7, 30), (0, 2)), ((129, 77, 1025), (0, 2)), ((6, 7, 8, 9), (0, 2))):
        assert ops.sum.inspect(np.empty(shape, dt), axis=axis, arch=ARCH).cubin


def test_indexed_reducers_over_interleaved_axes_compile() -> None:
    b = ops.max.inspect(np.empty((6, 7, 8, 9), np.float32), axis=(1, 3), arch=ARCH)
    assert b.decisions.stage == "segments" and b.cubin


# -- the index maps cover each output's values once -----------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((6, 7, 8, 9), (0, 2)), ((6, 7, 8, 9), (1, 3)), ((5, 3, 70, 33), (0, 2, 3)), ((9, 4, 50, 3), (1, 3))],
)
def test_planned_index_maps_sum_like_numpy(shape, axis) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(1).integers(0, 9, shape)
    _check_model(x, axis, _planned(x, axis))


@pytest.mark.parametrize(
    "view", [lambda a: a.T, lambda a: a[::2], lambda a: a[:, ::2], lambda a: a[..., 1:-1], lambda a: a[::3, 1::2].T]
)
@pytest.mark.parametrize("axis", [(0,), (1,), (0, 1)])
def test_planned_index_maps_of_views_sum_like_numpy(view, axis) -> None:  # type: ignore[no-untyped-def]
    x = view(np.random.default_rng(2).integers(0, 9, (24, 30)))
    _check_model(x, axis, _planned(x, axis))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    shape=st.lists(st.integers(1, 7), min_size=2, max_size=4),
    axes=st.sets(st.integers(0, 3), min_size=1),
    perm_seed=st.integers(0, 100),
)
def test_random_layouts_plan_index_maps_that_sum_like_numpy(shape, axes, perm_seed) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(perm_seed)
    x = rng.integers(0, 9, shape).transpose(rng.permutation(len(shape)))[..., ::2]
    axis = tuple(sorted({a % x.ndim for a in axes}))
    c = canonicalize(tuple(x.shape), tuple(s // x.itemsize for s in x.strides), axis)
    if x.size == 0 or c is None or c.plain:
        return
    _check_model(x, axis, _planned(x, axis))


# -- views on the device double -------------------------------------------------------------------


def test_views_are_read_in_place(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    for view, axis, stage in ((x.T, 0, "segments"), (x[::2], 0, "lines"), (x[:, ::2], 1, "segments")):
        step = ops.sum.strategy(view, axis=axis, multiprocessors=132)
        assert (step.variant.stage, step.variant.copy) == (stage, "")
    assert ops.sum.strategy(x[..., 1:-1], axis=None).variant.stage == "segments"


def test_a_reversed_view_is_copied_and_says_why(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    step = ops.sum.strategy(kd.flip(x, axis=0), axis=0)
    assert step.variant.copy == COPY_REVERSED and step.variant.stage == "columns"


def test_operands_of_one_layout_are_read_in_place_and_of_different_ones_copied(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 64), np.float32)
    assert ops._dot.strategy(x.T, x.T, axis=0).variant.copy == ""
    assert ops._dot.strategy(x.T, x, axis=0).variant.copy == COPY_LAYOUTS


def test_a_copy_is_recorded_in_the_build_decisions(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((64, 96), np.float32)
    assert ops.sum.inspect(kd.flip(x, axis=0), axis=0, arch=ARCH).decisions.copy == COPY_REVERSED
    assert ops.sum.inspect(x.T, axis=0, arch=ARCH).decisions.copy is None


def test_a_warm_view_reduction_launches_the_planned_grid_without_a_copy(drv: FakeDriver) -> None:
    s = kd.Session(0)
    x = s.zeros((256, 512), np.float32)
    ops.sum(x.T, axis=0)
    launches = len(drv.launches)
    ops.sum(x.T, axis=0)
    assert len(drv.launches) == launches + 1  # the reduction only: no copy kernel
    assert drv.launches[-1][1] == (ops.sum.strategy(x.T, axis=0, multiprocessors=132).blocks, 1, 1)


# -- the benchmark's table, without a GPU -----------------------------------------------------------


def test_the_reduce_bench_takes_the_issue_sections() -> None:
    import argparse

    from kerneldsl.bench import reduce_bench

    parser = argparse.ArgumentParser()
    reduce_bench.add_arguments(parser)
    args = parser.parse_args(["--only", "table", "--only", "host", "--sweep", "5"])
    assert args.only == ["table", "host"] and args.sweep == 5
    assert {"table", "sweep", "views", "host"} <= set(reduce_bench.SECTIONS)


def test_the_sweep_is_seeded_with_odd_extents_tuple_and_negative_axes() -> None:
    from kerneldsl.bench.reduce_layouts_bench import _sweep_cases

    cases = _sweep_cases(24, 21)
    assert [c[0] for c in cases] == [c[0] for c in _sweep_cases(24, 21)]
    assert all(d % 2 == 1 for _, shape, _, _, _ in cases for d in shape)
    axes = [a for *_, a, _ in cases]
    assert any(isinstance(a, tuple) for a in axes)
    assert any(min(a if isinstance(a, tuple) else (a,)) < 0 for a in axes)
    assert {np.dtype(dt).name for _, _, dt, _, _ in cases} == {"float16", "float32", "int32"}


def test_every_sweep_case_plans_without_a_gpu() -> None:
    from kerneldsl.bench.reduce_layouts_bench import _sweep_cases, _table_cases

    for _, shape, dt, axis, _ in _sweep_cases(24, 21) + _table_cases():
        assert ops.sum.strategy(np.lib.stride_tricks.as_strided(np.empty(1, dt), shape, [0] * len(shape)), axis=axis)


def test_one_read_of_a_view_counts_every_sector_it_has_values_in() -> None:
    from kerneldsl.bench.reduce_layouts_bench import _VIEWS, sector_bytes

    base = (64, 64)  # float32: 16 KiB, 8 values per 32-byte sector
    assert sector_bytes(np, base, 4, lambda a: a) == 64 * 64 * 4
    assert sector_bytes(np, base, 4, _VIEWS["x.T"]) == 64 * 64 * 4
    assert sector_bytes(np, base, 4, _VIEWS["x[::2]"]) == 32 * 64 * 4
    assert sector_bytes(np, base, 4, _VIEWS["x[:, ::2]"]) == 64 * 64 * 4  # half the values, every sector
    assert sector_bytes(np, base, 4, _VIEWS["x[..., 1:-1]"]) == 64 * 64 * 4
