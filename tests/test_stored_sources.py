"""The rendered text on disk: a build stores its generated CUDA source and adapter under a key made
before rendering (``build.source_material``), so that a disk hit renders no template. Every input
of the text or of the image keeps entries apart: templates, package version, Jinja release, body
source and arch miss the stored text; NVRTC and options miss the stored image. The adapter is
executed, so stored text is used only under this user's seal."""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
import kerneldsl.cache
import kerneldsl.jit.build
import kerneldsl.jit.codegen
import kerneldsl.jit.compiler
from kerneldsl.cache import cache_key, default_secret_path, get_default_cache, signing_key
from kerneldsl.jit.build import SOURCE_OUTPUT, Build, build, source_material
from kerneldsl.jit.codegen import RenderInputs, render_inputs
from kerneldsl.jit.compiler import CompiledCode
from kerneldsl.jit.specialize import Specialization, bind_declared


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scaled(y: kd.Out["T", "n"], x: kd.In["T", "n"], K: kd.Const[int] = 2) -> str:
    return f"if (threadIdx.x < n) {y}[threadIdx.x] = {x}[threadIdx.x] * (T)K;"


def spec_of(arch: str = "sm_90") -> Specialization:
    return bind_declared(scaled.signature, {"T": np.float32}, {}, arch)


class Counts:
    """How often the pipeline rendered templates and compiled (with a stand-in compiler)."""

    def __init__(self) -> None:
        self.renders = 0
        self.compiles = 0


