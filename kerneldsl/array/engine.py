"""The door from ``kd.DeviceArray``'s Python surface (``kerneldsl.device_array``: the operators,
the reduction methods, the complex parts) and the ``operators`` mixin to the array engine: the op
table and NumPy's array-method dtype rules, each imported on the first call that needs it and
then kept.

Why a door and not import statements: every public ``kd`` name imports DeviceArray first (it
registers the class with the runtime), and declaring a kernel must import no build pipeline
(``tests/test_cold_start.py``), which the op table's kernels are made with. Nothing the door
opens imports the surface back.
"""

from __future__ import annotations

from types import ModuleType

_ops: ModuleType | None = None
_dtype_variants: ModuleType | None = None


def ops() -> ModuleType:
    """``kerneldsl.array.ops``, the op table every operator and conversion of an array runs."""
    global _ops
    if _ops is None:
        from . import ops as table

        _ops = table
    return _ops


def dtype_variants() -> ModuleType:
    """``kerneldsl.array.dtype_variants``: reductions and scans in another dtype, ``var``/``std``."""
    global _dtype_variants
    if _dtype_variants is None:
        from . import dtype_variants as variants

        _dtype_variants = variants
    return _dtype_variants
