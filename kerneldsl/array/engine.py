"""The door from ``kd.DeviceArray``'s Python surface (``kerneldsl.device_array``: the operators,
the reduction methods, the complex parts, ``@``) and the ``operators`` mixin to what they run:
the op table, NumPy's array-method dtype rules, cuBLAS's matmul and the Array API namespace, each
opened on the first call that needs it and then kept.

Why a door, and why it imports nothing: the op table and cuBLAS make and return DeviceArrays, so
the surface cannot import them without an import loop; and every public ``kd`` name imports
DeviceArray first (it registers the class with the runtime), while declaring a kernel must import
no build pipeline (``tests/test_cold_start.py``), which the op table's kernels are made with. The
package root (``kerneldsl/__init__.py``, above every floor) hands the door its openers when the
package is imported: the surface depends on the door, the root on everything (the composition
root), and no import points back down the house to the surface.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType

Opener = Callable[[], ModuleType]

_openers: dict[str, Opener] = {}


def install(*, ops: Opener, dtype_variants: Opener, products: Opener, namespace: Opener) -> None:
    """The package root's openers: the op table, the dtype variants, cuBLAS's matmul, the Array
    API namespace."""
    _openers.update(ops=ops, dtype_variants=dtype_variants, products=products, namespace=namespace)


def _open(name: str) -> ModuleType:
    opener = _openers.get(name)
    if opener is None:  # only a module loaded outside its package (the root always runs first)
        raise ImportError(f"the array engine's door was not installed: import {__name__} through kerneldsl")
    return opener()


# Each opened once, then kept (functools.cache: a call costs no more than a global's test).
@functools.cache
def ops() -> ModuleType:
    """``kerneldsl.array.ops``, the op table every operator and conversion of an array runs."""
    return _open("ops")


@functools.cache
def dtype_variants() -> ModuleType:
    """``kerneldsl.array.dtype_variants``: reductions and scans in another dtype, ``var``/``std``."""
    return _open("dtype_variants")


@functools.cache
def products() -> ModuleType:
    """``kerneldsl.blas.np_matmul``, what ``@`` runs (it needs the kerneldsl[blas] extra)."""
    return _open("products")


@functools.cache
def namespace() -> ModuleType:
    """``kerneldsl.array_api``, the Array API namespace of these arrays (``__array_namespace__``)."""
    return _open("namespace")
