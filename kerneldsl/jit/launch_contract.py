"""One specialization's launch contract, decided once: the source of both launch paths.

A ``LaunchContract`` says what a call of one specialization takes and does before ``cuLaunchKernel``:
the arguments in order, the arrays and their ranks, where each shape symbol is read, which
extents are checked, which arrays may not overlap, the launch dimensions, and what goes in each
8-byte parameter slot. Both launch paths are generated from it, as Triton generates one binder
per signature: ``codegen.adapter_context`` turns it into the host adapter template's context,
``fastpath.launch_table`` into the integer table the C path runs. A new launch feature
(clusters, cooperative launches: ``cooperative`` and ``cluster`` here) is a field here, read by
those two functions; a contract that is ``extended`` launches with ``cuLaunchKernelEx``: the
adapter through ``Session.launch_ex``, the C path with ``fastpath.extended_launch``'s facts.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from ..dtypes import ElementType, complex_part_ctype
from ..errors import DeclarationError
from ..runtime.limits import CLUSTER_MIN_MAJOR
from .signature import ArrayParam, Expr, Extent, Signature
from .specialize import Specialization, computed_extent

SLOT_BYTES = 8  # every kernel parameter gets one 8-byte slot in the packed buffer


@dataclass(frozen=True)
class ArrayArgument:
    name: str
    argument: int  # its position among the runtime parameters
    ndim: int
    shape_text: str  # the declared shape, as errors quote it
    writes: bool
    strided: bool  # takes views of any strides: its element strides get slots of their own


@dataclass(frozen=True)
class SymbolBind:
    """Shape symbol ``symbol`` is the extent of ``array`` along ``axis``."""

    symbol: str
    array: str
    axis: int


@dataclass(frozen=True)
class ShapeCheck:
    """The extent of ``array`` along ``axis`` must be ``value``, or with ``symbol`` that symbol's,
    or with ``expr`` that computed extent's (over bound symbols and the contract's constants)."""

    array: str
    axis: int
    value: int | None
    symbol: str | None
    what: str  # how an error names what was expected
    expr: Expr | None = None


@dataclass(frozen=True)
class Slot:
    """One 8-byte kernel parameter slot: its C parameter, struct code and where its value comes
    from (``source``): an array's address ("pointer"), an array's element stride along ``axis``
    ("stride", the byte stride over ``itemsize``), a scalar ("scalar", converted as
    ``conversion`` says) or an unspecialized shape symbol ("symbol")."""

    name: str
    ctype: str
    code: str
    source: str
    param: str  # the array, scalar or symbol read
    axis: int = 0
    itemsize: int = 0
    element: str = ""  # a scalar's element type
    conversion: str = ""  # a scalar's: "bfloat16", "bool", "complex", "float" or "int" (``scalar_conversion``)
    part: str = ""  # a complex scalar's "real" or "imag": its two parts are two slots


@dataclass(frozen=True)
class LaunchContract:
    """Everything both launch paths check, compute and pack for one specialization."""

    kernel: str
    index_bits: int
    params: tuple[str, ...]  # the runtime parameters, in call order
    arrays: tuple[ArrayArgument, ...]
    binds: tuple[SymbolBind, ...]
    checks: tuple[ShapeCheck, ...]
    aliases: tuple[tuple[str, str], ...]  # array pairs that may not overlap
    dims: tuple[Expr, ...]  # grid x, y, z, block x, y, z, shared bytes
    constants: tuple[tuple[str, int], ...]  # names the dims may use besides bound symbols
    slots: tuple[Slot, ...]
    cooperative: bool = False  # all blocks co-resident: launched by cuLaunchKernelEx, occupancy-checked
    cluster: tuple[Expr, ...] = ()  # thread-block cluster x, y, z (cuLaunchKernelEx); () for none

    @property
    def extended(self) -> bool:
        """Whether the launch needs ``cuLaunchKernelEx`` attributes."""
        return self.cooperative or bool(self.cluster)

    @property
    def struct_format(self) -> str:
        return "<" + "".join(s.code for s in self.slots)

    @property
    def abi(self) -> tuple[tuple[str, str], ...]:
        """(parameter, C type) in launch order."""
        return tuple((s.name, s.ctype) for s in self.slots)


def launch_contract(spec: Specialization) -> LaunchContract:
    sig = spec.signature
    fixed = dict(spec.fixed_symbols)
    arguments = {p.name: i for i, p in enumerate(sig.runtime_params)}
    ints = {c.name for c in sig.consts if c.type is int}
    constants = {s: operator.index(v) for s, v in spec.fixed_symbols}
    constants.update({n: operator.index(v) for n, v in spec.consts if n in ints})
    return LaunchContract(
        kernel=sig.name,
        index_bits=spec.index_bits,
        params=tuple(arguments),
        arrays=tuple(
            ArrayArgument(a.name, arguments[a.name], len(a.shape), shape_text(a.shape), a.writes, a.strided)
            for a in sig.arrays
        ),
        binds=tuple(SymbolBind(s, param, axis) for s, (param, axis) in sig.symbols.items() if s not in fixed),
        checks=_shape_checks(spec, constants),
        aliases=() if sig.allow_alias else alias_pairs(sig),
        dims=launch_dims(sig),
        constants=tuple(constants.items()),
        slots=_slots(spec),
        cooperative=sig.cooperative,
        cluster=_cluster(spec),
    )


def _cluster(spec: Specialization) -> tuple[Expr, ...]:
    """The declared cluster shape, for an arch that has clusters (sm_90 and newer)."""
    cluster = spec.signature.cluster
    digits = spec.arch.removeprefix("sm_").rstrip("af")
    if cluster and (not digits.isdigit() or int(digits) // 10 < CLUSTER_MIN_MAJOR):
        raise DeclarationError(
            spec.signature.name, None, f"cluster= needs sm_{CLUSTER_MIN_MAJOR}0 or newer; this build is for {spec.arch}"
        )
    return cluster


def alias_pairs(sig: Signature) -> tuple[tuple[str, str], ...]:
    arrays = sig.arrays
    return tuple((a.name, b.name) for i, a in enumerate(arrays) for b in arrays[i + 1 :] if a.writes or b.writes)


def launch_dims(sig: Signature) -> tuple[Expr, ...]:
    """The seven launch values in order: grid x, y, z, block x, y, z, shared bytes."""
    return (*_pad3(sig.grid), *_pad3(sig.block), sig.shared)


def _pad3(dims: tuple[Expr, ...]) -> tuple[Expr, ...]:
    return dims + (Expr("int", (1,)),) * (3 - len(dims))


def shape_text(shape: tuple[Extent, ...]) -> str:
    """A declared shape as errors quote it: ``(m, n)``, ``(cdiv(n, 256),)``."""
    texts = [repr(d) if isinstance(d, Expr) else str(d) for d in shape]
    return f"({', '.join(texts)}{',' if len(texts) == 1 else ''})"


def _shape_checks(spec: Specialization, constants: dict[str, int]) -> tuple[ShapeCheck, ...]:
    """What each array's extents must be. A computed extent whose names are all constants
    (specialized symbols, int constants) is folded to a fixed value."""
    fixed = dict(spec.fixed_symbols)
    checks = []
    for a in spec.signature.arrays:
        for axis, d in enumerate(a.shape):
            if isinstance(d, Expr):
                if d.symbols() <= constants.keys():
                    value = computed_extent(spec.signature, a.name, axis, d, constants)
                    checks.append(ShapeCheck(a.name, axis, value, None, repr(d)))
                else:
                    checks.append(ShapeCheck(a.name, axis, None, None, repr(d), d))
            elif isinstance(d, int):
                checks.append(ShapeCheck(a.name, axis, operator.index(d), None, "its fixed extent"))
            elif d in fixed:
                checks.append(ShapeCheck(a.name, axis, operator.index(fixed[d]), None, f"specialized {d}"))
            elif spec.signature.symbols[d] != (a.name, axis):
                checks.append(ShapeCheck(a.name, axis, None, d, d))
    return tuple(checks)


def _slot_code(code: str) -> str:
    size = np.dtype(code).itemsize
    return code + (f"{SLOT_BYTES - size}x" if size < SLOT_BYTES else "")


def _slots(spec: Specialization) -> tuple[Slot, ...]:
    """One 8-byte slot per kernel parameter: arrays (and a strided one's element strides),
    scalars, then unspecialized shape symbols."""
    slots = []
    for p in spec.signature.runtime_params:
        et = spec.element_type(p.name)
        if isinstance(p, ArrayParam):
            qualifier = "const " if p.direction == "in" else ""
            slots.append(Slot(p.name, f"{qualifier}{et.ctype}*", _slot_code("Q"), "pointer", p.name))
            if p.strided:  # element strides of a view, read from its byte strides at launch
                for axis in range(len(p.shape)):
                    name = f"{p.name}_stride{axis}"
                    slots.append(Slot(name, "long long", _slot_code("q"), "stride", p.name, axis, et.numpy.itemsize))
        elif et.kind == "c":  # the kernel rebuilds the value from its parts (kernel.cu.j2)
            code, part_ctype = _slot_code(et.pack), complex_part_ctype(et)
            for part, suffix in (("real", "re"), ("imag", "im")):
                name = complex_part_name(p.name, suffix)
                slots.append(
                    Slot(name, part_ctype, code, "scalar", p.name, element=et.name, conversion="complex", part=part)
                )
        else:
            conversion = scalar_conversion(et)
            slots.append(
                Slot(p.name, et.ctype, _slot_code(et.pack), "scalar", p.name, element=et.name, conversion=conversion)
            )
    fixed = dict(spec.fixed_symbols)
    index_code = _slot_code("i" if spec.index_bits == 32 else "q")
    slots.extend(Slot(s, "index_t", index_code, "symbol", s) for s in spec.signature.symbols if s not in fixed)
    return tuple(slots)


def complex_part_name(param: str, suffix: str) -> str:
    """The C parameter holding one part ("re" or "im") of complex scalar ``param``."""
    return f"kd_{param}_{suffix}"


def scalar_conversion(et: ElementType) -> str:
    """How a launch turns a scalar argument into the plain value it packs (the adapter template
    spells each kind). It runs before the adapter reads any array, since a conversion may run
    user code (``__index__``, ``__float__``).

    The value is what ``struct`` would take from the argument for the slot's format, so both
    launch paths pack every scalar alike: "int" is ``operator.index``, "float" is
    ``math.ldexp(x, 0)`` (``PyFloat_AsDouble``, no parsing of strings as ``float()`` does),
    "bool" is truth, "bfloat16" the value's bits; exact ints and floats pass as they are.
    """
    if et.name in ("bfloat16", "bool"):
        return et.name
    return {"f": "float", "c": "complex"}.get(et.kind, "int")
