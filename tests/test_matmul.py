"""``kd.matmul`` and ``@`` on CPU: which cuBLAS call each of NumPy's cases becomes, with which
transposes, leading dimensions and batch strides, the result's shape and dtype, and the errors.

The cuBLAS double (``blas_double.FakeCublas``) implements the column-major contract over the
driver double's memory and records every call, so each result is also checked against NumPy.
A row-major product is computed as ``C^T = op(B)^T @ op(A)^T``: in a recorded call, cuBLAS's
first operand is ours second (see ``kd.blas``'s docstring).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from blas_double import BF16, FakeCublas
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.array.ndarray import DeviceArray
from kerneldsl.errors import BindingError, ShapeMismatchError, WrongSessionError
from kerneldsl.launch import fastpath
from kerneldsl.runtime import Session


def rand(shape: tuple[int, ...], dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def check(got: DeviceArray, a: np.ndarray, b: np.ndarray, rtol: float = 1e-5) -> None:
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_allclose(got.to_host().astype(np.float64), want, rtol=rtol, atol=rtol)


def batched_calls(lib: FakeCublas) -> list[dict[str, int]]:
    """The recorded cublasGemmStridedBatchedEx calls, in our operands' terms (cuBLAS's A is our b)."""
    calls = []
    for name, args in lib.calls:
        if name == "gemm_strided_batched_ex":
            tb, ta, n, m, k, ldb, sb, lda, sa, ldc, sc, batch = args
            calls.append(
                {
                    "trans_a": ta, "trans_b": tb, "m": m, "n": n, "k": k, "ld_a": lda, "stride_a": sa,
                    "ld_b": ldb, "stride_b": sb, "ld_out": ldc, "stride_out": sc, "batch": batch,
                }
            )  # fmt: skip
    return calls


# -- which call ------------------------------------------------------------------------------------


def test_2d_at_2d_is_one_cublaslt_gemm(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((3, 5)), rand((5, 7), seed=1)
    got = fake_session.to_device(a) @ fake_session.to_device(b)
    assert len(lib.lt.matmuls) == 1 and batched_calls(lib) == []  # type: ignore[attr-defined]
    check(got, a, b)


@pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")
def test_a_warm_at_of_2d_operands_takes_the_c_path(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((5, 3)), rand((3, 4), seed=1)
    da, db = fake_session.to_device(a), fake_session.to_device(b)
    da @ db  # the Python path, which remembers the call for the C path
    with fake_session.activated():  # frees the upload's queued event, which would send the next call to the Python path
        pass
    got = da @ db
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]
    check(got, a, b)


@pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")
def test_a_loop_of_at_stays_on_the_c_path_as_its_results_are_dropped(fake_session: Session, lib: FakeCublas) -> None:
    da, db = fake_session.to_device(rand((5, 3))), fake_session.to_device(rand((3, 4), seed=1))
    for _ in range(4):
        c = da @ db  # each new result frees the last: the C path's allocation drains that first
    assert lib.lt.c_matmuls == 3 and c.shape == (5, 4)  # type: ignore[attr-defined]


@pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")
def test_kd_matmul_of_2d_operands_takes_the_c_path_too(fake_session: Session, lib: FakeCublas) -> None:
    da, db = fake_session.to_device(rand((5, 3))), fake_session.to_device(rand((3, 4), seed=1))
    kd.matmul(da, db)
    with fake_session.activated():
        pass
    kd.matmul(da, db)
    assert lib.lt.c_matmuls == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64] + ([BF16] if BF16 is not None else []))
@pytest.mark.parametrize("shapes", [((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,))])
def test_a_product_with_a_vector_is_a_dot_reduction_not_a_cublas_call(
    fake_session: Session, lib: FakeCublas, drv: FakeDriver, dtype: Any, shapes: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    """``A @ v``, ``v @ A`` and ``v @ w`` launch one reduction kernel (tests/test_vector_reductions.py
    says which stage; tests/test_vector_reductions_gpu.py checks the values)."""
    a, b = fake_session.zeros(shapes[0], dtype), fake_session.zeros(shapes[1], dtype)
    before = len(drv.launches)
    got = kd.matmul(a, b)
    assert lib.names() == [] and len(drv.launches) == before + 1
    assert got.shape == np.matmul(np.zeros(shapes[0]), np.zeros(shapes[1])).shape and got.dtype == dtype


@pytest.mark.parametrize("shapes", [((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,))])
def test_at_with_a_vector_skips_the_general_path(
    fake_session: Session,
    lib: FakeCublas,
    monkeypatch: pytest.MonkeyPatch,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
) -> None:
    """Float operands of one dtype skip kd.matmul's general path (a CG iteration's host cost)."""
    from kerneldsl.blas import np_matmul

    da, db = fake_session.zeros(shapes[0]), fake_session.zeros(shapes[1])
    monkeypatch.setattr(np_matmul, "matmul", None)  # the general path is not called
    assert (da @ db).shape == np.matmul(np.zeros(shapes[0]), np.zeros(shapes[1])).shape


# -- strided views -----------------------------------------------------------------------------------


def test_a_transposed_view_is_read_through_a_transpose_flag(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((5, 3)), rand((5, 4), seed=1)
    da, db = fake_session.to_device(a), fake_session.to_device(b)
    got = da.T @ db
    (call,) = lib.lt.matmuls  # type: ignore[attr-defined]
    assert (call["ta"], call["tb"]) == (0, 1)  # cuBLAS's B is our a: transposed, not copied
    check(got, a.T, b)


def test_both_operands_transposed(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((5, 3)), rand((4, 5), seed=1)
    got = kd.matmul(fake_session.to_device(a).T, fake_session.to_device(b).T)
    (call,) = lib.lt.matmuls  # type: ignore[attr-defined]
    assert (call["ta"], call["tb"]) == (1, 1)
    check(got, a.T, b.T)


def test_a_column_slice_is_read_with_its_leading_dimension(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((4, 6)), rand((3, 2), seed=1)
    got = fake_session.to_device(a)[:, 1:4] @ fake_session.to_device(b)
    (call,) = batched_calls(lib)
    assert (call["trans_a"], call["ld_a"], call["ld_b"], call["ld_out"], call["batch"]) == (blas.OP_N, 6, 2, 2, 1)
    check(got, a[:, 1:4], b)


def test_a_reversed_view_is_copied(fake_session: Session, lib: FakeCublas, drv: FakeDriver) -> None:
    got = fake_session.zeros((4, 3))[::-1] @ fake_session.zeros((3, 2))
    (call,) = batched_calls(lib)
    assert (call["trans_a"], call["ld_a"]) == (blas.OP_N, 3)  # a contiguous copy: no stride describes it
    assert len(drv.launches) == 1 and got.shape == (4, 2)


# -- batches -------------------------------------------------------------------------------------------


def test_equal_batches_are_one_strided_batched_call(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((3, 4, 5)), rand((3, 5, 2), seed=1)
    got = kd.matmul(fake_session.to_device(a), fake_session.to_device(b))
    (call,) = batched_calls(lib)
    assert (call["m"], call["n"], call["k"], call["batch"]) == (4, 2, 5, 3)
    assert (call["stride_a"], call["stride_b"], call["stride_out"]) == (20, 10, 8)
    assert (call["ld_a"], call["ld_b"], call["ld_out"]) == (5, 2, 2)
    check(got, a, b)


@pytest.mark.parametrize("a_shape", [(1, 4, 5), (4, 5)])
def test_a_broadcast_batch_is_a_batch_stride_of_zero(
    fake_session: Session, lib: FakeCublas, a_shape: tuple[int, ...]
) -> None:
    a, b = rand(a_shape), rand((3, 5, 2), seed=1)
    got = fake_session.to_device(a) @ fake_session.to_device(b)
    (call,) = batched_calls(lib)
    assert (call["stride_a"], call["stride_b"], call["stride_out"], call["batch"]) == (0, 10, 8, 3)
    check(got, a, b)


def test_batch_axes_no_one_stride_describes_are_copied(fake_session: Session, lib: FakeCublas, drv: FakeDriver) -> None:
    got = fake_session.zeros((2, 1, 4, 3)) @ fake_session.zeros((5, 3, 6))
    (call,) = batched_calls(lib)
    assert got.shape == (2, 5, 4, 6) and call["batch"] == 10 and len(drv.launches) == 2  # both broadcast by a copy
    assert (call["stride_a"], call["stride_b"], call["stride_out"]) == (12, 18, 24)


def test_a_batched_matrix_at_a_vector(fake_session: Session, lib: FakeCublas) -> None:
    a, x = rand((3, 4, 5)), rand((5,), seed=1)
    got = fake_session.to_device(a) @ fake_session.to_device(x)
    (call,) = batched_calls(lib)
    assert got.shape == (3, 4) and (call["stride_a"], call["stride_b"], call["n"], call["batch"]) == (20, 0, 1, 3)
    check(got, a, x)


def test_a_transposed_batch_is_read_through_a_transpose_flag(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((3, 5, 4)), rand((3, 5, 2), seed=1)
    got = fake_session.to_device(a).transpose(0, 2, 1) @ fake_session.to_device(b)
    (call,) = batched_calls(lib)
    assert (call["trans_a"], call["ld_a"], call["stride_a"]) == (blas.OP_T, 4, 20)
    check(got, a.transpose(0, 2, 1), b)


# -- results, out= and dtypes ------------------------------------------------------------------------


def test_out_is_written_in_place(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((2, 3, 4)), rand((2, 4, 5), seed=1)
    out = fake_session.zeros((2, 3, 5))
    assert kd.matmul(fake_session.to_device(a), fake_session.to_device(b), out=out) is out
    check(out, a, b)


def test_out_of_a_wider_dtype_is_cast_into(fake_session: Session, lib: FakeCublas, drv: FakeDriver) -> None:
    out = fake_session.zeros((3, 2), np.float64)
    assert kd.matmul(fake_session.zeros((3, 4)), fake_session.zeros((4, 2)), out) is out and out.dtype == np.float64
    (call,) = lib.lt.matmuls  # type: ignore[attr-defined]
    assert call["compute"] == blas.COMPUTE_32F and len(drv.launches) == 1  # a float32 product, then the cast


def test_out_of_the_wrong_shape_is_refused(fake_session: Session, lib: FakeCublas) -> None:
    with pytest.raises(ValueError, match=r"out= has shape \(3, 3\), the result has shape \(3, 2\)"):
        kd.matmul(fake_session.zeros((3, 4)), fake_session.zeros((4, 2)), fake_session.zeros((3, 3)))
    assert lib.lt.matmuls == []  # type: ignore[attr-defined]


def test_at_equals_writes_into_the_left_operand(fake_session: Session, lib: FakeCublas, drv: FakeDriver) -> None:
    da = before = fake_session.zeros((3, 3))
    da @= fake_session.zeros((3, 3))
    assert da is before and len(lib.lt.matmuls) == 1 and len(drv.launches) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("left", "right", "result"),
    [(np.float16, np.float32, np.float32), (np.float32, np.float64, np.float64), (np.int8, np.float16, np.float16)]
    + ([(BF16, BF16, BF16), (BF16, np.float16, np.float32)] if BF16 is not None else []),
)
def test_mixed_dtypes_promote_like_numpy(
    fake_session: Session, lib: FakeCublas, left: Any, right: Any, result: Any
) -> None:
    got = kd.matmul(fake_session.zeros((2, 3), left), fake_session.zeros((3, 2), right))
    assert got.dtype == np.dtype(result) == np.result_type(left, right)
    ((ctype, *_), *_) = lib.lt.layouts.values()  # type: ignore[attr-defined]
    assert ctype == blas.checks.GEMM_TYPES[np.dtype(result)][0]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_integer_and_bool_results_are_refused_naming_the_supported_dtypes(
    fake_session: Session, lib: FakeCublas, dtype: Any
) -> None:
    a = fake_session.to_device(np.ones((2, 2), dtype))
    with pytest.raises(BindingError, match=f"the {np.dtype(dtype)} result is not supported.*float16.*float32, float64"):
        a @ a
    assert lib.calls == []


# -- shape errors, in NumPy's words ---------------------------------------------------------------------


@pytest.mark.parametrize(("sa", "sb"), [((3, 4), (5, 2)), ((4,), (3,)), ((2, 3, 4), (3,))])
def test_inner_extent_mismatch(
    fake_session: Session, lib: FakeCublas, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    with pytest.raises(ShapeMismatchError, match="mismatch in its core dimension 0"):
        fake_session.zeros(sa) @ fake_session.zeros(sb)
    with pytest.raises(ValueError, match="mismatch in its core dimension 0"):
        np.matmul(np.zeros(sa), np.zeros(sb))


def test_a_0d_operand_is_refused(fake_session: Session, lib: FakeCublas) -> None:
    with pytest.raises(ShapeMismatchError, match="Input operand 0 does not have enough dimensions"):
        kd.matmul(fake_session.zeros(()), fake_session.zeros((2, 2)))


def test_batches_that_do_not_broadcast(fake_session: Session, lib: FakeCublas) -> None:
    with pytest.raises(ShapeMismatchError, match=r"batch dimensions \(2,\) and \(3,\) could not be broadcast"):
        fake_session.zeros((2, 4, 4)) @ fake_session.zeros((3, 4, 4))


def test_arrays_of_two_sessions_are_refused(fake_session: Session, lib: FakeCublas) -> None:
    with Session(0) as other, pytest.raises(WrongSessionError):
        kd.matmul(fake_session.zeros((2, 2)), other.zeros((2, 2)))


def test_an_empty_inner_extent_is_zeros(fake_session: Session, lib: FakeCublas) -> None:
    got = kd.matmul(fake_session.zeros((2, 3, 0)), fake_session.zeros((2, 0, 4)))
    assert got.shape == (2, 3, 4) and not got.to_host().any() and batched_calls(lib) == []


# -- numpy operands and remote arrays -------------------------------------------------------------------


def test_numpy_operands_with_a_device_array_are_uploaded(fake_session: Session, lib: FakeCublas) -> None:
    a, b = rand((3, 4)), rand((4, 2), seed=1)
    got = kd.matmul(a, fake_session.to_device(b))
    assert type(got) is DeviceArray and got.session is fake_session
    check(got, a, b)


def test_host_operands_run_on_the_default_session_and_come_back_as_numpy(lib: FakeCublas) -> None:
    a, b = rand((3, 4)), rand((4, 2), seed=1)
    got = kd.matmul(a, b)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    dot = kd.matmul(a[0], b[:, 0])
    assert isinstance(dot, np.floating)  # as np.matmul: a scalar for two 1-D operands
    out = np.zeros((3, 2), np.float32)
    assert kd.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)


def test_out_lives_where_the_operands_do(fake_session: Session, lib: FakeCublas) -> None:
    a = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="operands are on the host, so out= must be a numpy array"):
        kd.matmul(a, a, out=fake_session.zeros((2, 2)))
    with pytest.raises(TypeError, match="operands are on the device, so out= must be a kerneldsl DeviceArray"):
        kd.matmul(fake_session.to_device(a), a, out=np.zeros((2, 2), np.float32))


def test_remote_arrays_send_the_call_to_their_worker(lib: FakeCublas) -> None:
    class Remote:
        def kd_route(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return ("routed", fn, args)

    r = Remote()
    assert kd.matmul(r, r) == ("routed", kd.matmul, (r, r))
