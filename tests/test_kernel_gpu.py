"""Declared kernels on a real GPU: every dtype against numpy, both call paths, foreign arrays.

Outputs are poisoned before each launch so a kernel that writes nothing cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_threads

import kerneldsl as kd
from kerneldsl import dtypes
from kerneldsl.errors import LaunchConfigError, ShapeMismatchError, WrongSessionError

pytestmark = pytest.mark.gpu

ALL_TYPES = list(dtypes.all_element_types())


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def affine(out: kd.Out["T", "n"], x: kd.In["T", "n"], y: kd.In["T", "n"], a: kd.Scalar["T"]):
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = (T)((float){a} * (float){x}[i] + (float){y}[i]);
    """


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def copy_exact(out: kd.Out["T", "n"], x: kd.In["T", "n"]):
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = {x}[i];
    """


@kd.kernel(grid=(kd.cdiv("n", 16), kd.cdiv("m", 16)), block=(16, 16))
def transpose(out: kd.Out["T", ("n", "m")], x: kd.In["T", ("m", "n")]):
    return f"""
    index_t c = blockIdx.x * 16 + threadIdx.x, r = blockIdx.y * 16 + threadIdx.y;
    if (r < m && c < n) {out}[c * {out.strides[0]} + r] = {x}[r * {x.strides[0]} + c];
    """


def random_array(rng: np.random.Generator, n: int, name: str) -> np.ndarray:
    dt = dtypes.ELEMENT_TYPES[name].numpy
    if name == "bool":
        return rng.integers(0, 2, n).astype(dt)
    if dtypes.ELEMENT_TYPES[name].kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    return rng.standard_normal(n).astype(dt)


def poison(n: int, dt: np.dtype) -> np.ndarray:
    return np.frombuffer(np.full(n * dt.itemsize, 0xA5, np.uint8).tobytes(), dt).copy()


@pytest.mark.parametrize("name", ALL_TYPES)
def test_copy_is_exact_for_every_dtype_on_device_arrays(name: str) -> None:
    rng = np.random.default_rng()
    x = random_array(rng, 1000, name)
    with kd.Session() as s:
        dout = s.to_device(poison(1000, x.dtype))
        copy_exact(dout, s.to_device(x))
        assert dout.to_host().tobytes() == x.tobytes()


@pytest.mark.parametrize("name", ALL_TYPES)
def test_copy_is_exact_for_every_dtype_on_numpy_arrays(name: str) -> None:
    x = random_array(np.random.default_rng(), 777, name)
    out = poison(777, x.dtype)
    copy_exact(out, x)
    assert out.tobytes() == x.tobytes()


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "int32", "uint8"])
def test_affine_matches_numpy(name: str) -> None:
    rng = np.random.default_rng()
    dt = dtypes.ELEMENT_TYPES[name].numpy
    x = (rng.standard_normal(4099) * 10).astype(dt)
    y = (rng.standard_normal(4099) * 10).astype(dt)
    a = dt.type(3)
    out = poison(4099, dt)
    affine(out, x, y, a)
    expected = (np.float32(a) * x.astype(np.float32) + y.astype(np.float32)).astype(dt)
    if dt.kind == "f":
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_array_equal(out, expected)


def test_two_dimensional_kernel_with_strides() -> None:
    x = np.random.default_rng().standard_normal((37, 53)).astype(np.float32)
    out = poison(37 * 53, np.dtype(np.float32)).reshape(53, 37)
    transpose(out, x)
    np.testing.assert_array_equal(out, x.T)


def test_empty_arrays_launch_nothing_and_succeed() -> None:
    copy_exact(np.empty(0, np.float32), np.empty(0, np.float32))  # numpy: staged, grid cdiv(0, 256) = 0
    s = kd.default_session()
    out = s.to_device(np.full(4, 7.0, np.float32))
    copy_exact(s.empty(0, np.float32), s.empty(0, np.float32))
    copy_exact(out, s.to_device(np.ones(4, np.float32)), grid=0)
    s.synchronize()
    np.testing.assert_array_equal(out.to_host(), np.full(4, 7.0, np.float32))


def test_shape_conflict_leaves_the_output_untouched() -> None:
    out = np.full(8, 7.0, np.float32)
    with pytest.raises(ShapeMismatchError):
        copy_exact(out, np.ones(9, np.float32))
    np.testing.assert_array_equal(out, np.full(8, 7.0, np.float32))


def test_launch_works_with_no_context_current() -> None:
    from cuda.bindings import driver as cu

    with kd.Session() as s:
        x = s.to_device(np.arange(64, dtype=np.float32))
        out = s.empty(64, np.float32)
        copy_exact(out, x)
        s.synchronize()
        while int(cu.cuCtxGetCurrent()[1]) != 0:
            cu.cuCtxPopCurrent()
        copy_exact(out, x)
        np.testing.assert_array_equal(out.to_host(), np.arange(64, dtype=np.float32))


def test_launch_works_while_another_context_is_current() -> None:
    from cuda.bindings import driver as cu

    with kd.Session() as s:
        x = s.to_device(np.arange(64, dtype=np.float32))
        out = s.empty(64, np.float32)
        err, other = cu.cuCtxCreate(None, 0, cu.CUdevice(0))
        assert int(err) == 0
        try:
            copy_exact(out, x)
            assert int(cu.cuCtxGetCurrent()[1]) == int(other)
            np.testing.assert_array_equal(out.to_host(), np.arange(64, dtype=np.float32))
            assert int(cu.cuCtxGetCurrent()[1]) == int(other)
        finally:
            cu.cuCtxDestroy(other)


def test_arrays_of_two_sessions_are_refused() -> None:
    with kd.Session() as a, kd.Session() as b:
        with pytest.raises(WrongSessionError):
            copy_exact(a.empty(4, np.float32), b.empty(4, np.float32))


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def accumulate(acc: kd.InOut["T", "n"], x: kd.In["T", "n"]):
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {acc}[i] += {x}[i];
    """


