"""kd.random and the prelude's Philox4x32-10 on the GPU: the device's words equal Random123's
known answers, the first values of a draw equal the NumPy reference (tests/philox_reference.py)
bit for bit (normals within a few ulp of the float64 Box-Muller), and 2^20 values have the
distribution's mean and variance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from philox_reference import KAT, integers, normal, uniform

import kerneldsl as kd
from kerneldsl.dtypes import element_type

pytestmark = pytest.mark.gpu

SEEDS = [0, 1, 2**63 + 12345]
BFLOAT16 = element_type("bfloat16").numpy


@kd.kernel(grid=1, block=3)
def known_answers(out: kd.Out[kd.uint32, 3, 4], inputs: kd.In[kd.uint32, 3, 6]):
    return f"""
    int t = threadIdx.x;
    const unsigned int* c = {inputs} + 6 * t;
    kd_philox4 r = kd_philox4x32_10(kd_philox4{{c[0], c[1], c[2], c[3]}}, c[4], c[5]);
    {out}[4 * t] = r.x; {out}[4 * t + 1] = r.y; {out}[4 * t + 2] = r.z; {out}[4 * t + 3] = r.w;
    """


def test_the_prelude_gives_random123s_known_answers(device_session: kd.Session) -> None:
    inputs = np.array([[*c, *k] for c, k, _ in KAT], np.uint32)
    out = device_session.zeros((3, 4), np.uint32)
    known_answers(out, device_session.to_device(inputs))
    assert out.to_host().tolist() == [list(e) for _, _, e in KAT]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_values_equal_the_reference_bit_for_bit(device_session: kd.Session, seed: int, dtype: Any) -> None:
    got = kd.random.uniform(1003, dtype=dtype, seed=seed, session=device_session).to_host()
    np.testing.assert_array_equal(got, uniform(1003, seed, dtype).astype(dtype))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("dtype", "rtol", "atol"), [(np.float32, 2e-6, 1e-6), (np.float64, 1e-13, 1e-14)])
def test_normal_values_equal_the_reference(
    device_session: kd.Session, seed: int, dtype: Any, rtol: float, atol: float
) -> None:
    got = kd.random.normal(1001, dtype=dtype, seed=seed, session=device_session).to_host()
    np.testing.assert_allclose(got, normal(1001, seed, dtype), rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    ("low", "high", "dtype"),
    [(-5, 17, np.int32), (0, 256, np.uint8), (-(2**40), 2**40, np.int64), (0, 2**64, np.uint64), (3, 4, np.int16)],
)
def test_integers_equal_the_reference(device_session: kd.Session, low: int, high: int, dtype: Any) -> None:
    got = kd.random.integers(999, low, high, dtype=dtype, seed=7, session=device_session).to_host()
    assert [int(v) for v in got] == integers(999, 7, low, high)


def test_a_draw_depends_only_on_the_seed_and_the_index(device_session: kd.Session) -> None:
    whole = kd.random.normal(4099, seed=11, session=device_session).to_host()
    part = kd.random.normal(1001, seed=11, session=device_session).to_host()
    shaped = kd.random.normal((17, 3, 5), seed=11, session=device_session).to_host()
    np.testing.assert_array_equal(whole[:1001], part)
    np.testing.assert_array_equal(whole[:255].reshape(17, 3, 5), shaped)


def test_a_generators_draws_differ_and_its_first_is_the_seeded_draw(device_session: kd.Session) -> None:
    g = kd.random.Generator(5)
    first, second = g.uniform(1000, session=device_session).to_host(), g.uniform(1000, session=device_session).to_host()
    np.testing.assert_array_equal(first, kd.random.uniform(1000, seed=5, session=device_session).to_host())
    np.testing.assert_array_equal(second, uniform(1000, 5, np.float32, subsequence=1).astype(np.float32))
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_two_to_the_twenty_normals_have_the_asked_mean_and_variance(device_session: kd.Session, dtype: Any) -> None:
    x = (
        kd.random.normal(2**20, dtype=dtype, loc=2.0, scale=3.0, seed=3, session=device_session)
        .to_host()
        .astype(np.float64)
    )
    assert abs(x.mean() - 2.0) < 0.015 and abs(x.var() / 9.0 - 1.0) < 0.01


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_two_to_the_twenty_uniforms_lie_in_range_with_the_right_moments(device_session: kd.Session, dtype: Any) -> None:
    x = (
        kd.random.uniform(2**20, dtype=dtype, low=-1.0, high=3.0, seed=4, session=device_session)
        .to_host()
        .astype(np.float64)
    )
    assert x.min() >= -1.0 and x.max() <= 3.0  # a 16-bit type rounds the values nearest -1 to it
    assert abs(x.mean() - 1.0) < 0.01 and abs(x.var() / (16 / 12) - 1.0) < 0.01


def test_unit_uniforms_are_never_zero(device_session: kd.Session) -> None:
    x = kd.random.uniform(2**20, seed=6, session=device_session).to_host()
    assert x.min() > 0.0 and x.max() <= 1.0


def test_integers_cover_their_range_evenly(device_session: kd.Session) -> None:
    x = kd.random.integers(2**20, -3, 7, dtype=np.int8, seed=8, session=device_session).to_host()
    counts = np.bincount(x.astype(np.int64) + 3, minlength=10)
    assert x.min() == -3 and x.max() == 6 and counts.size == 10
    assert np.all(np.abs(counts / 2**20 - 0.1) < 0.003)
