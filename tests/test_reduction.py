"""Reduction code generation on CPU: every stage compiles for int and float types (a representative
subset: every reducer for int32/float32, the integer and 16-bit float accumulators, bool, uint64),
the structure is deterministic (no atomics), and axis handling follows NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.reduction import DIRECT_MAX, ROWS_BLOCK_MIN, normalize_axis

ARCH = "sm_90"
REDUCERS = ("sum", "prod", "min", "max", "mean", "argmax", "argmin", "norm")


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):
    yield


def _sources(builds) -> str:
    return "\n".join(b.cuda_source for b in builds)


@pytest.mark.parametrize("name", REDUCERS)
@pytest.mark.parametrize("dt", [np.int32, np.float32], ids=["int32", "float32"])
def test_every_stage_compiles(name: str, dt: type) -> None:
    r = getattr(ops, name)
    direct = r.inspect(np.ones(100, dt), arch=ARCH)
    assert len(direct) == 1 and "stage direct" in direct[0].cuda_source
    (single,) = r.inspect(np.ones(DIRECT_MAX + 1, dt), arch=ARCH)
    assert "stage partial" in single.cuda_source and "if (kdlast)" in single.cuda_source
    assert "stage rows" in _sources(r.inspect(np.ones((3, 40), dt), axis=1, arch=ARCH))
    assert "stage columns" in _sources(r.inspect(np.ones((3, 40), dt), axis=0, arch=ARCH))
    for b in (*direct, single):  # the one atomic elects the last block; values are never added atomically
        assert b.cuda_source.count("atomic") == b.cuda_source.count("atomicAdd(kdticket, 1u)") and b.cubin


@pytest.mark.parametrize("dt", [np.bool_, np.int8, np.uint64, np.float16, np.float64, np.uint16])
def test_other_dtypes_compile(dt: type) -> None:
    for name in ("sum", "max", "argmax", "mean"):
        r = getattr(ops, name)
        assert r.inspect(np.ones(DIRECT_MAX + 1, dt), arch=ARCH)[0].cubin
        assert r.inspect(np.ones((5, ROWS_BLOCK_MIN), dt), axis=-1, arch=ARCH)[0].cubin


def test_accumulation_types_are_documented_ones() -> None:
    src = ops.sum.inspect(np.ones(10, np.float16), arch=ARCH)[0].cuda_source
    assert "typedef float kdA;" in src
    src = ops.sum.inspect(np.ones(10, np.int8), arch=ARCH)[0].cuda_source
    assert "typedef long long kdA;" in src and "(kdA)(0u + (kdU)a + (kdU)b)" in src
    src = ops.mean.inspect(np.ones(10, np.int16), arch=ARCH)[0].cuda_source
    assert "typedef double kdA;" in src


def test_full_reduction_uses_vector_loads_when_aligned() -> None:
    (partial,) = ops.sum.inspect(np.ones(1 << 20, np.float32), arch=ARCH)
    assert "vector x4" in partial.cuda_source
    assert "kdpart[blockIdx.x] = kdacc;" in partial.cuda_source


def test_rows_use_a_block_for_long_rows_and_a_warp_for_short_ones() -> None:
    short = ops.sum.inspect(np.ones((4, 100), np.float32), axis=1, arch=ARCH)[0].cuda_source
    long = ops.sum.inspect(np.ones((4, ROWS_BLOCK_MIN), np.float32), axis=1, arch=ARCH)[0].cuda_source
    assert "kdlanes = 32" in short and "kdlanes = 256" in long


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
    (b,) = ops.argmax.inspect(np.ones((3, 4, 5), np.float32), axis=1, arch=ARCH)
    assert "stage columns" in b.cuda_source


def test_user_reduction() -> None:
    sumsq = kd.reduction(map="x * x", reduce="a + b", identity="0", post="sqrt(r)", name="l2")
    builds = sumsq.inspect(np.ones(100, np.float32), arch=ARCH)
    src = builds[0].cuda_source
    assert "auto kdpre = [](kdA x) -> kdA { return x * x; };" in src
    assert "sqrt(r)" in src
    absmax = kd.reduction(map="x < 0 ? -x : x", reduce="a > b ? a : b", identity="min", dtype=np.float64)
    (b,) = absmax.inspect(np.ones((4, 8), np.float32), axis=0, arch=ARCH)
    assert "double* kdout" in b.cuda_source
