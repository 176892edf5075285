"""cuBLAS on session buffers: gemm, batched gemm, gemv, axpy, dot, nrm2 (the ``kerneldsl[blas]`` extra).

Every operation is asynchronous on a session stream (default: the session stream), so it
orders with kernels, copies and graph capture like any launch. Nothing here imports
nvmath-python until the first call: ``import kerneldsl`` works without the extra.

Layout: arrays are row-major, cuBLAS is column-major. A row-major ``(r, c)`` buffer *is* the
column-major ``(c, r)`` matrix, its transpose, with leading dimension ``c``. So
``C = op(A) @ op(B)`` is computed as ``C^T = op(B)^T @ op(A)^T``: the operands swap, each
``trans_*`` flag keeps its meaning, and every leading dimension is a buffer's row length.
Nothing is ever copied or transposed in memory.

Precision: float16 and bfloat16 multiply with float32 accumulation (``CUBLAS_COMPUTE_32F``,
alpha and beta are float32); float32 uses full float32 (``tf32=True`` opts into TF32 tensor
cores); float64 uses ``CUBLAS_COMPUTE_64F``.

Handle: one cuBLAS handle per session, created on first use and shared by the session's
threads (every call configures and enqueues under the session lock). Each stream gets its own
workspace, a DeviceArray the session owns: cuBLAS then never allocates during a call, which is
what makes graph capture work. ``Session.close()`` destroys the handle before any buffer,
stream or the context.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any

import numpy as np

from . import blas_lt, fastpath
from .dtypes import ELEMENT_TYPES, INT32_MAX, add_bfloat16
from .errors import (
    AliasingError,
    BindingError,
    BlasError,
    BlasNotAvailableError,
    ClosedError,
    ShapeMismatchError,
    StridedArrayError,
)
from .routing import RemoteArguments, is_remote, public, route, routed
from .runtime.handle import check_same_session
from .runtime.memory import DeviceArray
from .runtime.session import Session, default_session
from .runtime.stream import Stream

__all__ = [
    "BlasHandle",
    "WORKSPACE_BYTES",
    "available",
    "axpy",
    "dot",
    "gemm",
    "gemm_batched",
    "gemv",
    "handle",
    "library",
    "nrm2",
]

INSTALL_HINT = "pip install 'kerneldsl[blas]'"

# cuBLAS's recommended workspace for Hopper and newer (4 MiB suffices before): one per stream.
WORKSPACE_BYTES = 32 << 20

# Stable ABI values (cublas_api.h, library_types.h); a CPU test checks them against nvmath.
OP_N, OP_T = 0, 1
POINTER_MODE_HOST, POINTER_MODE_DEVICE = 0, 1
GEMM_DEFAULT = -1
R_16F, R_32F, R_64F, R_16BF = 2, 0, 1, 14
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70

_KEY = "cublas"

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_BF16 = ELEMENT_TYPES["bfloat16"].numpy if add_bfloat16() else None

# dtype -> (cudaDataType, cublasComputeType); the compute type fixes alpha/beta's C type.
_GEMM_TYPES: dict[np.dtype, tuple[int, int]] = {
    _F16: (R_16F, COMPUTE_32F),
    _F32: (R_32F, COMPUTE_32F),
    _F64: (R_64F, COMPUTE_64F),
}
if _BF16 is not None:
    _GEMM_TYPES[_BF16] = (R_16BF, COMPUTE_32F)

# dtype -> binding-name prefix of the classic level-1/2 routines (sgemv, daxpy, ...).
_VECTOR_PREFIX: dict[np.dtype, str] = {_F32: "s", _F64: "d"}

_STATUS_NAMES = {
    1: "NOT_INITIALIZED",
    3: "ALLOC_FAILED",
    7: "INVALID_VALUE",
    8: "ARCH_MISMATCH",
    11: "MAPPING_ERROR",
    13: "EXECUTION_FAILED",
    14: "INTERNAL_ERROR",
    15: "NOT_SUPPORTED",
    16: "LICENSE_ERROR",
}

_lib: Any = None


# -- the library ------------------------------------------------------------------------------------


def library() -> Any:
    """``nvmath.bindings.cublas``, imported on first use; BlasNotAvailableError when missing."""
    global _lib
    if _lib is None:
        try:
            from nvmath.bindings import cublas
        except ImportError as exc:
            raise BlasNotAvailableError(
                f"kd.blas needs nvmath-python and the cuBLAS library ({exc}): {INSTALL_HINT}"
            ) from exc
        _lib = cublas
    return _lib


def available() -> bool:
    """True when the nvmath-python cuBLAS bindings import (the library itself loads on first use)."""
    try:
        library()
    except BlasNotAvailableError:
        return False
    return True


def status_name(status: int) -> str:
    """``CUBLAS_STATUS_*`` name of a status code."""
    return f"CUBLAS_STATUS_{_STATUS_NAMES.get(int(status), int(status))}"


def _api(name: str) -> str:
    """The C name of a binding: ``sdot_64`` -> ``cublasSdot_64``."""
    return "cublas" + name[0].upper() + name[1:]


def _blas_error(exc: Any, api: str) -> BlasError:
    status = int(getattr(exc, "status", -1))
    return BlasError(status, status_name(status), api)


# -- the per-session handle ---------------------------------------------------------------------------


class BlasHandle:
    """A session's cuBLAS handle and the configuration last set on it (stream, workspace, pointer mode).

    Only configuration that differs from the cached one is set again, so a warm call costs no
    extra library calls. Workspaces are per stream: one workspace used by two streams at once
    would race. A graph captured with BLAS calls uses the workspace of its capture stream:
    do not replay it concurrently with BLAS work on that stream.
    """

    __slots__ = (
        "session",
        "raw",
        "_lib",
        "_default",
        "_stream",
        "_workspaces",
        "_pointer_mode",
        "_closed",
        "_f32",
        "_f64",
        "_p32",
        "_p64",
        "_s32",
        "_s64",
        "_lt",
    )

    def __init__(self, session: Session) -> None:
        """Create the cuBLAS handle (called by ``Session.vendor_handle`` with the session activated)."""
        lib = library()
        _refuse_during_capture(session, "create the cuBLAS handle")
        try:
            raw = lib.create()
        except lib.cuBLASError as exc:
            raise _blas_error(exc, "cublasCreate") from exc
        except (RuntimeError, OSError) as exc:  # nvmath could not load libcublas
            raise BlasNotAvailableError(
                f"the cuBLAS library could not be loaded ({type(exc).__name__}: {exc}): {INSTALL_HINT} "
                "(it installs nvidia-cublas)"
            ) from exc
        self.session = session
        self.raw = int(raw)
        self._lib = lib
        self._default = session.stream
        self._stream: Stream | None = None  # nothing bound yet: the first call binds
        self._workspaces: weakref.WeakKeyDictionary[Stream, DeviceArray] = weakref.WeakKeyDictionary()
        self._pointer_mode = POINTER_MODE_HOST  # cuBLAS's default
        self._closed = False
        # alpha and beta live in host memory of the compute type's C type (host pointer mode:
        # cuBLAS reads them during the call); the values last written are kept to skip rewrites
        self._f32 = (ctypes.c_float * 2)()
        self._f64 = (ctypes.c_double * 2)()
        base32, base64 = ctypes.addressof(self._f32), ctypes.addressof(self._f64)
        self._p32, self._p64 = (base32, base32 + 4), (base64, base64 + 8)
        self._s32: tuple[Any, Any] = (0.0, 0.0)
        self._s64: tuple[Any, Any] = (0.0, 0.0)
        self._lt: blas_lt.LtHandle | None = None  # the cuBLASLt handle and matmul configurations, made on first use

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"0x{self.raw:x}"
        return f"<BlasHandle {state} session={self.session.session_id} device={self.session.device}>"

    # -- Session.vendor_handle protocol ------------------------------------------------------------

    def release(self) -> None:
        """cublasDestroy (Session.close, context current); the workspaces are freed after it."""
        if self._closed:
            return
        lt = self._lt
        self.abandon()
        raw, self.raw = self.raw, 0
        self._workspaces = weakref.WeakKeyDictionary()
        try:
            if lt is not None:
                lt.release()
            self._lib.destroy(raw)
        except self._lib.cuBLASError as exc:
            raise _blas_error(exc, "cublasDestroy") from exc
        except blas_lt.library().cuBLASLtError as exc:
            raise _blas_error(exc, "cublasLtDestroy") from exc

    def abandon(self) -> None:
        """Forget the handle without calling cuBLAS (forked child, poisoned context)."""
        self._closed = True
        self._stream = None
        self._lt = None

    # -- configuration (session activated) ------------------------------------------------------------

    def _bind(self, stream: Stream | None, pointer_mode: int) -> int:
        """The raw handle, set to ``stream`` (default: the session stream) and ``pointer_mode``."""
        if stream is None:
            stream = self._default
        if stream is not self._stream or pointer_mode != self._pointer_mode:
            self._configure(stream, pointer_mode)
        return self.raw

    def workspace(self, stream: Stream) -> DeviceArray:
        """The workspace of ``stream``, allocated on its first use."""
        workspace = self._workspaces.get(stream)
        if workspace is None:
            _refuse_during_capture(self.session, "allocate the cuBLAS workspace of a new stream")
            workspace = self._workspaces[stream] = DeviceArray(self.session, WORKSPACE_BYTES, np.uint8)
        return workspace

    def lt(self) -> blas_lt.LtHandle:
        """The session's cuBLASLt handle and matmul configurations (session activated)."""
        if self._closed:
            raise ClosedError(f"the cuBLAS handle of session {self.session.session_id} was closed")
        if self._lt is None:
            _refuse_during_capture(self.session, "create the cuBLASLt handle")
            self._lt = blas_lt.LtHandle(WORKSPACE_BYTES)
        return self._lt

    def _configure(self, stream: Stream, pointer_mode: int) -> None:
        if self._closed:
            raise ClosedError(f"the cuBLAS handle of session {self.session.session_id} was closed")
        lib = self._lib
        if stream is not self._stream:
            workspace = self.workspace(stream)
            self._stream = None  # until both calls succeed
            self._call("cublasSetStream", lib.set_stream, stream.handle)
            # cublasSetStream resets the workspace to cuBLAS's own pool: set ours again, after it
            self._call("cublasSetWorkspace", lib.set_workspace, workspace.ptr, workspace.nbytes)
            self._stream = stream
        if pointer_mode != self._pointer_mode:
            self._call("cublasSetPointerMode", lib.set_pointer_mode, pointer_mode)
            self._pointer_mode = pointer_mode

    def _call(self, api: str, fn: Any, *args: Any) -> None:
        try:
            fn(self.raw, *args)
        except self._lib.cuBLASError as exc:
            raise _blas_error(exc, api) from exc

    def _scalars(self, compute: int, alpha: Any, beta: Any) -> tuple[int, int]:
        """Host addresses of alpha and beta, written in the compute type's C type when they changed."""
        if compute == COMPUTE_64F:
            if (alpha, beta) != self._s64:
                self._f64[0], self._f64[1] = alpha, beta
                self._s64 = (alpha, beta)
            return self._p64
        if (alpha, beta) != self._s32:
            self._f32[0], self._f32[1] = alpha, beta
            self._s32 = (alpha, beta)
        return self._p32


