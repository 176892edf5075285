"""kerneldsl: declarative, specialized, cached CUDA kernels with a persistent GPU runtime.

The folders read as the pipeline, each importing only those before it in this list: ``runtime/``
owns everything that talks to the CUDA driver (and the CPU device); ``cache/`` the disk cache;
``jit/`` the compile pipeline (signature -> specialize -> codegen -> compiler -> build);
``launch/`` the ``Kernel`` object (``@kd.kernel``) and its launch paths, Python's and C's
(``_fastlaunch.c``); ``array/`` the engine that ``kd.ops``, ``@kd.elementwise``, ``kd.reduction``
and ``@kd.fuse`` share; ``blas/`` cuBLAS; ``device_array/`` ``kd.DeviceArray`` and its NumPy
surface; ``tune/``, ``distributed/`` and ``array_api/`` on top.

``import kerneldsl`` imports nothing but this file and the array engine's door (which imports
nothing): each public name is imported on first use (PEP 562), so a program pays for the parts it
touches (a cold start is mostly imports).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._version import __version__
from .array import engine as _engine


def _op_table() -> ModuleType:
    from .array import ops

    return ops


def _dtype_variants() -> ModuleType:
    from .array import dtype_variants

    return dtype_variants


def _products() -> ModuleType:
    from .blas import np_matmul

    return np_matmul


def _array_api() -> ModuleType:
    from . import array_api

    return array_api


# The composition root: DeviceArray's surface reaches the engine and cuBLAS through this door,
# opened on first use (the engine imports the surface's class, never the other way).
_engine.install(ops=_op_table, dtype_variants=_dtype_variants, products=_products, namespace=_array_api)

# The public API, written once: home module -> the names it defines ("" lists modules named by
# their last part: ``kd.ops`` is ``kerneldsl.array.ops``). Type checkers read __init__.pyi, which
# tests/test_structure.py proves lists the same.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "": ("array_api", "blas", "cache", "distributed", "errors", "array.ops", "device_array.random", "torch"),
    ".device_array.creation": (
        "arange",
        "asarray",
        "empty",
        "empty_like",
        "full",
        "full_like",
        "ones",
        "ones_like",
        "zeros",
        "zeros_like",
    ),
    ".array.elementwise": ("elementwise",),
    ".array.fusion": ("fuse",),
    ".device_array.manipulation": (
        "broadcast_to",
        "concatenate",
        "expand_dims",
        "flip",
        "moveaxis",
        "squeeze",
        "stack",
    ),
    ".array.ndarray": ("DeviceArray",),
    ".array.reduction": ("reduction",),
    ".array.scan": ("scan",),
    ".device_array.sessions": ("Session", "default_session"),
    ".blas.np_matmul": ("matmul",),
    ".jit.device_code": ("DeviceFunction", "device_function"),
    ".launch.dispatch": ("Kernel", "kernel"),
    ".dtypes": (
        "bool_",
        "complex64",
        "complex128",
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
    ),
    ".runtime": ("Event", "PinnedArray", "Stream", "reset_device"),
    ".runtime.nvtx": ("profile",),
    ".runtime.selection": ("devices", "is_available"),
    ".jit.signature": ("Const", "In", "InOut", "Out", "Scalar", "cdiv", "dmax", "dmin", "sym"),
    ".jit.target": ("resolve_arch",),
    ".tune": ("Autotuned", "autotune"),
}

# public name -> the module that defines it ("" for a module), and a public module -> its path
_HOMES = {name.rpartition(".")[2]: home for home, names in _PUBLIC.items() for name in names}
_MODULES = {path.rpartition(".")[2]: f".{path}" for path in _PUBLIC[""]}

# names that make no arrays; every other name imports the array class first, so that it
# registers DeviceArray with the runtime and every array made from then on has operators
_MAKE_NO_ARRAYS = {
    ".jit.device_code",
    ".dtypes",
    ".runtime.nvtx",
    ".runtime.selection",
    ".jit.signature",
    ".jit.target",
    "cache",
    "errors",
}


def __getattr__(name: str) -> object:
    """Import a public name's module on first access (``kd.blas`` needs ``kerneldsl[blas]``,
    ``kd.distributed`` ``kerneldsl[distributed]``, ``kd.torch`` ``kerneldsl[torch]``)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if (home or name) not in _MAKE_NO_ARRAYS:
        importlib.import_module(".array.ndarray", __name__)
    module = importlib.import_module(home or _MODULES[name], __name__)
    value = module if not home else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = ["__version__", *_HOMES]
