"""DeviceArray views share memory with NumPy's layout rules: indexing, reshape, transpose, squeeze
and expand_dims give the shape, byte strides and offset NumPy gives for the same expression on an
array of the same layout; views keep their memory alive and follow its owner's closing; strided
views select the strided kernel layout, contiguous arrays keep the flat fast path (the driver
double stands in for the GPU: these check layouts and decisions, the GPU tests the values)."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from view_strategies import basic_index, dtypes, np_view, shapes

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.errors import ClosedError, StridedArrayError, ViewError
from kerneldsl.runtime import views


@pytest.fixture(scope="module")
def ms() -> Any:
    """One session for the property tests (hypothesis runs many examples per test)."""
    with installed_driver(FakeDriver()), kd.Session(0) as session:
        yield session


def offset(view: np.ndarray, base: np.ndarray) -> int:
    return int(view.__array_interface__["data"][0] - base.__array_interface__["data"][0])


def assert_layout_like(got: kd.DeviceArray, want: np.ndarray, root: kd.DeviceArray, host_root: np.ndarray) -> None:
    """Same shape, byte offset and contiguity as NumPy; same strides wherever there are elements
    (NumPy's strides of empty arrays vary between versions and mean nothing)."""
    assert got.shape == want.shape
    assert got.ptr - root.ptr == offset(want, host_root)
    assert got.is_contiguous == want.flags.c_contiguous
    if want.size:
        assert got.strides == want.strides


@st.composite
def viewed(draw: st.DrawFn) -> tuple[tuple[int, ...], Any, Any]:
    """A base shape and two indexes applied one after the other (a view of a view)."""
    shape = draw(shapes)
    first = draw(basic_index(shape))
    after = np_view(np.empty(shape, np.int8), first).shape
    return shape, first, draw(basic_index(after))


@st.composite
def reshapes(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """A shape of ``size`` elements, possibly with one -1 and extent-1 axes."""
    dims: list[int] = []
    rest = size
    while rest > 1 and len(dims) < 4:
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = draw(st.sampled_from(divisors))
        dims.append(d)
        rest //= d
    dims.append(rest)
    dims = draw(st.permutations(dims))
    if draw(st.booleans()):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    if size and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


# --- metadata against NumPy ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=viewed(), dtype=dtypes)
def test_basic_indexing_gives_numpys_shape_strides_and_offset(ms: kd.Session, case: Any, dtype: Any) -> None:
    shape, first, second = case
    host, dev = np.empty(shape, dtype), ms.empty(shape, dtype)
    assert_layout_like(dev[first][second], np_view(np_view(host, first), second), dev, host)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=shapes, dtype=dtypes)
def test_reshape_is_a_view_exactly_where_numpy_makes_one(
    ms: kd.Session, data: st.DataObject, shape: Any, dtype: Any
) -> None:
    host, dev = np.empty(shape, dtype), ms.empty(shape, dtype)
    key = data.draw(basic_index(shape))
    hv, dv = np_view(host, key), dev[key]
    new = data.draw(reshapes(hv.size))
    try:
        want = hv.reshape(new, copy=False)
    except ValueError:
        with pytest.raises(ViewError, match=r"\.copy\(\)\.reshape"):
            dv.reshape(new)
        return
    assert_layout_like(dv.reshape(new), want, dev, host)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=shapes)
def test_transpose_squeeze_and_expand_dims_match_numpy(ms: kd.Session, data: st.DataObject, shape: Any) -> None:
    host, dev = np.empty(shape, np.float32), ms.empty(shape, np.float32)
    key = data.draw(basic_index(shape))
    hv, dv = np_view(host, key), dev[key]
    axes = data.draw(st.permutations(range(hv.ndim)))
    assert_layout_like(dv.T, hv.T, dev, host)
    assert_layout_like(dv.transpose(axes), hv.transpose(axes), dev, host)
    assert_layout_like(dv.transpose(*axes), hv.transpose(*axes), dev, host)
    assert_layout_like(dv.squeeze(), hv.squeeze(), dev, host)
    ones = tuple(i for i, n in enumerate(hv.shape) if n == 1)
    if ones:
        assert_layout_like(dv.squeeze(ones[0]), hv.squeeze(ones[0]), dev, host)
    where = data.draw(st.integers(-hv.ndim - 1, hv.ndim))
    assert_layout_like(dv.expand_dims(where), np.expand_dims(hv, where), dev, host)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=shapes)
def test_ravel_is_a_view_of_contiguous_arrays_and_a_copy_of_strided_ones(
    ms: kd.Session, data: st.DataObject, shape: Any
) -> None:
    dev = ms.empty(shape, np.float32)
    view = dev[data.draw(basic_index(shape))]
    flat = view.ravel()
    assert flat.shape == (view.size,) and flat.is_contiguous
    assert (flat.base is dev) == view.is_contiguous


