"""One specialization, built: generated sources, cache key, and the compiled image.

``build()`` is the miss path of a process: decide the generated code's render inputs, take its
rendered text from the disk cache (stored under ``source_material``, the inputs' key, and sealed
with this user's secret since the adapter is executed; so a fresh process renders no template and
imports no Jinja) or render it, derive the image's key material from the text, then take the
image from the disk cache or compile it with NVRTC and store both.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import cache as disk_cache
from .. import logs
from .._version import __version__
from ..errors import InvalidCacheEntryError, KernelCompileError
from ..runtime import nvtx
from ..runtime.checks import is_host_output
from ..runtime.host_image import static_shared_bytes
from ..runtime.host_toolchain import HostCompileFailure
from .attributes import Resources, image_resources
from .codegen import Generated, RenderInputs, render_inputs, renderer_identity, template_digest
from .compile_hints import STATIC_SHARED_LIMIT, compile_error_message, static_shared_hint
from .compiler import (
    CompiledCode,
    NvrtcFailure,
    build_options,
    check_options,
    compile_source,
    nvrtc_identity,
    require_supported,
)
from .device_code import NO_DEVICE_CODE, DeviceCode
from .headers import NO_HEADERS, Headers, headers_unchanged, resolve
from .host_compile import compile_host, host_identity, host_options, refuse_unsupported
from .launch_contract import LaunchContract
from .specialize import Specialization

log = logs.get("jit.build")

COMPILED_BY = ("nvrtc", "c++")  # a build's origin when it was compiled: for the GPU, for the CPU device


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """kerneldsl version plus a hash of the templates and the code that decides what is generated:
    every module of this package (the compile pipeline, found, never listed) and the dtype table
    it spells C types from. A change to any of them changes every key."""
    h = hashlib.sha256(template_digest().encode())
    here = Path(__file__).parent
    for path in [*sorted(here.rglob("*.py")), here.parent / "dtypes.py"]:
        h.update(path.relative_to(here.parent).as_posix().encode())
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"


def key_material(
    spec: Specialization, generated: Generated, options: Sequence[str], output: str, headers: Headers = NO_HEADERS
) -> dict[str, Any]:
    """Everything the compiled image depends on, and nothing unstable (no paths, times, pids):
    the headers it includes by the wheels' versions and each user header's digest."""
    return {
        "format": disk_cache.CACHE_FORMAT_VERSION,
        "fingerprint": fingerprint(),
        "kernel": spec.signature.name,
        "source": generated.cuda_source,
        "abi": [list(slot) for slot in generated.abi] + [generated.struct_format],
        "options": list(options),
        **({"host_compiler": host_identity()} if is_host_output(output) else {"nvrtc": nvrtc_identity()}),
        "arch": spec.arch,
        "output": output,
        "bindings": bindings(spec),
        "headers": headers.material(),
    }


def bindings(spec: Specialization) -> dict[str, Any]:
    """The specialization's choices by name, for ``kerneldsl cache list`` and ``explain`` (the
    source already holds them; constants are their repr, shortened)."""
    limit = disk_cache.BINDING_TEXT_LIMIT

    def shown(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."

    return {
        "dtypes": dict(spec.type_vars),
        "constants": {name: shown(value) for name, value in spec.consts},
        "extents": dict(spec.fixed_symbols),
        "aligned": dict(spec.aligned),
        "index_bits": spec.index_bits,
    }


SOURCE_OUTPUT = "source"  # the output named in the key material of stored rendered text
_SOURCE_FIELDS = ("cuda_source", "adapter_source")


def source_material(spec: Specialization, inputs: RenderInputs) -> dict[str, Any]:
    """What the rendered text depends on: the templates and code generation (``fingerprint``), the
    Jinja release, and the templates' contexts, which hold the body, the arch and every decision."""
    return {
        "format": disk_cache.CACHE_FORMAT_VERSION,
        "fingerprint": fingerprint(),
        "renderer": renderer_identity(),
        "kernel": spec.signature.name,
        "arch": spec.arch,
        "output": SOURCE_OUTPUT,
        "bindings": bindings(spec),
        "abi": [list(slot) for slot in inputs.abi] + [inputs.struct_format],
        "contexts": inputs.identity(),
    }


def _seal(secret: bytes, key: str, texts: dict[str, str]) -> str:
    """The HMAC that vouches this user's kerneldsl wrote ``texts`` under ``key``."""
    message = json.dumps([key, [texts[name] for name in _SOURCE_FIELDS]]).encode()
    return hmac.new(secret, message, "sha256").hexdigest()


def _stored_sources(
    store: disk_cache.DiskCache, inputs: RenderInputs, key: str, material: dict[str, Any]
) -> Generated | None:
    """The generated pair stored under ``key``, if sealed with this user's secret (the adapter is
    executed); None on a miss, without a secret, or for a payload of another shape or seal
    (rendered again and stored over it)."""
    secret = disk_cache.signing_key()
    if secret is None:
        return None
    payload = store.get(key, material)
    if payload is None:
        return None
    try:
        stored = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(stored, dict) or sorted(stored) != sorted((*_SOURCE_FIELDS, "seal")):
        return None
    if not all(type(value) is str for value in stored.values()):
        return None
    if not hmac.compare_digest(stored["seal"], _seal(secret, key, stored)):
        return None
    return inputs.with_sources(stored["cuda_source"], stored["adapter_source"])


