"""Code generation: a Specialization and the user's body -> CUDA source and host adapter source.

Python decides (parameter order, C types, the packed parameter layout, which shapes to check);
the Jinja templates in ``templates/`` hold all of the generated text.
"""

from __future__ import annotations

import hashlib
import math
import struct
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import jinja2
import numpy as np

from ._version import __version__
from .dtypes import ELEMENT_TYPES, ElementType
from .errors import DeclarationError
from .signature import ArrayParam, Expr, ScalarParam
from .specialize import Specialization

SLOT_BYTES = 8  # every kernel parameter gets one 8-byte slot in the packed buffer


def templates_dir() -> Path:
    """Installed wheels carry the templates inside the package; a checkout has them at the top."""
    packaged = Path(__file__).parent / "templates"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "templates"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(version=__version__, **context)


@lru_cache(maxsize=1)
def template_digest() -> str:
    """Hash of every template: a changed template must change every cache key."""
    h = hashlib.sha256()
    for path in sorted(templates_dir().glob("*.j2")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


# --- what the body function sees ---------------------------------------------------------------


class ArrayProxy:
    """Stands for an array parameter while the body is generated; ``str()`` is its C name."""

    def __init__(self, param: ArrayParam, et: ElementType, aligned16: bool) -> None:
        self.name = param.name
        self.direction = param.direction
        self.dtype: np.dtype = et.numpy
        self.ctype = et.ctype
        self.ndim = len(param.shape)
        self.shape: tuple[str, ...] = tuple(str(d) for d in param.shape)
        self.strides: tuple[str, ...] = tuple(f"{param.name}_stride{i}" for i in range(self.ndim))
        self.aligned16 = aligned16

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<array {self.name}: {self.direction} {self.dtype}{list(self.shape)}>"


class ScalarProxy:
    """Stands for a scalar parameter while the body is generated; ``str()`` is its C name."""

    def __init__(self, param: ScalarParam, et: ElementType) -> None:
        self.name = param.name
        self.dtype: np.dtype = et.numpy
        self.ctype = et.ctype

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<scalar {self.name}: {self.dtype}>"


def body_arguments(spec: Specialization) -> dict[str, Any]:
    """Keyword arguments the body function is called with: proxies and constant values."""
    aligned = dict(spec.aligned)
    args: dict[str, Any] = dict(spec.consts)
    for p in spec.signature.params:
        if isinstance(p, ArrayParam):
            args[p.name] = ArrayProxy(p, spec.element_type(p.name), aligned[p.name])
        elif isinstance(p, ScalarParam):
            args[p.name] = ScalarProxy(p, spec.element_type(p.name))
    return args


def call_body(spec: Specialization, body: Callable[..., Any]) -> str:
    text = body(**body_arguments(spec))
    if not isinstance(text, str):
        raise DeclarationError(spec.signature.name, None, f"the body function must return the CUDA body as str, got {type(text).__name__}")
    return textwrap.dedent(text).strip("\n")


# --- the generated pair ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """Everything code generation produced for one specialization."""

    entry: str
    cuda_source: str
    adapter_source: str
    body: str
    body_file: str
    abi: tuple[tuple[str, str], ...]  # (parameter, C type) in launch order
    struct_format: str
    launch_plan: tuple[Any, ...] | None  # the adapter as tables for the C launch path

    @property
    def param_bytes(self) -> int:
        return SLOT_BYTES * len(self.abi)


def generate(spec: Specialization, body: Callable[..., Any]) -> Generated:
    sig = spec.signature
    body_text = call_body(spec, body)
    entry = f"kd_{sig.name}"
    body_file = f"{sig.name}.body"
    slots = _slots(spec)
    cuda_source = render(
        "kernel.cu.j2",
        name=sig.name,
        arch=spec.arch,
        index_bits=spec.index_bits,
        index_ctype="int" if spec.index_bits == 32 else "long long",
        uses_half=_uses(spec, "float16"),
        uses_bfloat16=_uses(spec, "bfloat16"),
        type_vars=[(v, ELEMENT_TYPES[t].ctype) for v, t in spec.type_vars],
        consts=[_const_decl(n, v) for n, v in spec.consts],
        fixed_symbols=[{"name": s, "value": v} for s, v in spec.fixed_symbols],
        entry=entry,
        params=[{"decl": s["decl"]} for s in slots],
        arrays=[{"name": a.name, "shape": [str(d) for d in a.shape]} for a in sig.arrays],
        body_file=body_file,
        body=body_text,
    )
    struct_format = "<" + "".join(s["code"] for s in slots)
    adapter_source = render(
        "adapter.py.j2",
        name=sig.name,
        arch=spec.arch,
        index_bits=spec.index_bits,
        struct_format_literal=repr(struct_format),
        converters=sorted({s["converter"] for s in slots if s["converter"]}),
        runtime_names=[p.name for p in sig.runtime_params],
        arrays=[_adapter_array(a) for a in sig.arrays],
        alias_checks=[] if sig.allow_alias else _alias_pairs(sig),
        symbol_binds=_symbol_binds(spec),
        shape_checks=_shape_checks(spec),
        dim_values=_dim_values(spec),
        grid=_pad3(sig.grid),
        block=_pad3(sig.block),
        shared=sig.shared,
        pack_values=[s["value"] for s in slots],
    )
    return Generated(
        entry=entry,
        cuda_source=cuda_source,
        adapter_source=adapter_source,
        body=body_text,
        body_file=body_file,
        abi=tuple((s["name"], s["ctype"]) for s in slots),
        struct_format=struct_format,
        launch_plan=launch_plan(spec),
    )


def _uses(spec: Specialization, type_name: str) -> bool:
    return any(t == type_name for _, t in spec.param_types) or any(t == type_name for _, t in spec.type_vars)


def _slot_code(code: str) -> str:
    size = np.dtype(code).itemsize
    return code + (f"{SLOT_BYTES - size}x" if size < SLOT_BYTES else "")


def _slots(spec: Specialization) -> list[dict[str, Any]]:
    """One 8-byte slot per kernel parameter: arrays, scalars, then unspecialized shape symbols."""
    slots = []
    for p in spec.signature.runtime_params:
        et = spec.element_type(p.name)
        if isinstance(p, ArrayParam):
            qualifier = "const " if p.direction == "in" else ""
            restrict = "" if spec.signature.allow_alias else " __restrict__"
            decl = f"{qualifier}{et.ctype}*{restrict} {p.name}"
            slots.append(_slot(p.name, f"{qualifier}{et.ctype}*", decl, "Q", f"a_{p.name}.ptr", None))
        else:
            converter = "to_bfloat16_bits" if et.name == "bfloat16" else None
            value = f"{converter}(a_{p.name})" if converter else f"a_{p.name}"
            slots.append(_slot(p.name, et.ctype, f"{et.ctype} {p.name}", et.pack, value, converter))
    fixed = dict(spec.fixed_symbols)
    index_code = "i" if spec.index_bits == 32 else "q"
    for s in spec.signature.symbols:
        if s not in fixed:
            slots.append(_slot(s, "index_t", f"index_t {s}", index_code, f"s_{s}", None))
    return slots


def _slot(name: str, ctype: str, decl: str, code: str, value: str, converter: str | None) -> dict[str, Any]:
    return {"name": name, "ctype": ctype, "decl": decl, "code": _slot_code(code), "value": value, "converter": converter}


def _const_decl(name: str, value: Any) -> dict[str, str]:
    if isinstance(value, bool):
        return {"name": name, "ctype": "bool", "literal": "true" if value else "false"}
    if isinstance(value, int):
        return {"name": name, "ctype": "long long", "literal": f"{value}LL"}
    return {"name": name, "ctype": "double", "literal": _float_literal(value)}


def _float_literal(value: float) -> str:
    """An exact C++17 constant: hex floats round-trip every finite double; infinities and NaN
    (which NVRTC has no constexpr builtin for) are spelled by their bits."""
    if math.isfinite(value):
        return value.hex()
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return f"__builtin_bit_cast(double, 0x{bits:016x}ULL)"


def _adapter_array(a: ArrayParam) -> dict[str, Any]:
    return {"name": a.name, "ndim": len(a.shape), "shape_text": str(a.shape).replace("'", ""), "writes": a.writes}


def _alias_pairs(sig: Any) -> list[tuple[str, str]]:
    arrays = sig.arrays
    return [
        (a.name, b.name)
        for i, a in enumerate(arrays)
        for b in arrays[i + 1 :]
        if a.writes or b.writes
    ]


def _symbol_binds(spec: Specialization) -> list[dict[str, Any]]:
    fixed = dict(spec.fixed_symbols)
    return [
        {"symbol": s, "array": param, "axis": axis}
        for s, (param, axis) in spec.signature.symbols.items()
        if s not in fixed
    ]


def _shape_checks(spec: Specialization) -> list[dict[str, Any]]:
    fixed = dict(spec.fixed_symbols)
    checks = []
    for a in spec.signature.arrays:
        for axis, d in enumerate(a.shape):
            if isinstance(d, int):
                checks.append({"array": a.name, "axis": axis, "expected": d, "what": "its fixed extent"})
            elif d in fixed:
                checks.append({"array": a.name, "axis": axis, "expected": fixed[d], "what": f"specialized {d}"})
            elif spec.signature.symbols[d] != (a.name, axis):
                checks.append({"array": a.name, "axis": axis, "expected": f"s_{d}", "what": d})
    return checks


def _dim_values(spec: Specialization) -> dict[str, str]:
    """How the adapter spells each name a launch dimension may use."""
    values = {s: f"s_{s}" for s in spec.signature.symbols}
    values.update({s: str(v) for s, v in spec.fixed_symbols})
    values.update({n: repr(v) for n, v in spec.consts})
    return values


def _pad3(dims: tuple[Expr, ...]) -> tuple[Expr, ...]:
    return dims + (Expr("int", (1,)),) * (3 - len(dims))


# --- the same adapter as tables, for the C launch path (kerneldsl/_fastlaunch.c) ----------------------

_OPCODES = {"int": 1, "sym": 2, "add": 3, "sub": 4, "mul": 5, "floordiv": 6, "cdiv": 7, "min": 8, "max": 9}
_SLOT_KINDS = {
    "ptr": 0, "sym32": 1, "sym64": 2, "bool": 3, "int8": 4, "int16": 5, "int32": 6, "int64": 7,
    "uint8": 8, "uint16": 9, "uint32": 10, "uint64": 11, "float16": 12, "float32": 13, "float64": 14,
}


class _Unplannable(Exception):
    """Something only the Python adapter handles (e.g. a bfloat16 scalar)."""


def launch_plan(spec: Specialization) -> tuple[Any, ...] | None:
    """What the generated adapter checks, computes and packs, as integer tables the C launch
    path runs: ``(nargs, arrays, binds, checks, aliases, programs, slots)``. None when the
    specialization needs something only the adapter does; such calls stay on the Python path.
    """
    sig = spec.signature
    if not sig.arrays:
        return None
    arg_index = {p.name: i for i, p in enumerate(sig.runtime_params)}
    array_index = {a.name: j for j, a in enumerate(sig.arrays)}
    binds = _symbol_binds(spec)
    symbol_index = {b["symbol"]: k for k, b in enumerate(binds)}
    try:
        programs = _programs(spec, symbol_index)
        slots = _plan_slots(spec, array_index, symbol_index, arg_index)
    except _Unplannable:
        return None
    return (
        len(sig.runtime_params),
        tuple((arg_index[a.name], len(a.shape)) for a in sig.arrays),
        tuple((symbol_index[b["symbol"]], array_index[b["array"]], b["axis"]) for b in binds),
        tuple(_plan_check(c, array_index, symbol_index) for c in _shape_checks(spec)),
        tuple((array_index[a], array_index[b]) for a, b in ([] if sig.allow_alias else _alias_pairs(sig))),
        programs,
        slots,
    )


def _plan_check(check: dict[str, Any], array_index: dict[str, int], symbol_index: dict[str, int]) -> tuple[int, ...]:
    expected = check["expected"]
    if isinstance(expected, str):  # "s_<symbol>": equal to where the symbol was bound
        return (array_index[check["array"]], check["axis"], symbol_index[expected[2:]], 0)
    return (array_index[check["array"]], check["axis"], -1, int(expected))


def _programs(spec: Specialization, symbol_index: dict[str, int]) -> tuple[tuple[int, int], ...]:
    """Grid, block and shared as postfix programs, each ended by (0, 0)."""
    values: dict[str, tuple[int, int]] = {s: (_OPCODES["sym"], i) for s, i in symbol_index.items()}
    values.update({s: (_OPCODES["int"], int(v)) for s, v in spec.fixed_symbols})
    for name, value in spec.consts:
        if not isinstance(value, int):  # a float constant in a launch dimension: adapter only
            values[name] = (-1, 0)
        else:
            values[name] = (_OPCODES["int"], int(value))
    sig = spec.signature
    code: list[tuple[int, int]] = []
    for expr in (*_pad3(sig.grid), *_pad3(sig.block), sig.shared):
        _emit(expr, values, code)
        code.append((0, 0))
    return tuple(code)


def _emit(expr: Expr, values: dict[str, tuple[int, int]], code: list[tuple[int, int]]) -> None:
    if expr.op == "int":
        code.append((_OPCODES["int"], int(expr.args[0])))
    elif expr.op == "sym":
        op = values[expr.args[0]]
        if op[0] < 0:
            raise _Unplannable(expr.args[0])
        code.append(op)
    else:
        for arg in expr.args:
            _emit(arg, values, code)
        code.append((_OPCODES[expr.op], 0))


def _plan_slots(
    spec: Specialization, array_index: dict[str, int], symbol_index: dict[str, int], arg_index: dict[str, int]
) -> tuple[tuple[int, int], ...]:
    slots = []
    for p in spec.signature.runtime_params:
        if isinstance(p, ArrayParam):
            slots.append((_SLOT_KINDS["ptr"], array_index[p.name]))
            continue
        kind = _SLOT_KINDS.get(spec.element_type(p.name).name)
        if kind is None:
            raise _Unplannable(p.name)
        slots.append((kind, arg_index[p.name]))
    width = "sym32" if spec.index_bits == 32 else "sym64"
    slots.extend((_SLOT_KINDS[width], i) for i in symbol_index.values())
    return tuple(slots)