def handle(session: Session | None = None) -> BlasHandle:
    """The cuBLAS handle of ``session`` (default: the default session), created on first use."""
    session = default_session() if session is None else session
    return session.vendor_handle(_KEY, BlasHandle)


def _refuse_during_capture(session: Session, what: str) -> None:
    if session.capturing:
        raise RuntimeError(
            f"cannot {what} while a CUDA graph is being captured in session {session.session_id}: "
            "make one BLAS call on the same stream before `with session.capture():` (or call kd.blas.handle(session))"
        )


# -- validation (before cuBLAS sees anything) -----------------------------------------------------------


def _session_of(op: str, names: tuple[str, ...], arrays: tuple[Any, ...], stream: Stream | None) -> Session:
    """The one session owning every array and ``stream``; specific errors for foreign, closed or mixed ones."""
    for name, a in zip(names, arrays):
        if a is not None and type(a) is not DeviceArray:
            if is_remote(a):
                raise RemoteArguments(a)
            raise BindingError(
                op, name, f"expected a kerneldsl DeviceArray, got {type(a).__name__} (use session.to_device)"
            )
    for name, a in zip(names, arrays):
        if a is not None and not a.is_contiguous:
            raise StridedArrayError(
                op, name, f"a strided view (strides {a.strides}) where cuBLAS needs C-contiguous memory: pass x.copy()"
            )
    present = [a for a in arrays if a is not None]
    if stream is not None:
        present.append(stream)
    for a in present:
        a._check()
    return check_same_session(*present)


