"""Disk-cache keys: stable across processes, sensitive to every input that shapes the image, including
where the user's body is spelled (the ``#line`` directives name its file and lines, which the image
carries)."""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
import kerneldsl.jit.build
import kerneldsl.jit.codegen
from kerneldsl.cache import cache_key
from kerneldsl.jit.build import SOURCE_OUTPUT, fingerprint, key_material
from kerneldsl.jit.codegen import generate
from kerneldsl.jit.compiler import build_options
from kerneldsl.jit.specialize import Specialization, bind_declared

REPO = Path(__file__).resolve().parents[1]
THIS_FILE = str(Path(__file__).resolve())

KERNEL_SCRIPT = '''
import numpy as np
import kerneldsl as kd

@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def axpb(y: kd.Out["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"], B: kd.Const[int] = 3):
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {a} * {x}[i] + (T)B;
    """
'''

MAIN = """
if __name__ == "__main__":
    import hashlib, sys
    mode = sys.argv[1]
    if mode == "forbid-nvrtc":
        import kerneldsl.jit.build, kerneldsl.jit.compiler

        def refuse(*args, **kwargs):
            raise RuntimeError("NVRTC called")

        kerneldsl.jit.compiler.compile_source = refuse
        kerneldsl.jit.build.compile_source = refuse
    b = axpb.compile(T=np.float32, arch="sm_90")
    print("key", b.cache_key)
    print("origin", b.origin)
    print("cubin", hashlib.sha256(b.cubin).hexdigest())
    if mode == "forbid-nvrtc":
        try:
            axpb.compile(T=np.float32, arch="sm_80")
        except RuntimeError as exc:
            print("miss", exc)
"""


