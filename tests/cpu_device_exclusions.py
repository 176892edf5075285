"""The ``gpu`` tests that do not run on the CPU device, each with the reason: the one list.

Everything else in ``tests/*_gpu.py`` runs on the CPU device on a machine without a GPU (CI). What
is excluded measures a property only a GPU has (timing, occupancy, co-residency), or needs what
the CPU device refuses by design (CUDA IPC across processes, CUB and cooperative groups headers,
raw cubins), never a semantic the CPU device gets wrong.
"""

from __future__ import annotations

import fnmatch

# node-id pattern (fnmatch) -> why it does not run on the CPU device
EXCLUDED: dict[str, str] = {}


def exclusion(nodeid: str) -> str | None:
    """Why the test ``nodeid`` is excluded from the CPU device, or None when it runs there."""
    for pattern, why in EXCLUDED.items():
        if fnmatch.fnmatchcase(nodeid, pattern):
            return why
    return None