def test_sizes_of_a_view_are_numpys(fake_session: kd.Session) -> None:
    v = fake_session.empty((6, 4), np.float64)[1:5:2, ::-1]
    assert (len(v), v.size, v.nbytes, v.itemsize, v.ndim, v.strides) == (2, 8, 64, 8, 2, (64, -8))


def test_a_byte_span_covers_negative_strides() -> None:
    assert views.byte_span((3, 4), (16, -4), 4) == (-12, 36)
    assert views.byte_span((0, 4), (16, 4), 4) == (0, 0)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), shape=shapes)
def test_dense_order_is_the_axis_order_a_permuted_array_fills_memory_in(data: st.DataObject, shape: Any) -> None:
    view = np.empty(shape, np.float32).transpose(data.draw(st.permutations(range(len(shape)))))
    order = views.dense_order(view.shape, view.strides, view.itemsize)
    if view.size == 0:
        assert order is None
    else:
        assert order is not None and view.transpose(order).flags.c_contiguous


def test_dense_order_is_none_where_a_view_leaves_gaps_repeats_or_runs_backwards() -> None:
    host = np.empty((4, 6), np.float32)
    for view in (host[:, ::2], host[:, :3], host[::-1], np.broadcast_to(host[:1], (4, 6))):
        assert views.dense_order(view.shape, view.strides, view.itemsize) is None


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ((0, 0, 0), "too many indices"),
        (5, "out of bounds for axis 0 with size 4"),
        ((slice(None), -7), "out of bounds for axis 1"),
        ([0, 1], "advanced"),
        (np.array([True, False, True, True]), "advanced"),
        (True, "advanced"),
        ((Ellipsis, Ellipsis), "single ellipsis"),
    ],
)
def test_indexing_refuses_what_is_not_basic_indexing_like_numpy(
    fake_session: kd.Session, key: Any, message: str
) -> None:
    with pytest.raises(IndexError, match=message):
        fake_session.empty((4, 6), np.float32)[key]


def test_reshape_errors_are_numpys(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    with pytest.raises(ValueError, match="cannot reshape array of size 24 into shape"):
        a.reshape(5, 5)
    with pytest.raises(ValueError, match="only specify one unknown"):
        a.reshape(-1, -1)


def test_a_reshape_that_needs_a_copy_is_a_view_error_naming_the_way_out(fake_session: kd.Session) -> None:
    with pytest.raises(ViewError, match=r"strided view of shape \(6, 4\).*\.copy\(\)\.reshape") as info:
        fake_session.empty((4, 6), np.float32).T.reshape(24)
    assert isinstance(info.value, ValueError)


def test_axis_errors(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 1), np.float32)
    with pytest.raises(ValueError, match="size not equal to one"):
        a.squeeze(0)
    with pytest.raises(IndexError, match="axis 3 is out of bounds"):
        a.expand_dims(3)
    with pytest.raises(ValueError, match="don't match"):
        a.transpose(0, 0)


# --- ownership -----------------------------------------------------------------------------------


def test_a_view_keeps_its_memory_alive(fake_session: kd.Session) -> None:
    a = fake_session.to_device(np.arange(12, dtype=np.float32))
    view = a[2:6]
    ptr = a.ptr
    del a
    gc.collect()
    fake_session.synchronize()
    assert view.base.ptr == ptr and not view.closed
    np.testing.assert_array_equal(view.to_host(), [2, 3, 4, 5])


