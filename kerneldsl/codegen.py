"""Code generation: a Specialization and the user's body -> CUDA source and host adapter source.

Python decides (parameter order, C types, the packed parameter layout, which shapes to check);
the Jinja templates in ``templates/`` hold all of the generated text.
"""

from __future__ import annotations

import hashlib
import math
import operator
import struct
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._version import __version__
from .dtypes import ELEMENT_TYPES, ElementType
from .errors import DeclarationError, ProxyAttributeError
from .installed import dist_info_pattern, first_version
from .signature import ArrayParam, Expr, ScalarParam, Signature
from .specialize import Specialization
from .template_options import COMPILED_DIR, make_environment

if TYPE_CHECKING:
    import jinja2

SLOT_BYTES = 8  # every kernel parameter gets one 8-byte slot in the packed buffer


def templates_dir() -> Path:
    """Installed wheels carry the templates inside the package; a checkout has them at the top."""
    packaged = Path(__file__).parent / "templates"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "templates"


def compiled_templates_dir() -> Path:
    """Where an installed package keeps its templates compiled to Python (``setup.py``)."""
    return Path(__file__).parent / COMPILED_DIR


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """Jinja, imported on the first render; an installed package's templates come precompiled."""
    import jinja2

    compiled = compiled_templates_dir()
    loader: jinja2.BaseLoader = (
        jinja2.ModuleLoader(str(compiled)) if compiled.is_dir() else jinja2.FileSystemLoader(str(templates_dir()))
    )
    environment: jinja2.Environment = make_environment(jinja2, loader, undefined=jinja2.StrictUndefined)
    return environment


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(version=__version__, **context)


@lru_cache(maxsize=1)
def renderer_identity() -> str:
    """The Jinja release that renders here, which keys of stored rendered text record (another
    release may render the same template differently); found without importing Jinja."""
    version = first_version(dist_info_pattern("jinja2"))
    if version is None:  # not installed as a distribution: the module says
        import jinja2

        version = jinja2.__version__
    return f"jinja2 {version}"


