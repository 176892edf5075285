"""kerneldsl: declarative, specialized, cached CUDA kernels with a persistent GPU runtime.

The pipeline, one module per stage: signature -> specialize -> codegen -> compiler -> cache
-> build -> launch -> dispatch (``@kd.kernel``), with ``runtime/`` owning everything that talks
to the CUDA driver, ``fastpath`` the C launch path, and ``array/`` the core that ``kd.ops``,
``@kd.elementwise``, ``kd.reduction`` and ``@kd.fuse`` share.
"""

import logging
from typing import TYPE_CHECKING

from . import cache, errors, ops
from ._version import __version__
from .array.elementwise import elementwise
from .array.fusion import fuse
from .array.reduction import reduction
from .dispatch import Kernel, kernel
from .dtypes import (
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .runtime import DeviceArray, Event, PinnedArray, Session, Stream, default_session, reset_device
from .signature import Const, In, InOut, Out, Scalar, cdiv, dmax, dmin, sym
from .target import resolve_arch

if TYPE_CHECKING:  # kd.blas as the module it is, for type checkers
    from . import blas as blas


def __getattr__(name: str) -> object:
    """``kd.blas`` is imported on first access: it is an optional extra (``kerneldsl[blas]``)."""
    if name == "blas":
        import importlib

        return importlib.import_module(".blas", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# A library logs but never configures logging: without a handler of the application's, stay quiet.
logging.getLogger("kerneldsl").addHandler(logging.NullHandler())

__all__ = [
    "Const",
    "DeviceArray",
    "Event",
    "PinnedArray",
    "Session",
    "Stream",
    "default_session",
    "reset_device",
    "resolve_arch",
    "In",
    "InOut",
    "Kernel",
    "Out",
    "Scalar",
    "__version__",
    "blas",
    "bool_",
    "cache",
    "cdiv",
    "dmax",
    "dmin",
    "elementwise",
    "errors",
    "float16",
    "float32",
    "float64",
    "fuse",
    "int8",
    "int16",
    "int32",
    "int64",
    "kernel",
    "ops",
    "reduction",
    "sym",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
