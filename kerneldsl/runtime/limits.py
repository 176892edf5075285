"""The launch limits, defined once: what ``cuLaunchKernel`` takes without an opt-in on every CUDA
device kerneldsl supports (compute capability 7.0 and newer), and what a 32-bit ``index_t`` numbers.

The session's launch checks read these names; the generated adapter is rendered with
``MAX_INDEX32_THREADS``; the C launch path is handed ``LAUNCH_LIMITS`` when it is configured
(``fastpath``) and leaves every launch past them to the Python path.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_BLOCK_THREADS = 1024
DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory above this needs a per-function opt-in
MAX_INDEX32_THREADS = 2**31 - 1  # threads along an axis a 32-bit index_t can number
MAX_CLUSTER_BLOCKS = 8  # the portable thread-block cluster size (larger needs a non-portable opt-in)
CLUSTER_MIN_MAJOR = 9  # thread-block clusters need compute capability 9.0 (sm_90) or newer


class LaunchLimits(NamedTuple):
    """The limits as one value, the shape ``_fastlaunch.set_launch_limits`` reads."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    block_threads: int
    shared: int
    index32_threads: int


LAUNCH_LIMITS = LaunchLimits(MAX_GRID, MAX_BLOCK, MAX_BLOCK_THREADS, DEFAULT_SHARED_LIMIT, MAX_INDEX32_THREADS)