def _dtype(op: str, table: dict[np.dtype, Any], names: tuple[str, ...], arrays: tuple[Any, ...]) -> np.dtype:
    """The common dtype of ``arrays``, which ``table`` must support."""
    dt: np.dtype[Any] = arrays[0].dtype
    if dt not in table:
        supported = ", ".join(str(d) for d in table)
        raise BindingError(op, names[0], f"dtype {dt} is not supported (supported: {supported})")
    for name, a in zip(names[1:], arrays[1:]):
        if a is not None and a.dtype != dt:
            raise BindingError(op, name, f"dtype {a.dtype} does not match {names[0]}'s {dt}")
    return dt


def _ndim(op: str, name: str, a: DeviceArray, ndim: int) -> None:
    if a.ndim != ndim:
        raise ShapeMismatchError(op, name, f"expected a {ndim}-D array, got shape {a.shape}")


def _output(
    op: str, session: Session, out: DeviceArray | None, shape: tuple[int, ...], dtype: np.dtype, beta: Any
) -> DeviceArray:
    """``out`` checked against the result's shape, or a new array (which needs ``beta == 0``)."""
    if out is None:
        if beta != 0:
            raise BindingError(op, "beta", f"beta={beta!r} scales the previous output: pass out=")
        return session.empty(shape, dtype)
    if out.shape != shape:
        raise ShapeMismatchError(op, "out", f"expected shape {shape}, got {out.shape}")
    return out


