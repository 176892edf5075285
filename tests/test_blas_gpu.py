"""kd.blas on a real GPU against numpy (float64 references), pipelines, graphs, lifecycle. Run with ``-m gpu``.

Inputs are fresh random data each run (the seed is in every failure message); outputs are
poisoned with NaN first, so an operation that writes nothing cannot pass.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest
from conftest import in_threads, seed_of

import kerneldsl as kd
from kerneldsl import blas
from kerneldsl.blas import lt_config
from kerneldsl.blas.checks import GEMM_TYPES
from kerneldsl.dtypes import ELEMENT_TYPES, add_bfloat16
from kerneldsl.errors import BlasError, ClosedError
from kerneldsl.launch import fastpath
from kerneldsl.runtime import Session

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not blas.available(), reason="kerneldsl[blas] is not installed")]

BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None
GEMM_DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)] + ([BF16] if BF16 is not None else [])
VECTOR_DTYPES = [np.dtype(np.float32), np.dtype(np.float64)]

# Error allowed per unit of |alpha| |op(A)| @ |op(B)| + |beta| |C|: output rounding of the
# storage type plus accumulation (float32 for the half types) over k terms.
TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}
if BF16 is not None:
    TOL[BF16] = 3e-2


@kd.kernel(grid=(kd.cdiv("n", 16), kd.cdiv("m", 16)), block=(16, 16))
def affine2d(out: kd.Out["T", ("m", "n")], x: kd.In["T", ("m", "n")], a: kd.Scalar["T"], b: kd.Scalar["T"]):
    return f"""
    index_t c = blockIdx.x * 16 + threadIdx.x, r = blockIdx.y * 16 + threadIdx.y;
    if (r < m && c < n) {out}[r * {out.strides[0]} + c] = {a} * {x}[r * {x.strides[0]} + c] + {b};
    """


@kd.kernel(grid=1, block=1)
def spin(cycles: kd.Scalar[kd.int64]):
    return """
    long long start = clock64();
    while (clock64() - start < cycles) { }
    """


SPIN_SECOND = 2_000_000_000  # clock64 cycles; the H200 boosts to about 1.98 GHz


def uniform(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


def nan_like(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.full(shape, np.nan, np.float32).astype(dtype)


def f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def op(x: np.ndarray, trans: bool) -> np.ndarray:
    return f64(x).swapaxes(-1, -2) if trans else f64(x)


def assert_close(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, tol: float, rng: np.random.Generator) -> None:
    """|got - ref| <= tol * bound elementwise (bound: the sum of absolute terms)."""
    err = np.abs(f64(got) - ref)
    limit = tol * bound + 1e-30
    worst = float(np.nanmax(err / limit)) if err.size else 0.0
    assert np.all(err <= limit), f"error {worst:.3g}x the allowed bound (seed {seed_of(rng)})"


# -- gemm -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=str)
@pytest.mark.parametrize("trans_a", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["N", "T"])
@pytest.mark.parametrize(
    ("alpha", "beta", "with_out"),
    [
        (1.0, 0.0, True),
        (-1.5, 0.0, True),
        (0.75, 1.0, True),
        (2.0, -0.5, True),
        (1.0, 0.0, False),
        (-1.5, 0.0, False),
    ],
)  # beta != 0 needs out=
def test_gemm_matches_numpy(
    default_device_session: Session,
    fresh_rng: np.random.Generator,
    dtype: np.dtype,
    trans_a: bool,
    trans_b: bool,
    alpha: float,
    beta: float,
    with_out: bool,
) -> None:
    m, n, k = 67, 45, 129  # non-square, not multiples of any tile
    a = uniform(fresh_rng, (k, m) if trans_a else (m, k), dtype)
    b = uniform(fresh_rng, (n, k) if trans_b else (k, n), dtype)
    c = uniform(fresh_rng, (m, n), dtype) if beta else nan_like((m, n), dtype)  # beta == 0: C is never read
    out = default_device_session.to_device(c) if with_out else None
    result = blas.gemm(
        default_device_session.to_device(a),
        default_device_session.to_device(b),
        out,
        alpha=alpha,
        beta=beta,
        trans_a=trans_a,
        trans_b=trans_b,
    )
    assert result.shape == (m, n) and result.dtype == dtype
    if with_out:
        assert result is out
    ref = alpha * (op(a, trans_a) @ op(b, trans_b)) + (beta * f64(c) if beta else 0)
    bound = abs(alpha) * (np.abs(op(a, trans_a)) @ np.abs(op(b, trans_b))) + (abs(beta) * np.abs(f64(c)) if beta else 0)
    assert_close(result.to_host(), ref, bound, TOL[dtype], fresh_rng)


@pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built")
@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=str)
def test_warm_gemm_with_out_runs_from_c_and_matches_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: np.dtype
) -> None:
    m, n, k = 67, 45, 129
    a, b, c = uniform(fresh_rng, (m, k), dtype), uniform(fresh_rng, (k, n), dtype), uniform(fresh_rng, (m, n), dtype)
    da, db, out = (
        default_device_session.to_device(a),
        default_device_session.to_device(b),
        default_device_session.to_device(c),
    )
    blas.gemm(da, db, out, alpha=0.0, beta=1.0)  # the Python path: out stays c, the call is remembered
    config = blas.handle(default_device_session).lt().config(*GEMM_TYPES[dtype], da, db, out, False, False)
    assert config is not None and config.c_entry.launch
    for _ in range(3):  # from C: out = 2 a @ b - out / 2, three times
        blas.gemm(da, db, out, alpha=2.0, beta=-0.5)
    ab, expected = op(a, False) @ op(b, False), f64(c)
    for _ in range(3):
        expected = 2 * ab - 0.5 * expected
    bound = 4 * (np.abs(op(a, False)) @ np.abs(op(b, False))) + np.abs(f64(c))
    assert_close(out.to_host(), expected, bound, 4 * TOL[dtype], fresh_rng)


def test_gemm_keyword_spellings_run_from_c_and_match_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator
) -> None:
    dt = np.dtype(np.float32)
    a, b = uniform(fresh_rng, (64, 64), dt), uniform(fresh_rng, (64, 64), dt)
    da, db, out = (
        default_device_session.to_device(a),
        default_device_session.to_device(b),
        default_device_session.to_device(nan_like((64, 64), dt)),
    )
    other = default_device_session.create_stream()
    want, bound = f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b))
    for _ in range(3):  # the first of each spelling runs the Python path, the others run from C
        assert blas.gemm(da, db, out=out) is out
        assert_close(out.to_host(), want, bound, TOL[dt], fresh_rng)
        blas.gemm(da, db, out=out, alpha=2.0, beta=0.0, stream=other)
        other.synchronize()
        assert_close(out.to_host(), 2 * want, 2 * bound, TOL[dt], fresh_rng)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 300, 7), (300, 1, 7), (5, 9, 1), (513, 257, 1031), (64, 2048, 16)])
def test_gemm_shapes(
    default_device_session: Session, fresh_rng: np.random.Generator, shape: tuple[int, int, int]
) -> None:
    m, n, k = shape
    a, b = uniform(fresh_rng, (m, k), np.dtype(np.float32)), uniform(fresh_rng, (k, n), np.dtype(np.float32))
    got = blas.gemm(default_device_session.to_device(a), default_device_session.to_device(b)).to_host()
    assert_close(got, f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b)), TOL[np.dtype(np.float32)], fresh_rng)


def test_gemm_tf32_is_opt_in(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    a, b = uniform(fresh_rng, (256, 512), np.dtype(np.float32)), uniform(fresh_rng, (512, 128), np.dtype(np.float32))
    da, db = default_device_session.to_device(a), default_device_session.to_device(b)
    ref, bound = f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b))
    assert_close(blas.gemm(da, db, tf32=True).to_host(), ref, bound, 2e-3, fresh_rng)  # 10-bit mantissa inputs
    assert_close(blas.gemm(da, db).to_host(), ref, bound, TOL[np.dtype(np.float32)], fresh_rng)


def test_gemm_with_an_empty_inner_dimension_is_zero(default_device_session: Session) -> None:
    out = default_device_session.to_device(nan_like((3, 4), np.dtype(np.float32)))
    blas.gemm(default_device_session.empty((3, 0)), default_device_session.empty((0, 4)), out=out)
    assert np.array_equal(out.to_host(), np.zeros((3, 4), np.float32))
    c = np.full((3, 4), 2.0, np.float32)
    out = default_device_session.to_device(c)
    blas.gemm(
        default_device_session.empty((3, 0)), default_device_session.empty((0, 4)), out=out, beta=0.5
    )  # C = beta * C
    np.testing.assert_array_equal(out.to_host(), c * 0.5)


@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=str)
@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_batched_matches_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: np.dtype, trans_a: bool, trans_b: bool
) -> None:
    batch, m, n, k = 7, 33, 20, 47
    a = uniform(fresh_rng, (batch, k, m) if trans_a else (batch, m, k), dtype)
    b = uniform(fresh_rng, (batch, n, k) if trans_b else (batch, k, n), dtype)
    c = uniform(fresh_rng, (batch, m, n), dtype)
    out = default_device_session.to_device(c)
    blas.gemm_batched(
        default_device_session.to_device(a),
        default_device_session.to_device(b),
        out,
        alpha=0.5,
        beta=-1.0,
        trans_a=trans_a,
        trans_b=trans_b,
    )
    ref = 0.5 * (op(a, trans_a) @ op(b, trans_b)) - f64(c)
    bound = 0.5 * (np.abs(op(a, trans_a)) @ np.abs(op(b, trans_b))) + np.abs(f64(c))
    assert_close(out.to_host(), ref, bound, TOL[dtype], fresh_rng)


# -- gemv and level 1 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("trans_a", [False, True], ids=["N", "T"])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.0), (-2.0, 0.5)])
def test_gemv_matches_numpy(
    default_device_session: Session,
    fresh_rng: np.random.Generator,
    dtype: np.dtype,
    trans_a: bool,
    alpha: float,
    beta: float,
) -> None:
    a = uniform(fresh_rng, (301, 173), dtype)
    x = uniform(fresh_rng, 301 if trans_a else 173, dtype)
    y = uniform(fresh_rng, 173 if trans_a else 301, dtype) if beta else nan_like((173 if trans_a else 301,), dtype)
    out = default_device_session.to_device(y)
    blas.gemv(
        default_device_session.to_device(a),
        default_device_session.to_device(x),
        out,
        alpha=alpha,
        beta=beta,
        trans_a=trans_a,
    )
    opa = op(a, trans_a)
    ref = alpha * (opa @ f64(x)) + (beta * f64(y) if beta else 0)
    bound = abs(alpha) * (np.abs(opa) @ np.abs(f64(x))) + (abs(beta) * np.abs(f64(y)) if beta else 0)
    assert_close(out.to_host(), ref, bound, TOL[dtype], fresh_rng)


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_axpy_dot_nrm2_match_numpy(
    default_device_session: Session, fresh_rng: np.random.Generator, dtype: np.dtype, n: int
) -> None:
    x, y = uniform(fresh_rng, (n,), dtype), uniform(fresh_rng, (n,), dtype)
    dx, dy = default_device_session.to_device(x), default_device_session.to_device(y)
    tol = TOL[dtype] * 10
    d = blas.dot(dx, dy)
    assert d.shape == () and d.dtype == dtype
    assert_close(d.to_host(), np.dot(f64(x), f64(y)), np.dot(np.abs(f64(x)), np.abs(f64(y))), tol, fresh_rng)
    norm = np.linalg.norm(f64(x))
    assert_close(blas.nrm2(dx).to_host(), norm, norm, tol, fresh_rng)
    blas.axpy(-0.25, dx, dy)
    assert_close(dy.to_host(), f64(y) - 0.25 * f64(x), np.abs(f64(y)) + 0.25 * np.abs(f64(x)), TOL[dtype], fresh_rng)


def test_level1_results_stay_on_the_device(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    x = uniform(fresh_rng, (4096,), np.dtype(np.float32))
    dx = default_device_session.to_device(x)
    out = default_device_session.to_device(np.full((), np.nan, np.float32))
    blas.dot(dx, dx, out)  # warm: handle, workspace, pointer mode
    default_device_session.synchronize()
    spin(SPIN_SECOND // 10)  # 100 ms: a dot that synchronized the host would wait for it
    start = time.perf_counter()
    assert blas.dot(dx, dx, out) is out
    assert time.perf_counter() - start < 0.05
    np.testing.assert_allclose(out.to_host(), np.dot(f64(x), f64(x)), rtol=1e-5)
    assert (
        blas.dot(default_device_session.empty(0), default_device_session.empty(0)).to_host() == 0
        and blas.nrm2(default_device_session.empty(0)).to_host() == 0
    )


# -- composition: kernels, streams, graphs, threads ------------------------------------------------------------------


def test_kernel_gemm_kernel_pipeline_without_host_sync(
    default_device_session: Session, fresh_rng: np.random.Generator
) -> None:
    m, k, n = 200, 300, 100
    dt = np.dtype(np.float32)
    a, b = uniform(fresh_rng, (m, k), dt), uniform(fresh_rng, (k, n), dt)
    da, db = default_device_session.to_device(a), default_device_session.to_device(b)
    a2, c, d = (
        default_device_session.empty((m, k), dt),
        default_device_session.empty((m, n), dt),
        default_device_session.empty((m, n), dt),
    )
    done = default_device_session.create_event()
    affine2d(a2, da, np.float32(2.0), np.float32(1.0))  # warm: compile and load the kernels, make the handle
    affine2d(d, c, np.float32(0.5), np.float32(-1.0))
    blas.gemm(a2, db, c)
    default_device_session.synchronize()
    spin(SPIN_SECOND // 5)  # hold the stream for 200 ms: everything below is enqueued behind it
    start = time.perf_counter()
    affine2d(a2, da, np.float32(2.0), np.float32(1.0))  # a2 = 2a + 1
    blas.gemm(a2, db, c)  # c = a2 @ b
    affine2d(d, c, np.float32(0.5), np.float32(-1.0))  # d = c / 2 - 1
    done.record()
    enqueue_s = time.perf_counter() - start
    assert not done.query(), "the pipeline finished before the spin did: something synchronized the host"
    assert enqueue_s < 0.1
    ref = 0.5 * ((2 * f64(a) + 1) @ f64(b)) - 1
    bound = 0.5 * ((2 * np.abs(f64(a)) + 1) @ np.abs(f64(b))) + 1
    assert_close(d.to_host(), ref, bound, 4e-5, fresh_rng)


def test_graph_capture_and_replay(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    m, k, n = 96, 80, 72
    dt = np.dtype(np.float32)
    da, db = (
        default_device_session.to_device(uniform(fresh_rng, (m, k), dt)),
        default_device_session.to_device(uniform(fresh_rng, (k, n), dt)),
    )
    a2, c, d = (
        default_device_session.empty((m, k), dt),
        default_device_session.empty((m, n), dt),
        default_device_session.to_device(nan_like((m, n), dt)),
    )
    blas.gemm(da, db, c)  # handle and workspace exist before the capture (cuBLAS must not allocate inside it)
    affine2d(a2, da, np.float32(2.0), np.float32(1.0))  # and the kernels are loaded
    affine2d(d, c, np.float32(1.0), np.float32(3.0))
    d.copy_from_host(nan_like((m, n), dt))
    with default_device_session.capture() as g:
        affine2d(a2, da, np.float32(2.0), np.float32(1.0))
        blas.gemm(a2, db, c, alpha=0.5)
        affine2d(d, c, np.float32(1.0), np.float32(3.0))
    assert np.isnan(d.to_host()).all()  # capture records, it does not run
    for _ in range(2):  # replay reads the buffers' current contents
        a, b = uniform(fresh_rng, (m, k), dt), uniform(fresh_rng, (k, n), dt)
        da.copy_from_host(a)
        db.copy_from_host(b)
        g.replay()
        ref = 0.5 * ((2 * f64(a) + 1) @ f64(b)) + 3
        bound = 0.5 * ((2 * np.abs(f64(a)) + 1) @ np.abs(f64(b))) + 3
        assert_close(d.to_host(), ref, bound, 4e-5, fresh_rng)


def test_second_stream_gets_its_own_workspace(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    dt = np.dtype(np.float32)
    a, b = uniform(fresh_rng, (128, 64), dt), uniform(fresh_rng, (64, 32), dt)
    da, db = default_device_session.to_device(a), default_device_session.to_device(b)
    other = default_device_session.create_stream()
    out = default_device_session.to_device(nan_like((128, 32), dt))
    blas.gemm(da, db, out, stream=other)
    other.synchronize()
    assert_close(out.to_host(), f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b)), TOL[dt], fresh_rng)
    blas.gemm(da, db, out, beta=1.0)  # back on the session stream
    assert_close(out.to_host(), 2 * (f64(a) @ f64(b)), 2 * (np.abs(f64(a)) @ np.abs(f64(b))), TOL[dt], fresh_rng)
    h = blas.handle(default_device_session)
    assert h._workspaces[other].ptr != h._workspaces[default_device_session.stream].ptr
    assert h._workspaces[other].nbytes == blas.WORKSPACE_BYTES


def test_four_threads_share_the_handle(default_device_session: Session, fresh_rng: np.random.Generator) -> None:
    dt = np.dtype(np.float64)
    a = [uniform(fresh_rng, (64, 64), dt) for _ in range(4)]
    da = [default_device_session.to_device(x) for x in a]
    outs = [default_device_session.empty((64, 64), dt) for _ in range(4)]

    def work(i: int) -> None:
        for _ in range(200):
            blas.gemm(da[i], da[i], outs[i])

    in_threads(work)
    for x, out in zip(a, outs):
        assert_close(out.to_host(), x @ x, np.abs(x) @ np.abs(x), TOL[dt], fresh_rng)


def test_gemm_restores_the_callers_context(fresh_rng: np.random.Generator) -> None:
    from cuda.bindings import driver as cu

    with Session(0) as s:
        a = uniform(fresh_rng, (32, 32), np.dtype(np.float32))
        da = s.to_device(a)
        err, other = cu.cuCtxCreate(None, 0, cu.CUdevice(0))
        assert int(err) == 0
        try:
            out = blas.gemm(da, da)
            assert int(cu.cuCtxGetCurrent()[1]) == int(other)
            assert_close(
                out.to_host(), f64(a) @ f64(a), np.abs(f64(a)) @ np.abs(f64(a)), TOL[np.dtype(np.float32)], fresh_rng
            )
        finally:
            cu.cuCtxDestroy(other)


# -- lifecycle and failures ------------------------------------------------------------------------------------------


def test_close_destroys_the_handle_before_the_context() -> None:
    s = Session(0)
    a = s.to_device(np.eye(16, dtype=np.float32))
    out = blas.gemm(a, a)
    h = blas.handle(s)
    assert not h.closed and h.raw
    s.close()  # raises SessionCloseError if cublasDestroy or any later release failed
    assert h.closed and s.closed
    with pytest.raises(ClosedError):
        blas.gemm(a, a)
    with pytest.raises(ClosedError):
        blas.handle(s)
    assert out.closed


def test_exit_with_a_live_handle_is_clean() -> None:
    script = textwrap.dedent(
        """
        import numpy as np
        from kerneldsl import blas
        from kerneldsl.launch import fastpath
        from kerneldsl.blas import lt_config
        from kerneldsl.runtime import Session
        s = Session(0)
        a = s.to_device(np.ones((8, 8), np.float32))
        assert (blas.gemm(a, a).to_host() == 8).all()
        with Session(0) as t:
            blas.gemm(t.to_device(np.ones((4, 4))), t.to_device(np.ones((4, 4))))
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok" and "Traceback" not in result.stderr and "Error" not in result.stderr