def write_script(directory: Path, leading_blank_lines: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "axpb_kernel.py"
    path.write_text("\n" * leading_blank_lines + KERNEL_SCRIPT + MAIN)
    return path


def load_script(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"kd_script_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(path: Path, mode: str, cache_dir: Path, hash_seed: str = "0") -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        KERNELDSL_CACHE_DIR=str(cache_dir),
        PYTHONHASHSEED=hash_seed,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    result = subprocess.run(
        [sys.executable, str(path), mode], env=env, cwd=str(path.parent), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


# --- key computation without NVRTC ---------------------------------------------------------------------


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def scaled(y: kd.Out["T", "n"], x: kd.In["T", "n"], K: kd.Const[int] = 2) -> str:
    return f"if (threadIdx.x < n) {y}[threadIdx.x] = {x}[threadIdx.x] * (T)K;"


def spec_of(kernel: kd.Kernel = scaled, arch: str = "sm_90", T: Any = np.float32, **consts: Any) -> Specialization:
    return bind_declared(kernel.signature, {"T": T}, consts, arch)


def material_of(
    spec: Specialization | None = None,
    body: Callable[..., str] = scaled.body,
    options: tuple[str, ...] = (),
    output: str = "cubin",
) -> dict[str, Any]:
    spec = spec or spec_of()
    return key_material(spec, generate(spec, body), build_options(spec.arch, output, options), output)


def key_of(**kwargs: Any) -> str:
    return cache_key(material_of(**kwargs))


def test_key_is_sha256_of_canonical_json() -> None:
    material = material_of()
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert key_of() == hashlib.sha256(canonical).hexdigest()


def test_key_is_stable_within_a_process() -> None:
    assert key_of() == key_of()


def test_material_holds_every_documented_component() -> None:
    material = material_of()
    assert set(material) >= {"format", "fingerprint", "source", "abi", "options", "nvrtc", "arch", "output"}
    assert material["fingerprint"].startswith(kd.__version__ + "+")


def test_key_changes_with_options() -> None:
    assert key_of(options=("-DX=1",)) != key_of()
    assert key_of(options=("-DX=1",)) != key_of(options=("-DX=2",))


def test_key_changes_with_arch() -> None:
    assert key_of(spec=spec_of(arch="sm_80")) != key_of(spec=spec_of(arch="sm_90"))


def test_key_changes_with_output_kind() -> None:
    assert key_of(output="ptx") != key_of(output="cubin")


def test_key_changes_with_dtype() -> None:
    assert key_of(spec=spec_of(T=np.float64)) != key_of(spec=spec_of(T=np.float32))


def test_key_changes_with_constant_value() -> None:
    assert key_of(spec=spec_of(K=3)) != key_of(spec=spec_of(K=2))
    assert key_of(spec=spec_of(K=2)) == key_of()  # the default is the value 2


def test_key_changes_with_index_width() -> None:
    wide = bind_declared(scaled.signature, {"T": np.float32}, {}, "sm_90", index_width=64)
    assert key_of(spec=wide) != key_of()


def test_key_changes_with_body_source() -> None:
    def other_body(**params: Any) -> str:
        return scaled.body(**params).replace("(T)K", "(T)(K + 1)")

    assert key_of(body=other_body) != key_of()


def test_key_changes_with_where_the_body_is_spelled() -> None:
    """The same text from a function that does not spell it is numbered in ``scaled.body``, not at
    this file's line: other source, so another key."""

    def same_body(**params: Any) -> str:
        return scaled.body(**params)

    assert key_of(body=same_body) != key_of()


# --- templates --------------------------------------------------------------------------------------------


def _clear_template_caches() -> None:
    kerneldsl.jit.codegen._environment.cache_clear()
    kerneldsl.jit.codegen.template_digest.cache_clear()
    kerneldsl.jit.build.fingerprint.cache_clear()


@pytest.fixture
def template_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point code generation at an editable copy of the templates; call the result after editing."""
    copy = tmp_path / "templates"
    shutil.copytree(kerneldsl.jit.codegen.templates_dir(), copy)
    monkeypatch.setattr(kerneldsl.jit.codegen, "templates_dir", lambda: copy)
    _clear_template_caches()
    yield copy
    monkeypatch.undo()
    _clear_template_caches()


def test_template_digest_hashes_names_and_contents_of_every_template(template_copy: Path) -> None:
    original = REPO / "templates"
    assert kerneldsl.jit.codegen.template_digest() == _digest_of(original)


def _digest_of(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.j2")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def test_key_changes_with_kernel_template_content(template_copy: Path) -> None:
    before = material_of()
    cu = template_copy / "kernel.cu.j2"
    cu.write_text(cu.read_text() + "// a template change\n")
    _clear_template_caches()
    after = material_of()
    assert after["source"] != before["source"]
    assert after["fingerprint"] != before["fingerprint"]
    assert cache_key(after) != cache_key(before)


def test_key_changes_with_adapter_template_content(template_copy: Path) -> None:
    # the CUDA source stays the same: only the fingerprint can tell
    before = material_of()
    adapter = template_copy / "adapter.py.j2"
    adapter.write_text(adapter.read_text() + "# a template change\n")
    _clear_template_caches()
    after = material_of()
    assert after["source"] == before["source"]
    assert after["fingerprint"] != before["fingerprint"]
    assert cache_key(after) != cache_key(before)


def test_editing_the_torch_warm_call_template_keeps_every_key(template_copy: Path) -> None:
    # kd.torch's warm calls are Python made at registration, never stored in a cache
    before = material_of()
    warm = template_copy / "torch" / "warm.py.j2"
    warm.write_text(warm.read_text() + "# a template change\n")
    _clear_template_caches()
    assert material_of() == before


def test_fingerprint_is_cached_until_cleared(template_copy: Path) -> None:
    first = fingerprint()
    (template_copy / "prelude.cuh.j2").write_text("// changed\n")
    assert fingerprint() == first
    _clear_template_caches()
    assert fingerprint() != first


_JIT = Path(kerneldsl.jit.build.__file__).parent


@pytest.mark.parametrize("module", sorted(str(p.relative_to(_JIT)) for p in _JIT.rglob("*.py")))
def test_a_change_to_any_module_of_the_compile_pipeline_changes_the_fingerprint(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change to any part of a declaration's rules or of code generation must change every key
    (the modules are found, never listed: a new one counts at once)."""
    changed, read = _JIT / module, Path.read_bytes
    _clear_template_caches()
    before = fingerprint()
    monkeypatch.setattr(Path, "read_bytes", lambda path: read(path) + (b"# changed\n" if path == changed else b""))
    _clear_template_caches()
    after = fingerprint()
    monkeypatch.undo()
    _clear_template_caches()
    assert after != before


# --- nothing unstable in the material -------------------------------------------------------------------------


def test_material_names_no_path_but_the_directive_of_the_bodys_own_file() -> None:
    material = material_of()
    directive = f'#line {scaled.body.__code__.co_firstlineno + 2} "{THIS_FILE}"'
    assert directive in material["source"].split("\n")
    material["source"] = material["source"].replace(directive, "")
    text = json.dumps(material)
    for forbidden in (THIS_FILE, str(Path(THIS_FILE).parent), str(REPO), Path(THIS_FILE).name, os.getcwd()):
        assert forbidden not in text


def test_key_is_stable_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    a = write_script(tmp_path / "a")
    first = run_script(a, "plain", tmp_path / "cache", hash_seed="1")
    second = run_script(a, "plain", tmp_path / "cache2", hash_seed="2")
    assert first["key"] == second["key"]
    assert first["origin"] == second["origin"] == "nvrtc"
    assert first["cubin"] == second["cubin"]
    # and the same as this process computes for the same declaration
    module = load_script(a)
    spec = bind_declared(module.axpb.signature, {"T": np.float32}, {}, "sm_90")
    assert cache_key(material_of(spec=spec, body=module.axpb.body)) == first["key"]


def test_a_kernel_moved_in_its_file_or_to_another_path_gets_another_key(tmp_path: Path) -> None:
    """Its image names its file and lines (compiler reports, line tables): it is compiled again."""
    keys = set()
    for script in (
        write_script(tmp_path / "a"),
        write_script(tmp_path / "a2", leading_blank_lines=0),
        write_script(tmp_path / "b", leading_blank_lines=25),
    ):
        spec = bind_declared(load_script(script).axpb.signature, {"T": np.float32}, {}, "sm_90")
        keys.add(cache_key(material_of(spec=spec, body=load_script(script).axpb.body)))
    assert len(keys) == 3


# --- disk hits across processes ---------------------------------------------------------------------------------


def test_new_process_hits_the_disk_cache_without_nvrtc(isolated_cache: Path, tmp_path: Path) -> None:
    script = write_script(tmp_path / "kernels")
    compiled_here = load_script(script).axpb.compile(T=np.float32, arch="sm_90")
    assert compiled_here.origin == "nvrtc"
    other = run_script(script, "forbid-nvrtc", isolated_cache)
    assert other["origin"] == "disk"
    assert other["key"] == compiled_here.cache_key
    assert other["cubin"] == hashlib.sha256(compiled_here.cubin).hexdigest()
    assert other["miss"] == "NVRTC called"  # another arch is a miss and reaches the compiler


def test_redeclared_kernel_hits_the_disk_cache_in_process(
    isolated_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(tmp_path / "kernels")
    first = load_script(script).axpb.compile(T=np.float64, arch="sm_80")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("NVRTC must not be reached")

    monkeypatch.setattr(kerneldsl.jit.build, "compile_source", refuse)
    again = load_script(script).axpb.compile(T=np.float64, arch="sm_80")
    assert again is not first
    assert again.origin == "disk"
    assert again.cubin == first.cubin
    assert again.registers == first.registers


_COMPILE_SAXPY = """
import json, sys
import numpy as np
import kerneldsl as kd

@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]):
    return f\"\"\"
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
    \"\"\"

b = saxpy.compile(T=np.float32, arch="sm_90")
print(json.dumps({"key": b.cache_key, "elf": b.cubin[:4] == b"\\x7fELF"}))
"""


def test_four_processes_compiling_one_kernel_leave_one_image_and_one_source_entry(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen([sys.executable, "-c", _COMPILE_SAXPY], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len({r["key"] for r in results}) == 1 and all(r["elf"] for r in results)
    store = kd.cache.DiskCache(tmp_path / "cache")
    try:
        entries = store.entries()
        assert [e.key for e in entries if e.material["output"] == "cubin"] == [results[0]["key"]]
        assert [e.material["output"] for e in entries].count(SOURCE_OUTPUT) == 1
    finally:
        store.close()


# --- what the disk entries say, and what they are trusted with --------------------------------------------


def test_explain_names_the_constant_dtype_and_index_width_that_changed(tmp_path: Path) -> None:
    import dataclasses

    from kerneldsl.cache import DiskCache

    stored = material_of(spec_of(K=128))
    with DiskCache(tmp_path / "cache") as cache:
        cache.put(cache_key(stored), b"image", stored)
        prefix = "miss: nearest entry for kernel 'scaled' differs in: "
        assert cache.explain(material_of(spec_of(K=256))) == prefix + "constant K: 128 -> 256, source"
        assert cache.explain(material_of(spec_of(K=128, T=np.float64))) == (
            prefix + "dtype T: float32 -> float64, abi, source"
        )
        wide = dataclasses.replace(spec_of(K=128), index_bits=64)
        assert cache.explain(material_of(wide)).startswith(prefix + "index width 32 -> 64, ")


@pytest.fixture
def fake_nvrtc(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in compiler recording what it compiled."""
    from kerneldsl.jit.compiler import CompiledCode

    compiled: list[str] = []

    def fake_compile(source: str, name: str, options: Any, output: str = "cubin") -> CompiledCode:
        compiled.append(name)
        return CompiledCode(b"\x7fELF image of " + source.encode(), output, "", 8, 0, 0)

    monkeypatch.setattr(kerneldsl.jit.build, "compile_source", fake_compile)
    return compiled


def build_scaled() -> kerneldsl.jit.build.Build:
    return kerneldsl.jit.build.build(spec_of(), scaled.body, ())


def _image_entry(meta: object, image: bytes = b"\x7fELF cubin") -> bytes:
    text = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return len(text).to_bytes(4, "little") + text + image


_META = {"output": "cubin", "log": "", "registers": 8, "shared_bytes": 0, "spill_bytes": 0, "headers": []}
BAD_IMAGE_ENTRIES = {
    "json-garbage": _image_entry(b"{registers: 8"),
    "wrong-struct": b"\x01\x02",
    "length-past-the-end": (10**6).to_bytes(4, "little") + b"{}",
    "not-an-object": _image_entry([1, 2]),
    "missing-field": _image_entry({k: v for k, v in _META.items() if k != "log"}),
    "extra-field": _image_entry({**_META, "entry": "main"}),
    "registers-as-text": _image_entry({**_META, "registers": "8; rm -rf"}),
    "registers-out-of-range": _image_entry({**_META, "registers": 4096}),
    "registers-a-bool": _image_entry({**_META, "registers": True}),
    "negative-spill": _image_entry({**_META, "spill_bytes": -1}),
    "ptx-in-a-cubin-entry": _image_entry({**_META, "output": "ptx"}),
    "log-not-text": _image_entry({**_META, "log": 5}),
}


@pytest.mark.parametrize("entry", BAD_IMAGE_ENTRIES)
def test_image_entry_with_bad_metadata_is_evicted_and_compiled_again_once(
    fake_nvrtc: list[str], caplog: pytest.LogCaptureFixture, entry: str
) -> None:
    from kerneldsl.cache import get_default_cache

    first = build_scaled()
    get_default_cache().put(first.cache_key, BAD_IMAGE_ENTRIES[entry], first.key_material)  # sealed, digest-valid
    caplog.set_level("WARNING", logger="kerneldsl.cache")
    again = build_scaled()
    assert (again.origin, again.compiled, len(fake_nvrtc)) == ("nvrtc", first.compiled, 2)
    assert len([r for r in caplog.records if r.name == "kerneldsl.cache"]) == 1
    assert build_scaled().origin == "disk"


def test_a_substituted_image_without_the_seal_is_compiled_again_never_loaded(fake_nvrtc: list[str]) -> None:
    import diskcache

    from kerneldsl.cache import get_default_cache, seal
    from kerneldsl.jit.compiler import CompiledCode

    first = build_scaled()
    mallory = CompiledCode(b"MALLORY-CUBIN", "cubin", "", 8, 0, 0).to_bytes()
    forged = seal.pack(first.cache_key, mallory, first.key_material, b"a restored cache's own secret!!!")
    with diskcache.Cache(str(get_default_cache().directory)) as raw:
        raw.set(first.cache_key, forged)
    again = build_scaled()
    assert (again.origin, again.cubin) == ("nvrtc", first.cubin)
