"""The cuBLAS bindings (``nvmath.bindings.cublas``), imported on first use, and their stable ABI values."""

from __future__ import annotations

from typing import Any

from ..errors import BlasError, BlasNotAvailableError

INSTALL_HINT = "pip install 'kerneldsl[blas]'"

# Stable ABI values (cublas_api.h, library_types.h); a CPU test checks them against nvmath.
OP_N, OP_T = 0, 1
POINTER_MODE_HOST, POINTER_MODE_DEVICE = 0, 1
GEMM_DEFAULT = -1
R_16F, R_32F, R_64F, R_16BF = 2, 0, 1, 14
C_32F, C_64F = 4, 5  # cuComplex, cuDoubleComplex
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70

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


def api_name(binding: str) -> str:
    """The C name of a binding: ``sdot_64`` -> ``cublasSdot_64``."""
    return "cublas" + binding[0].upper() + binding[1:]


def blas_error(exc: Any, api: str) -> BlasError:
    """The typed error of a failed binding call (``exc`` carries the cuBLAS status)."""
    status = int(getattr(exc, "status", -1))
    return BlasError(status, status_name(status), api)
