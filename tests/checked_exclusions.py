"""The CPU-device tests that do not run under ``$KERNELDSL_CHECKS`` (CI's checked run of the suite),
each with the reason: the one list.

The checked run proves that kerneldsl's own kernels (every op, reduction, scan, fused and random
kernel, every dtype) raise no check. What is excluded here asserts something a checked session
changes by design (its image kind, its timing), or is a kernel that is buggy on purpose; never a
report on a correct kernel (that is a bug to fix in the kernel or in the checker).
"""

from __future__ import annotations

import fnmatch

# node-id pattern (fnmatch) -> why it does not run with the checks on
EXCLUDED: dict[str, str] = {}


def checked_exclusion(nodeid: str) -> str | None:
    """Why the test ``nodeid`` does not run with the checks on, or None when it does."""
    for pattern, why in EXCLUDED.items():
        if fnmatch.fnmatchcase(nodeid, pattern):
            return why
    return None