def _store_sources(store: disk_cache.DiskCache, generated: Generated, key: str, material: dict[str, Any]) -> None:
    secret = disk_cache.signing_key()
    if secret is None:
        return
    texts = {name: getattr(generated, name) for name in _SOURCE_FIELDS}
    payload = {**texts, "seal": _seal(secret, key, texts)}
    store.put(key, json.dumps(payload, sort_keys=True).encode(), material)


def _stored_image(store: disk_cache.DiskCache, key: str, material: dict[str, Any], output: str) -> CompiledCode | None:
    """The image stored under ``key``; None on a miss, for an entry that does not decode
    (evicted, with one warning, and compiled again) or one compiled from a header that has
    changed since (compiled again and stored over it)."""
    payload = store.get(key, material)
    if payload is None:
        return None
    try:
        found = CompiledCode.from_bytes(payload, output)
    except InvalidCacheEntryError as exc:
        store.evict(key, str(exc))
        return None
    return found if headers_unchanged(found.headers) else None


@dataclass(repr=False)
class Build:
    """What ``kernel.inspect()`` returns: the specialization with its sources and image."""

    specialization: Specialization
    generated: Generated
    options: tuple[str, ...]
    key_material: dict[str, Any]
    cache_key: str
    compiled: CompiledCode
    origin: str  # "nvrtc", "c++" (the CPU device's compiler) or "disk": where the image came from
    compile_seconds: float
    _launch_factory: Callable[..., Any] | None = field(default=None, repr=False)
    resources_by_session: dict[int, Resources] = field(default_factory=dict, repr=False)  # by session id

    @property
    def cuda_source(self) -> str:
        return self.generated.cuda_source

    @property
    def host_adapter_source(self) -> str:
        return self.generated.adapter_source

    @property
    def cubin(self) -> bytes:
        if self.compiled.output != "cubin":
            raise ValueError(f"this build holds {self.compiled.output}; inspect with output='cubin' for a cubin")
        return self.compiled.image

    @property
    def image(self) -> bytes:
        """What a session loads: a cubin for a GPU, a shared library for the CPU device."""
        if self.compiled.output == "ptx":
            raise ValueError("this build holds PTX, which no session loads; inspect with output='cubin'")
        return self.compiled.image

    @property
    def ptx(self) -> str:
        if self.compiled.output != "ptx":
            raise ValueError("this build holds a cubin; compile with output='ptx' for PTX")
        return self.compiled.image.rstrip(b"\x00").decode()

    @property
    def log(self) -> str:
        """What NVRTC and ptxas said: warnings, and with ``-Xptxas=-v`` register and memory use."""
        return self.compiled.log

    @property
    def registers(self) -> int | None:
        return self.compiled.registers

    @property
    def shared_bytes(self) -> int | None:
        return self.compiled.shared_bytes

    def resources(self, session: Any = None) -> Resources:
        """The driver's attributes of this image loaded in ``session`` (default: the default
        session): registers, static/const/local bytes, max threads per block, PTX and binary
        versions, max dynamic shared bytes (``kerneldsl.jit.attributes.Resources``)."""
        return image_resources(self.image, self.generated.entry, self.resources_by_session, session)

    @property
    def arch(self) -> str:
        return self.specialization.arch

    @property
    def index_bits(self) -> int:
        """32 or 64: the width of ``index_t`` this specialization was built with."""
        return self.specialization.index_bits

    @property
    def launch_contract(self) -> LaunchContract:
        """The launch contract the adapter was rendered from and the C path's table is made of."""
        return self.generated.launch

    @property
    def decisions(self) -> Any:
        """What the kernel's maker chose for this specialization, a frozen record whose fields are
        the maker's (kerneldsl's array kernels: ``kerneldsl.array.decisions``); None for a kernel
        whose body returned a plain string (a user's kernel)."""
        return self.generated.decisions

    def __repr__(self) -> str:
        """One line: the specialization, the image's size and resources, where it came from and
        the cache key's prefix; the sources, image and log are the attributes of those names."""
        return f"<Build {self.specialization.describe()}: {', '.join(self._summary())}>"

    def _repr_markdown_(self) -> str:
        """A notebook's view: the specialization and the image as a table."""
        spec = self.specialization
        rows = [
            ("kernel", f"`{spec.signature.name}`"),
            ("dtypes", ", ".join(f"{n}: {t}" for n, t in spec.param_types) or "none"),
            ("constants", ", ".join(f"{n}={v!r}" for n, v in spec.consts) or "none"),
            ("index width", f"{spec.index_bits}-bit"),
            ("arch", spec.arch),
            ("image", ", ".join(self._summary()[:-1])),
            ("cache key", f"`{self.cache_key[:12]}`"),
        ]
        table = "\n".join(f"| {name} | {value} |" for name, value in rows)
        return f"**kerneldsl build** of `{spec.signature.name}`\n\n| | |\n|---|---|\n{table}\n"

    def _summary(self) -> list[str]:
        compiled = self.compiled
        parts = [f"{compiled.output} {len(compiled.image)} bytes"]
        if compiled.registers is not None:
            parts.append(f"{compiled.registers} registers")
        if compiled.shared_bytes:
            parts.append(f"{compiled.shared_bytes} bytes shared")
        if compiled.spill_bytes:
            parts.append(f"{compiled.spill_bytes} bytes spilled")
        took = f" in {self.compile_seconds * 1e3:.0f} ms" if self.origin in COMPILED_BY else ""
        parts.append(f"from {self.origin}{took}")
        parts.append(f"key {self.cache_key[:12]}")
        return parts

    def launch_factory(self) -> Callable[..., Any]:
        """``make_launch`` from the generated adapter, executed once per build."""
        if self._launch_factory is None:
            namespace: dict[str, Any] = {}
            code = compile(self.generated.adapter_source, f"<kerneldsl adapter {self.generated.entry}>", "exec")
            exec(code, namespace)
            self._launch_factory = namespace["make_launch"]
        return self._launch_factory


