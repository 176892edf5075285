"""Headers and shared device code, compiled for sm_90 with NVRTC (no GPU): the kerneldsl[headers]
wheels give CUB and cooperative groups to a body's ``#include``; a user's ``include_dirs=`` and
every header a build opens are in its cache key (``explain`` names the one that changed); a
``kd.device_function`` is rendered above each kernel that ``uses=`` it and keyed with it."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import (
    DeclarationError,
    ExtraNotInstalledError,
    HeadersNotAvailableError,
    KernelCompileError,
)
from kerneldsl.jit import compiler, headers
from kerneldsl.jit.codegen import render_inputs

ROOT = Path(__file__).parent.parent


def _wheels_installed() -> bool:
    try:
        headers.system_include_dirs()
    except HeadersNotAvailableError:
        return False
    return True


needs_wheels = pytest.mark.skipif(not _wheels_installed(), reason="the kerneldsl[headers] extra is not installed")

X = np.ones(300, np.float32)
OUT = np.zeros(1, np.float32)

CUB_BODY = """
#include <cub/block/block_reduce.cuh>
typedef cub::BlockReduce<float, 128> Reduce;
__shared__ typename Reduce::TempStorage scratch;
float v = 0.f;
for (index_t i = threadIdx.x; i < n; i += 128) v += x[i];
float total = Reduce(scratch).Sum(v);
if (threadIdx.x == 0) out[0] = total;
"""


def _kernel(body: str, **declaration: Any) -> kd.Kernel:
    @kd.kernel(grid=1, block=128, **declaration)
    def total(out: kd.Out["float32", 1], x: kd.In["float32", "n"]) -> str:
        return body

    return total


@needs_wheels
def test_the_headers_extra_gives_cccl_and_the_cuda_runtime_headers() -> None:
    cccl, runtime = headers.system_include_dirs()
    assert os.path.isfile(os.path.join(cccl, "cub", "block", "block_reduce.cuh"))
    assert os.path.isfile(os.path.join(runtime, "cooperative_groups.h"))


@needs_wheels
def test_a_body_including_cub_compiles_and_keys_the_wheels(isolated_cache: Path) -> None:
    build = _kernel(CUB_BODY).inspect(OUT, X, arch="sm_90")
    assert build.origin == "nvrtc" and build.registers is not None
    assert build.key_material["headers"] == {"system": headers.system_identity(), "user": {}}
    assert "nvidia-cuda-cccl" in headers.system_identity()


@needs_wheels
def test_a_body_including_cooperative_groups_compiles(isolated_cache: Path) -> None:
    body = """
    #include <cooperative_groups.h>
    namespace cg = cooperative_groups;
    cg::thread_block block = cg::this_thread_block();
    block.sync();
    if (block.thread_rank() == 0) out[0] = x[0];
    """
    assert _kernel(body).inspect(OUT, X, arch="sm_90").origin == "nvrtc"


@needs_wheels
def test_includes_asks_for_the_wheels_without_an_include_line(isolated_cache: Path) -> None:
    plain = _kernel("out[0] = x[0];")
    asking = _kernel("out[0] = x[0];", includes=("cub",))
    assert plain.inspect(OUT, X, arch="sm_90").key_material["headers"]["system"] is None
    assert asking.inspect(OUT, X, arch="sm_90").key_material["headers"]["system"] == headers.system_identity()


def test_include_lines_move_to_file_scope_and_keep_the_body_lines() -> None:
    text, found = headers.hoist_includes('#include <cub/cub.cuh>\nint a;\n  # include "mine.cuh" // note\nint b;')
    assert found == ("<cub/cub.cuh>", '"mine.cuh"')
    assert text.split("\n") == ["", "int a;", "", "int b;"]


def test_a_user_header_is_keyed_by_its_bytes_and_explain_names_it(isolated_cache: Path, tmp_path: Path) -> None:
    include = tmp_path / "include"
    include.mkdir()
    (include / "scale.cuh").write_text("#define SCALE 2.0f\n")
    body = '#include "scale.cuh"\nout[0] = SCALE * x[0];'
    first = _kernel(body, include_dirs=[include]).inspect(OUT, X, arch="sm_90")
    (include / "scale.cuh").write_text("#define SCALE 3.0f\n")
    kernel = _kernel(body, include_dirs=[str(include)])
    assert "header 0:scale.cuh changed" in kernel.explain(OUT, X, arch="sm_90")
    second = kernel.inspect(OUT, X, arch="sm_90")
    assert second.cache_key != first.cache_key
    assert first.key_material["headers"]["system"] is None  # a user header alone needs no wheels


def test_a_header_that_a_user_header_includes_is_keyed_too(isolated_cache: Path, tmp_path: Path) -> None:
    (tmp_path / "outer.cuh").write_text('#include "detail/inner.cuh"\n')
    (tmp_path / "detail").mkdir()
    (tmp_path / "detail" / "inner.cuh").write_text("#define SCALE 2.0f\n")
    build = _kernel('#include "outer.cuh"\nout[0] = SCALE * x[0];', include_dirs=[tmp_path]).inspect(
        OUT, X, arch="sm_90"
    )
    assert sorted(build.key_material["headers"]["user"]) == ["0:detail/inner.cuh", "0:outer.cuh"]


def _header(path: Path, text: str) -> Path:
    """``path`` holding ``text``, saved a while ago: a header modified once a compile has begun
    is never vouched for (``headers.read_headers``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    an_hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(an_hour_ago, an_hour_ago))
    return path


