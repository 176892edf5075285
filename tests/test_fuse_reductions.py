"""@kd.fuse through reductions on CPU: what traces into one kernel over rows, the strategy each
shape gets (read from Build.decisions), tuple outputs, and the FusionError for what cannot fuse."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl.array.fused_plan import FusedRowsPlan
from kerneldsl.array.fused_rows import INTERLEAVE_MAX, decide
from kerneldsl.bench import fuse_bench, ops_bench
from kerneldsl.bench.fuse_bench import softmax  # the pipeline the bench times
from kerneldsl.errors import FusionError

ARCH = "sm_90"


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):  # type: ignore[no-untyped-def]
    yield


@kd.fuse
def layer_norm(x: Any, w: Any, b: Any) -> Any:
    mean = kd.ops.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    rstd = 1.0 / kd.ops.sqrt(kd.ops.mean(xc * xc, axis=-1, keepdims=True) + 1e-5)
    return xc * rstd * w + b, mean, rstd


@kd.fuse
def column_softmax(x: Any) -> Any:
    e = kd.ops.exp(x - kd.ops.max(x, axis=0, keepdims=True))
    return e / kd.ops.sum(e, axis=0)  # broadcast back by shape: the reduced axis leads


def _decisions(fused: Any, *args: Any) -> Any:
    return fused.inspect(*args, arch=ARCH).decisions


def _f32(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


def test_softmax_is_one_kernel_reading_its_rows_once() -> None:
    build = softmax.inspect(_f32(4096, 4096), arch=ARCH)
    assert build.cuda_source.count("__global__") == 1
    d = build.decisions
    assert (d.stage, d.strategy, d.group, d.items, d.passes) == ("fused", "row-per-block", 256, 4, 1)
    assert (d.layout, d.vector_width, d.accumulation) == ("rows", 4, np.dtype(np.float32))


def test_a_fused_pipeline_is_built_with_pytorchs_fast_arithmetic() -> None:
    build = softmax.inspect(_f32(64, 512), arch=ARCH)
    assert build.decisions.fast_math and "--use_fast_math" in build.options


def test_half_precision_intermediates_stay_in_float32_until_stored() -> None:
    half = softmax.inspect(np.ones((64, 512), np.float16), arch=ARCH)
    assert half.decisions.accumulation == np.float32
    stores = half.cuda_source.count("(kd_half)(") + half.cuda_source.count("kd_narrow(kdst")
    assert stores == 1  # the one conversion is the output's store


def test_a_bfloat16_row_held_in_few_units_takes_a_128_thread_block() -> None:
    d = _decisions(softmax, np.zeros((4096, 4096), ml_dtypes.bfloat16))
    assert (d.strategy, d.group, d.items, d.vector_width) == ("row-per-block", 128, 4, 8)


def test_a_long_bfloat16_row_keeps_the_smallest_block_that_holds_it() -> None:
    d = _decisions(softmax, np.zeros((2048, 32768), ml_dtypes.bfloat16))
    assert (d.strategy, d.group, d.items) == ("row-per-block", 512, 8)


def test_a_split_bfloat16_row_keeps_256_thread_blocks() -> None:
    d = _decisions(softmax, np.zeros((64, 32768), ml_dtypes.bfloat16))
    assert (d.strategy, d.group, d.items) == ("split", 256, 2)


def test_rows_up_to_1024_elements_take_a_warp_each() -> None:
    d = _decisions(softmax, _f32(16384, 1024))
    assert (d.strategy, d.group, d.items, d.passes) == ("row-per-warp", 32, 8, 1)


@pytest.mark.parametrize(
    ("x", "group", "items"),
    [
        (_f32(100, 8), 1, 2),  # 2 units: a row per thread
        (np.zeros((100, 64), np.float16), 2, 4),  # 8 units
        (np.zeros((100, 96), np.float16), 4, 3),  # 12 units
        (_f32(100, 1024), 32, 8),  # rows of 32 lanes' SHORT_ROW_ITEMS units and more keep the warp
    ],
)
def test_short_rows_take_part_of_a_warp_each_thread_several_units(x: np.ndarray, group: int, items: int) -> None:
    d = _decisions(softmax, x)
    assert (d.strategy, d.group, d.items) == ("row-per-warp", group, items)


@pytest.mark.parametrize(("dt", "width", "items"), [(ml_dtypes.bfloat16, 8, 4), (np.float16, 8, 4), (np.float32, 4, 8)])
def test_rows_not_a_multiple_of_the_vector_read_aligned_vectors_with_per_element_edges(
    dt: Any, width: int, items: int
) -> None:
    d = _decisions(softmax, np.zeros((333, 7777), dt))
    assert (d.shifted, d.vector_width, d.items, d.passes) == (True, width, items, 1)


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, np.float16, np.float32])
def test_a_shifted_layer_norm_reads_its_weight_per_element(dt: Any) -> None:
    x, w = np.zeros((333, 7777), dt), np.zeros(7777, dt)
    build = layer_norm.inspect(x, w, w, arch=ARCH)
    assert (build.decisions.shifted, build.decisions.vector_width) == (True, 16 // np.dtype(dt).itemsize)
    assert "kdp1[kdrowoff1 + kdcolumn]" in build.cuda_source  # the weight: row offset 0, its own shift


def test_a_shifted_rows_items_count_the_extra_unit() -> None:
    # 4095 float32 columns: 1024 units, 1025 when shifted, so 256 threads hold 5 each (not 4)
    d = _decisions(softmax, _f32(333, 4095))
    assert (d.shifted, d.group, d.items) == (True, 256, 5)


@pytest.mark.parametrize(
    ("x", "group", "items"),
    [
        (_f32(100, 7), 2, 4),  # a lane takes columns l, l + 2, ...
        (np.zeros((100, 27), np.float16), 8, 4),
        (np.zeros((3, 2001, 27), ml_dtypes.bfloat16), 8, 4),
        (np.zeros((120015, 97), np.float16), 32, 4),
        (np.zeros((100, 127), np.float64), 32, 4),
        (_f32(20001, 301), 32, 10),
    ],
)
def test_short_rows_that_are_not_whole_vectors_interleave_their_elements(x: np.ndarray, group: int, items: int) -> None:
    d = _decisions(softmax, x)
    assert (d.strategy, d.vector_width, d.shifted, d.group, d.items) == ("row-per-warp", 1, False, group, items)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    count=st.integers(1, 300_000),
    width=st.sampled_from([2, 4, 8, 16]),
    rows=st.integers(1, 1_000_000),
    sms=st.sampled_from([16, 132]),
)
def test_a_held_strategy_covers_every_unit_of_its_row(count: int, width: int, rows: int, sms: int) -> None:
    s = decide(count, width, 16 // width, 2, rows, sms, True)
    units = -(-count // s.width) + (count % s.width != 0)  # a shifted row's extra unit
    assert s.width in (1, width) and s.lanes <= s.threads
    if s.items is not None:
        assert s.items * s.lanes * s.cluster >= units and s.passes == 1


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_rows_past_the_interleaved_length_take_shifted_vectors(dt: Any) -> None:
    width = 16 // np.dtype(dt).itemsize
    d = _decisions(softmax, np.zeros((100, INTERLEAVE_MAX[width] + 1), dt))
    assert (d.strategy, d.vector_width, d.shifted) == ("row-per-warp", width, True)


def test_rows_that_are_a_multiple_of_the_vector_are_not_shifted() -> None:
    d = _decisions(softmax, np.zeros((333, 4096), ml_dtypes.bfloat16))
    assert (d.shifted, d.vector_width) == (False, 8)


def test_a_permuted_layout_is_not_shifted() -> None:
    d = _decisions(column_softmax, _f32(7777, 33))
    assert (d.layout, d.shifted, d.vector_width) == ("permuted", False, 1)


def test_long_rows_take_a_block_that_holds_them_in_registers() -> None:
    assert (_decisions(softmax, _f32(1024, 32768)).group, _decisions(softmax, _f32(1024, 32768)).items) == (1024, 8)
    bf16 = _decisions(softmax, np.ones((1024, 32768), ml_dtypes.bfloat16))
    assert (bf16.group, bf16.items, bf16.vector_width, bf16.accumulation) == (512, 8, 8, np.dtype(np.float32))


def test_rows_too_long_for_registers_are_read_again_per_phase() -> None:
    d = _decisions(softmax, _f32(300, 1_000_000))
    assert (d.strategy, d.items, d.passes) == ("row-per-block", None, 3)  # max, sum, the outputs


def test_rows_too_long_for_one_block_but_not_for_a_cluster_are_split_to_be_held() -> None:
    d = _decisions(softmax, _f32(512, 65536))
    assert (d.strategy, d.split, d.group, d.items, d.passes) == ("split", True, 256, 8, 1)


def test_few_long_rows_are_split_over_a_cluster_of_blocks() -> None:
    d = _decisions(softmax, _f32(8, 100_000))
    assert (d.strategy, d.split, d.group, d.items, d.passes) == ("split", True, 512, 7, 1)
    plan = softmax.plan((_f32(8, 100_000),), None)
    assert (plan.step(132, True).strategy.cluster, plan.step(132, True).blocks) == (8, 64)


def test_without_clusters_few_rows_take_a_block_each() -> None:
    plan = softmax.plan((_f32(8, 100_000),), None)
    assert (plan.step(108, False).strategy.strategy, plan.step(108, False).blocks) == ("row-per-block", 8)


def test_split_rows_too_long_for_registers_are_read_again() -> None:
    d = _decisions(softmax, _f32(3, 2_000_000))
    assert (d.strategy, d.items, d.passes) == ("split", None, 3)


def test_layer_norm_returns_its_mean_and_rstd_from_the_same_kernel() -> None:
    args = (_f32(32768, 768), _f32(768), _f32(768))
    plan = layer_norm.plan(args, None)
    assert isinstance(plan, FusedRowsPlan)
    assert plan.shapes == ((32768, 768), (32768, 1), (32768, 1))
    assert plan.dtypes == (np.dtype(np.float32),) * 3
    build = layer_norm.inspect(*args, arch=ARCH)
    assert build.cuda_source.count("__global__") == 1
    assert (build.decisions.strategy, build.decisions.items, build.decisions.passes) == ("row-per-warp", 6, 1)


def test_a_new_row_count_reuses_the_kernel() -> None:
    assert softmax.plan((_f32(64, 1024),), None).kernel is softmax.plan((_f32(96, 1024),), None).kernel


def test_the_bench_pipelines_are_one_kernel_each() -> None:
    x, w = _f32(4096, 4096), _f32(4096)
    for fused, args in [
        (fuse_bench.softmax, (x,)),
        (fuse_bench.log_softmax, (x,)),
        (fuse_bench.logsumexp, (x,)),
        (fuse_bench.layer_norm, (x, w, w)),
        (fuse_bench.rms_norm, (x, w)),
    ]:
        assert (_decisions(fused, *args).strategy, _decisions(fused, *args).passes) == ("row-per-block", 1)


def test_other_axes_are_reduced_through_strided_offsets() -> None:
    d = _decisions(column_softmax, _f32(37, 5))
    assert (d.layout, d.vector_width, d.items) == ("permuted", 1, None)
    plan = column_softmax.plan((_f32(37, 5),), None)
    assert plan.shapes == ((37, 5),)


def test_the_last_two_axes_reduce_as_one_row() -> None:
    @kd.fuse
    def normalize(x: Any) -> Any:
        return x - kd.ops.mean(x, axis=(1, 2), keepdims=True)

    d = _decisions(normalize, _f32(6, 8, 32))
    assert (d.layout, d.strategy, d.group) == ("rows", "row-per-warp", 16)  # 256 values: 16 lanes of 4 units


def test_a_reduction_result_returned_without_keepdims_is_one_value_per_row() -> None:
    @kd.fuse
    def lse(x: Any) -> Any:
        m = kd.ops.max(x, axis=-1, keepdims=True)
        return kd.ops.log(kd.ops.sum(kd.ops.exp(x - m), axis=-1)), kd.ops.max(x, axis=-1)

    plan = lse.plan((_f32(10, 300),), None)
    assert plan.shapes == ((10,), (10,))


@pytest.mark.parametrize("shape", [(5, 1), (0, 7), (3, 0), (1, 1)])
def test_rows_of_one_element_and_empty_arrays_compile(shape: tuple[int, int]) -> None:
    assert _decisions(softmax, _f32(*shape)).stage == "fused"


def test_a_chain_ending_in_its_one_reduction_keeps_the_reduction_kernels() -> None:
    @kd.fuse
    def sum_of_squares(x: Any) -> Any:
        return kd.ops.sum(x * x, axis=-1)

    assert _decisions(sum_of_squares, _f32(64, 64)).stage == "rows"


def _error(func: Any, *args: Any) -> str:
    with pytest.raises(FusionError) as info:
        kd.fuse(func).inspect(*args, arch=ARCH)
    return str(info.value)


def test_reductions_over_different_axis_sets_are_refused_naming_both() -> None:
    message = _error(
        lambda x: x - kd.ops.sum(x, axis=0, keepdims=True) + kd.ops.max(x, axis=1, keepdims=True), _f32(4, 6)
    )
    assert "'max'" in message and "'sum'" in message and "axis set" in message


def test_a_result_without_keepdims_paired_with_other_rows_is_refused() -> None:
    message = _error(lambda x: x - kd.ops.sum(x, axis=-1), _f32(4, 4))  # NumPy would pair row j's sum with column j
    assert "subtract" in message and "keepdims=True" in message


def test_an_index_reduction_cannot_feed_later_work() -> None:
    assert "argmax" in _error(lambda x: kd.ops.argmax(x, axis=-1) + 1, _f32(4, 4))


def test_arguments_larger_than_the_reduced_shape_are_refused() -> None:
    message = _error(lambda x, y: x / kd.ops.sum(x, axis=-1, keepdims=True) + y, _f32(4, 8), _f32(3, 4, 8))
    assert "argument 1" in message and "(3, 4, 8)" in message


def test_out_is_refused_for_tuple_outputs() -> None:
    args = (_f32(4, 8), _f32(8), _f32(8))
    with pytest.raises(FusionError, match="tuple"):
        layer_norm.plan(args, np.empty((4, 8), np.float32))


def test_a_fused_call_launches_once_with_the_planned_grid(drv: Any) -> None:
    s = kd.Session(0)
    x = s.zeros((4096, 1024), np.float32)
    softmax(x)
    grid, block = drv.launches[-1][1], drv.launches[-1][2]
    assert (grid, block) == ((4096 // 8, 1, 1), (256, 1, 1))  # 8 rows of 1024 per 256-thread block
    y, mean, rstd = layer_norm(x, s.zeros(1024, np.float32), s.zeros(1024, np.float32))
    assert (y.shape, mean.shape, rstd.shape) == ((4096, 1024), (4096, 1), (4096, 1))


def test_an_empty_max_has_no_identity_as_in_numpy(drv: Any) -> None:
    s = kd.Session(0)
    with pytest.raises(ValueError, match="zero-size array"):
        softmax(s.zeros((3, 0), np.float32))


def test_no_rows_launch_nothing(drv: Any) -> None:
    s = kd.Session(0)
    before = len(drv.launches)
    assert softmax(s.zeros((0, 5), np.float32)).shape == (0, 5)
    assert len(drv.launches) == before


def test_rows_of_no_elements_still_launch_to_write_their_reductions(drv: Any) -> None:
    @kd.fuse
    def share(x: Any) -> Any:
        total = kd.ops.sum(x, axis=-1, keepdims=True)
        return x / total, total

    s = kd.Session(0)
    before = len(drv.launches)
    y, total = share(s.zeros((3, 0), np.float32))
    assert (y.shape, total.shape, len(drv.launches)) == ((3, 0), (3, 1), before + 1)


FRESH_PROCESS = """
import json, sys, time
import numpy as np
start = time.perf_counter()
import kerneldsl as kd
@kd.fuse
def softmax(x):
    m = kd.ops.max(x, axis=-1, keepdims=True)
    e = kd.ops.exp(x - m)
    return e / kd.ops.sum(e, axis=-1, keepdims=True)