def _no_alias(op: str, out: DeviceArray, **inputs: DeviceArray) -> None:
    for name, a in inputs.items():
        if out.overlaps(a):
            raise AliasingError(op, "out", f"overlaps input {name!r}: cuBLAS cannot write its result in place")


def _fill_zero(out: DeviceArray, stream: Stream | None) -> DeviceArray:
    """Enqueue ``out[...] = 0``: an empty sum, which cuBLAS's quick returns would leave unwritten."""
    out.fill_zero(stream)
    return out


def _dim(*extents: int) -> bool:
    """True when the 64-bit (``_64``) entry points are needed."""
    return max(extents) > INT32_MAX


# -- level 3 ---------------------------------------------------------------------------------------------


def _fast_ok(a: Any, b: Any, out: Any, stream: Any, ndim: int) -> bool:
    """The warm-path test: device arrays of one open session, ``ndim``-D, one supported dtype."""
    if type(a) is not DeviceArray or type(b) is not DeviceArray or a.ndim != ndim or b.ndim != ndim:
        return False
    if not (a.is_contiguous and b.is_contiguous and (out is None or type(out) is not DeviceArray or out.is_contiguous)):
        return False
    session, dt = a.session, a.dtype
    if b.session is not session or not session.usable or a.closed or b.closed or dt not in _GEMM_TYPES:
        return False
    if b.dtype is not dt and b.dtype != dt:
        return False
    if out is not None and (
        type(out) is not DeviceArray
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
) -> tuple[Session, DeviceArray, int, int, int]:
    """Validate a (batched) matmul: ``(session, out, m, n, k)``; allocates ``out`` when None.

    The common case is a few cheap tests; anything unusual takes the slow path, which names the problem.
    """
    if _fast_ok(a, b, out, stream, ndim):
        session = a.session
    else:
        session = _session_of(op, ("a", "b", "out"), (a, b, out), stream)
        _ndim(op, "a", a, ndim)
        _ndim(op, "b", b, ndim)
        _dtype(op, _GEMM_TYPES, ("a", "b", "out"), (a, b, out))
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
        return session, _output(op, session, out, shape, a.dtype, beta), m, n, k
    if out.overlaps(a) or out.overlaps(b):  # the common case is two cheap tests
        _no_alias(op, out, a=a, b=b)
    return session, out, m, n, k


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
    """``out = alpha * op(a) @ op(b) + beta * out`` with ``op(x) = x.T`` when ``trans_x``; returns ``out``.

    2-D row-major arrays of one dtype (float16, bfloat16, float32, float64). Without ``out`` a
    new array is allocated (``beta`` must then be 0). ``tf32=True`` lets float32 use TF32.
    Runs ``cublasLtMatmul`` with a configuration made once per problem (``blas_lt``); a warm
    ``gemm(a, b, out)`` or ``gemm(a, b, out=out)``, with ``alpha=``, ``beta=`` and ``stream=`` as
    keywords, is then enqueued from C (one entry per stream).
    """
    session, out, m, n, k = _matmul("kd.blas.gemm", a, b, out, stream, 2, trans_a, trans_b, beta)
    if not (m and n):
        return out
    if not k and beta == 0:
        return _fill_zero(out, stream)
    ctype, compute = _GEMM_TYPES[a.dtype]
    if tf32 and ctype == R_32F:
        compute = COMPUTE_32F_FAST_TF32
    h = session.vendor_handle(_KEY, BlasHandle)
    with session.activated():
        lt_handle = h.lt()
        config = lt_handle.config(ctype, compute, a, b, out, trans_a, trans_b)
        pa, pb = h._scalars(compute, alpha, beta)
        if config is None:
            _gemm_ex(h, stream, ctype, compute, a, b, out, m, n, k, trans_a, trans_b, pa, pb)
        else:
            on = h._default if stream is None else stream
            workspace = h.workspace(on)
            lt = blas_lt.library()
            try:  # C^T (n x m) = op(B)^T @ op(A)^T: see the module docstring
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
                raise _blas_error(exc, "cublasLtMatmul") from exc
        if session.capturing:
            session.keep_alive((a, b, out))
        elif config is not None and not (trans_a or trans_b or tf32):
            double = compute == COMPUTE_64F
            operands = (a, b, out)
            fastpath.remember(
                gemm,
                config.c_slot.on_stream(stream),
                lambda: _gemm_launch(session, lt_handle, config, double, operands, workspace, stream),
            )
    return out


