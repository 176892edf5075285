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

from .._version import __version__
from ..dtypes import ELEMENT_TYPES, ElementType
from ..errors import DeclarationError, ProxyAttributeError
from ..installed import dist_info_pattern, first_version
from ..runtime.limits import MAX_INDEX32_THREADS
from .body_checks import check_body
from .device_code import NO_DEVICE_CODE, DeviceCode
from .headers import hoist_includes
from .launch_contract import SLOT_BYTES, LaunchContract, Slot, launch_contract
from .prelude import prelude_parts
from .signature import ArrayParam, Expr, ScalarParam, extent_c_text
from .source_lines import LineMap, locate_body
from .specialize import Specialization
from .template_options import COMPILED_DIR, make_environment

if TYPE_CHECKING:
    import jinja2


def templates_dir() -> Path:
    """Installed wheels carry the templates inside the package; a checkout has them at the top."""
    package = Path(__file__).parent.parent
    packaged = package / "templates"
    return packaged if packaged.is_dir() else package.parent / "templates"


def compiled_templates_dir() -> Path:
    """Where the templates' compiled code is kept (``template_cache``): beside them."""
    return templates_dir() / COMPILED_DIR


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """Jinja, imported on the first render; each template's compiled code comes from the code
    cache when it was compiled from the template's current source."""
    import jinja2

    from .template_cache import TemplateCodeCache

    loader = jinja2.FileSystemLoader(str(templates_dir()))
    cache = TemplateCodeCache(str(compiled_templates_dir()))
    environment: jinja2.Environment = make_environment(
        jinja2, loader, undefined=jinja2.StrictUndefined, bytecode_cache=cache
    )
    return environment


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(version=__version__, **context)


def template_macros(template: str) -> Any:
    """The macros of ``template``, as attributes (templates whose text is assembled piece by piece)."""
    return _environment().get_template(template).module


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
    """Hash of every top-level template, what cached builds are rendered from: a changed template
    must change every cache key. Templates in subfolders render host Python that no cache stores
    (``torch/``: kd.torch's warm calls, made when an operator is registered), so editing them
    leaves every compiled kernel valid."""
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
        self.shape: tuple[str, ...] = tuple(extent_c_text(d) for d in param.shape)
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
class GeneratedBody:
    """A body function's result when it also reports what it chose (kerneldsl's own kernels).
    ``decisions`` is its maker's frozen record, kept on the Build (``Build.decisions``) for tests
    and users to read; the compile pipeline carries it and never reads it."""

    text: str
    decisions: object


def call_body(spec: Specialization, body: Callable[..., Any]) -> tuple[str, object, LineMap | None]:
    """The body's text (dedented, outer blank lines dropped), its decisions (None for a plain
    string), and where each of its lines sits in the user's file when the body function returned
    one of its own string literals (``source_lines``; kerneldsl's generated bodies are never placed)."""
    result = body(**body_arguments(spec))
    text, decisions = (result.text, result.decisions) if isinstance(result, GeneratedBody) else (result, None)
    if not isinstance(text, str):
        raise DeclarationError(
            spec.signature.name, None, f"the body function must return the CUDA body as str, got {type(text).__name__}"
        )
    check_body(spec.signature, body, text)
    dedented = textwrap.dedent(text)
    stripped = dedented.strip("\n")
    placed = None if isinstance(result, GeneratedBody) else locate_body(body, text)
    if placed is not None:  # body line k is the returned string's line k - 1 + (blank lines dropped above)
        first = len(dedented) - len(dedented.lstrip("\n"))
        placed = LineMap(placed.filename, placed.lines[first : first + stripped.count("\n") + 1])
    return stripped, decisions, placed


