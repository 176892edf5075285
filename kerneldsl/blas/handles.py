"""A session's cuBLAS handle: created on first use, configured only when a call needs a change.

The session's device picks the library: cuBLAS (nvmath's bindings) on a GPU, the host BLAS
(``host``: the same calls, computed by NumPy) on the CPU device, which needs no extra.

One handle per session, shared by the session's threads (every call configures and enqueues
under the session lock). Each stream gets its own workspace, a DeviceArray the session owns:
cuBLAS then never allocates during a call, which is what makes graph capture work.
``Session.close()`` destroys the handle before any buffer, stream or the context.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np

from ..array.ndarray import DeviceArray, as_array
from ..errors import BlasNotAvailableError, ClosedError
from ..runtime import memory
from ..runtime.session import Session, default_session
from ..runtime.stream import Stream
from . import host, lt_config
from .binding import COMPUTE_64F, INSTALL_HINT, POINTER_MODE_HOST, api_name, blas_error, library

# cuBLAS's recommended workspace for Hopper and newer (4 MiB suffices before): one per stream.
WORKSPACE_BYTES = 32 << 20

KEY = "cublas"  # the session's vendor-handle key


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
        "lib",
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
        "_c32",
        "_c64",
        "_lt",
    )

    def __init__(self, session: Session) -> None:
        """Create the library's handle (called by ``Session.vendor_handle`` with the session activated)."""
        lib = host.library() if session.gpu.host else library()
        refuse_during_capture(session, "create the cuBLAS handle")
        try:
            raw = lib.create()
        except lib.cuBLASError as exc:
            raise blas_error(exc, "cublasCreate") from exc
        except (RuntimeError, OSError) as exc:  # nvmath could not load libcublas
            raise BlasNotAvailableError(
                f"the cuBLAS library could not be loaded ({type(exc).__name__}: {exc}): {INSTALL_HINT} "
                "(it installs nvidia-cublas)"
            ) from exc
        self.session = session
        self.raw = int(raw)
        self.lib: Any = lib  # the bindings (nvmath.bindings.cublas, or host.HostBlas on the CPU device)
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
        self._c32 = (ctypes.c_float * 4)()  # complex alpha and beta: (re, im) each
        self._c64 = (ctypes.c_double * 4)()
        self._lt: lt_config.LtHandle | None = None  # the cuBLASLt handle and matmul configurations, made on first use

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
            self.lib.destroy(raw)
        except self.lib.cuBLASError as exc:
            raise blas_error(exc, "cublasDestroy") from exc
        except lt_config.library().cuBLASLtError as exc:
            raise blas_error(exc, "cublasLtDestroy") from exc

    def abandon(self) -> None:
        """Forget the handle without calling cuBLAS (forked child, poisoned context)."""
        self._closed = True
        self._stream = None
        self._lt = None

    # -- what the operations use (session activated) ------------------------------------------------

    def stream_of(self, stream: Stream | None) -> Stream:
        """The stream a call with ``stream=stream`` runs on (None: the session stream)."""
        return self._default if stream is None else stream

    def bind(self, stream: Stream | None, pointer_mode: int) -> int:
        """The raw handle, set to ``stream`` (default: the session stream) and ``pointer_mode``."""
        if stream is None:
            stream = self._default
        if stream is not self._stream or pointer_mode != self._pointer_mode:
            self._configure(stream, pointer_mode)
        return self.raw

    def call(
        self,
        binding: str,
        *args: Any,
        stream: Stream | None,
        pointer_mode: int = POINTER_MODE_HOST,
        api: str | None = None,
        keep: tuple[Any, ...] = (),
    ) -> None:
        """Enqueue ``lib.<binding>(raw, *args)`` on ``stream``; a failure is a BlasError naming ``api``
        (default: the binding's C name). Under capture the graph keeps ``keep`` alive."""
        lib = self.lib
        raw = self.bind(stream, pointer_mode)
        try:
            getattr(lib, binding)(raw, *args)
        except lib.cuBLASError as exc:
            raise blas_error(exc, api or api_name(binding)) from exc
        if keep and self.session.capturing:
            self.session.keep_alive(keep)

    def scalars(self, compute: int, alpha: Any, beta: Any) -> tuple[int, int]:
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

    def complex_scalars(self, compute: int, alpha: Any, beta: Any) -> tuple[int, int]:
        """Host addresses of complex alpha and beta (cuDoubleComplex for COMPUTE_64F, else cuComplex)."""
        parts = self._c64 if compute == COMPUTE_64F else self._c32
        a, b = complex(alpha), complex(beta)
        parts[0], parts[1], parts[2], parts[3] = a.real, a.imag, b.real, b.imag
        base = ctypes.addressof(parts)
        return base, base + ctypes.sizeof(parts) // 2

    def workspace(self, stream: Stream) -> DeviceArray:
        """The workspace of ``stream``, allocated on its first use."""
        workspace = self._workspaces.get(stream)
        if workspace is None:
            refuse_during_capture(self.session, "allocate the cuBLAS workspace of a new stream")
            workspace = as_array(memory.array_type(self.session, WORKSPACE_BYTES, np.uint8))
            self._workspaces[stream] = workspace
        return workspace

    def lt(self) -> lt_config.LtHandle | None:
        """The session's cuBLASLt handle and matmul configurations (session activated); None on the
        CPU device, whose host BLAS has no cuBLASLt (each gemm there is one ``gemm_ex``)."""
        if self._closed:
            raise ClosedError(f"the cuBLAS handle of session {self.session.session_id} was closed")
        if self._lt is None and not self.session.gpu.host:
            refuse_during_capture(self.session, "create the cuBLASLt handle")
            self._lt = lt_config.LtHandle(WORKSPACE_BYTES)
        return self._lt

    def _configure(self, stream: Stream, pointer_mode: int) -> None:
        if self._closed:
            raise ClosedError(f"the cuBLAS handle of session {self.session.session_id} was closed")
        lib = self.lib
        if stream is not self._stream:
            workspace = self.workspace(stream)
            self._stream = None  # until both calls succeed
            self._set("cublasSetStream", lib.set_stream, stream.handle)
            # cublasSetStream resets the workspace to cuBLAS's own pool: set ours again, after it
            self._set("cublasSetWorkspace", lib.set_workspace, workspace.ptr, workspace.nbytes)
            self._stream = stream
        if pointer_mode != self._pointer_mode:
            self._set("cublasSetPointerMode", lib.set_pointer_mode, pointer_mode)
            self._pointer_mode = pointer_mode

    def _set(self, api: str, fn: Any, *args: Any) -> None:
        try:
            fn(self.raw, *args)
        except self.lib.cuBLASError as exc:
            raise blas_error(exc, api) from exc


def handle(session: Session | None = None) -> BlasHandle:
    """The cuBLAS handle of ``session`` (default: the default session), created on first use."""
    session = default_session() if session is None else session
    return session.vendor_handle(KEY, BlasHandle)


def refuse_during_capture(session: Session, what: str) -> None:
    if session.capturing:
        raise RuntimeError(
            f"cannot {what} while a CUDA graph is being captured in session {session.session_id}: "
            "make one BLAS call on the same stream before `with session.capture():` (or call kd.blas.handle(session))"
        )