build = softmax.inspect(np.ones((64, 1024), np.float32), arch="sm_90")
loaded = sorted(m for m in ("jinja2", "cuda.bindings.nvrtc") if m in sys.modules)
print(json.dumps({"origin": build.origin, "loaded": loaded, "seconds": time.perf_counter() - start}))
"""


def test_a_disk_hit_in_a_fresh_process_renders_no_template_and_loads_no_nvrtc(tmp_path: Any) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> Any:
        done = subprocess.run(
            [sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, env=env, check=True
        )
        return json.loads(done.stdout)

    first, second = run(), run()
    assert (first["origin"], second["origin"]) == ("nvrtc", "disk")
    assert second["loaded"] == []


def test_the_fuse_bench_has_a_section_per_pipeline_and_parses_its_options() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    fuse_bench.add_arguments(parser)
    args = parser.parse_args(["--only", "softmax", "--dtype", "bfloat16", "--no-compile", "--reps", "3"])
    assert (args.only, args.dtype, args.no_compile, args.reps) == (["softmax"], ["bfloat16"], True, 3)
    assert list(fuse_bench.SECTIONS) == [
        "softmax",
        "log_softmax",
        "logsumexp",
        "layer_norm",
        "rms_norm",
        "sweep",
        "first",
    ]
    assert fuse_bench.ROW_SHAPES == ((4096, 4096), (16384, 1024), (1024, 32768))
    assert fuse_bench.NORM_SHAPES == ((4096, 4096), (32768, 768))


def test_the_fuse_sweep_is_seeded_and_covers_every_pipeline_dtype_and_batched_rows() -> None:
    cases = fuse_bench.sweep_cases(fuse_bench.SWEEP_CASES, fuse_bench.SWEEP_SEED)
    assert cases == fuse_bench.sweep_cases(fuse_bench.SWEEP_CASES, fuse_bench.SWEEP_SEED)
    assert {dtype for _, _, dtype in cases} == set(fuse_bench.SWEEP_DTYPES)
    assert {name for name, _, _ in cases} == set(fuse_bench.PIPELINES)
    assert any(len(shape) == 3 for _, shape, _ in cases) and any(shape[-1] % 2 for _, shape, _ in cases)


def test_every_fuse_sweep_case_compiles_to_one_fused_kernel_without_a_gpu() -> None:
    pipelines = {name: getattr(fuse_bench, name) for name in fuse_bench.PIPELINES}
    for name, shape, dtype in fuse_bench.sweep_cases(fuse_bench.SWEEP_CASES, fuse_bench.SWEEP_SEED):
        dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        x, w = np.zeros(shape, dt), np.ones(shape[-1], dt)
        operands = {"layer_norm": (x, w, w), "rms_norm": (x, w)}.get(name, (x,))
        assert pipelines[name].inspect(*operands, arch="sm_90").decisions.stage == "fused"


def test_constants_of_the_trace_are_parameters_not_part_of_the_kernel() -> None:
    def rms(eps: float) -> Any:
        return kd.fuse(lambda x: x / kd.ops.sqrt(kd.ops.mean(x * x, axis=-1, keepdims=True) + eps))

    assert rms(1e-5).plan((_f32(8, 64),), None).kernel is rms(1e-6).plan((_f32(8, 64),), None).kernel


def test_a_split_row_launches_in_clusters_of_its_blocks(drv: Any) -> None:
    s = kd.Session(0)
    softmax(s.zeros((8, 100_000), np.float32))
    f, grid, block, shared, stream, attributes = drv.ex_launches[-1]
    assert (grid, block, attributes["cluster"]) == ((64, 1, 1), (512, 1, 1), (8, 1, 1))


def test_the_reduction_methods_of_a_traced_array_fuse_like_the_functions() -> None:
    @kd.fuse
    def centered(x: Any) -> Any:
        return (x - x.mean(axis=-1, keepdims=True)) / (x.max(axis=-1, keepdims=True) - x.min(axis=-1, keepdims=True))

    plan = centered.plan((_f32(16, 256),), None)
    assert isinstance(plan, FusedRowsPlan) and [r.reducer.name for r in plan.pipeline.reductions] == [
        "mean",
        "max",
        "min",
    ]


def test_softmax_keeps_exp_in_the_registers_its_input_leaves() -> None:
    # 32 held float32 a thread fill HOLD_BYTES; exp(x - m) fits too because no later pass reads x
    d = _decisions(softmax, _f32(1024, 32768))
    assert (d.strategy, d.items, d.carried) == ("row-per-block", 8, True)


def test_shifted_rows_keep_exp_in_the_registers_their_input_leaves() -> None:
    # rows of 7777 float32: x alone fills HOLD_BYTES, as in a row of whole vectors
    d = _decisions(softmax, _f32(1000, 7777))
    assert (d.shifted, d.items, d.carried) == (True, 8, True)


def test_split_rows_carry_only_what_fits_beside_their_held_inputs() -> None:
    # 8 held float32 vectors a thread fill HOLD_BYTES; in split rows ptxas spilled a carried exp
    # beside them, so a split row counts both as live at once
    d = _decisions(softmax, _f32(16, 65536))
    assert (d.split, d.items, d.carried) == (True, 8, False)


def test_the_benches_keep_each_contenders_best_round_with_the_contenders_taking_turns() -> None:
    order: list[str] = []
    timings = {"kd": iter([3.0, 1.0, 2.0]), "torch": iter([2.0, 2.5, 4.0])}

    def contender(label: str) -> Any:
        return lambda: order.append(label) or next(timings[label])

    best = ops_bench.best_rounds({"kd": contender("kd"), "torch": contender("torch")})
    assert best == {"kd": 1.0, "torch": 2.0}
    assert order == ["kd", "torch"] * ops_bench.ROUNDS


@pytest.mark.parametrize(
    ("shape", "strategy"), [((64, 32), "row-per-warp"), ((64, 4096), "row-per-block"), ((8, 16384), "split")]
)
def test_every_fused_strategy_compiles_without_warnings(shape: tuple[int, int], strategy: str) -> None:
    build = softmax.inspect(_f32(*shape), arch=ARCH)
    assert build.decisions.strategy == strategy
    assert "warning" not in build.log