def test_a_view_of_a_view_has_the_owner_as_its_base(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    assert a.base is None
    assert a[1:].base is a and a[1:][:, 2].base is a and a.reshape(6, 4).T.base is a


def test_closing_a_view_leaves_the_memory_to_its_owner(fake_session: kd.Session) -> None:
    a = fake_session.to_device(np.arange(6, dtype=np.int32))
    view = a[::2]
    frees = fake_session.api.calls.count("cuMemFreeAsync")
    view.close()
    assert view.closed and not a.closed and fake_session.api.calls.count("cuMemFreeAsync") == frees
    with pytest.raises(ClosedError):
        view.to_host()
    np.testing.assert_array_equal(a.to_host(), np.arange(6))


def test_closing_the_owner_closes_its_views(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    views_of_a = [a[1], a.T, a[1:][::2], a.reshape(24)]
    a.close()
    for v in views_of_a:
        assert v.closed
        with pytest.raises(ClosedError):
            v.to_host()
        with pytest.raises(ClosedError):
            v[0]
        with pytest.raises(ClosedError):
            ops.add(v, 1)


def test_a_view_is_not_a_separate_allocation(fake_session: kd.Session) -> None:
    a = fake_session.empty((64,), np.float32)
    before = fake_session.memory_info()
    _ = [a[i:] for i in range(10)]
    assert fake_session.memory_info() == before


# --- transfers and copies on the driver double -------------------------------------------------------


def test_to_host_of_a_contiguous_view_reads_its_elements(fake_session: kd.Session) -> None:
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = fake_session.to_device(host)
    for key in [1, (slice(1, 3),), (2, slice(1, 4)), (Ellipsis, None)]:
        np.testing.assert_array_equal(a[key].to_host(), host[key])
    np.testing.assert_array_equal(a.reshape(3, 8).to_host(), host.reshape(3, 8))


def test_copy_from_host_into_a_contiguous_view_writes_only_its_elements(fake_session: kd.Session) -> None:
    a = fake_session.zeros((4, 6), np.int16)
    a[2].copy_from_host(np.arange(6, dtype=np.int16))
    want = np.zeros((4, 6), np.int16)
    want[2] = np.arange(6)
    np.testing.assert_array_equal(a.to_host(), want)


def test_a_strided_view_goes_through_a_copy_kernel_to_the_host(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    launches = len(fake_session.api.launches)
    a[:, ::2].to_host()
    assert len(fake_session.api.launches) == launches + 1


def test_the_cuda_array_interface_of_a_strided_view_has_its_strides(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    assert a[1:].__cuda_array_interface__["strides"] is None
    cai = a[:, 1:3].__cuda_array_interface__
    assert (cai["shape"], cai["strides"], cai["data"][0]) == ((4, 2), (24, 4), a.ptr + 4)


def test_a_strided_view_exports_to_dlpack_only_as_a_copy(fake_session: kd.Session) -> None:
    with pytest.raises(BufferError, match="copy=None"):
        fake_session.empty((4, 6), np.float32).T.__dlpack__(copy=False)


def test_repr_says_what_the_array_is(fake_session: kd.Session) -> None:
    a = fake_session.empty((4, 6), np.float32)
    assert "shape=(4, 6) dtype=float32" in repr(a) and "view" not in repr(a)
    assert "shape=(6, 4) dtype=float32 view strides=(4, 24)" in repr(a.T)


def test_setitem_through_a_view_is_one_kernel_and_augmented_assignment_writes_in_place(drv: FakeDriver) -> None:
    """Each assignment is one kernel writing through a view of ``a`` (the values: test_views_gpu);
    the closing ``__setitem__`` of ``a[1:3] += 1`` (the view onto itself) enqueues nothing."""

    def enqueued() -> tuple[int, int]:
        return len(drv.launches), drv.count("cuMemcpyDtoDAsync")

    with kd.Session(0) as s:
        a = s.empty((4, 6), np.float32)
        start = enqueued()
        a[1:3] += 1  # __getitem__, __iadd__ into the view, then __setitem__ of the view onto itself
        assert enqueued() == (start[0] + 1, start[1])
        a[0] = 2.5
        assert enqueued() == (start[0] + 2, start[1])
        a[:, 0] = np.arange(4)
        assert enqueued() == (start[0] + 3, start[1])
        a[3] = a[2]
        assert enqueued() == (start[0] + 4, start[1])


# --- kernels: layouts and refusals ---------------------------------------------------------------------


def test_strided_views_select_the_strided_layout_and_contiguous_arrays_the_flat_one(fake_session: kd.Session) -> None:
    a = fake_session.empty((64, 64), np.float32)
    assert ops.add.inspect(a, a, arch="sm_90").decisions.layout == "flat"
    assert ops.add.inspect(a[8:], a[8:], arch="sm_90").decisions.layout == "flat"
    assert ops.add.inspect(a[8:], a[8:], arch="sm_90").decisions.vector_width > 1
    assert ops.add.inspect(a.T, a, arch="sm_90").decisions.layout == "strided"
    assert ops.add.inspect(a, 1.0, out=a[:, ::-1], arch="sm_90").decisions.layout == "strided"
    assert ops.add.inspect(a[:, 0], a[0], arch="sm_90").decisions.layout == "strided"


def test_fused_functions_take_strided_views(fake_session: kd.Session) -> None:
    @kd.fuse
    def gelu_ish(x: Any, y: Any) -> Any:
        return x * ops.tanh(y) + 1.0

    a = fake_session.empty((32, 32), np.float32)
    assert gelu_ish.inspect(a, a, arch="sm_90").decisions.layout == "flat"
    assert gelu_ish.inspect(a.T, a[::-1], arch="sm_90").decisions.layout == "strided"
    assert type(gelu_ish(a.T, a[::-1])) is kd.DeviceArray


def test_a_strided_view_runs_one_kernel_whatever_its_strides(fake_session: kd.Session) -> None:
    a = fake_session.empty((64, 64), np.float32)
    ops.add(a[::2], 1.0)
    kernel = ops.add._plans.values()[-1].kernel
    builds = len(kernel._builds)
    ops.add(a[::4], 1.0)
    ops.add(a[::-3], 1.0)
    assert len(kernel._builds) == builds


def test_an_input_overlapping_out_at_other_elements_is_copied_first(fake_session: kd.Session) -> None:
    a = fake_session.empty(64, np.float32)
    ops.add(a[1:], 1.0, out=a[:-1])  # shifted: a copy of the input, then the op
    assert fake_session.api.calls.count("cuMemcpyDtoDAsync") == 1
    ops.add(a[::-1], 1.0, out=a)  # reversed: a copy kernel, then the op
    ops.add(a[1:], 1.0, out=a[1:])  # exactly the output: in place
    assert fake_session.api.calls.count("cuMemcpyDtoDAsync") == 1 and len(fake_session.api.launches) == 4


def test_a_reduction_of_a_strided_view_reads_it_in_place(fake_session: kd.Session) -> None:
    a = fake_session.empty((64, 64), np.float32)
    ops.sum(a[:, 1])
    assert len(fake_session.api.launches) == 1  # the reduction: no copy (issue 21)
    ops.sum(a[:, 1])
    assert len(fake_session.api.launches) == 2


def test_a_reduction_of_a_reversed_view_reduces_a_contiguous_copy(fake_session: kd.Session) -> None:
    a = fake_session.empty((64, 64), np.float32)
    ops.sum(kd.flip(a, axis=0), axis=0)
    assert len(fake_session.api.launches) == 2  # the copy, the reduction


def test_a_reduction_into_a_strided_out_writes_through_a_temporary(fake_session: kd.Session) -> None:
    a, b = fake_session.empty((64, 64), np.float32), fake_session.empty((64, 2), np.float32)
    ops.sum(a, axis=0, out=b[:, 0])  # the first call also compiles and may allocate scratch
    allocations, frees = (
        fake_session.api.calls.count("cuMemAllocFromPoolAsync"),
        fake_session.api.calls.count("cuMemFreeAsync"),
    )
    ops.sum(a, axis=0, out=b[:, 1])
    assert fake_session.api.calls.count("cuMemAllocFromPoolAsync") == allocations + 1  # the temporary
    assert fake_session.api.calls.count("cuMemFreeAsync") == frees + 1  # freed after the copy into the view


def test_a_kernel_parameter_refuses_a_strided_view_with_the_way_out(fake_session: kd.Session) -> None:
    @kd.kernel(grid=kd.cdiv("n", 128), block=128)
    def twice(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
        return f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = 2 * {x}[i];"

    a = fake_session.empty((8, 8), np.float32)
    with pytest.raises(StridedArrayError, match=r"argument 'x' of kernel 'twice'.*strided view.*x\.copy\(\)"):
        twice(fake_session.empty(8, np.float32), a[:, 0])
    launches = len(fake_session.api.launches)
    twice(fake_session.empty(8, np.float32), a[3])  # a contiguous view is fine
    assert len(fake_session.api.launches) == launches + 1


def test_a_kernel_parameter_declared_strided_takes_views_and_their_element_strides(fake_session: kd.Session) -> None:
    @kd.kernel(grid=kd.cdiv("n", 128), block=128, strided=("x",))
    def first_column(y: kd.Out["float32", "n"], x: kd.In["float32", ("n", "m")]) -> str:
        return f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {y}[i] = {x}[i * {x.strides[0]}];"

    a = fake_session.empty((8, 6), np.float32)
    assert ("x_stride0", "long long") in first_column.inspect(fake_session.empty(6, np.float32), a.T).generated.abi
    fake_session.api.snapshot_slots = 4  # y, x, x_stride0, x_stride1
    first_column(fake_session.empty(6, np.float32), a.T)
    first_column(fake_session.empty(4, np.float32), a[::2, ::-1])
    strides = [np.frombuffer(b[16:32], np.int64).tolist() for b in fake_session.api.param_bytes]
    assert strides == [[1, 6], [12, -1]]


def test_only_array_parameters_can_be_declared_strided() -> None:
    with pytest.raises(kd.errors.DeclarationError, match="strided= names array parameters only"):

        @kd.kernel(strided=("alpha",))
        def scale(x: kd.InOut["float32", "n"], alpha: kd.Scalar["float32"]) -> str:
            return ""
