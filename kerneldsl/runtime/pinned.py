"""Page-locked host memory owned by a session: the source and destination of async copies.

A ``PinnedArray`` is what ``DeviceBuffer.copy_from_host_async`` / ``copy_to_host_async`` take
and what the pinned pipeline and the staging of kernel arguments copy through; ``.array`` is a
numpy view of it. It reads of its session only what every handle does (``SessionCore``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .driver import check
from .handle import Handle, SessionCore
from .shapes import ShapeDtype


class _HostView:
    """Exposes pinned memory to numpy while keeping its PinnedArray alive (the view's base)."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: PinnedArray) -> None:
        self.owner = owner
        self.__array_interface__ = {
            "shape": owner.shape,
            "typestr": owner.dtype.str,
            "descr": owner.dtype.descr,
            "data": (owner.ptr, False),
            "strides": None,
            "version": 3,
        }


class PinnedArray(ShapeDtype, Handle):
    """Page-locked host memory (cuMemHostAlloc) for async copies; ``.array`` is a numpy view."""

    kind = "host"
    __slots__ = ("ptr", "shape", "dtype", "ndim", "size", "nbytes", "strides")
    ptr: int

    def __init__(self, session: SessionCore, shape: Any, dtype: Any) -> None:
        Handle.__init__(self, session)
        nbytes = self._init_layout(shape, dtype)
        self.ptr = 0
        if nbytes:
            with session.activated():
                raw = check("cuMemHostAlloc", session.api.cuMemHostAlloc(nbytes, 0), requested=nbytes)
                self._own(raw)
            self.ptr = int(raw)

    @property
    def array(self) -> np.ndarray:
        """A numpy view of the pinned memory; it keeps this PinnedArray (and the memory) alive."""
        self._check()
        if not self.nbytes:
            return np.empty(self.shape, self.dtype)
        return np.asarray(_HostView(self))

    def __repr__(self) -> str:
        return f"<PinnedArray {self.shape} {self.dtype} session={self.session.session_id}>"


def pinned_empty(session: SessionCore, shape: Any, dtype: Any = np.float32) -> PinnedArray:
    """Uninitialized page-locked host memory."""
    return PinnedArray(session, shape, dtype)
