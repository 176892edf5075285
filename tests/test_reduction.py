"""Reduction code generation on CPU: every stage compiles for int and float types (a representative
subset: every reducer for int32/float32, the integer and 16-bit float accumulators, bool, uint64),
the structure is deterministic (no atomics), and axis handling follows NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array.reduction import DIRECT_MAX, ROWS_BLOCK_MIN, normalize_axis

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


def test_rows_use_a_block_for_long_rows_and_a_warp_for_short_ones() -> None:
    short = ops.sum.inspect(np.ones((4, 100), np.float32), axis=1, arch=ARCH).decisions
    long = ops.sum.inspect(np.ones((4, ROWS_BLOCK_MIN), np.float32), axis=1, arch=ARCH).decisions
    assert (short.stage, short.group) == ("rows", 32) and (long.stage, long.group) == ("rows", 256)


def test_axis_normalization() -> None:
    assert normalize_axis(None, 2, "sum") is None
    assert normalize_axis(-1, 2, "sum") == 1
    assert normalize_axis((0,), 3, "sum") == 0
    with pytest.raises(np.exceptions.AxisError):
        normalize_axis(2, 2, "sum")
    with pytest.raises(NotImplementedError):
        normalize_axis((0, 1), 2, "sum")
    with pytest.raises(TypeError):
        normalize_axis(1.0, 2, "sum")


def test_middle_axis_of_3d_compiles() -> None:
    b = ops.argmax.inspect(np.ones((3, 4, 5), np.float32), axis=1, arch=ARCH)
    assert b.decisions.stage == "columns" and b.cubin


def test_user_reduction() -> None:
    sumsq = kd.reduction(map="x * x", reduce="a + b", identity="0", post="sqrt(r)", name="l2")
    src = sumsq.inspect(np.ones(100, np.float32), arch=ARCH).cuda_source
    assert "auto kdpre = [](kdA x) -> kdA { return x * x; };" in src
    assert "sqrt(r)" in src
    absmax = kd.reduction(map="x < 0 ? -x : x", reduce="a > b ? a : b", identity="min", dtype=np.float64)
    b = absmax.inspect(np.ones((4, 8), np.float32), axis=0, arch=ARCH)
    assert b.specialization.element_type("kdout").name == "float64"