@lru_cache(maxsize=1)
def template_digest() -> str:
    """Hash of every template: a changed template must change every cache key."""
    h = hashlib.sha256()
    for path in sorted(templates_dir().glob("*.j2")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


# --- what the body function sees ---------------------------------------------------------------


class _Proxy:
    """A parameter as the body function sees it: a misspelt attribute names the kernel, the
    parameter and the attributes there are (``__getattr__`` runs only for missing ones)."""

    kernel: str
    name: str

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") or attribute in ("kernel", "name"):
            raise AttributeError(attribute)
        valid = tuple(sorted(a for a in vars(self) if a != "kernel"))
        raise ProxyAttributeError(self.kernel, self.name, attribute, valid)


class ArrayProxy(_Proxy):
    """Stands for an array parameter while the body is generated; ``str()`` is its C name."""

    def __init__(self, param: ArrayParam, et: ElementType, aligned16: bool, kernel: str) -> None:
        self.kernel = kernel
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


class ScalarProxy(_Proxy):
    """Stands for a scalar parameter while the body is generated; ``str()`` is its C name."""

    def __init__(self, param: ScalarParam, et: ElementType, kernel: str) -> None:
        self.kernel = kernel
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
            args[p.name] = ArrayProxy(p, spec.element_type(p.name), aligned[p.name], spec.signature.name)
        elif isinstance(p, ScalarParam):
            args[p.name] = ScalarProxy(p, spec.element_type(p.name), spec.signature.name)
    return args


@dataclass(frozen=True)
class Decisions:
    """What a generated array kernel chose for one specialization, kept on its Build so that
    tests and users read the choice instead of the generated text."""

    layout: str | None = None  # "flat" (every array has the result's shape) or "broadcast"
    vector_width: int = 1  # elements per 16-byte access; 1: the scalar path
    stage: str | None = None  # a reduction's kernel: "direct", "partial", "rows", "columns" or "gather"
    accumulation: np.dtype | None = None  # the dtype a reduction accumulates in
    group: int | None = None  # a reduction's lanes per row (rows, gather) or across columns (columns)
    split: bool = False  # several blocks share one output; the last to finish folds their partials


@dataclass(frozen=True)
class GeneratedBody:
    """A body function's result when it also reports decisions (kerneldsl's own kernels)."""

    text: str
    decisions: Decisions


def call_body(spec: Specialization, body: Callable[..., Any]) -> tuple[str, Decisions]:
    result = body(**body_arguments(spec))
    text, decisions = (result.text, result.decisions) if isinstance(result, GeneratedBody) else (result, Decisions())
    if not isinstance(text, str):
        raise DeclarationError(
            spec.signature.name, None, f"the body function must return the CUDA body as str, got {type(text).__name__}"
        )
    return textwrap.dedent(text).strip("\n"), decisions


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
    decisions: Decisions

    @property
    def param_bytes(self) -> int:
        return SLOT_BYTES * len(self.abi)

    def __repr__(self) -> str:
        """Sizes, not the sources (``cuda_source``, ``adapter_source``, ``body``)."""
        return (
            f"<Generated {self.entry}: CUDA {len(self.cuda_source.splitlines())} lines, adapter "
            f"{len(self.adapter_source.splitlines())} lines, {len(self.abi)} parameter slots>"
        )


KERNEL_TEMPLATE = "kernel.cu.j2"
ADAPTER_TEMPLATE = "adapter.py.j2"


@dataclass(frozen=True)
class Plan:
    """What code generation decided for one specialization before any template is rendered: the
    two templates' contexts and what a launch needs besides the text. Rendering is a pure
    function of the templates and these contexts, so a disk hit can take the text stored under
    ``identity()`` and never import Jinja."""

    entry: str
    body: str
    body_file: str
    abi: tuple[tuple[str, str], ...]
    struct_format: str
    decisions: Decisions
    kernel_context: dict[str, Any]
    adapter_context: dict[str, Any]

    def identity(self) -> list[Any]:
        """The contexts as exact, JSON-ready data: equal identities render equal text."""
        return [_exact(self.kernel_context), _exact(self.adapter_context)]

    def with_sources(self, cuda_source: str, adapter_source: str) -> Generated:
        return Generated(
            entry=self.entry,
            cuda_source=cuda_source,
            adapter_source=adapter_source,
            body=self.body,
            body_file=self.body_file,
            abi=self.abi,
            struct_format=self.struct_format,
            decisions=self.decisions,
        )

    def render(self) -> Generated:
        return self.with_sources(
            render(KERNEL_TEMPLATE, **self.kernel_context), render(ADAPTER_TEMPLATE, **self.adapter_context)
        )


def _exact(value: Any) -> Any:
    """``value`` as JSON-ready data that keeps every distinction a template can see (tuple from
    list, int from bool and float, an Expr's tree); TypeError for any other type, so that no
    context value can be encoded ambiguously."""
    kind = type(value)
    if kind in (str, int, bool) or value is None:
        return value
    if kind is float:
        return ["float", value.hex()]
    if kind in (list, tuple):
        return [kind.__name__, *(_exact(v) for v in value)]
    if kind is dict:
        return ["dict", *([_exact(k), _exact(v)] for k, v in value.items())]
    if kind is Expr:
        return ["Expr", value.op, _exact(value.args)]
    raise TypeError(f"cannot key a template context holding a {kind.__name__}")


def plan(spec: Specialization, body: Callable[..., Any]) -> Plan:
    """Call the body and decide everything the templates are given; renders nothing."""
    sig = spec.signature
    body_text, decisions = call_body(spec, body)
    entry = f"kd_{sig.name}"
    body_file = f"{sig.name}.body"
    slots = _slots(spec)
    struct_format = "<" + "".join(s["code"] for s in slots)
    kernel_context = {
        "name": sig.name,
        "arch": spec.arch,
        "index_bits": spec.index_bits,
        "index_ctype": "int" if spec.index_bits == 32 else "long long",
        "uses_half": _uses(spec, "float16"),
        "uses_bfloat16": _uses(spec, "bfloat16"),
        "type_vars": [(v, ELEMENT_TYPES[t].ctype) for v, t in spec.type_vars],
        "consts": [_const_decl(n, v) for n, v in spec.consts],
        "fixed_symbols": [{"name": s, "value": _int_literal(v)} for s, v in spec.fixed_symbols],
        "entry": entry,
        "params": [{"decl": s["decl"]} for s in slots],
        "arrays": [{"name": a.name, "shape": [str(d) for d in a.shape]} for a in sig.arrays if not a.strided],
        "body_file": body_file,
        "body": body_text,
    }
    adapter_context = {
        "name": sig.name,
        "arch": spec.arch,
        "index_bits": spec.index_bits,
        "struct_format_literal": repr(struct_format),
        "converters": sorted({s["converter"] for s in slots if s["converter"]}),
        "runtime_names": [p.name for p in sig.runtime_params],
        "arrays": [_adapter_array(a) for a in sig.arrays],
        "alias_checks": [] if sig.allow_alias else alias_pairs(sig),
        "strided": [a.name for a in sig.arrays if a.strided],
        "symbol_binds": symbol_binds(spec),
        "shape_checks": shape_checks(spec),
        "dim_values": _dim_values(spec),
        "grid": _pad3(sig.grid),
        "block": _pad3(sig.block),
        "shared": sig.shared,
        "conversions": [{"name": s["name"], "value": s["conversion"]} for s in slots if "conversion" in s],
        "pack_values": [s["value"] for s in slots],
    }
    return Plan(
        entry=entry,
        body=body_text,
        body_file=body_file,
        abi=tuple((s["name"], s["ctype"]) for s in slots),
        struct_format=struct_format,
        decisions=decisions,
        kernel_context=kernel_context,
        adapter_context=adapter_context,
    )


def generate(spec: Specialization, body: Callable[..., Any]) -> Generated:
    return plan(spec, body).render()


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
            if p.strided:  # element strides of a view, read from its byte strides at launch
                for axis in range(len(p.shape)):
                    name = f"{p.name}_stride{axis}"
                    value = f"a_{p.name}.strides[{axis}] // {et.numpy.itemsize}"
                    slots.append(_slot(name, "long long", f"long long {name}", "q", value, None))
        else:
            value, converter = scalar_conversion(et, f"a_{p.name}")
            slot = _slot(p.name, et.ctype, f"{et.ctype} {p.name}", et.pack, f"v_{p.name}", converter)
            slots.append({**slot, "conversion": value})
    fixed = dict(spec.fixed_symbols)
    index_code = "i" if spec.index_bits == 32 else "q"
    for s in spec.signature.symbols:
        if s not in fixed:
            slots.append(_slot(s, "index_t", f"index_t {s}", index_code, f"s_{s}", None))
    return slots


def scalar_conversion(et: ElementType, arg: str) -> tuple[str, str | None]:
    """The adapter's one conversion of scalar argument ``arg`` to the plain value it packs, and
    the runtime converter that expression calls (None: a builtin). It runs before the adapter
    reads any array, since a conversion may run user code (``__index__``, ``__float__``).

    The value is what ``struct`` would take from ``arg`` for the slot's format, so both launch
    paths still pack every scalar alike: ``operator.index`` for integers, ``math.ldexp(x, 0)``
    (``PyFloat_AsDouble``, no parsing of strings as ``float()`` does) for floats, truth for
    bool; exact ints and floats pass as they are.
    """
    if et.name == "bfloat16":
        return f"to_bfloat16_bits({arg})", "to_bfloat16_bits"
    if et.name == "bool":
        return f"True if {arg} else False", None
    if et.kind == "f":
        return f"{arg} if type({arg}) is float else ldexp({arg}, 0)", "ldexp"
    return f"{arg} if type({arg}) is int else index({arg})", "index"


def _slot(name: str, ctype: str, decl: str, code: str, value: str, converter: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "ctype": ctype,
        "decl": decl,
        "code": _slot_code(code),
        "value": value,
        "converter": converter,
    }


def _const_decl(name: str, value: Any) -> dict[str, str]:
    if isinstance(value, bool):
        return {"name": name, "ctype": "bool", "literal": "true" if value else "false"}
    if isinstance(value, int):
        return {"name": name, "ctype": "long long", "literal": f"{_int_literal(value)}LL"}
    return {"name": name, "ctype": "double", "literal": _float_literal(float(value))}


def _int_literal(value: int) -> str:
    """The exact int's spelling: an int subclass's own ``__str__``/``__repr__`` never reaches the source."""
    return repr(operator.index(value))


def _float_literal(value: float) -> str:
    """An exact C++17 constant: hex floats round-trip every finite double; infinities and NaN
    (which NVRTC has no constexpr builtin for) are spelled by their bits."""
    if math.isfinite(value):
        return value.hex()
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return f"__builtin_bit_cast(double, 0x{bits:016x}ULL)"


def _adapter_array(a: ArrayParam) -> dict[str, Any]:
    return {"name": a.name, "ndim": len(a.shape), "shape_text": str(a.shape).replace("'", ""), "writes": a.writes}


def alias_pairs(sig: Signature) -> list[tuple[str, str]]:
    arrays = sig.arrays
    return [(a.name, b.name) for i, a in enumerate(arrays) for b in arrays[i + 1 :] if a.writes or b.writes]


def symbol_binds(spec: Specialization) -> list[dict[str, Any]]:
    fixed = dict(spec.fixed_symbols)
    return [
        {"symbol": s, "array": param, "axis": axis}
        for s, (param, axis) in spec.signature.symbols.items()
        if s not in fixed
    ]


def shape_checks(spec: Specialization) -> list[dict[str, Any]]:
    fixed = dict(spec.fixed_symbols)
    checks = []
    for a in spec.signature.arrays:
        for axis, d in enumerate(a.shape):
            if isinstance(d, int):
                expected = operator.index(d)
                checks.append({"array": a.name, "axis": axis, "expected": expected, "what": "its fixed extent"})
            elif d in fixed:
                expected = operator.index(fixed[d])
                checks.append({"array": a.name, "axis": axis, "expected": expected, "what": f"specialized {d}"})
            elif spec.signature.symbols[d] != (a.name, axis):
                checks.append({"array": a.name, "axis": axis, "expected": f"s_{d}", "what": d})
    return checks


def _dim_values(spec: Specialization) -> dict[str, str]:
    """How the adapter spells each name a launch dimension may use: symbols and int constants."""
    values = {s: f"s_{s}" for s in spec.signature.symbols}
    values.update({s: _int_literal(v) for s, v in spec.fixed_symbols})
    ints = {c.name for c in spec.signature.consts if c.type is int}
    values.update({n: _int_literal(v) for n, v in spec.consts if n in ints})
    return values


def _pad3(dims: tuple[Expr, ...]) -> tuple[Expr, ...]:
    return dims + (Expr("int", (1,)),) * (3 - len(dims))


def launch_dims(sig: Signature) -> tuple[Expr, ...]:
    """The seven launch values in order: grid x, y, z, block x, y, z, shared bytes."""
    return (*_pad3(sig.grid), *_pad3(sig.block), sig.shared)