def _scale(value: float) -> str:
    return f"#define SCALE {value:.1f}f\n"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the working directory ---------------------------------------------------------------------


def test_a_quoted_include_never_reads_the_working_directory(
    isolated_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scale = _header(tmp_path / "include" / "scale.cuh", _scale(2.5))
    _header(tmp_path / "cwd" / "scale.cuh", '#error "read from the working directory"\n')
    monkeypatch.chdir(tmp_path / "cwd")
    body = '#include "scale.cuh"\nout[0] = SCALE * x[0];'
    build = _kernel(body, include_dirs=[scale.parent]).inspect(OUT, X, arch="sm_90", output="ptx")
    assert "0f40200000" in build.ptx  # 2.5f, from the include directory


def test_a_header_only_in_the_working_directory_is_not_found(
    isolated_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _header(tmp_path / "only_here.cuh", "#define SCALE 2.0f\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KernelCompileError, match='cannot open source file "only_here.cuh"') as caught:
        _kernel('#include "only_here.cuh"\nout[0] = SCALE * x[0];').inspect(OUT, X, arch="sm_90")
    assert "kd_total.cu(" in caught.value.log and "kerneldsl-nvrtc" not in caught.value.log  # NVRTC's own name


# --- what the compiler read, checked on a disk hit ----------------------------------------------------


# form -> (files under tmp_path, the body, the file NVRTC reads SCALE from); "->" makes a symlink
INCLUDE_FORMS: dict[str, tuple[dict[str, str], str, str]] = {
    "include MACRO": (
        {"include/scale.cuh": _scale(2.5)},
        '#define SCALE_HEADER "scale.cuh"\n#include SCALE_HEADER\nout[0] = SCALE * x[0];',
        "include/scale.cuh",
    ),
    "a header including through a macro": (
        {"include/outer.cuh": '#define INNER "inner.cuh"\n#include INNER\n', "include/inner.cuh": _scale(2.5)},
        '#include "outer.cuh"\nout[0] = SCALE * x[0];',
        "include/inner.cuh",
    ),
    "a block comment after the name": (
        {"include/scale.cuh": _scale(2.5)},
        '#include "scale.cuh" /* the scale */\nout[0] = SCALE * x[0];',
        "include/scale.cuh",
    ),
    "a line continuation": (
        {"include/scale.cuh": _scale(2.5)},
        '#include \\\n"scale.cuh"\nout[0] = SCALE * x[0];',
        "include/scale.cuh",
    ),
    "a comment before the hash": (
        {"include/scale.cuh": _scale(2.5)},
        '/**/#include "scale.cuh"\nout[0] = SCALE * x[0];',
        "include/scale.cuh",
    ),
    "dot-dot through a symlink": (
        {
            "include/scale.cuh": _scale(5),  # where "lnk/.." would be read as text, not where the OS goes
            "elsewhere/deep/.keep": "",
            "include/lnk": "-> ../elsewhere/deep",
            "elsewhere/scale.cuh": _scale(2.5),
        },
        '#include "lnk/../scale.cuh"\nout[0] = SCALE * x[0];',
        "elsewhere/scale.cuh",
    ),
}


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        if text.startswith("-> "):
            (root / name).symlink_to(text[3:])
        else:
            _header(root / name, text)


@pytest.mark.parametrize("form", sorted(INCLUDE_FORMS))
def test_editing_a_header_the_compiler_read_is_a_miss_however_it_was_included(
    isolated_cache: Path, tmp_path: Path, form: str
) -> None:
    files, body, read = INCLUDE_FORMS[form]
    _plant(tmp_path, {**files, "include/seen.cuh": "// an #include line that the key follows\n"})

    def build() -> Any:
        kernel = _kernel('#include "seen.cuh"\n' + body, include_dirs=[tmp_path / "include"])
        return kernel.inspect(OUT, X, arch="sm_90", output="ptx")

    first = build()
    assert (first.origin, build().origin) == ("nvrtc", "disk")
    assert "0f40200000" in first.ptx  # 2.5f: the value in the file NVRTC reads
    _header(tmp_path / read, _scale(3.5))
    edited = build()
    assert edited.origin == "nvrtc"
    assert "0f40600000" in edited.ptx  # 3.5f
    assert build().origin == "disk"


def test_include_dirs_reach_nvrtc_without_an_include_line_to_follow(isolated_cache: Path, tmp_path: Path) -> None:
    scale = _header(tmp_path / "scale.cuh", _scale(2.5))
    body = '#define SCALE_HEADER "scale.cuh"\n#include SCALE_HEADER\nout[0] = SCALE * x[0];'
    build = _kernel(body, include_dirs=[tmp_path]).inspect(OUT, X, arch="sm_90")
    assert build.compiled.headers == ((str(scale), _sha256(scale)),)


@needs_wheels
def test_a_hit_rereads_only_the_headers_outside_the_wheels(isolated_cache: Path, tmp_path: Path) -> None:
    scale = _header(tmp_path / "scale.cuh", _scale(2.5))
    build = _kernel('#include "scale.cuh"\n' + CUB_BODY, include_dirs=[tmp_path]).inspect(OUT, X, arch="sm_90")
    assert build.compiled.headers == ((str(scale), _sha256(scale)),)


def test_a_header_replaced_by_a_fifo_has_changed_and_is_not_waited_on(tmp_path: Path) -> None:
    scale = _header(tmp_path / "scale.cuh", _scale(2.5))
    recorded = ((str(scale), _sha256(scale)),)
    assert headers.headers_unchanged(recorded)
    scale.unlink()
    os.mkfifo(scale, 0o600)
    assert not headers.headers_unchanged(recorded)


def test_a_header_modified_once_the_compile_began_is_not_vouched_for(tmp_path: Path) -> None:
    scale = tmp_path / "scale.cuh"
    began = time.time_ns()
    scale.write_text(_scale(2.5))
    assert headers.read_headers([str(scale)], began) is None
    assert headers.read_headers([str(_header(scale, _scale(2.5)))], began) == ((str(scale), _sha256(scale)),)


def test_an_image_whose_reads_nvrtc_did_not_report_is_never_served_from_disk(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiler, "_include_trace", lambda path: ())
    first = _kernel("out[0] = x[0];").inspect(OUT, X, arch="sm_90")
    assert first.compiled.headers is None
    assert _kernel("out[0] = x[0];").inspect(OUT, X, arch="sm_90").origin == "nvrtc"


def test_without_the_extra_a_system_include_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import cuda.pathfinder

    monkeypatch.setattr(headers, "first_version", lambda pattern: None)
    monkeypatch.setattr(cuda.pathfinder, "locate_nvidia_header_directory", lambda name: None)
    headers.system_identity.cache_clear()
    try:
        with pytest.raises(HeadersNotAvailableError, match=r"pip install 'kerneldsl\[headers\]'") as caught:
            _kernel(CUB_BODY).inspect(OUT, X, arch="sm_90")
    finally:
        headers.system_identity.cache_clear()
    assert isinstance(caught.value, ExtraNotInstalledError)


@pytest.mark.parametrize(
    "include_dirs",
    [["relative/include"], ["/no/such/kerneldsl/dir"], [__file__], "/usr/include", [3]],
    ids=["relative", "missing", "a-file", "one-str", "not-a-path"],
)
def test_include_dirs_must_be_existing_absolute_directories(include_dirs: Any) -> None:
    with pytest.raises(DeclarationError, match="include"):
        _kernel("out[0] = x[0];", include_dirs=include_dirs)


def test_includes_names_known_header_libraries_only() -> None:
    with pytest.raises(DeclarationError, match="header libraries"):
        _kernel("out[0] = x[0];", includes=("cub/../../etc",))


def test_a_device_function_name_is_a_c_identifier() -> None:
    with pytest.raises(DeclarationError, match="C identifier"):
        kd.device_function("not a name", "__device__ int f() { return 1; }")


def test_uses_takes_device_functions_only() -> None:
    with pytest.raises(DeclarationError, match="device_function"):
        _kernel("out[0] = x[0];", uses=["__device__ float f(float v) { return v; }"])


HALF = kd.device_function("half_of", "__device__ float half_of(float v) { return 0.5f * v; }")
QUARTER = kd.device_function(
    "quarter_of", "__device__ float quarter_of(float v) { return half_of(half_of(v)); }", uses=[HALF]
)


def test_device_functions_render_once_after_those_they_use() -> None:
    kernel = _kernel("out[0] = quarter_of(x[0]) + half_of(x[1]);", uses=[QUARTER, HALF])
    inputs = render_inputs(kernel.specialize(OUT, X, arch="sm_90"), kernel.body, kernel.code)
    assert [f["name"] for f in inputs.kernel_context["device_functions"]] == ["half_of", "quarter_of"]


def test_a_device_function_compiles_into_the_kernel_and_its_text_is_keyed(isolated_cache: Path) -> None:
    body = "out[0] = half_of(x[0]);"
    first = _kernel(body, uses=[HALF]).inspect(OUT, X, arch="sm_90")
    other = kd.device_function("half_of", "__device__ float half_of(float v) { return v / 2.0f; }")
    second = _kernel(body, uses=[other]).inspect(OUT, X, arch="sm_90")
    assert first.origin == second.origin == "nvrtc"
    assert first.cache_key != second.cache_key


def test_a_kernel_ships_with_its_device_code(tmp_path: Path) -> None:
    cloudpickle = pytest.importorskip("cloudpickle")  # how kerneldsl.distributed ships kernels
    kernel = _kernel("out[0] = half_of(x[0]);", uses=[HALF], include_dirs=[tmp_path])
    assert pickle.loads(cloudpickle.dumps(kernel)).code == kernel.code


CUB_HIT = """
import json, sys
import numpy as np
import kerneldsl as kd
@kd.kernel(grid=1, block=128)
def total(out: kd.Out["float32", 1], x: kd.In["float32", "n"]):
    return BODY
b = total.inspect(np.zeros(1, np.float32), np.ones(300, np.float32), arch="sm_90")
loaded = sorted(m for m in ("jinja2", "cuda.bindings.nvrtc", "cuda.pathfinder") if m in sys.modules)
print(json.dumps({"origin": b.origin, "loaded": loaded}))
""".replace("BODY", repr(CUB_BODY))


@needs_wheels
def test_a_disk_hit_of_a_cub_kernel_loads_no_nvrtc_jinja_or_pathfinder(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(tmp_path / "cache")}

    def fresh() -> dict[str, Any]:
        run = subprocess.run([sys.executable, "-c", CUB_HIT], capture_output=True, text=True, cwd=ROOT, env=env)
        assert run.returncode == 0, run.stderr
        result: dict[str, Any] = json.loads(run.stdout)
        return result

    assert fresh()["origin"] == "nvrtc"
    assert fresh() == {"origin": "disk", "loaded": []}
