"""kerneldsl: declarative, specialized, cached CUDA kernels with a persistent GPU runtime.

The pipeline, one module per stage: signature -> specialize -> codegen -> compiler -> cache
-> build -> launch -> dispatch (``@kd.kernel``), with ``runtime/`` owning everything that talks
to the CUDA driver, ``fastpath`` the C launch path, and ``array/`` the core that ``kd.ops``,
``@kd.elementwise``, ``kd.reduction`` and ``@kd.fuse`` share.

``import kerneldsl`` imports nothing but this file: each public name is imported on first use
(PEP 562), so a program pays for the parts it touches (a cold start is mostly imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._version import __version__

if TYPE_CHECKING:  # the same names, eagerly, for type checkers
    from . import blas as blas
    from . import cache as cache
    from . import distributed as distributed
    from . import errors as errors
    from . import ops as ops
    from .array.creation import arange as arange
    from .array.creation import asarray as asarray
    from .array.creation import empty as empty
    from .array.creation import empty_like as empty_like
    from .array.creation import full as full
    from .array.creation import full_like as full_like
    from .array.creation import ones as ones
    from .array.creation import ones_like as ones_like
    from .array.creation import zeros as zeros
    from .array.creation import zeros_like as zeros_like
    from .array.elementwise import elementwise as elementwise
    from .array.fusion import fuse as fuse
    from .array.reduction import reduction as reduction
    from .array.scan import scan as scan
    from .dispatch import Kernel as Kernel
    from .dispatch import kernel as kernel
    from .dtypes import bool_ as bool_
    from .dtypes import float16 as float16
    from .dtypes import float32 as float32
    from .dtypes import float64 as float64
    from .dtypes import int8 as int8
    from .dtypes import int16 as int16
    from .dtypes import int32 as int32
    from .dtypes import int64 as int64
    from .dtypes import uint8 as uint8
    from .dtypes import uint16 as uint16
    from .dtypes import uint32 as uint32
    from .dtypes import uint64 as uint64
    from .runtime import DeviceArray as DeviceArray
    from .runtime import Event as Event
    from .runtime import PinnedArray as PinnedArray
    from .runtime import Session as Session
    from .runtime import Stream as Stream
    from .runtime import default_session as default_session
    from .runtime import reset_device as reset_device
    from .signature import Const as Const
    from .signature import In as In
    from .signature import InOut as InOut
    from .signature import Out as Out
    from .signature import Scalar as Scalar
    from .signature import cdiv as cdiv
    from .signature import dmax as dmax
    from .signature import dmin as dmin
    from .signature import sym as sym
    from .target import resolve_arch as resolve_arch

# public name -> the module that defines it (a module named by itself is the attribute)
_HOMES = {
    **dict.fromkeys(["blas", "cache", "distributed", "errors", "ops"], ""),
    "elementwise": ".array.elementwise",
    "fuse": ".array.fusion",
    "reduction": ".array.reduction",
    "scan": ".array.scan",
    **dict.fromkeys(["Kernel", "kernel"], ".dispatch"),
    **dict.fromkeys(
        [
            "bool_",
            "float16",
            "float32",
            "float64",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
        ],
        ".dtypes",
    ),
    **dict.fromkeys(
        ["DeviceArray", "Event", "PinnedArray", "Session", "Stream", "default_session", "reset_device"], ".runtime"
    ),
    **dict.fromkeys(["Const", "In", "InOut", "Out", "Scalar", "cdiv", "dmax", "dmin", "sym"], ".signature"),
    "resolve_arch": ".target",
    **dict.fromkeys(
        ["arange", "asarray", "empty", "empty_like", "full", "full_like", "ones", "ones_like", "zeros", "zeros_like"],
        ".array.creation",
    ),
}


def __getattr__(name: str) -> object:
    """Import a public name's module on first access (``kd.blas`` needs ``kerneldsl[blas]``,
    ``kd.distributed`` ``kerneldsl[distributed]``)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(home or f".{name}", __name__)
    value = module if not home else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = ["__version__", *_HOMES]  # checkers read the "X as X" re-exports above
