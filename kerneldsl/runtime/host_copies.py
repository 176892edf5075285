"""The warm host transfers: a numpy array into new device memory (or over an existing array), and
device memory back into a numpy array, each one call into the C path (``Allocator.upload`` /
``upload_into`` / ``download`` of ``_fastlaunch.c``, the session's ``native_allocator``).

At a thousand elements a numpy -> device -> numpy roundtrip is all latency. The full path
(``to_device`` through the constructor and ``copy_from_host``, ``copy_to_host``) costs per copy
about 160-250 Python calls and up to eight driver calls (context queries for each activation, an
event created, recorded, queried and destroyed for the wait); the event it leaves queued also sends
the next op's result allocation from the C launch path to the Python constructor. Here one hold
of the session lock covers the pool allocation (an upload), ``cuMemcpyHtoDAsync`` /
``cuMemcpyDtoHAsync`` on the session stream and a ``cuStreamQuery`` spin, the last two without
the GIL. A thread without the context current, or a session with events queued for destruction,
is activated once (which makes the context current and drains the queue) and the C call made
again; everything else unusual (a closed or capturing session, an array not contiguous, a driver
that lacks an entry point, a pool that refuses) is left to the full path, which decides and raises.

Staging, by size: below ``pinned_pipeline.UPLOAD_MIN_BYTES`` (256 MiB) and ``DOWNLOAD_MIN_BYTES``
(64 MiB) these copies read and write the caller's pageable memory directly, as PyTorch's
``from_numpy(x).cuda()`` and ``.cpu()`` do: the driver's own staging is the faster below those
sizes. From them up they go through the session's two pinned chunk buffers
(``pinned_pipeline``), whose memcpy and DMA overlap. ``kerneldsl bench arrays --only transfers``
measures both at each size against PyTorch, the figures to move the thresholds by. The
pinned buffers of ``runtime.staging`` serve kernel calls on numpy arrays, whose several copies
share one wait (``STAGE_LIMIT``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

import numpy as np

from ..errors import StickyCudaError
from . import driver, nvtx, pinned_pipeline
from .pinned_pipeline import PipelinedBuffer, PipelineSession


class CopySession(PipelineSession, Protocol):
    """A Session as the warm host copies see it: the pipeline's, with the C path's allocator and
    the templates it copies new arrays from (``Session`` says what each does)."""

    def native_allocator(self) -> Any: ...

    def template(self, shape: Any, dtype: Any) -> object: ...


class CopiedBuffer(PipelinedBuffer, Protocol):
    """A contiguous device array as a warm host copy reads it (the C path reads its slots)."""

    @property
    def session(self) -> CopySession: ...

    @property
    def nbytes(self) -> int: ...


_Session = TypeVar("_Session", bound=CopySession)
_Buffer = TypeVar("_Buffer", bound=PipelinedBuffer)


def upload(session: _Session, src: np.ndarray, empty: Callable[[_Session, Any, Any], _Buffer]) -> _Buffer | None:
    """A new array of ``session`` holding C-contiguous ``src``, made by the C path; None when the
    full path should make it (nothing was done): also while NVTX ranges are on (its copies range).
    ``UPLOAD_MIN_BYTES`` and up go through the pinned pipeline when it is free, into an array
    made by ``empty(session, shape, dtype)``."""
    if src.nbytes >= pinned_pipeline.UPLOAD_MIN_BYTES:
        staged = pinned_pipeline.upload(session, src, empty)
        if staged is not None:
            return staged
    allocator = None if nvtx.ON else session.native_allocator()
    if allocator is None or not allocator.copies:
        return None
    try:
        template = session.template(src.shape, src.dtype)
    except TypeError:  # a dtype the runtime refuses: the full path says why
        return None
    made = _in_c(session, allocator.upload, template, src)
    if made is None:
        return None
    if type(made) is int:
        copy_failed(session, "cuMemcpyHtoDAsync", made)
    arr, done = made
    _finish(session, src, done)
    return arr  # type: ignore[no-any-return]


def download(arr: CopiedBuffer, out: np.ndarray) -> bool:
    """Copy contiguous ``arr`` into ``out`` (writable, C-contiguous, of its size) by the C path;
    False when the full path should (nothing was done), as for ``upload``."""
    if arr.nbytes >= pinned_pipeline.DOWNLOAD_MIN_BYTES and pinned_pipeline.download(arr, out):
        return True
    return _copy_existing(arr, out, "download", "cuMemcpyDtoHAsync")


def upload_into(arr: CopiedBuffer, src: np.ndarray) -> bool:
    """Copy C-contiguous ``src`` (of its size) into contiguous ``arr`` by the C path; False when
    the full path should (nothing was done), as for ``upload``."""
    if arr.nbytes >= pinned_pipeline.UPLOAD_MIN_BYTES and pinned_pipeline.upload_into(arr, src):
        return True
    return _copy_existing(arr, src, "upload_into", "cuMemcpyHtoDAsync")


def _copy_existing(arr: CopiedBuffer, host: np.ndarray, method: str, api: str) -> bool:
    session = arr.session
    allocator = None if nvtx.ON else session.native_allocator()
    if allocator is None or not allocator.copies:
        return False
    done = _in_c(session, getattr(allocator, method), arr, host)
    if done is None:
        return False
    if type(done) is int:
        copy_failed(session, api, done)
    _finish(session, host, done)
    return True


def _in_c(session: CopySession, copy: Any, *args: Any) -> Any:
    """``copy(*args)`` of the C path, made again with the session activated when it declines
    (the context not current on this thread, events queued for destruction); None if it still does."""
    made = copy(*args)
    if made is None:
        with session.activated():
            made = copy(*args)
    return made


def _finish(session: CopySession, host: np.ndarray, done: bool) -> None:
    """Wait for a copy the C path's spin did not see finish, ``host`` kept alive until then."""
    if not done:
        session.keep_alive(host, session.stream)
        session.stream.synchronize()


def copy_failed(session: CopySession, api: str, code: int) -> NoReturn:
    """Raise the typed error of a copy the driver refused (a sticky one poisons the session)."""
    exc = driver.error(api, code)
    if isinstance(exc, StickyCudaError):
        session.poison(exc)
    raise exc
