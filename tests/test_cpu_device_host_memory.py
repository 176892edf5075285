"""The CPU device's memory is the host's: a kernel reads a NumPy array where it is, and kd.ops on
NumPy arrays copy nothing into device memory (their kernels read the operands and write the result
the call returns). A kernel writes a copy of a NumPy array it writes, copied back only once its
launch has succeeded, as the staged path on a GPU does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, NewType

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import KernelFaultError
from kerneldsl.runtime import memory
from kerneldsl.runtime.session import forget_default_sessions
from kerneldsl.runtime.staging import StagingPool

pytestmark = pytest.mark.skipif(not kd.is_available("cpu"), reason="no host C++ compiler for the CPU device")

n = NewType("n", int)


@kd.kernel(grid=1, block=1)
def address_of(where: kd.Out[kd.uint64, Literal[1]], x: kd.In[kd.float32, n]) -> str:
    return "where[0] = (unsigned long long)x;"


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def fill_then_trap(y: kd.InOut[kd.float32, n]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) y[i] = 7.0f; if (i == 0) __trap();"


@pytest.fixture
def cpu_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CPU device as the default session's (kd.ops on NumPy arrays run there)."""
    monkeypatch.setenv("KERNELDSL_DEVICE", "cpu")
    forget_default_sessions()
    yield
    forget_default_sessions()


@pytest.fixture
def no_device_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any copy of a NumPy array into device memory (direct, or through a staging buffer) fails the test."""

    def refused(*args: Any) -> Any:
        raise AssertionError("a NumPy operand was copied into device memory")

    monkeypatch.setattr(memory, "to_device", refused)
    monkeypatch.setattr(StagingPool, "acquire", refused)


@pytest.fixture
def cpu() -> Iterator[Any]:
    with kd.Session(device="cpu") as s:
        yield s


def test_a_kernel_reads_a_numpy_input_where_it_is(cpu: Any) -> None:
    x = np.zeros(64, np.float32)
    where = np.zeros(1, np.uint64)
    address_of(where, x, stream=cpu.stream)
    assert int(where[0]) == x.ctypes.data


def test_a_misaligned_numpy_input_is_read_from_an_aligned_copy(cpu: Any) -> None:
    # (a staged specialization assumes 16-byte aligned arrays)
    x = np.zeros(65, np.float32)[1:]
    where = np.zeros(1, np.uint64)
    address_of(where, x, stream=cpu.stream)
    assert int(where[0]) != x.ctypes.data and int(where[0]) % 16 == 0


def test_a_written_numpy_array_is_unchanged_when_the_launch_fails(cpu: Any) -> None:
    y = np.arange(256, dtype=np.float32)
    with pytest.raises(KernelFaultError):
        fill_then_trap(y, stream=cpu.stream)
    np.testing.assert_array_equal(y, np.arange(256, dtype=np.float32))


@pytest.mark.usefixtures("cpu_default", "no_device_copies")
def test_kd_ops_on_contiguous_numpy_arrays_copy_nothing_into_device_memory() -> None:
    x = np.linspace(-1, 1, 3000, dtype=np.float32).reshape(30, 100)
    np.testing.assert_allclose(kd.ops.sin(x), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(kd.ops.add(x, x[0]), x + x[0])
    np.testing.assert_allclose(kd.ops.sum(x, axis=1), x.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kd.ops.cumsum(x, axis=1), np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)

    @kd.fuse
    def mean_square(a: Any) -> Any:
        return kd.ops.sum(a * a, axis=-1) / a.shape[-1]

    np.testing.assert_allclose(mean_square(x), (x * x).mean(axis=-1), rtol=1e-5)


@pytest.mark.usefixtures("cpu_default")
def test_kd_ops_on_strided_and_read_only_numpy_arrays_match_numpy() -> None:
    x = np.linspace(-1, 1, 3000, dtype=np.float32).reshape(30, 100)
    read_only = x.copy()
    read_only.flags.writeable = False
    np.testing.assert_allclose(kd.ops.exp(x[:, ::3]), np.exp(x[:, ::3]), rtol=1e-6)
    np.testing.assert_allclose(kd.ops.exp(x.T), np.exp(x.T), rtol=1e-6)
    np.testing.assert_allclose(kd.ops.exp(read_only), np.exp(read_only), rtol=1e-6)
    np.testing.assert_allclose(kd.ops.max(x.T, axis=0), x.max(axis=1))
