"""Scratch memory of kernels that hand partial results between blocks (split reductions, scans).

Buffers are kept per (session, thread, role, dtype): each use is ordered on the session stream,
so one thread's launches never overwrite what another launch still reads. A buffer grows to the
largest request and is reused; a zeroed one (tickets, flags) is left zeroed by the kernels that
use it, or, for scan flags, tagged with a per-launch epoch so it never needs clearing.
Kernels read them as plain memory: they are the runtime's ``DeviceBuffer``s.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..runtime.memory import DeviceBuffer

EPOCH_LIMIT = 1 << 30  # scan flags hold the epoch in 30 bits: past it, the flags start over zeroed


class Scratch:
    def __init__(self) -> None:
        self._buffers: dict[tuple[int, int, str, np.dtype], DeviceBuffer] = {}
        self._epochs: dict[tuple[int, int], int] = {}

    def get(self, session: Any, role: str, dtype: np.dtype, count: int, zeroed: bool = False) -> DeviceBuffer:
        key = (session.session_id, threading.get_ident(), role, dtype)
        found = self._buffers.get(key)
        if found is None or found.closed or found.size < count:
            size = max(count, 2 * found.size if found is not None and not found.closed else count)
            found = self._buffers[key] = session.zeros(size, dtype) if zeroed else session.empty(size, dtype)
        return found

    def discard(self, session: Any, role: str, dtype: np.dtype) -> None:
        found = self._buffers.pop((session.session_id, threading.get_ident(), role, dtype), None)
        if found is not None and not found.closed:
            found.close()

    def next_epoch(self, session: Any) -> tuple[int, bool]:
        """The next launch's epoch (from 1), and whether the epochs just started over."""
        key = (session.session_id, threading.get_ident())
        epoch = self._epochs.get(key, 0) + 1
        wrapped = epoch >= EPOCH_LIMIT
        self._epochs[key] = epoch = 1 if wrapped else epoch
        return epoch, wrapped


SCRATCH = Scratch()