def _gemm_ex(
    h: BlasHandle,
    stream: Stream | None,
    ctype: int,
    compute: int,
    a: DeviceArray,
    b: DeviceArray,
    out: DeviceArray,
    m: int,
    n: int,
    k: int,
    trans_a: bool,
    trans_b: bool,
    pa: int,
    pb: int,
) -> None:
    """cublasGemmEx, for the problems cuBLASLt has no configuration for (session activated)."""
    lib = h._lib
    raw = h._bind(stream, POINTER_MODE_HOST)
    fn = lib.gemm_ex if m <= INT32_MAX and n <= INT32_MAX and k <= INT32_MAX else lib.gemm_ex_64
    try:  # C^T (n x m) = op(B)^T @ op(A)^T: see the module docstring
        fn(
            raw,
            OP_T if trans_b else OP_N,
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
        )
    except lib.cuBLASError as exc:
        raise _blas_error(exc, "cublasGemmEx") from exc


def _gemm_launch(
    session: Session,
    lt_handle: blas_lt.LtHandle,
    config: blas_lt.MatmulConfig,
    double_scale: bool,
    operands: tuple[DeviceArray, ...],
    workspace: DeviceArray,
    stream: Stream | None,
) -> Any | None:
    """A C GemmLaunch of ``config`` for ``gemm(a, b, out)`` with ``stream=stream`` (``workspace``
    is that stream's); None when the C path cannot take it (disabled, or a driver or cuBLASLt
    without the entry points)."""
    module = fastpath.native()
    matmul, current_context = blas_lt.matmul_address(), session.entry_point("cuCtxGetCurrent")
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