def test_graph_of_kernel_launches_replays() -> None:
    with kd.Session() as s:
        x, out = s.to_device(np.ones(256, np.float32)), s.to_device(np.zeros(256, np.float32))
        accumulate(out, x)
        with s.capture() as graph:
            for _ in range(10):
                accumulate(out, x)
        for _ in range(3):
            graph.replay()
        np.testing.assert_array_equal(out.to_host(), np.full(256, 31.0, np.float32))


def test_four_threads_share_one_kernel_and_session() -> None:
    s = kd.default_session()

    def work(seed: int) -> None:
        x = np.full(5000, seed, np.float32)
        dx, dout = s.to_device(x), s.empty(5000, np.float32)
        for _ in range(200):
            copy_exact(dout, dx)
        np.testing.assert_array_equal(dout.to_host(), x)

    in_threads(work)


def test_cupy_arrays_are_kernel_arguments_without_copies() -> None:
    cp = pytest.importorskip("cupy")
    x = cp.arange(1000, dtype=cp.float32)
    out = cp.full(1000, -1, dtype=cp.float32)
    copy_exact(out, x)
    kd.default_session().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), np.arange(1000, dtype=np.float32))


def test_torch_tensors_are_kernel_arguments_without_copies() -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    out = torch.full((1000,), -1.0, device="cuda")
    copy_exact(out, x)
    kd.default_session().synchronize()
    assert torch.equal(out.cpu(), x.cpu())


@kd.kernel(grid=kd.cdiv("n", 384), block=384)
def fill_bytes(out: kd.Out[kd.uint8, "n"]):
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = 7;
    """


def test_the_index_idiom_is_exact_when_the_launch_overshoots_int32() -> None:
    """n = 2**31 - 1 fits int32, but cdiv(n, 384) * 384 threads do not: the README's idiom must not
    wrap (it once ended in CUDA_ERROR_ILLEGAL_ADDRESS here)."""
    s = kd.default_session()
    n = 2**31 - 1
    out = s.empty(n, np.uint8)
    fill_bytes(out)
    s.synchronize()
    host = out.to_host()
    out.close()
    assert not s.poisoned and (host[:4096] == 7).all() and (host[-4096:] == 7).all()


def test_launch_limits_are_checked_on_the_device() -> None:
    s = kd.default_session()
    dx = s.to_device(np.arange(64, dtype=np.float32))
    dout = s.empty(64, np.float32)
    with pytest.raises(LaunchConfigError, match="grid.y = 70000"):
        copy_exact(dout, dx, grid=(1, 70000))
    copy_exact(dout, dx, shared=100 * 1024)  # opted into above 48 KiB
    s.synchronize()
    np.testing.assert_array_equal(dout.to_host(), np.arange(64, dtype=np.float32))
