"""The ``gpu`` tests that do not run on the CPU device, each with the reason: the one list.

Everything else in ``tests/*_gpu.py`` runs on the CPU device on a machine without a GPU (CI). What
is excluded measures a property only a GPU has (timing, occupancy, co-residency), or needs what
the CPU device refuses by design (CUDA IPC across processes, CUB and cooperative groups headers,
raw cubins), never a semantic the CPU device gets wrong.
"""

from __future__ import annotations

import fnmatch

# node-id pattern (fnmatch) -> why it does not run on the CPU device
EXCLUDED: dict[str, str] = {
    "tests/test_blas_gpu.py::test_warm_gemm_with_out_runs_from_c_and_matches_numpy*": (
        "reads cuBLASLt's matmul configuration and the C launch path's cublasLtMatmul entry: the CPU device's "
        "host BLAS has no cuBLASLt, each gemm there is one gemm_ex on the Python path"
    ),
    "tests/test_blas_gpu.py::test_cublaslt_failure_becomes_blas_error": (
        "patches the cuBLASLt bindings: the CPU device's host BLAS has no cuBLASLt "
        "(test_blas_cpu_device checks a refused host BLAS argument becomes a BlasError)"
    ),
    "tests/test_blas_gpu.py::test_kernel_gemm_kernel_pipeline_without_host_sync": (
        "times the enqueue behind a spinning kernel: the CPU device runs work when it is enqueued"
    ),
    "tests/test_blas_gpu.py::test_gemm_restores_the_callers_context": (
        "creates a second context with the real CUDA driver (cuCtxCreate on GPU 0)"
    ),
}


def exclusion(nodeid: str) -> str | None:
    """Why the test ``nodeid`` is excluded from the CPU device, or None when it runs there."""
    for pattern, why in EXCLUDED.items():
        if fnmatch.fnmatchcase(nodeid, pattern):
            return why
    return None
