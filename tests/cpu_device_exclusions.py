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
    "tests/test_devices_agree_gpu.py::*": (
        "compares the CPU device with a real GPU: without one there is nothing to compare"
    ),
    "tests/test_kernel_gpu.py::test_torch_tensors_are_kernel_arguments_without_copies": (
        "makes CUDA tensors: the CPU build of PyTorch that CI installs for kd.torch has none"
    ),
    "tests/test_torch_gpu.py::*": (
        "CUDA tensors, torch's current stream and CUDA graphs: the CPU device runs torch's CPU tensors, which "
        "tests/test_torch_ops.py and tests/test_torch_compile.py cover"
    ),
    "tests/test_runtime_gpu.py::*": (
        "the raw CUDA runtime under kerneldsl: modules loaded from NVRTC cubins (the CPU device needs the source), "
        "the real driver's device queries, an illegal address's sticky error, Ctrl-C of a clock64 spin, the "
        "driver pool's reserve, a soak and the launch overhead against raw cuLaunchKernel"
    ),
    "tests/test_headers_gpu.py::test_a_cub_block_reduction_matches_numpy*": (
        "CUB's block primitives have no host build: the CPU device refuses #include <cub/...> (UnsupportedOnCpuError)"
    ),
    "tests/test_launch_ex_gpu.py::test_a_cooperative_grid_passes_cooperative_groups_grid_sync": (
        "cooperative groups' grid sync has no host build: the CPU device refuses #include <cooperative_groups.h>"
    ),
    "tests/test_launch_ex_gpu.py::*cluster*": (
        "reads %cluster_ctarank with inline PTX, which the CPU device refuses (its runtime emulates clusters; "
        "kd_host_cluster_rank() is the host's spelling)"
    ),
    "tests/test_kernel_gpu.py::test_launch_works_with_no_context_current": (
        "pops and creates contexts with the real CUDA driver (cuCtxPopCurrent, cuCtxCreate)"
    ),
    "tests/test_kernel_gpu.py::test_launch_works_while_another_context_is_current": (
        "creates a second context with the real CUDA driver (cuCtxCreate)"
    ),
    "tests/test_fastlaunch_gpu.py::test_a_thread_with_no_current_context_launches_from_c": (
        "clears the thread's current context with the real CUDA driver"
    ),
    "tests/test_hardening_gpu.py::test_overlapping_adoptions_of_one_foreign_buffer_give_numpys_result*": (
        "adopts a foreign __cuda_array_interface__ buffer, which is CUDA memory the CPU device cannot address"
    ),
    "tests/test_distributed_gpu.py::test_each_worker_has_its_own_session_on_its_gpu*": (
        "asserts each worker's GPU pinning (CUDA_VISIBLE_DEVICES ordinals and PCI bus ids)"
    ),
    "tests/test_pool_gpu.py::test_a_request_that_fits_only_after_a_trim_succeeds": (
        "fills the GPU's memory until the driver pool must be trimmed: the CPU device allocates host memory directly"
    ),
    "tests/test_reduction_gpu.py::test_every_strategy_sums_like_numpy*": (
        "asserts the strategy planned for an H200's 132 SMs; the CPU device plans for its cores "
        "(KERNELDSL_CPU_PLAN=gpu plans the H200's)"
    ),
    "tests/test_tune_gpu.py::test_occupancy_*agrees_with_the_driver*": (
        "compares kerneldsl's occupancy model with the GPU driver's answer"
    ),
    "tests/test_tune_gpu.py::test_resources_are_what_ptxas_reported": (
        "compares a kernel's registers and shared memory with what ptxas reported; the CPU device has no ptxas"
    ),
    "tests/test_ipc_gpu.py::*": (
        "moves between two worker processes sharing one GPU through CUDA IPC: the CPU device has no IPC (its "
        "workers' moves take Dask's comms, which test_distributed_gpu runs)"
    ),
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
