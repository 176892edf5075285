"""DeviceArray views on the GPU, against NumPy doing the same on the same data: views read back
with ``to_host()``, flow through ``kd.ops`` and ``@kd.fuse`` as inputs and as ``out=`` (strided
layout), are copied, filled, cast and assigned, and reduce correctly, on every dtype kd.ops
supports. Outputs start poisoned so that a kernel writing the wrong elements cannot pass."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ops_gpu import DTYPES, assert_same, ids, numpy_result, poisoned, rand
from view_strategies import basic_index, np_view

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.bench import error_bounds

pytestmark = pytest.mark.gpu

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
view_shapes = st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple)


def seeded(data: st.DataObject) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))


def a_view(data: st.DataObject, session: Any, dt: np.dtype) -> tuple[np.ndarray, kd.DeviceArray, np.ndarray, Any]:
    """Random host data, its device copy, and the same random basic index applied to both."""
    shape = data.draw(view_shapes)
    host = rand(seeded(data), dt, shape)
    key = data.draw(basic_index(shape))
    dev = session.to_device(host)
    return host, dev, np_view(host, key), dev[key]


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@EXAMPLES
@given(data=st.data())
def test_to_host_of_any_view_is_numpys_view(device_session: Any, data: st.DataObject, dt: np.dtype) -> None:
    _, _, want, view = a_view(data, device_session, dt)
    assert_same(view.to_host(), want)
    assert_same(view.T.to_host(), want.T)


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@EXAMPLES
@given(data=st.data())
def test_binary_ops_on_strided_views_match_numpy(device_session: Any, data: st.DataObject, dt: np.dtype) -> None:
    _, _, hv, dv = a_view(data, device_session, dt)
    other = rand(seeded(data), dt, hv.shape[::-1])  # transposed: strided whenever ndim > 1
    do = device_session.to_device(other).T
    for name in ("add", "maximum", "equal"):
        assert_same(ops.ELEMENTWISE[name](dv, do).to_host(), numpy_result(name, hv, other.T))
    assert_same(ops.where(dv == do, dv, do).to_host(), np.where(hv == other.T, hv, other.T))
    assert_same((dv * do).to_host(), numpy_result("multiply", hv, other.T))  # operators are the same ops


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@EXAMPLES
@given(data=st.data())
def test_out_can_be_a_strided_view_and_only_its_elements_change(
    device_session: Any, data: st.DataObject, dt: np.dtype
) -> None:
    shape = data.draw(view_shapes)
    key = data.draw(basic_index(shape))
    target = poisoned(device_session, shape, dt)
    want = target.to_host()
    x = rand(seeded(data), dt, np_view(want, key).shape)
    ops.add(device_session.to_device(x), x, out=target[key])
    np_view(want, key)[...] = numpy_result("add", x, x)
    assert_same(target.to_host(), want)


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@EXAMPLES
@given(data=st.data())
def test_copy_fill_astype_and_setitem_of_views(device_session: Any, data: st.DataObject, dt: np.dtype) -> None:
    host, dev, hv, dv = a_view(data, device_session, dt)
    copied = dv.copy()
    assert copied.is_contiguous and copied.base is None
    assert_same(copied.to_host(), hv)
    assert_same(dv.astype(np.float32).to_host(), hv.astype(np.float32))
    value = rand(seeded(data), dt, ())[()]
    dv.fill(value)
    hv.fill(value)
    assert_same(dev.to_host(), host)
    replacement = rand(seeded(data), dt, hv.shape)
    dv[...] = replacement
    hv[...] = replacement
    assert_same(dev.to_host(), host)


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@EXAMPLES
@given(data=st.data())
def test_fused_functions_read_and_write_views(device_session: Any, data: st.DataObject, dt: np.dtype) -> None:
    @kd.fuse
    def mix(x: Any, y: Any) -> Any:
        return ops.where(x > y, x, y) + y

    _, _, hv, dv = a_view(data, device_session, dt)
    other = rand(seeded(data), dt, hv.shape[::-1])
    with np.errstate(all="ignore"):
        want = numpy_result("add", np.where(hv > other.T, hv, other.T), other.T)
    assert_same(mix(dv, device_session.to_device(other).T).to_host(), want)
    target = poisoned(device_session, hv.shape[::-1], want.dtype).T  # a transposed (strided) out=
    assert mix(dv, device_session.to_device(other).T, out=target) is target
    assert_same(target.to_host(), want)


@pytest.mark.parametrize("dt", [dt for dt in DTYPES if dt.name != "bfloat16"], ids=ids)
@pytest.mark.parametrize("name", ["sum", "max", "argmin"])
@EXAMPLES
@given(data=st.data())
def test_reductions_of_strided_views(device_session: Any, data: st.DataObject, dt: np.dtype, name: str) -> None:
    _, _, hv, dv = a_view(data, device_session, dt)
    if hv.ndim == 0 or (hv.size == 0 and name != "sum"):
        return  # max and argmin of nothing raise, as in NumPy; 0-d reductions are test_reduction's
    got = getattr(ops, name)(dv).to_host()
    want = np.asarray(getattr(np, name)(hv))
    if name == "sum" and dt.kind == "f":  # another summation order: the sum's own error bound
        acc = np.float64 if dt == np.float64 else np.float32
        bound = error_bounds.sum_bound(hv, acc=acc, out=dt)
        error_bounds.assert_within(got, np.sum(hv.astype(np.float64)), bound, f"sum of a {hv.shape} view")
    else:
        assert_same(got, want.astype(got.dtype))


def test_a_reduction_writes_into_a_strided_out(device_session: Any) -> None:
    host = np.arange(48, dtype=np.int32).reshape(6, 8)
    target = poisoned(device_session, (8, 2), np.int32)
    want = target.to_host()
    ops.sum(device_session.to_device(host).T, axis=1, out=target[:, 1])
    want[:, 1] = host.T.sum(axis=1)
    assert_same(target.to_host(), want)


def test_an_input_overlapping_out_is_read_before_it_is_written(device_session: Any) -> None:
    host = np.arange(1000, dtype=np.float32)
    a = device_session.to_device(host)
    ops.add(a[1:], a[:-1], out=a[1:])
    np.add(host[1:], host[:-1], out=host[1:])
    assert_same(a.to_host(), host)
    ops.negative(a[::-1], out=a)
    np.negative(host[::-1], out=host)
    assert_same(a.to_host(), host)


def test_contiguous_views_keep_the_vector_path(device_session: Any) -> None:
    a = device_session.to_device(np.arange(4096, dtype=np.float32).reshape(64, 64))
    assert ops.add.inspect(a[16:], a[16:]).decisions.vector_width == 4
    assert_same(ops.add(a[16:], a[16:]).to_host(), 2 * np.arange(4096, dtype=np.float32).reshape(64, 64)[16:])


@pytest.mark.parametrize("axes", [(1, 0), (2, 0, 1), (1, 2, 0), (0, 2, 1)])
def test_an_op_on_operands_permuted_alike_is_laid_out_as_they_are(device_session: Any, axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(7)
    a, b = (rand(rng, np.dtype(np.float32), (3, 5, 7)[: len(axes)]) for _ in range(2))
    da, db = (device_session.to_device(h).transpose(axes) for h in (a, b))
    ha, hb = a.transpose(axes), b.transpose(axes)
    for got, want in ((ops.add(da, db), np.add(ha, hb)), (ops.sin(da), np.sin(ha)), (da * 2, ha * 2)):
        assert got.strides == want.strides
        np.testing.assert_allclose(got.to_host(), want, rtol=1e-6)


def test_an_op_on_operands_laid_out_differently_gives_a_contiguous_result(device_session: Any) -> None:
    host = np.arange(36, dtype=np.float32).reshape(6, 6)
    a = device_session.to_device(host)
    got = ops.add(a, a.T)
    assert got.is_contiguous
    assert_same(got.to_host(), host + host.T)


def test_an_op_on_transposed_numpy_arrays_returns_numpys_layout(default_device_session: Any) -> None:
    host = np.arange(20, dtype=np.float64).reshape(4, 5)
    got = ops.multiply(host.T, host.T)
    assert isinstance(got, np.ndarray) and got.flags.f_contiguous
    assert_same(got, host.T * host.T)


def test_a_view_keeps_its_memory_after_the_owner_is_dropped(device_session: Any) -> None:
    a = device_session.to_device(np.arange(64, dtype=np.int32))
    view = a[::3]
    del a
    device_session.synchronize()
    np.testing.assert_array_equal(view.to_host(), np.arange(64, dtype=np.int32)[::3])


def test_a_kernel_declared_strided_reads_a_transposed_view(device_session: Any) -> None:
    @kd.kernel(grid=(kd.cdiv("m", 16), kd.cdiv("n", 16)), block=(16, 16), strided=("x",))
    def scaled(y: kd.Out["T", ("n", "m")], x: kd.In["T", ("n", "m")], alpha: kd.Scalar["T"]) -> str:
        return f"""
        int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
        if (i < n && j < m) {y}[i * m + j] = {alpha} * {x}[i * {x.strides[0]} + j * {x.strides[1]}];
        """

    host = np.arange(35, dtype=np.float32).reshape(5, 7)
    a = device_session.to_device(host)
    for view, want in [(a.T, host.T), (a[::-2, 1:], host[::-2, 1:]), (a, host)]:
        out = poisoned(device_session, want.shape, np.float32)
        scaled(out, view, np.float32(2))
        assert_same(out.to_host(), 2 * want)


def test_setitem_writes_through_a_view_and_augmented_assignment_works(device_session: Any) -> None:
    a, want = device_session.zeros((4, 6), np.float32), np.zeros((4, 6), np.float32)
    for target in (a, want):
        target[1:3] += 1  # __getitem__, __iadd__ into the view, then __setitem__ of the view onto itself
        target[0] = 2.5
        target[:, 0] = np.arange(4)
        target[3] = target[2]
    assert_same(a.to_host(), want)
