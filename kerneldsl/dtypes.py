"""The element types kerneldsl supports and how each one is spelled in CUDA C++ and in a param buffer.

One table drives everything: declaration checks, the C type in generated source, the
``struct`` code used to pack a scalar into the kernel's parameter buffer, and the short
code that enters specialization keys.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

# bfloat16 exists in numpy only through ml_dtypes, imported the first time a bfloat16 is asked for
# (``add_bfloat16``): a fresh process that never uses one does not pay for it.
_ml_dtypes: ModuleType | None = None
_looked_for_ml_dtypes = False
_bfloat16_lock = threading.Lock()

INT32_MAX = 2**31 - 1  # past this, element counts and offsets need 64-bit indexing


@dataclass(frozen=True)
class ElementType:
    """One supported element type."""

    name: str
    numpy: np.dtype
    ctype: str
    pack: str  # struct code of a scalar of this type in a kernel parameter buffer (complex: of each part)
    kind: str  # "b" bool, "i" signed, "u" unsigned, "f" floating, "c" complex

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize


def _table() -> dict[str, ElementType]:
    rows = [
        ("bool", np.dtype(np.bool_), "bool", "?", "b"),
        ("int8", np.dtype(np.int8), "signed char", "b", "i"),
        ("int16", np.dtype(np.int16), "short", "h", "i"),
        ("int32", np.dtype(np.int32), "int", "i", "i"),
        ("int64", np.dtype(np.int64), "long long", "q", "i"),
        ("uint8", np.dtype(np.uint8), "unsigned char", "B", "u"),
        ("uint16", np.dtype(np.uint16), "unsigned short", "H", "u"),
        ("uint32", np.dtype(np.uint32), "unsigned int", "I", "u"),
        ("uint64", np.dtype(np.uint64), "unsigned long long", "Q", "u"),
        ("float16", np.dtype(np.float16), "kd_half", "e", "f"),
        ("float32", np.dtype(np.float32), "float", "f", "f"),
        ("float64", np.dtype(np.float64), "double", "d", "f"),
        ("complex64", np.dtype(np.complex64), "kd_complex64", "f", "c"),
        ("complex128", np.dtype(np.complex128), "kd_complex128", "d", "c"),
    ]
    return {name: ElementType(name, dt, ctype, pack, kind) for name, dt, ctype, pack, kind in rows}


ELEMENT_TYPES: dict[str, ElementType] = _table()  # bfloat16 joins once asked for (add_bfloat16)
_BY_NUMPY: dict[np.dtype, ElementType] = {et.numpy: et for et in ELEMENT_TYPES.values()}


def add_bfloat16() -> bool:
    """Add the bfloat16 row, importing ml_dtypes on the first call; whether the tables have it
    (False without ml_dtypes). Every path from a name or dtype to a row comes through here on a
    miss (``is_dtype_name``, ``element_type``), so a bfloat16 is never refused for being asked
    for first."""
    global _ml_dtypes, _looked_for_ml_dtypes
    with _bfloat16_lock:
        if not _looked_for_ml_dtypes:
            found: ModuleType | None
            try:
                import ml_dtypes as found
            except ImportError:  # pragma: no cover - depends on the environment
                found = None
            if found is not None:
                row = ElementType("bfloat16", np.dtype(found.bfloat16), "kd_bfloat16", "H", "f")
                _BY_NUMPY[row.numpy] = row
                ELEMENT_TYPES[row.name] = row
            _ml_dtypes = found
            _looked_for_ml_dtypes = True
    return "bfloat16" in ELEMENT_TYPES


def all_element_types() -> dict[str, ElementType]:
    """Every supported element type, bfloat16 included when ml_dtypes is installed."""
    add_bfloat16()
    return ELEMENT_TYPES


# The public dtype names are numpy's scalar types: usable wherever numpy takes a dtype, and valid
# types for checkers in annotations (kd.In[kd.float32, n]).
bool_ = np.bool_
int8 = np.int8
int16 = np.int16
int32 = np.int32
int64 = np.int64
uint8 = np.uint8
uint16 = np.uint16
uint32 = np.uint32
uint64 = np.uint64
float16 = np.float16
float32 = np.float32
float64 = np.float64
complex64 = np.complex64
complex128 = np.complex128


def is_dtype_name(name: str) -> bool:
    """True when ``name`` spells a supported type rather than a dtype variable."""
    return name in ELEMENT_TYPES or (name == "bfloat16" and add_bfloat16())


def element_type(spec: Any) -> ElementType:
    """Resolve a dtype spelling (name, numpy dtype or scalar type) to its table row.

    Raises ``KeyError`` with the list of supported names when the type is unknown.
    """
    if isinstance(spec, ElementType):
        return spec
    found = _row(spec)
    if found is None and add_bfloat16():
        found = _row(spec)
    if found is None:
        raise KeyError(_unknown(spec))
    return found


def _row(spec: Any) -> ElementType | None:
    if isinstance(spec, str) and spec in ELEMENT_TYPES:
        return ELEMENT_TYPES[spec]
    try:
        return _BY_NUMPY.get(np.dtype(spec))
    except TypeError:
        return None


def _unknown(spec: Any) -> str:
    add_bfloat16()  # the list below names every supported type
    if _ml_dtypes is None and str(spec).startswith("bfloat16"):
        return f"element type {spec!r} needs the ml_dtypes package (numpy's bfloat16): pip install ml_dtypes"
    if isinstance(spec, np.dtype) and not spec.isnative and _row(spec.newbyteorder("=")) is not None:
        return (
            f"element type {spec!r} is in the other byte order: kernels read the machine's; convert with "
            "a.astype(a.dtype.newbyteorder('='))"
        )
    return f"unsupported element type {spec!r}; supported: {', '.join(ELEMENT_TYPES)}"


def scalar_element_type(value: Any) -> ElementType:
    """The element type a Python or numpy scalar binds a dtype variable to (NumPy's defaults)."""
    if isinstance(value, np.generic):
        return element_type(value.dtype)
    if isinstance(value, bool):
        return ELEMENT_TYPES["bool"]
    if isinstance(value, int):
        return ELEMENT_TYPES["int64"]
    if isinstance(value, float):
        return ELEMENT_TYPES["float64"]
    if isinstance(value, complex):
        return ELEMENT_TYPES["complex128"]
    raise KeyError(f"cannot bind a dtype variable from a value of type {type(value).__name__}")


def complex_part_ctype(et: ElementType) -> str:
    """The C type of a complex type's real and imaginary parts (each its own parameter slot)."""
    return {"complex64": "float", "complex128": "double"}[et.name]


def to_complex(value: Any) -> complex:
    """A scalar as the Python complex a complex parameter packs, without parsing strings as
    ``complex()`` would (a number's own ``__complex__`` / ``__float__`` / ``__index__`` runs)."""
    if type(value) is complex:
        return value
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"a complex parameter takes a number, not {type(value).__name__}")
    return complex(value)


def to_bfloat16_bits(value: Any) -> int:
    """bfloat16 bits of a scalar, rounded to nearest even (NaN stays NaN), for parameter packing."""
    (bits,) = np.array([value], dtype=np.float32).view(np.uint32)
    u = int(bits)
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