class _Gemm(fastpath.Front):
    """``kd.blas.gemm``: remembered warm calls run from C, every other call in ``_gemm``."""

    def _call(self, *args: Any, **kwargs: Any) -> DeviceArray:
        try:
            return _gemm(*args, **kwargs)
        except RemoteArguments as remote:  # remote arrays: run on their worker
            return route(remote.handle, self, args, kwargs)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (public, (__name__, "gemm"))


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
    """
    session, out, m, n, k = _matmul("kd.blas.gemm_batched", a, b, out, stream, 3, trans_a, trans_b, beta)
    batch = a.shape[0]
    if not (batch and m and n):
        return out
    if not k and beta == 0:
        return _fill_zero(out, stream)
    ctype, compute = _GEMM_TYPES[a.dtype]
    if tf32 and ctype == R_32F:
        compute = COMPUTE_32F_FAST_TF32
    (_, ra, lda), (_, rb, ldb) = a.shape, b.shape
    h = session.vendor_handle(_KEY, BlasHandle)
    lib = h._lib
    with session.activated():
        raw = h._bind(stream, POINTER_MODE_HOST)
        pa, pb = h._scalars(compute, alpha, beta)
        big = _dim(m, n, k, batch)
        fn = lib.gemm_strided_batched_ex_64 if big else lib.gemm_strided_batched_ex
        try:  # strides are in elements: one matrix each
            fn(
                raw,
                OP_T if trans_b else OP_N,
                OP_T if trans_a else OP_N,
                n,
                m,
                k,
                pa,
                b.ptr,
                ctype,
                ldb or 1,
                rb * ldb,
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
            )
        except lib.cuBLASError as exc:
            raise _blas_error(exc, "cublasGemmStridedBatchedEx") from exc
        if session.capturing:
            session.keep_alive((a, b, out))
    return out


# -- level 2 ---------------------------------------------------------------------------------------------


@routed
def gemv(
    a: DeviceArray,
    x: DeviceArray,
    out: DeviceArray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    stream: Stream | None = None,
) -> DeviceArray:
    """``out = alpha * op(a) @ x + beta * out`` for a 2-D ``a`` and 1-D ``x`` (float32, float64)."""
    op = "kd.blas.gemv"
    session = _session_of(op, ("a", "x", "out"), (a, x, out), stream)
    _ndim(op, "a", a, 2)
    _ndim(op, "x", x, 1)
    if out is not None:
        _ndim(op, "out", out, 1)
    dt = _dtype(op, _VECTOR_PREFIX, ("a", "x", "out"), (a, x, out))
    rows, cols = a.shape
    n_in, n_out = (rows, cols) if trans_a else (cols, rows)
    if x.shape[0] != n_in:
        raise ShapeMismatchError(op, "x", f"op(a) is {n_out}x{n_in} but x has {x.shape[0]} elements")
    out = _output(op, session, out, (n_out,), dt, beta)
    _no_alias(op, out, a=a, x=x)
    if not n_out:
        return out
    if not n_in and beta == 0:
        return _fill_zero(out, stream)
    compute = COMPUTE_64F if dt == _F64 else COMPUTE_32F
    prefix, suffix = _VECTOR_PREFIX[dt], "_64" if _dim(rows, cols) else ""
    h = handle(session)
    with session.activated():
        raw = h._bind(stream, POINTER_MODE_HOST)
        pa, pb = h._scalars(compute, alpha, beta)
        lib = h._lib
        try:
            if n_in:  # row-major a is the column-major (cols x rows) a^T: op(a) = a is cuBLAS's "T"
                api = f"{prefix}gemv{suffix}"
                getattr(lib, api)(raw, OP_N if trans_a else OP_T, cols, rows, pa, a.ptr, cols, x.ptr, 1, pb, out.ptr, 1)
            else:  # empty sum: gemv would return early and leave beta * out unscaled
                api = f"{prefix}scal{suffix}"
                getattr(lib, api)(raw, n_out, pb, out.ptr, 1)
        except lib.cuBLASError as exc:
            raise _blas_error(exc, _api(api)) from exc
        if session.capturing:
            session.keep_alive((a, x, out))
    return out


# -- level 1 ---------------------------------------------------------------------------------------------


@routed
def axpy(alpha: float, x: DeviceArray, y: DeviceArray, *, stream: Stream | None = None) -> DeviceArray:
    """``y += alpha * x`` in place over all elements (same shape, float32 or float64); returns ``y``."""
    op = "kd.blas.axpy"
    session = _session_of(op, ("x", "y"), (x, y), stream)
    dt = _dtype(op, _VECTOR_PREFIX, ("x", "y"), (x, y))
    if x.shape != y.shape:
        raise ShapeMismatchError(op, "y", f"shape {y.shape} differs from x's {x.shape}")
    n = x.size
    if not n:
        return y
    name = _VECTOR_PREFIX[dt] + "axpy" + ("_64" if _dim(n) else "")
    h = handle(session)
    with session.activated():
        raw = h._bind(stream, POINTER_MODE_HOST)
        pa, _ = h._scalars(COMPUTE_64F if dt == _F64 else COMPUTE_32F, alpha, 0.0)
        try:
            getattr(h._lib, name)(raw, n, pa, x.ptr, 1, y.ptr, 1)
        except h._lib.cuBLASError as exc:
            raise _blas_error(exc, _api(name)) from exc
        if session.capturing:
            session.keep_alive((x, y))
    return y


@routed
def dot(x: DeviceArray, y: DeviceArray, out: DeviceArray | None = None, *, stream: Stream | None = None) -> DeviceArray:
    """``sum(x * y)`` of two 1-D arrays, written on the device into a 0-d array (``out`` or new).

    The result stays on the device (no host synchronization); read it with ``.to_host()``.
    """
    op = "kd.blas.dot"
    session = _session_of(op, ("x", "y", "out"), (x, y, out), stream)
    _ndim(op, "x", x, 1)
    _ndim(op, "y", y, 1)
    dt = _dtype(op, _VECTOR_PREFIX, ("x", "y", "out"), (x, y, out))
    if x.shape != y.shape:
        raise ShapeMismatchError(op, "y", f"{y.shape[0]} elements, x has {x.shape[0]}")
    out = _scalar_output(op, session, out, dt)
    if not x.size:
        return _fill_zero(out, stream)
    name = _VECTOR_PREFIX[dt] + "dot" + ("_64" if _dim(x.size) else "")
    return _reduce(session, name, (x.size, x.ptr, 1, y.ptr, 1), out, stream, (x, y, out))


@routed
def nrm2(x: DeviceArray, out: DeviceArray | None = None, *, stream: Stream | None = None) -> DeviceArray:
    """Euclidean norm over all elements of ``x`` (float32, float64), on the device into a 0-d array."""
    op = "kd.blas.nrm2"
    session = _session_of(op, ("x", "out"), (x, out), stream)
    dt = _dtype(op, _VECTOR_PREFIX, ("x", "out"), (x, out))
    out = _scalar_output(op, session, out, dt)
    if not x.size:
        return _fill_zero(out, stream)
    name = _VECTOR_PREFIX[dt] + "nrm2" + ("_64" if _dim(x.size) else "")
    return _reduce(session, name, (x.size, x.ptr, 1), out, stream, (x, out))


def _scalar_output(op: str, session: Session, out: DeviceArray | None, dtype: np.dtype) -> DeviceArray:
    if out is None:
        return session.empty((), dtype)
    if out.size != 1:
        raise ShapeMismatchError(op, "out", f"expected one element (shape ()), got shape {out.shape}")
    return out


def _reduce(
    session: Session, name: str, args: tuple[Any, ...], out: DeviceArray, stream: Stream | None, keep: tuple[Any, ...]
) -> DeviceArray:
    """A level-1 reduction in device pointer mode: the result is written by the GPU, no host wait."""
    h = handle(session)
    with session.activated():
        raw = h._bind(stream, POINTER_MODE_DEVICE)
        try:
            getattr(h._lib, name)(raw, *args, out.ptr)
        except h._lib.cuBLASError as exc:
            raise _blas_error(exc, _api(name)) from exc
        if session.capturing:
            session.keep_alive(keep)
    return out
