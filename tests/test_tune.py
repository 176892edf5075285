"""``@kd.autotune`` on the driver double: declarations, keys, safe measuring, the records kept in
the disk cache and what a warm cache saves (no GPU; launches are recorded, times come from
``FakeDriver.launch_ms``)."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import cache as disk_cache
from kerneldsl import tune
from kerneldsl.cli import main
from kerneldsl.errors import AutotuneError, BindingError, DeclarationError
from kerneldsl.launch import fastpath
from kerneldsl.tune import records


@kd.kernel(grid=kd.cdiv("n", 1024), block=128)
def add(y: kd.InOut["float32", "n"], x: kd.In["float32", "n"], ITEMS: kd.Const[int] = 1):
    return f"""
    #if {ITEMS} == 3
    #error three items per thread is refused
    #endif
    for (int k = 0; k < {ITEMS}; ++k) {{
      size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * {ITEMS} + k;
      if (i < n) {y}[i] += {x}[i];
    }}"""


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def fill(y: kd.Out["T", "n"], value: kd.Scalar["T"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {value};"


BLOCKS = {"block": [128, 256]}


def by_block(times: dict[int, float]) -> Any:
    """``FakeDriver.launch_ms``: a launch takes ``times[block.x]`` ms."""
    return lambda launch: times[launch[2][0]]


@pytest.fixture(autouse=True)
def private_cache(isolated_cache: Path) -> Path:
    return isolated_cache


@pytest.fixture
def arrays(drv: Any) -> tuple[Any, Any]:
    s = kd.default_session()
    return s.to_device(np.ones(1000, np.float32)), s.to_device(np.arange(1000, dtype=np.float32))


# --- declarations ------------------------------------------------------------------------------


def test_configs_given_as_lists_are_their_product() -> None:
    tuned = kd.autotune(configs={"ITEMS": [1, 2], "block": [128, 256]}, key=("n",))(add)
    assert [c.label for c in tuned.configs] == [
        "ITEMS=1 block=128",
        "ITEMS=1 block=256",
        "ITEMS=2 block=128",
        "ITEMS=2 block=256",
    ]


def test_a_config_key_that_is_no_constant_or_launch_setting_is_refused() -> None:
    with pytest.raises(DeclarationError, match="TILE"):
        kd.autotune(configs=[{"TILE": 16}], key=("n",))(add)


def test_a_config_declared_twice_is_refused() -> None:
    with pytest.raises(DeclarationError, match="declared twice"):
        kd.autotune(configs=[{"ITEMS": 2}, {"ITEMS": 2}], key=("n",))(add)


def test_a_constant_of_the_wrong_type_in_a_config_is_refused() -> None:
    with pytest.raises(DeclarationError, match="ITEMS"):
        kd.autotune(configs=[{"ITEMS": 2.5}], key=("n",))(add)


def test_a_block_naming_an_unknown_symbol_is_refused() -> None:
    with pytest.raises(DeclarationError, match="block"):
        kd.autotune(configs=[{"block": "m"}], key=("n",))(add)


def test_no_configs_is_refused() -> None:
    with pytest.raises(DeclarationError, match="at least one"):
        kd.autotune(configs=[], key=("n",))(add)


def test_a_key_naming_nothing_of_the_kernel_is_refused() -> None:
    with pytest.raises(DeclarationError, match="'m'"):
        kd.autotune(configs=[{"ITEMS": 1}], key=("m",))(add)


def test_autotune_goes_above_a_kernel() -> None:
    with pytest.raises(DeclarationError, match="above @kd.kernel"):
        kd.autotune(configs=[{"ITEMS": 1}])(lambda: None)  # type: ignore[arg-type]


def test_a_tune_for_entry_must_give_every_symbol_and_dtype_variable() -> None:
    with pytest.raises(DeclarationError, match="lacks"):
        kd.autotune(configs=[{"block": 128}], key=("T",), tune_for=[{"T": np.float32}])(fill)


def test_a_config_becomes_a_kernel_with_its_constant_bound_and_its_launch_replaced() -> None:
    tuned = kd.autotune(configs=[{"ITEMS": 4, "block": 64, "maxrregcount": 32}], key=("n",))(add)
    variant = tuned.variant(tuned.configs[0])
    assert [c.default for c in variant.signature.consts] == [4]
    assert variant.signature.block[0].args == (64,)
    assert "--maxrregcount=32" in variant.options


# --- keys ----------------------------------------------------------------------------------------


def test_keys_are_extents_dtype_names_and_bucket_values(arrays: tuple[Any, Any]) -> None:
    y, x = arrays
    tuned = kd.autotune(configs=BLOCKS, key=("n", lambda y, x: x.shape[0].bit_length()))(add)
    assert tuned.key.values(tuned.key.raw((y, x))) == [1000, 10]
    typed = kd.autotune(configs=BLOCKS, key=("T",))(fill)
    assert typed.key.values(typed.key.raw((y, 1.0))) == ["float32"]


def test_the_default_key_is_every_dtype_variable_and_shape_symbol() -> None:
    assert kd.autotune(configs=BLOCKS)(fill).key.names == ["T", "n"]


def test_a_bucket_that_gives_no_plain_value_is_a_binding_error(arrays: tuple[Any, Any]) -> None:
    y, x = arrays
    tuned = kd.autotune(configs=BLOCKS, key=(lambda y, x: object(),))(add)
    with pytest.raises(BindingError, match="autotune key"):
        tuned(y, x)


def test_a_tuned_constant_given_by_a_call_is_a_binding_error(arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=[{"ITEMS": 1}, {"ITEMS": 2}], key=("n",))(add)
    with pytest.raises(BindingError, match="tuned constant"):
        tuned(*arrays, ITEMS=2)


def test_a_launch_override_on_a_tuned_call_is_a_binding_error(arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    with pytest.raises(BindingError, match="block="):
        tuned(*arrays, block=64)


# --- measuring -----------------------------------------------------------------------------------


def test_the_first_call_measures_every_config_then_runs_the_fastest(drv: Any, arrays: tuple[Any, Any]) -> None:
    drv.launch_ms = by_block({128: 2.0, 256: 1.0})
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    before = tune.benchmark_launches()
    tuned(*arrays)
    measured = tune.benchmark_launches() - before
    assert measured > 2 and len(drv.launches) == measured + 1
    assert {launch[2][0] for launch in drv.launches[:-1]} == {128, 256}
    assert drv.launches[-1][2] == (256, 1, 1)
    choice = tuned.tune(*arrays)
    assert (choice.config.label, choice.source, choice.ms) == ("block=256", "measured", 1.0)


def test_written_arguments_are_timed_on_scratch_copies(drv: Any, arrays: tuple[Any, Any]) -> None:
    y, x = arrays
    drv.snapshot_slots = 2  # y's and x's pointers
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    tuned(y, x)
    pointers = [struct.unpack("<QQ", p) for p in drv.param_bytes]
    assert all(py != y.ptr and px == x.ptr for py, px in pointers[:-1])  # read-only x is used as it is
    assert pointers[-1] == (y.ptr, x.ptr)


def test_numpy_arguments_are_timed_on_device_copies_and_left_alone(drv: Any) -> None:
    y, x = np.ones(1000, np.float32), np.arange(1000, dtype=np.float32)
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    tuned(y, x)
    assert tuned.tune(y, x).measured == 2
    np.testing.assert_array_equal(x, np.arange(1000, dtype=np.float32))


def test_restore_runs_on_the_call_arguments_after_each_config(drv: Any, arrays: tuple[Any, Any]) -> None:
    y, x = arrays
    drv.snapshot_slots = 1
    restored: list[Any] = []
    tuned = kd.autotune(configs=BLOCKS, key=("n",), restore=lambda y, x: restored.append(y))(add)
    tuned(y, x)
    assert restored == [y, y]
    assert {struct.unpack("<Q", p)[0] for p in drv.param_bytes} == {y.ptr}


def test_prune_drops_configs_before_anything_runs(drv: Any, arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=BLOCKS, key=("n",), prune=lambda config, y, x: config["block"] == 128)(add)
    tuned(*arrays)
    assert {launch[2][0] for launch in drv.launches} == {128}


def test_a_config_that_fails_to_compile_is_skipped_and_named(drv: Any, arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=[{"ITEMS": 1}, {"ITEMS": 3}], key=("n",))(add)
    tuned(*arrays)
    timings = tuned.tune(*arrays).timings
    assert timings["ITEMS=3"].ms is None and timings["ITEMS=3"].error.startswith("KernelCompileError")
    assert timings["ITEMS=1"].ms is not None


def test_a_config_whose_block_no_sm_holds_is_skipped_before_launching(drv: Any, arrays: tuple[Any, Any]) -> None:
    drv.func_values["MAX_THREADS_PER_BLOCK"] = 256  # as ptxas would say of a register-heavy kernel
    tuned = kd.autotune(configs={"block": [256, 512]}, key=("n",))(add)
    tuned(*arrays)
    assert "zero occupancy" in str(tuned.tune(*arrays).timings["block=512"].error)
    assert {launch[2][0] for launch in drv.launches} == {256}


def test_every_config_failing_is_an_autotune_error_naming_each(drv: Any, arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=[{"ITEMS": 3}, {"ITEMS": 3, "block": 2048}], key=("n",))(add)
    with pytest.raises(AutotuneError) as caught:
        tuned(*arrays)
    assert sorted(caught.value.failures) == ["ITEMS=3", "ITEMS=3 block=2048"]
    assert drv.launches == []


def test_explain_says_which_config_a_call_uses_and_why(drv: Any, arrays: tuple[Any, Any]) -> None:
    drv.launch_ms = by_block({128: 2.0, 256: 1.0})
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    assert "not tuned yet" in tuned.explain(*arrays)
    tuned(*arrays)
    text = tuned.explain(*arrays)
    assert "block=256, 1.0000 ms" in text and "measured in this process" in text


def test_a_dtype_key_keeps_the_winner_on_the_c_launch_path(drv: Any) -> None:
    tuned = kd.autotune(configs=BLOCKS, key=("T",))(fill)
    y = kd.default_session().empty(1000, np.float32)
    tuned(y, 1.0)
    tuned(y, 1.0)
    if fastpath.ENABLED:
        assert tuned._remembered_launches == 1 and drv.c_launches > 0


@pytest.mark.skipif(not fastpath.ENABLED, reason="the C launch path is off")
def test_a_shape_key_keeps_each_keys_winner_on_the_c_launch_path(drv: Any) -> None:
    s = kd.default_session()
    pairs = {n: (s.to_device(np.ones(n, np.float32)), s.zeros(n, np.float32)) for n in (1000, 5000)}
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    drv.launch_ms = by_block({128: 1.0, 256: 2.0})
    tuned(*pairs[1000])
    drv.launch_ms = by_block({128: 2.0, 256: 1.0})
    tuned(*pairs[5000])
    tuned(*pairs[1000])  # each key's first warm call makes its entry, pinned to its extent
    tuned(*pairs[5000])
    before = drv.c_launches
    for n in (1000, 5000, 1000, 5000):
        tuned(*pairs[n])
    assert drv.c_launches - before == 4 and tuned._remembered_launches == 2
    assert [launch[2][0] for launch in drv.launches[-4:]] == [128, 256, 128, 256]


def test_a_pinned_entry_declines_another_extent() -> None:
    contract = add.inspect(np.ones(1000, np.float32), np.ones(1000, np.float32), arch="sm_90").launch_contract
    table = fastpath.launch_table(contract)
    if table is None:
        pytest.skip("the C launch path is off")
    pinned = fastpath._pinned(contract, table, {"n": 1000})
    assert pinned is not None and pinned[3][-1] == (0, 0, -1, 1000) and len(pinned[3]) == len(table[3]) + 1


# --- remembered ----------------------------------------------------------------------------------


def test_a_warm_cache_chooses_with_no_benchmark_launch(drv: Any, arrays: tuple[Any, Any]) -> None:
    drv.launch_ms = by_block({128: 2.0, 256: 1.0})
    kd.autotune(configs=BLOCKS, key=("n",))(add)(*arrays)
    fresh = kd.autotune(configs=BLOCKS, key=("n",))(add)  # a new process's view: nothing in memory
    before = tune.benchmark_launches()
    fresh(*arrays)
    choice = fresh.tune(*arrays)
    assert tune.benchmark_launches() == before
    assert (choice.source, choice.config.label) == ("remembered", "block=256")
    assert "remembered on disk" in kd.autotune(configs=BLOCKS, key=("n",))(add).explain(*arrays)


def test_adding_a_config_measures_only_the_new_one(drv: Any, arrays: tuple[Any, Any]) -> None:
    drv.launch_ms = by_block({64: 0.5, 128: 2.0, 256: 1.0})
    kd.autotune(configs=BLOCKS, key=("n",))(add)(*arrays)
    drv.launches.clear()
    more = kd.autotune(configs={"block": [128, 256, 64]}, key=("n",))(add)
    more(*arrays)
    assert {launch[2][0] for launch in drv.launches} == {64}
    assert (more.tune(*arrays).measured, more.tune(*arrays).config.label) == (1, "block=64")


def test_another_key_is_tuned_on_its_own(drv: Any) -> None:
    s = kd.default_session()
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    tuned(s.zeros(1000, np.float32), s.zeros(1000, np.float32))
    before = tune.benchmark_launches()
    tuned(s.zeros(2000, np.float32), s.zeros(2000, np.float32))
    assert tune.benchmark_launches() > before


def _record_key(tuned: Any, y: Any, x: Any) -> tuple[str, dict[str, Any]]:
    wanted = tuned._material(tuned.key.raw((y, x)), {}, y.session)
    return disk_cache.cache_key(wanted), wanted


def test_a_record_round_trips_through_the_disk_cache(drv: Any, arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    tuned(*arrays)
    _, wanted = _record_key(tuned, *arrays)
    timings = records.load(disk_cache.get_default_cache(), wanted)
    assert sorted(t.label for t in timings.values()) == ["block=128", "block=256"]
    assert wanted["device"] == "Fake GPU" and wanted["key"] == [1000]


def test_a_record_of_the_wrong_shape_is_evicted_and_tuned_again(drv: Any, arrays: tuple[Any, Any]) -> None:
    tuned = kd.autotune(configs=BLOCKS, key=("n",))(add)
    key, wanted = _record_key(tuned, *arrays)
    store = disk_cache.get_default_cache()
    store.put(key, json.dumps({"configs": {"x": {"ms": "fast"}}}).encode(), wanted)
    assert records.load(store, wanted) == {}
    assert store.get(key, wanted) is None
    tuned(*arrays)
    assert tuned.tune(*arrays).source == "measured"


def test_editing_the_body_starts_a_new_record() -> None:
    @kd.kernel(grid=kd.cdiv("n", 1024), block=128)
    def add(y: kd.InOut["float32", "n"], x: kd.In["float32", "n"], ITEMS: kd.Const[int] = 1):
        return f"size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] -= {x}[i];"

    edited = kd.autotune(configs=BLOCKS, key=("n",))(add)
    assert edited.identity != kd.autotune(configs=BLOCKS, key=("n",))(globals()["add"]).identity


def test_the_configs_are_not_part_of_the_kernel_identity() -> None:
    one = kd.autotune(configs=BLOCKS, key=("n",))(add)
    assert one.identity == kd.autotune(configs={"block": [64]}, key=("n",))(add).identity


def test_a_build_explained_is_compared_with_builds_not_tuning_records(drv: Any, arrays: tuple[Any, Any]) -> None:
    kd.autotune(configs={"ITEMS": [2, 4]}, key=("n",))(add)(*arrays)
    assert re.search(r"constant ITEMS: [24] -> 1", add.explain(*arrays))  # the nearest entry is a variant's build


def test_cache_list_shows_tuning_records(drv: Any, arrays: tuple[Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
    drv.launch_ms = by_block({128: 2.0, 256: 1.0})
    kd.autotune(configs=BLOCKS, key=("n",))(add)(*arrays)
    capsys.readouterr()
    assert main(["cache", "list", "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out) if r["output"] == "tuning"]
    assert (row["kernel"], row["device"]) == ("add", "Fake GPU")
    assert row["tuning"] == {"key": "n=1000", "winner": "block=256", "winner_ms": 1.0, "measured": 2, "skipped": 0}
    assert main(["cache", "list"]) == 0
    assert "tuning records:" in capsys.readouterr().out


# --- ahead of time and in a fresh process -------------------------------------------------------------

MODULE = textwrap.dedent(
    """
    import numpy as np
    import kerneldsl as kd

    @kd.autotune(configs={"block": [128, 256]}, key=("n",), tune_for=[{"n": 4096}])
    @kd.kernel(grid=kd.cdiv("n", 256), block=256)
    def twice(y: kd.InOut["float32", "n"], by: kd.Scalar["float32"], PLUS: kd.Const[int] = 0):
        loop = "for (index_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)"
        return loop + f" {y}[i] *= {by} + {PLUS};"
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    import numpy as np
    from driver_double import FakeDriver
    from kerneldsl.runtime import use_driver
    from kerneldsl import tune
    import tuned_module

    with use_driver(FakeDriver()):
        import kerneldsl as kd
        y = kd.default_session().zeros(4096, np.float32)
        tuned_module.twice(y, 2.0)
        print(tune.benchmark_launches(), tuned_module.twice.tune(y, 2.0).source)
    """
)


def test_a_fresh_process_with_a_warm_cache_makes_no_benchmark_launch(tmp_path: Path, private_cache: Path) -> None:
    (tmp_path / "tuned_module.py").write_text(MODULE)
    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(private_cache)}
    tests = str(Path(__file__).parent)

    def run() -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path), tests], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    first, second = run(), run()
    assert int(first[0]) > 0 and first[1] == "measured"
    assert second == ["0", "remembered"]


def test_kerneldsl_tune_tunes_the_declared_keys(
    drv: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = tmp_path / "tuned_cli_module.py"
    path.write_text(MODULE)
    assert main(["tune", str(path)]) == 0
    out = capsys.readouterr().out
    assert "twice" in out and "n=4096" in out and "measured" in out
    assert main(["tune", str(path)]) == 0
    assert "remembered" in capsys.readouterr().out


def test_the_tune_benchmark_parses_its_options_and_its_kernels_compile_in_every_config() -> None:
    import argparse

    from kerneldsl.bench import BENCHMARKS, tune_bench

    parser = argparse.ArgumentParser()
    BENCHMARKS["tune"].add_arguments(parser)
    assert parser.parse_args(["--only", "rows", "--reps", "3"]).only == ["rows"]
    for tuned in (tune_bench.tuned_matmul(), tune_bench.tuned_row_sum()):
        builds = [tuned.variant(c).compile(arch="sm_90") for c in tuned.configs]
        assert all(b.compiled.spill_bytes == 0 for b in builds)