def body_segments(body: str, body_file: str, placed: LineMap | None) -> list[dict[str, Any]]:
    """The body as runs of lines, each run under one ``#line`` directive: a line placed in the
    user's file is numbered there, any other line by its place in ``<kernel>.body``. A blank line
    continues the run it is in (it holds nothing to number), so no run starts blank."""
    runs: list[dict[str, Any]] = []
    next_line: tuple[str, int] | None = None
    for k, text in enumerate(body.split("\n"), start=1):
        at = placed.lines[k - 1] if placed is not None and k <= len(placed.lines) else None
        where = (placed.filename, at) if placed is not None and at is not None else (body_file, k)
        if runs and (where == next_line or not text.strip()):
            runs[-1]["lines"].append(text)
            assert next_line is not None
            next_line = (next_line[0], next_line[1] + 1)
            continue
        runs.append({"file": where[0], "line": where[1], "lines": [text]})
        next_line = (where[0], where[1] + 1)
    return [{"file": r["file"], "line": r["line"], "text": "\n".join(r["lines"])} for r in runs]


def number_generated_lines(source: str, generated_file: str) -> str:
    """The kernel template marks where numbering returns to the generated file with
    ``#line 0 "<generated file>"`` (a template cannot count its own lines); each mark becomes
    the true number of the line after it, so a report on generated code names that line."""
    mark = f'#line 0 "{generated_file}"'
    if mark not in source:
        return source
    lines = source.split("\n")
    return "\n".join(f'#line {i + 2} "{generated_file}"' if line == mark else line for i, line in enumerate(lines))


