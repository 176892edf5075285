"""NVTX ranges for Nsight Systems: compiles, Python-path launches and transfers, each a named
range in the ``kerneldsl`` domain, through the optional ``nvtx`` package (``kerneldsl[nvtx]``).

Off unless ``KERNELDSL_NVTX=1`` was set when kerneldsl was imported or a ``kd.profile()`` block
is running; off, a range is a shared null context and the C launch path is untouched. On,
kernels stop making new C launch entries (their calls stay on the Python path, where each
launch is a range); calls already remembered by the C path stay there, unranged.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import NvtxNotAvailableError

__all__ = ["DOMAIN", "enabled", "profile", "ranged", "span"]

DOMAIN = "kerneldsl"
_NULL = contextlib.nullcontext()
_lock = threading.Lock()
_depth = 0  # kd.profile() blocks running
_module: Any = None


def _load() -> Any:
    """The ``nvtx`` module, or NvtxNotAvailableError naming the extra."""
    global _module
    if _module is None:
        try:
            import nvtx
        except ImportError as exc:
            raise NvtxNotAvailableError(
                f"NVTX ranges need the nvtx package ({exc}): pip install 'kerneldsl[nvtx]', or unset KERNELDSL_NVTX"
            ) from None
        _module = nvtx
    return _module


def enabled() -> bool:
    """Whether ranges are emitted now (``KERNELDSL_NVTX=1``, or inside ``kd.profile()``)."""
    return ON


def span(what: str, detail: Any = None) -> contextlib.AbstractContextManager[Any]:
    """A range named ``what`` plus ``detail`` (an object with ``describe()``, e.g. a
    Specialization, or anything shown as it prints: a byte count) while NVTX is on; a shared
    null context while it is off, the detail never formatted."""
    if not ON:
        return _NULL
    describe = getattr(detail, "describe", None)
    text = describe() if callable(describe) else detail
    ranged: contextlib.AbstractContextManager[Any] = _load().annotate(
        message=what if text is None else f"{what} {text}", domain=DOMAIN
    )
    return ranged


def ranged(function: Callable[..., Any], what: str, detail: Any = None) -> Callable[..., Any]:
    """``function`` called inside a ``span(what, detail)``: what a slow path calls while NVTX is
    on (``call = ranged(f, ...) if nvtx.ON else f``: no cost while off)."""

    def call(*args: Any) -> Any:
        with span(what, detail):
            return function(*args)

    return call


@contextlib.contextmanager
def profile() -> Iterator[None]:
    """``with kd.profile(): ...``: NVTX ranges for the block's compiles, launches and transfers
    (``NvtxNotAvailableError`` at entry without the ``nvtx`` package)."""
    global _depth, ON
    _load()
    with _lock:
        _depth += 1
        ON = True
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            ON = _depth > 0 or _from_environment


_from_environment = os.environ.get("KERNELDSL_NVTX", "0") not in ("", "0")
ON = _from_environment  # without the nvtx package the first range raises NvtxNotAvailableError