class _BadLeadingDimension:
    """Passes everything through to nvmath, but gives cublasGemmEx lda = 0 (CUBLAS_STATUS_INVALID_VALUE)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)

    def gemm_strided_batched_ex(self, *args: Any) -> None:
        args = list(args)
        args[9] = 0  # lda
        self._lib.gemm_strided_batched_ex(*args)

    def matmul(self, *args: Any) -> None:
        args = list(args)
        args[4], args[6] = args[6], args[4]  # operand layouts swapped: inconsistent extents, same buffer sizes
        self._lib.matmul(*args)


def test_cublas_failure_becomes_blas_error(default_device_session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    a = default_device_session.to_device(np.ones((1, 8, 8), np.float32))
    h = blas.handle(default_device_session)
    monkeypatch.setattr(h, "lib", _BadLeadingDimension(h.lib))
    with pytest.raises(BlasError) as info:
        blas.gemm_batched(a, a)
    assert info.value.name == "CUBLAS_STATUS_INVALID_VALUE" and info.value.api == "cublasGemmStridedBatchedEx"
    monkeypatch.undo()
    assert (blas.gemm_batched(a, a).to_host() == 8).all()  # the session and handle stay usable


def test_cublaslt_failure_becomes_blas_error(default_device_session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = (
        default_device_session.to_device(np.ones((8, 4), np.float32)),
        default_device_session.to_device(np.ones((4, 8), np.float32)),
    )
    out = blas.gemm(a, b)
    monkeypatch.setattr(lt_config, "_lib", _BadLeadingDimension(lt_config.library()))
    blas.gemm._forget_launches()  # the C path calls the library it resolved before the patch
    with pytest.raises(BlasError) as info:
        blas.gemm(a, b, out)
    assert info.value.api == "cublasLtMatmul"
    monkeypatch.undo()
    assert (blas.gemm(a, b, out).to_host() == 4).all()  # the session and handle stay usable