# --- the generated pair ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """Everything code generation produced for one specialization."""

    entry: str
    cuda_source: str
    adapter_source: str
    body: str
    body_file: str
    launch: LaunchContract  # what both launch paths check, compute and pack
    decisions: object  # GeneratedBody.decisions, None for a plain string body
    body_places: tuple[tuple[str, int], ...] = ()  # (file, line) the #line directives give each body line

    @property
    def abi(self) -> tuple[tuple[str, str], ...]:
        """(parameter, C type) in launch order."""
        return self.launch.abi

    @property
    def struct_format(self) -> str:
        return self.launch.struct_format

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
class RenderInputs:
    """What code generation decided for one specialization before any template is rendered: the
    two templates' contexts and the launch contract they and the C path come from. Rendering is a
    pure function of the templates and these contexts, so a disk hit can take the text stored
    under ``identity()`` and never import Jinja."""

    entry: str
    body: str
    body_file: str
    launch: LaunchContract
    decisions: object  # GeneratedBody.decisions, None for a plain string body
    kernel_context: dict[str, Any]
    adapter_context: dict[str, Any]
    includes: tuple[str, ...] = ()  # what the body's and device functions' #include lines name
    body_places: tuple[tuple[str, int], ...] = ()  # (file, line) the #line directives give each body line

    @property
    def abi(self) -> tuple[tuple[str, str], ...]:
        return self.launch.abi

    @property
    def struct_format(self) -> str:
        return self.launch.struct_format

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
            launch=self.launch,
            decisions=self.decisions,
            body_places=self.body_places,
        )

    def render(self) -> Generated:
        cuda_source = render(KERNEL_TEMPLATE, **self.kernel_context)
        return self.with_sources(
            number_generated_lines(cuda_source, self.kernel_context["generated_file"]),
            render(ADAPTER_TEMPLATE, **self.adapter_context),
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


def render_inputs(spec: Specialization, body: Callable[..., Any], code: DeviceCode = NO_DEVICE_CODE) -> RenderInputs:
    """Call the body and decide everything the templates are given; renders nothing. The body's
    and device functions' ``#include`` lines move to file scope (blanked where they were)."""
    sig = spec.signature
    body_text, decisions, placed = call_body(spec, body)
    body_text, includes = hoist_includes(body_text)
    functions = []
    for function in code.ordered():
        text, more = hoist_includes(textwrap.dedent(function.text).strip("\n"))
        functions.append({"name": function.name, "text": text})
        includes += more
    entry = f"kd_{sig.name}"
    body_file = f"{sig.name}.body"
    launch = launch_contract(spec)
    restrict = "" if sig.allow_alias else " __restrict__"
    uses_complex = _uses(spec, "complex64") or _uses(spec, "complex128")
    segments = body_segments(body_text, body_file, placed)
    kernel_context = {
        "name": sig.name,
        "arch": spec.arch,
        "index_bits": spec.index_bits,
        "index_ctype": "int" if spec.index_bits == 32 else "long long",
        "uses_half": _uses(spec, "float16"),
        "uses_bfloat16": _uses(spec, "bfloat16"),
        "uses_complex": uses_complex,
        **prelude_parts([body_text, *(f["text"] for f in functions)], uses_complex),
        "complex_scalars": [
            {"name": s.param, "ctype": ELEMENT_TYPES[s.element].ctype, "parts": (s.name, imag.name)}
            for s, imag in zip(launch.slots, launch.slots[1:])
            if s.part == "real"
        ],
        "type_vars": [(v, ELEMENT_TYPES[t].ctype) for v, t in spec.type_vars],
        "consts": [_const_decl(n, v) for n, v in spec.consts],
        "fixed_symbols": [{"name": s, "value": _int_literal(v)} for s, v in spec.fixed_symbols],
        "entry": entry,
        "params": [{"decl": _decl(s, restrict), "ctype": s.ctype} for s in launch.slots],
        "arrays": [{"name": a.name, "shape": [extent_c_text(d) for d in a.shape]} for a in sig.arrays if not a.strided],
        "generated_file": f"{entry}.cu",  # the name NVRTC compiles it under
        "body_segments": segments,
        "includes": list(dict.fromkeys(includes)),
        "device_functions": functions,
    }
    return RenderInputs(
        entry=entry,
        body=body_text,
        body_file=body_file,
        launch=launch,
        decisions=decisions,
        kernel_context=kernel_context,
        adapter_context=adapter_context(launch, spec.arch),
        includes=tuple(dict.fromkeys(includes)),
        body_places=tuple((s["file"], s["line"] + i) for s in segments for i in range(s["text"].count("\n") + 1)),
    )


def adapter_context(launch: LaunchContract, arch: str) -> dict[str, Any]:
    """The host adapter template's context: ``launch`` as plain data (``RenderInputs.identity``
    keys it), which the template spells as Python."""
    return {
        "name": launch.kernel,
        "arch": arch,
        "index_bits": launch.index_bits,
        "max_index32_threads": MAX_INDEX32_THREADS,
        "struct_format_literal": repr(launch.struct_format),
        "runtime_names": list(launch.params),
        "arrays": [
            {"name": a.name, "ndim": a.ndim, "shape_text": a.shape_text, "writes": a.writes} for a in launch.arrays
        ],
        "alias_checks": list(launch.aliases),
        "strided": [a.name for a in launch.arrays if a.strided],
        "symbol_binds": [{"symbol": b.symbol, "array": b.array, "axis": b.axis} for b in launch.binds],
        "shape_checks": [
            {"array": c.array, "axis": c.axis, "value": c.value, "symbol": c.symbol, "what": c.what, "expr": c.expr}
            for c in launch.checks
        ],
        "constants": dict(launch.constants),
        "grid": launch.dims[0:3],
        "block": launch.dims[3:6],
        "shared": launch.dims[6],
        "cooperative": launch.cooperative,
        "cluster": launch.cluster,
        "conversions": [
            {"name": s.param, "kind": s.conversion} for s in launch.slots if s.source == "scalar" and s.part != "imag"
        ],
        "slots": [
            {"source": s.source, "param": s.param, "axis": s.axis, "itemsize": s.itemsize, "part": s.part}
            for s in launch.slots
        ],
    }


def generate(spec: Specialization, body: Callable[..., Any], code: DeviceCode = NO_DEVICE_CODE) -> Generated:
    return render_inputs(spec, body, code).render()


def _uses(spec: Specialization, type_name: str) -> bool:
    return any(t == type_name for _, t in spec.param_types) or any(t == type_name for _, t in spec.type_vars)


def _decl(slot: Slot, restrict: str) -> str:
    """The kernel's C parameter for ``slot``; array pointers are ``__restrict__`` unless aliasing is allowed."""
    return f"{slot.ctype}{restrict if slot.source == 'pointer' else ''} {slot.name}"


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
