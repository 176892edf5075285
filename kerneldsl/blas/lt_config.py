"""cuBLASLt matmul configurations for kd.blas.gemm: descriptors and an algorithm, chosen once per problem.

``cublasGemmEx`` runs cuBLAS's algorithm heuristic on every call. A ``MatmulConfig`` holds the
matmul descriptor, the three matrix layouts and the algorithm the heuristic picked once per
(dtype, compute type, transposes, shapes, operand alignment); a warm gemm then only enqueues
``cublasLtMatmul``. Configurations belong to one session's cuBLAS handle (``LtHandle``), live as
long as it does, and are destroyed with it by ``Session.close`` (context current). The layout
convention is kd.blas's: a row-major ``(r, c)`` buffer is the column-major ``(c, r)`` matrix with
leading dimension ``c``.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from ..launch.warm import CEntry

MAX_ALIGNMENT = 256  # cuBLASLt's default assumption about operand pointers

# cublasLt attribute ids (cublasLt.h, a stable ABI); a CPU test checks them against nvmath.
DESC_TRANSA, DESC_TRANSB = 3, 4
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # A, B, C, D bytes
SCALE_TYPE = {70: 1}  # CUBLAS_COMPUTE_64F scales in double (CUDA_R_64F); the others in float (0)


_lib: Any = None


def library() -> Any:
    """``nvmath.bindings.cublasLt`` (kd.blas imports nvmath first and reports a missing extra)."""
    global _lib
    if _lib is None:
        from nvmath.bindings import cublasLt

        _lib = cublasLt
    return _lib


@functools.cache
def matmul_address() -> int:
    """Address of ``cublasLtMatmul`` in the library nvmath loaded (both load it through
    cuda.pathfinder, which loads a library once), for the C launch path; 0 if it cannot be found."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        lib = ctypes.CDLL(load_nvidia_dynamic_lib("cublasLt").abs_path)
        return int(ctypes.cast(lib.cublasLtMatmul, ctypes.c_void_p).value or 0)
    except Exception:  # no C path then: every gemm takes the Python path, which reports real errors
        return 0


def alignment(ptr: int) -> int:
    """The largest power of two, up to 256, dividing ``ptr``: what an algorithm may assume."""
    return MAX_ALIGNMENT if ptr % MAX_ALIGNMENT == 0 else ptr & -ptr


class MatmulConfig:
    """One problem's descriptor, layouts (of a, b and out) and chosen algorithm."""

    __slots__ = ("desc", "layouts", "algo", "alignments", "c_entry", "_result")

    def __init__(
        self, desc: int, layouts: tuple[int, int, int], result: np.ndarray, alignments: tuple[int, int, int]
    ) -> None:
        self.desc = desc
        self.layouts = layouts
        self._result = result  # owns the cublasLtMatmulAlgo_t that ``algo`` points at
        self.algo = int(result.ctypes.data)
        self.alignments = alignments
        self.c_entry = CEntry()  # the C path's GemmLaunch, made on the first eligible call


class LtHandle:
    """The cuBLASLt handle of one session and every configuration made on it (created with the session activated)."""

    def __init__(self, workspace_bytes: int) -> None:
        self._lt = library()
        self.raw = int(self._lt.create())
        self._workspace_bytes = workspace_bytes
        self._configs: dict[tuple[Any, ...], MatmulConfig | None] = {}
        self._descs: list[int] = []
        self._layouts: list[int] = []

    def config(
        self, ctype: int, compute: int, a: Any, b: Any, out: Any, trans_a: bool, trans_b: bool
    ) -> MatmulConfig | None:
        """The configuration of ``out = op(a) @ op(b)``; None when cuBLASLt has no algorithm for it."""
        alignments = (alignment(a.ptr), alignment(b.ptr), alignment(out.ptr))
        key = (ctype, compute, trans_a, trans_b, a.shape, b.shape, alignments)
        if key in self._configs:
            return self._configs[key]
        found = self._configs[key] = self._make(
            ctype, compute, a.shape, b.shape, out.shape, trans_a, trans_b, alignments
        )
        return found

    def _make(
        self,
        ctype: int,
        compute: int,
        a_shape: tuple[int, ...],
        b_shape: tuple[int, ...],
        out_shape: tuple[int, ...],
        trans_a: bool,
        trans_b: bool,
        alignments: tuple[int, int, int],
    ) -> MatmulConfig | None:
        lt = self._lt
        desc = lt.matmul_desc_create(compute, SCALE_TYPE.get(compute, 0))
        self._descs.append(desc)
        # C^T = op(B)^T @ op(A)^T: cuBLASLt's first operand is b, its second a
        for attr, transposed in ((DESC_TRANSA, trans_b), (DESC_TRANSB, trans_a)):
            op = np.array([1 if transposed else 0], np.int32)
            lt.matmul_desc_set_attribute(desc, attr, op.ctypes.data, 4)
        layouts = tuple(self._layout(ctype, shape) for shape in (a_shape, b_shape, out_shape))
        pref = lt.matmul_preference_create()
        try:
            limit = np.array([self._workspace_bytes], np.uint64)
            lt.matmul_preference_set_attribute(pref, PREF_MAX_WORKSPACE_BYTES, limit.ctypes.data, 8)
            for attr, align in zip(PREF_MIN_ALIGNMENT, (alignments[1], alignments[0], alignments[2], alignments[2])):
                value = np.array([align], np.uint32)
                lt.matmul_preference_set_attribute(pref, attr, value.ctypes.data, 4)
            result = np.zeros(1, lt.matmul_heuristic_result_dtype)
            count = np.zeros(1, np.int32)
            try:
                lt.matmul_algo_get_heuristic(
                    self.raw,
                    desc,
                    layouts[1],
                    layouts[0],
                    layouts[2],
                    layouts[2],
                    pref,
                    1,
                    result.ctypes.data,
                    count.ctypes.data,
                )
            except lt.cuBLASLtError:
                return None  # e.g. NOT_SUPPORTED for this combination: kd.blas uses cublasGemmEx
        finally:
            lt.matmul_preference_destroy(pref)
        if count[0] < 1:
            return None
        return MatmulConfig(desc, (layouts[0], layouts[1], layouts[2]), result, alignments)

    def _layout(self, ctype: int, shape: tuple[int, ...]) -> int:
        rows, cols = shape[-1], shape[-2]
        layout = self._lt.matrix_layout_create(ctype, rows, cols, max(rows, 1))
        self._layouts.append(layout)
        return int(layout)

    def release(self) -> None:
        """Destroy every layout and descriptor, then the handle (session activated)."""
        lt = self._lt
        configs, self._configs = self._configs, {}
        for config in configs.values():
            if config is not None:
                config.c_entry.clear()
        for layout in self._layouts:
            lt.matrix_layout_destroy(layout)
        for desc in self._descs:
            lt.matmul_desc_destroy(desc)
        self._layouts, self._descs = [], []
        lt.destroy(self.raw)
        self.raw = 0
