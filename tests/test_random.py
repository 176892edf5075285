"""kd.random on CPU: the NumPy Philox4x32-10 reference against Random123's known answers, the
declaration rules of the array API, the fill kernels compiling for sm_90, and what a draw
launches (the driver double records the seed and subsequence it packs)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver
from philox_reference import KAT, philox4x32_10, words

import kerneldsl as kd
from kerneldsl import dtypes
from kerneldsl.device_array import random as kdr
from kerneldsl.errors import BindingError


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_the_reference_gives_random123s_known_answers(counter: Any, key: Any, expected: Any) -> None:
    got = philox4x32_10(np.array(counter, np.uint32), np.array(key, np.uint32))
    assert [int(v) for v in got] == list(expected)


def test_the_reference_words_put_the_offset_low_and_the_subsequence_high() -> None:
    # counter (offset lo, offset hi, subsequence lo, subsequence hi), key (seed lo, seed hi)
    seed, sub = 0x299F31D0A4093822, 0x0370734413198A2E
    got = words(seed, sub, 1)  # group 0: counter words 0, 0, then the subsequence
    want = philox4x32_10(np.array([0, 0, 0x13198A2E, 0x03707344], np.uint32), np.array([0xA4093822, 0x299F31D0]))
    assert (got[0] == want).all()


def test_random_is_a_public_module() -> None:
    assert kd.random is kdr
    assert callable(kd.random.normal) and callable(kd.random.Generator)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: kd.random.uniform(4, dtype=np.int32), "uniform makes"),
    (lambda: kd.random.normal(4, dtype=np.uint8), "normal makes"),
    (lambda: kd.random.integers(4, 10, dtype=np.float32), "integers makes"),
    (lambda: kd.random.integers(4, 5, 5), "low < high"),
    (lambda: kd.random.integers(4, 0, 300, dtype=np.uint8), "<= 256"),
    (lambda: kd.random.normal(4, seed=-1), r"\[0, 2\*\*64\)"),
    (lambda: kd.random.normal(4, seed=1.5), "must be an int"),
])  # fmt: skip
def test_a_draw_it_cannot_make_is_refused_before_any_device_work(call: Any, message: str) -> None:
    with pytest.raises(BindingError, match=message):
        call()


@pytest.mark.parametrize(
    ("distribution", "dtype", "wide", "per"),
    [
        ("uniform", "float32", False, 4),
        ("uniform", "float64", True, 2),
        ("uniform", "float16", False, 4),
        ("uniform", "bfloat16", False, 4),
        ("normal", "float32", False, 4),
        ("normal", "float64", True, 2),
        ("integers", "int32", False, 4),
        ("integers", "uint8", False, 4),
        ("integers", "int64", True, 2),
    ],
)
def test_each_fill_compiles_for_sm_90_with_its_values_per_philox_call(
    distribution: str, dtype: str, wide: bool, per: int
) -> None:
    dt = dtypes.element_type(dtype).numpy
    scalars = (0, 5) if distribution == "integers" else (0.0, 1.0)
    build = kdr._fill_kernel(distribution, dt, wide).inspect(np.empty(1001, dt), 1, 0, *scalars, arch="sm_90")
    assert build.decisions.vector_width == per


@pytest.fixture
def drv() -> Any:
    kernels = [kdr._fill_kernel("normal", np.dtype(np.float32), False)]
    with installed_driver(FakeDriver(), *kernels) as fake:
        fake.snapshot_slots = 4  # out, seed, subsequence, loc
        yield fake


def _seed_and_subsequence(params: bytes) -> tuple[int, int]:
    return struct.unpack_from("<QQ", params, 8)


def test_a_draw_launches_one_thread_per_four_values(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        a = kd.random.normal((3, 1000), seed=9, session=s)
        assert a.shape == (3, 1000) and a.dtype == np.float32
    [(_, grid, block, _, _, _)] = drv.launches
    assert grid[0] * block[0] * 4 >= 3000 > (grid[0] - 1) * block[0] * 4


def test_a_seeded_draw_reads_subsequence_0_and_a_generator_numbers_its_draws(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        kd.random.normal(100, seed=2**63 + 3, session=s)
        g = kd.random.Generator(2**63 + 3)
        g.normal(100, session=s)
        g.normal(100, session=s)
    assert [_seed_and_subsequence(p) for p in drv.param_bytes] == [(2**63 + 3, 0), (2**63 + 3, 0), (2**63 + 3, 1)]


def test_an_empty_draw_launches_nothing(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        assert kd.random.normal(0, seed=1, session=s).shape == (0,)
    assert not drv.launches