@pytest.fixture
def counts(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    seen = Counts()
    real_render = kerneldsl.jit.codegen.render

    def counting_render(template: str, **context: Any) -> str:
        seen.renders += 1
        return real_render(template, **context)

    def fake_compile(source: str, name: str, options: Any, output: str = "cubin") -> CompiledCode:
        seen.compiles += 1
        return CompiledCode(b"\x7fELF image of " + source.encode(), output, "", 8, 0, 0)

    monkeypatch.setattr(kerneldsl.jit.codegen, "render", counting_render)
    monkeypatch.setattr(kerneldsl.jit.build, "compile_source", fake_compile)
    monkeypatch.setattr(kerneldsl.jit.build, "require_supported", lambda arch: None)
    yield seen
    _clear_identity_caches()


_IDENTITY_CACHES = (
    kerneldsl.jit.codegen.template_digest,
    kerneldsl.jit.codegen.renderer_identity,
    kerneldsl.jit.codegen._environment,
    kerneldsl.jit.build.fingerprint,
    kerneldsl.jit.compiler.nvrtc_identity,
)


def _clear_identity_caches() -> None:
    for cached in _IDENTITY_CACHES:
        cached.cache_clear()


def build_scaled(arch: str = "sm_90", body: Callable[..., str] = scaled.body, options: tuple[str, ...] = ()) -> Build:
    return build(spec_of(arch), body, options)


def test_a_disk_hit_renders_no_template(counts: Counts) -> None:
    first = build_scaled()
    again = build_scaled()
    assert (first.origin, again.origin) == ("nvrtc", "disk")
    assert (counts.renders, counts.compiles) == (2, 1)  # kernel and adapter, once
    assert again.generated == first.generated
    assert again.cache_key == first.cache_key


def test_the_stored_text_is_kept_under_its_own_entry(counts: Counts) -> None:
    build_scaled()
    outputs = sorted(e.material["output"] for e in get_default_cache().entries())
    assert outputs == ["cubin", SOURCE_OUTPUT]


def test_an_image_whose_text_was_evicted_renders_the_text_again(counts: Counts) -> None:
    first = build_scaled()
    inputs = render_inputs(spec_of(), scaled.body)
    material = source_material(spec_of(), inputs)
    get_default_cache().evict(cache_key(material), "test")
    again = build_scaled()
    assert again.origin == "disk" and counts.renders == 4
    assert again.generated == first.generated
    assert build_scaled().origin == "disk" and counts.renders == 4  # stored again


def test_stored_text_of_another_shape_is_rendered_again(counts: Counts) -> None:
    first = build_scaled()
    inputs = render_inputs(spec_of(), scaled.body)
    material = source_material(spec_of(), inputs)
    get_default_cache().put(cache_key(material), b'{"cuda_source": 1}', material)
    again = build_scaled()
    assert counts.renders == 4 and again.generated == first.generated


# --- what keeps entries apart --------------------------------------------------------------------------------


def _other_body(**params: Any) -> str:
    return scaled.body(**params).replace("(T)K", "(T)(K + 1)")


def test_another_arch_misses_text_and_image(counts: Counts) -> None:
    build_scaled()
    assert build_scaled(arch="sm_80").origin == "nvrtc"
    assert (counts.renders, counts.compiles) == (4, 2)


def test_another_body_source_misses_text_and_image(counts: Counts) -> None:
    build_scaled()
    assert build_scaled(body=_other_body).origin == "nvrtc"
    assert (counts.renders, counts.compiles) == (4, 2)


def test_changed_templates_miss_text_and_image(counts: Counts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_scaled()
    copy = tmp_path / "templates"
    shutil.copytree(kerneldsl.jit.codegen.templates_dir(), copy)
    adapter = copy / "adapter.py.j2"  # the adapter alone: the CUDA source stays the same
    adapter.write_text(adapter.read_text() + "# a template change\n")
    monkeypatch.setattr(kerneldsl.jit.codegen, "templates_dir", lambda: copy)
    _clear_identity_caches()
    again = build_scaled()
    assert again.origin == "nvrtc" and again.host_adapter_source.endswith("# a template change\n")
    assert (counts.renders, counts.compiles) == (4, 2)


def test_another_package_version_misses_text_and_image(counts: Counts, monkeypatch: pytest.MonkeyPatch) -> None:
    build_scaled()
    monkeypatch.setattr(kerneldsl.jit.build, "__version__", "99.0")
    kerneldsl.jit.build.fingerprint.cache_clear()
    assert build_scaled().origin == "nvrtc"
    assert (counts.renders, counts.compiles) == (4, 2)


def test_another_jinja_release_misses_the_text(counts: Counts, monkeypatch: pytest.MonkeyPatch) -> None:
    build_scaled()
    monkeypatch.setattr(kerneldsl.jit.codegen, "renderer_identity", lambda: "jinja2 0.1")
    monkeypatch.setattr(kerneldsl.jit.build, "renderer_identity", lambda: "jinja2 0.1")
    assert build_scaled().origin == "disk"  # rendered again, to the same text: the image is found
    assert (counts.renders, counts.compiles) == (4, 1)


def test_another_nvrtc_misses_the_image(counts: Counts, monkeypatch: pytest.MonkeyPatch) -> None:
    build_scaled()
    kerneldsl.jit.compiler.nvrtc_identity.cache_clear()
    monkeypatch.setattr(kerneldsl.jit.compiler, "_wheel_version", lambda: "13.0.1")
    assert build_scaled().origin == "nvrtc"
    assert (counts.renders, counts.compiles) == (2, 2)  # the text is NVRTC's input, shared


def test_other_options_miss_the_image(counts: Counts) -> None:
    build_scaled()
    assert build_scaled(options=("--use_fast_math",)).origin == "nvrtc"
    assert (counts.renders, counts.compiles) == (2, 2)


# --- the key of a plan ----------------------------------------------------------------------------------------


def _with_context(inputs: RenderInputs, **changes: Any) -> RenderInputs:
    return RenderInputs(**{**inputs.__dict__, "adapter_context": {**inputs.adapter_context, **changes}})


def test_plan_identity_tells_apart_what_a_template_can_tell_apart() -> None:
    inputs = render_inputs(spec_of(), scaled.body)
    variants = [1, True, 1.0, "1", [1], (1,), {"1": 1}, None]
    identities = [_with_context(inputs, extra=v).identity() for v in variants]
    assert len({repr(i) for i in identities}) == len(variants)


def test_plan_identity_refuses_a_context_value_it_cannot_key_exactly() -> None:
    inputs = render_inputs(spec_of(), scaled.body)
    with pytest.raises(TypeError, match="int64"):
        _with_context(inputs, extra=np.int64(1)).identity()


def test_source_material_records_every_input_of_the_text() -> None:
    material = source_material(spec_of(), render_inputs(spec_of(), scaled.body))
    components = {"format", "fingerprint", "renderer", "kernel", "arch", "output", "bindings", "abi", "contexts"}
    assert set(material) == components
    assert material["renderer"].startswith("jinja2 ") and material["output"] == SOURCE_OUTPUT


# --- the seal: stored text is executed only if this user's kerneldsl wrote it ---------------------------------


def _forge(inputs: RenderInputs, adapter_source: str, seal: str) -> None:
    """Store, under the real key and material, text that this user's kerneldsl did not write."""
    material = source_material(spec_of(), inputs)
    payload = {"cuda_source": "", "adapter_source": adapter_source, "seal": seal}
    get_default_cache().put(cache_key(material), json.dumps(payload).encode(), material)


def test_stored_text_without_this_users_seal_is_rendered_again_not_run(counts: Counts) -> None:
    first = build_scaled()
    _forge(render_inputs(spec_of(), scaled.body), "raise SystemExit('forged adapter ran')", "0" * 64)
    again = build_scaled()
    assert counts.renders == 4
    assert again.generated == first.generated
    again.launch_factory()  # the rendered adapter, not the forged one


def test_a_cache_sealed_under_another_users_secret_only_misses(
    counts: Counts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_scaled()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "elsewhere"))  # another secret, as on another machine
    again = build_scaled()
    assert (again.origin, counts.renders, counts.compiles) == ("nvrtc", 4, 2)  # neither text nor image trusted
    assert build_scaled().origin == "disk" and counts.renders == 4  # sealed again under this secret


def test_without_a_usable_secret_every_build_renders(
    counts: Counts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    secret = default_secret_path()
    secret.parent.mkdir(parents=True, mode=0o700)
    secret.write_bytes(b"s" * 32)
    secret.chmod(0o622)  # others could have written it
    assert signing_key() is None
    with pytest.warns(RuntimeWarning, match="no usable kerneldsl secret"):
        origins = [build_scaled().origin, build_scaled().origin]
    assert origins == ["nvrtc", "disk"]
    assert counts.renders == 4
    assert [e.material["output"] for e in get_default_cache().entries()] == ["cubin"]


def test_the_secret_is_made_once_private_to_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    key = signing_key()
    path = default_secret_path()
    assert key is not None and len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    kerneldsl.cache.secret._secrets.clear()
    assert signing_key() == key  # read back, not made again


def test_without_a_home_directory_there_is_no_secret_and_builds_still_work(
    counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setattr(Path, "home", no_home)
    assert signing_key() is None
    with pytest.warns(RuntimeWarning, match="no usable kerneldsl secret"):
        origins = [build_scaled().origin, build_scaled().origin]
    assert origins == ["nvrtc", "disk"]
