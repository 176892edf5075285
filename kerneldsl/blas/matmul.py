"""``kd.blas.gemm`` and ``kd.blas.gemm_batched``: one validation and setup, then cuBLASLt or cuBLAS.

A 2-D gemm runs ``cublasLtMatmul`` with a configuration made once per problem (``lt_config``),
``cublasGemmEx`` when cuBLASLt has none; a warm ``gemm(a, b, out)`` is then enqueued from C
(a ``GemmLaunch`` the fast path remembers, one per stream). Row-major operands are passed
swapped: ``C^T = op(B)^T @ op(A)^T`` (see the package docstring).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from ..launch import fastpath, warm
from ..runtime import memory
from . import lt_config

if TYPE_CHECKING:
    from ..array.ndarray import DeviceArray
from ..errors import ShapeMismatchError
from ..launch.routing import RemoteArguments, public, route, routed
from ..runtime.session import Session
from ..runtime.stream import Stream
from .binding import COMPUTE_32F_FAST_TF32, COMPUTE_64F, GEMM_DEFAULT, OP_N, OP_T, R_32F, blas_error
from .checks import (
    COMPLEX_GEMM_TYPES,
    GEMM_TYPES,
    check_ndim,
    common_dtype,
    fill_zero,
    needs_64,
    no_alias,
    output,
    session_of,
)
from .handles import BlasHandle, handle


class _Problem(NamedTuple):
    """A checked, non-empty matmul: where it runs, its extents and its cuBLAS types."""

    session: Session
    handle: BlasHandle
    m: int
    n: int
    k: int
    ctype: int
    compute: int


def _fast_ok(a: Any, b: Any, out: Any, stream: Any, ndim: int) -> bool:
    """The warm-path test: device arrays of one open session, ``ndim``-D, one supported dtype."""
    if type(a) is not memory.array_type or type(b) is not memory.array_type or a.ndim != ndim or b.ndim != ndim:
        return False
    if not (
        a.is_contiguous and b.is_contiguous and (out is None or type(out) is not memory.array_type or out.is_contiguous)
    ):
        return False
    session, dt = a.session, a.dtype
    if b.session is not session or not session.usable or a.closed or b.closed or dt not in GEMM_TYPES:
        return False
    if b.dtype is not dt and b.dtype != dt:
        return False
    if out is not None and (
        type(out) is not memory.array_type
        or out.session is not session
        or out.closed
        or (out.dtype is not dt and out.dtype != dt)
    ):
        return False
    return stream is None or (type(stream) is Stream and stream.session is session and not stream.closed)


def _matmul(
    op: str,
    a: DeviceArray,
    b: DeviceArray,
    out: DeviceArray | None,
    stream: Stream | None,
    ndim: int,
    trans_a: bool,
    trans_b: bool,
    beta: Any,
    tf32: bool,
) -> tuple[DeviceArray, _Problem | None]:
    """Validate a (batched) matmul and allocate ``out`` when None: ``(out, problem)``, where
    ``problem`` is None when nothing is left to run (an empty result, or an empty sum now zeroed).

    The common case is a few cheap tests; anything unusual takes the slow path, which names the problem.
    """
    if _fast_ok(a, b, out, stream, ndim):
        session = a.session
    else:
        session = session_of(op, ("a", "b", "out"), (a, b, out), stream)
        check_ndim(op, "a", a, ndim)
        check_ndim(op, "b", b, ndim)
        common_dtype(op, GEMM_TYPES, ("a", "b", "out"), (a, b, out))
    sa, sb = a.shape, b.shape
    m, k = (sa[-1], sa[-2]) if trans_a else (sa[-2], sa[-1])
    kb, n = (sb[-1], sb[-2]) if trans_b else (sb[-2], sb[-1])
    if k != kb:
        raise ShapeMismatchError(
            op, "b", f"op(a) is {m}x{k} but op(b) is {kb}x{n}: the inner extents differ ({k} != {kb})"
        )
    if ndim == 2:
        shape: tuple[int, ...] = (m, n)
    elif sb[0] != sa[0]:
        raise ShapeMismatchError(op, "b", f"batch extent {sb[0]} differs from a's {sa[0]}")
    else:
        shape = (sa[0], m, n)
    if out is None or out.shape != shape:
        out = output(op, session, out, shape, a.dtype, beta)
    elif out.overlaps(a) or out.overlaps(b):  # the common case is two cheap tests
        no_alias(op, out, a=a, b=b)
    if not (m and n) or (ndim == 3 and not shape[0]):
        return out, None
    if not k and beta == 0:
        return fill_zero(out, stream), None
    ctype, compute = GEMM_TYPES[a.dtype]
    if tf32 and ctype == R_32F:
        compute = COMPUTE_32F_FAST_TF32
    return out, _Problem(session, handle(session), m, n, k, ctype, compute)


def _gemm(
    a: DeviceArray,
    b: DeviceArray,
    out: DeviceArray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    trans_b: bool = False,
    tf32: bool = False,
    stream: Stream | None = None,
) -> DeviceArray:
    """``out = alpha * op(a) @ op(b) + beta * out`` with ``op(x) = x.T`` when ``trans_x``
    (``trans_a``, ``trans_b``); returns ``out``.

    2-D row-major arrays of one dtype (float16, bfloat16, float32, float64, complex64,
    complex128; complex ones run cublasGemmEx, with complex ``alpha``/``beta`` allowed). Without
    ``out`` a new array is allocated (``beta`` must then be 0). ``tf32=True`` lets float32 use TF32.
    Runs ``cublasLtMatmul`` with a configuration made once per problem (``lt_config``); a warm
    ``gemm(a, b, out)`` or ``gemm(a, b, out=out)``, with ``alpha=``, ``beta=`` and ``stream=`` as
    keywords, is then enqueued from C (one entry per stream).
    """
    out, problem = _matmul("kd.blas.gemm", a, b, out, stream, 2, trans_a, trans_b, beta, tf32)
    if problem is None:
        return out
    session, h, m, n, k, ctype, compute = problem
    with session.activated():
        lt_handle = h.lt()  # None on the CPU device, whose host BLAS has no cuBLASLt
        config = None
        if lt_handle is not None and ctype not in COMPLEX_GEMM_TYPES:
            config = lt_handle.config(ctype, compute, a, b, out, trans_a, trans_b)
        pa, pb = scalars(h, ctype, compute, alpha, beta)
        if lt_handle is None or config is None:
            _gemm_ex(h, stream, problem, a, b, out, trans_a, trans_b, pa, pb)
        else:
            on = h.stream_of(stream)
            workspace = h.workspace(on)
            lt = lt_config.library()
            try:  # C^T (n x m) = op(B)^T @ op(A)^T: see the package docstring
                lt.matmul(
                    lt_handle.raw,
                    config.desc,
                    pa,
                    b.ptr,
                    config.layouts[1],
                    a.ptr,
                    config.layouts[0],
                    pb,
                    out.ptr,
                    config.layouts[2],
                    out.ptr,
                    config.layouts[2],
                    config.algo,
                    workspace.ptr,
                    workspace.nbytes,
                    on.handle,
                )
            except lt.cuBLASLtError as exc:
                raise blas_error(exc, "cublasLtMatmul") from exc
        if session.capturing:
            session.keep_alive((a, b, out))
        elif lt_handle is not None and config is not None and not (trans_a or trans_b or tf32):
            double = compute == COMPUTE_64F
            operands = (a, b, out)
            warm.remember(
                gemm,
                config.c_entry.on_stream(stream),
                lambda: _gemm_launch(session, lt_handle, config, double, operands, workspace, stream),
            )
    return out


def scalars(h: BlasHandle, ctype: int, compute: int, alpha: Any, beta: Any) -> tuple[int, int]:
    """Host addresses of alpha and beta in the C type cuBLAS reads for ``ctype``/``compute``."""
    if ctype in COMPLEX_GEMM_TYPES:
        return h.complex_scalars(compute, alpha, beta)
    return h.scalars(compute, alpha, beta)


def _gemm_ex(
    h: BlasHandle,
    stream: Stream | None,
    problem: _Problem,
    a: DeviceArray,
    b: DeviceArray,
    out: DeviceArray,
    trans_a: bool,
    trans_b: bool,
    pa: int,
    pb: int,
) -> None:
    """cublasGemmEx, for the problems cuBLASLt has no configuration for (session activated)."""
    m, n, k, ctype, compute = problem.m, problem.n, problem.k, problem.ctype, problem.compute
    h.call(
        "gemm_ex_64" if needs_64(m, n, k) else "gemm_ex",
        OP_T if trans_b else OP_N,  # C^T (n x m) = op(B)^T @ op(A)^T: see the package docstring
        OP_T if trans_a else OP_N,
        n,
        m,
        k,
        pa,
        b.ptr,
        ctype,
        b.shape[1] or 1,
        a.ptr,
        ctype,
        a.shape[1] or 1,
        pb,
        out.ptr,
        ctype,
        n,
        compute,
        GEMM_DEFAULT,
        stream=stream,
        api="cublasGemmEx",
    )


def _gemm_launch(
    session: Session,
    lt_handle: lt_config.LtHandle,
    config: lt_config.MatmulConfig,
    double_scale: bool,
    operands: tuple[DeviceArray, ...],
    workspace: DeviceArray,
    stream: Stream | None,
) -> Any | None:
    """A C GemmLaunch of ``config`` for ``gemm(a, b, out)`` with ``stream=stream`` (``workspace``
    is that stream's); None when the C path cannot take it (disabled, or a driver or cuBLASLt
    without the entry points)."""
    module = fastpath.native()
    matmul, current_context = lt_config.matmul_address(), session.entry_point("cuCtxGetCurrent")
    if module is None or not (matmul and current_context):
        return None
    return module.GemmLaunch(
        session=session,
        tags=tuple(a.dispatch_tag for a in operands),
        shapes=tuple(a.shape for a in operands),
        alignment=config.alignments,
        matmul=matmul,
        current_context=current_context,
        context=session.context_address,
        handle=lt_handle.raw,
        desc=config.desc,
        layouts=config.layouts,
        algo=config.algo,
        workspace=workspace.ptr,
        workspace_bytes=workspace.nbytes,
        stream=(session.stream if stream is None else stream).handle,
        double_scale=double_scale,
        stream_object=stream,
    )


class _Gemm(fastpath.FastPathCallable):
    """``kd.blas.gemm``: remembered warm calls run from C, every other call in ``_gemm``."""

    def _call(self, *args: Any, **kwargs: Any) -> DeviceArray:
        try:
            return _gemm(*args, **kwargs)
        except RemoteArguments as remote:  # remote arrays: run on their worker
            return route(remote.handle, self, args, kwargs)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (public, ("kerneldsl.blas", "gemm"))


gemm = _Gemm()
functools.update_wrapper(gemm, _gemm)


@routed
def gemm_batched(
    a: DeviceArray,
    b: DeviceArray,
    out: DeviceArray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    trans_b: bool = False,
    tf32: bool = False,
    stream: Stream | None = None,
) -> DeviceArray:
    """``out[i] = alpha * op(a[i]) @ op(b[i]) + beta * out[i]`` for 3-D arrays (one strided-batched call).

    Same dtypes, transposes and ``out`` rules as :func:`gemm`; the batch extents must agree.
    ``trans_a``/``trans_b`` transpose each matrix of ``a``/``b``; ``tf32=True`` lets float32
    products use TF32 tensor cores; ``stream``: a stream of the arrays' session.
    """
    out, problem = _matmul("kd.blas.gemm_batched", a, b, out, stream, 3, trans_a, trans_b, beta, tf32)
    if problem is None:
        return out
    session, h, m, n, k, ctype, compute = problem
    (batch, ra, lda), (_, rb, ldb) = a.shape, b.shape
    with session.activated():
        pa, pb = scalars(h, ctype, compute, alpha, beta)
        h.call(
            "gemm_strided_batched_ex_64" if needs_64(m, n, k, batch) else "gemm_strided_batched_ex",
            OP_T if trans_b else OP_N,
            OP_T if trans_a else OP_N,
            n,
            m,
            k,
            pa,
            b.ptr,
            ctype,
            ldb or 1,
            rb * ldb,  # strides are in elements: one matrix each
            a.ptr,
            ctype,
            lda or 1,
            ra * lda,
            pb,
            out.ptr,
            ctype,
            n,
            m * n,
            batch,
            compute,
            GEMM_DEFAULT,
            stream=stream,
            api="cublasGemmStridedBatchedEx",
            keep=(a, b, out),
        )
    return out