def build(
    spec: Specialization,
    body: Callable[..., Any],
    user_options: Sequence[str],
    output: str = "cubin",
    use_disk: bool = True,
    code: DeviceCode = NO_DEVICE_CODE,
) -> Build:
    inputs = render_inputs(spec, body, code)
    if is_host_output(output):
        refuse_unsupported(inputs.includes)
        options = host_options(check_options(user_options), output)
    else:
        options = build_options(spec.arch, output, user_options)
    headers = resolve(code, inputs.includes)
    store = disk_cache.get_default_cache() if use_disk else None
    texts_material = source_material(spec, inputs)
    texts_key = disk_cache.cache_key(texts_material)
    generated = _stored_sources(store, inputs, texts_key, texts_material) if store is not None else None
    rendered = generated is None
    if generated is None:
        generated = inputs.render()
    material = key_material(spec, generated, options, output, headers)
    key = disk_cache.cache_key(material)
    if store is not None:
        found = _stored_image(store, key, material, output)
        if found is not None:
            log.debug("disk hit %s %s", spec.describe(), key[:12])
            if rendered:
                _store_sources(store, generated, texts_key, texts_material)
            return Build(spec, generated, options, material, key, found, "disk", 0.0)
    start = time.perf_counter()
    compiled = _compile(spec, generated, body, options + headers.options(), output)
    seconds = time.perf_counter() - start
    compiled = replace(compiled, headers=headers.outside_wheels(compiled.headers))
    log.debug("compiled %s in %.1f ms", spec.describe(), seconds * 1e3)
    if store is not None:
        store.put(key, compiled.to_bytes(), material)
        if rendered:
            _store_sources(store, generated, texts_key, texts_material)
    return Build(spec, generated, options, material, key, compiled, COMPILED_BY[is_host_output(output)], seconds)


def _compile(
    spec: Specialization, generated: Generated, body: Callable[..., Any], options: tuple[str, ...], output: str
) -> CompiledCode:
    if not is_host_output(output):
        require_supported(spec.arch)
    try:
        with nvtx.span("compile", spec):
            if is_host_output(output):
                return _within_gpu_limits(
                    spec, generated, compile_host(generated.cuda_source, f"{generated.entry}.cu", options, output)
                )
            return compile_source(generated.cuda_source, f"{generated.entry}.cu", options, output)
    except (NvrtcFailure, HostCompileFailure) as failure:
        from .diagnostics import BodyOrigin, map_log  # only a failed compile maps lines onto the source

        compiler = "the host C++ compiler" if is_host_output(output) else "NVRTC"
        origin = BodyOrigin.of(body)
        mapped = map_log(
            failure.log, generated.body_file, generated.body, origin, generated.cuda_source, generated.body_places
        )
        raise KernelCompileError(
            compile_error_message(compiler, spec.describe(), mapped, failure.log),
            failure.log,
            mapped,
            generated.cuda_source,
            spec.signature.name,
        ) from None


def _within_gpu_limits(spec: Specialization, generated: Generated, compiled: CompiledCode) -> CompiledCode:
    """A CPU-device image, refused as a GPU build would be when its kernel declares more static
    shared memory than any GPU takes, so that what runs on the CPU device compiles for a GPU."""
    used = static_shared_bytes(compiled.image, generated.entry)
    if used is None or used <= STATIC_SHARED_LIMIT:
        return compiled
    message = f"the CPU device refuses {spec.describe()} as a GPU would:\nhint: {static_shared_hint(used)}"
    raise KernelCompileError(message, "", [], generated.cuda_source, spec.signature.name)
