"""What a fresh process pays before its first result: ``import kerneldsl`` imports nothing heavy,
declaring a kernel imports no build pipeline, and a disk-cache hit neither loads NVRTC nor renders
a template (no Jinja); the compiler's identity in cache keys still tells NVRTC releases apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kerneldsl as kd
from kerneldsl.jit import compiler

ROOT = Path(__file__).parent.parent
HEAVY = ("kerneldsl.", "jinja2", "cuda", "diskcache", "numpy")
LOOKED_FOR = ("jinja2", "cuda.bindings.nvrtc", "kerneldsl.jit.diagnostics", "ml_dtypes")
NOT_AT_DECLARATION = (
    "kerneldsl.jit.build",
    "kerneldsl.jit.codegen",
    "kerneldsl.cache",
    "kerneldsl.jit.diagnostics",
    "diskcache",
    "logging",
    "ml_dtypes",
)

DECLARE_AND_INSPECT = """
import json, sys
import numpy as np
import kerneldsl as kd
@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], a: kd.Scalar["T"]):
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i];"
b = saxpy.inspect(np.ones(4, np.float32), np.ones(4, np.float32), np.float32(1), arch="sm_90")
print(json.dumps({"origin": b.origin, "loaded": sorted(m for m in LOOKED_FOR if m in sys.modules)}))
""".replace("LOOKED_FOR", repr(LOOKED_FOR))

DECLARE = """
import sys
from typing import NewType, TypeVar
import kerneldsl as kd
T = TypeVar("T")
n = NewType("n", int)
@kd.kernel(grid=kd.cdiv(n, 256), block=256, options=["--use_fast_math"], precompile=[{"T": kd.float32}])
def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], a: kd.Scalar[T]) -> str:
    return "y[0] = a;"
print(sorted(m for m in sys.modules if m in NOT_AT_DECLARATION or m.startswith(("jinja2", "cuda"))))
""".replace("NOT_AT_DECLARATION", repr(NOT_AT_DECLARATION))


def _python(code: str, **env: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    return run.stdout


def test_importing_kerneldsl_imports_nothing_heavy() -> None:
    loaded = _python(f"import sys, kerneldsl; print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    assert loaded.strip() == "['kerneldsl._version', 'kerneldsl.array', 'kerneldsl.array.engine']"


def test_every_public_name_resolves() -> None:
    assert set(kd.__all__) == {"__version__", *kd._HOMES}
    assert all(getattr(kd, name) is not None for name in kd.__all__)


def test_declaring_a_kernel_imports_no_build_pipeline_jinja_or_cuda_bindings() -> None:
    assert _python(DECLARE).strip() == "[]"


def test_a_disk_hit_in_a_fresh_process_loads_no_nvrtc_and_renders_no_template(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(tmp_path / "cache")}
    first = json.loads(_python(DECLARE_AND_INSPECT, **env))
    second = json.loads(_python(DECLARE_AND_INSPECT, **env))
    assert (first["origin"], second["origin"]) == ("nvrtc", "disk")
    assert first["loaded"] == ["cuda.bindings.nvrtc", "jinja2"]  # what the check below looks for
    assert second["loaded"] == []


BFLOAT16_FIRST = """
import sys
import numpy as np
from kerneldsl import dtypes
before = "ml_dtypes" in sys.modules
by_name = dtypes.element_type("{spelling}").name if "{spelling}" == "bfloat16" else None
if "{spelling}" == "dtype":
    import ml_dtypes
    by_name = dtypes.element_type(np.dtype(ml_dtypes.bfloat16)).name
if "{spelling}" == "declared":
    import kerneldsl as kd
    @kd.kernel(grid=1, block=1)
    def half(y: kd.Out["bfloat16", 1]) -> str:
        return ""
    by_name = half.signature.params[0].dtype
print(before, by_name)
"""


@pytest.mark.parametrize("spelling", ["bfloat16", "dtype", "declared"])
def test_a_bfloat16_asked_for_first_imports_ml_dtypes_then(spelling: str) -> None:
    assert _python(BFLOAT16_FIRST.format(spelling=spelling)).split() == ["False", "bfloat16"]


def test_another_nvrtc_release_gets_other_cache_keys(monkeypatch: pytest.MonkeyPatch, isolated_cache: Any) -> None:
    import numpy as np

    from kerneldsl.jit.build import key_material
    from kerneldsl.jit.codegen import generate

    @kd.kernel(grid=1, block=1)
    def one(y: kd.Out[kd.float32, 1]) -> str:
        return "y[0] = 1.0f;"

    spec = one.specialize(np.zeros(1, np.float32), arch="sm_90")
    keys = []
    for version in ("13.0.88", "13.5.37"):
        compiler.nvrtc_identity.cache_clear()
        monkeypatch.setattr(compiler, "_wheel_version", lambda v=version: v)
        keys.append(key_material(spec, generate(spec, one.body), (), "cubin")["nvrtc"])
    compiler.nvrtc_identity.cache_clear()
    assert keys == ["nvidia-cuda-nvrtc 13.0.88", "nvidia-cuda-nvrtc 13.5.37"]


def test_without_the_wheel_the_library_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler.nvrtc_identity.cache_clear()
    monkeypatch.setattr(compiler, "_wheel_version", lambda: None)
    try:
        assert compiler.nvrtc_identity() == "nvrtc {}.{}".format(*compiler.nvrtc_version())
    finally:
        compiler.nvrtc_identity.cache_clear()


def test_a_loaded_library_other_than_the_wheel_is_refused_before_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler.nvrtc_identity.cache_clear()
    monkeypatch.setattr(compiler, "_wheel_version", lambda: "12.9.1")
    try:
        with pytest.raises(kd.errors.NvrtcNotFoundError, match="is not the one installed as nvidia-cuda-nvrtc 12.9.1"):
            compiler.compile_source('extern "C" __global__ void k() {}', "k.cu", ("-arch=sm_90",))
    finally:
        compiler.nvrtc_identity.cache_clear()


def test_the_coldstart_bench_reports_every_figure_the_targets_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU benchmark's plumbing, on CPU: scripts stand in with fixed times (seconds printed by
    the script: its marks, then the total)."""
    from kerneldsl.bench import coldstart_bench as bench

    def fake_seconds(script: str, env: dict[str, str]) -> list[float]:
        assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"].endswith("bytecode")
        if script is bench.KERNELDSL:
            warm = env["KERNELDSL_CACHE_DIR"].endswith("cache")
            return [0.25, 0.28, 0.56 if warm else 0.70]
        return {bench.IMPORT_NUMPY: [0.25], bench.IMPORT_KERNELDSL: [0.002], bench.CUPY: [0.7]}.get(script, [0.5])

    monkeypatch.setattr(bench, "_seconds", fake_seconds)
    monkeypatch.setattr(bench, "_floor_script", lambda cache, work: "floor")
    report = bench.measure(runs=3)
    first = report["first numpy result in a fresh process (ms)"]
    assert first == pytest.approx(
        {
            "kerneldsl, warm disk cache": 560,
            "kerneldsl, empty disk cache (NVRTC compiles)": 700,
            "floor: cuda.bindings + prebuilt cubin": 500,
            "CuPy RawKernel, warm kernel cache": 700,
        }
    )
    assert report["kerneldsl, warm disk cache, by phase (ms)"] == pytest.approx(
        {
            "import numpy": 250,
            "import kerneldsl + declare saxpy": 30,
            "first call: session, disk hit, launch, copy": 280,
        }
    )
    assert report["ratios"] == pytest.approx(
        {
            "kerneldsl / floor (target <= 1.15)": 1.12,
            "kerneldsl / CuPy (target <= 0.8)": 0.8,
            "import kerneldsl / import numpy (target <= 1.3)": 0.008,
        }
    )


def test_the_jinja_release_in_keys_is_found_without_importing_jinja() -> None:
    code = "import sys; from kerneldsl.jit.codegen import renderer_identity as r; print(r(), 'jinja2' in sys.modules)"
    import jinja2

    assert _python(code).split() == ["jinja2", jinja2.__version__, "False"]


@pytest.mark.parametrize("spelled", ["jinja2-3.1.6.dist-info", "Jinja2-3.1.6.dist-info"])
def test_a_dist_info_is_matched_in_any_case(spelled: str) -> None:
    from kerneldsl.installed import dist_info_pattern

    found = dist_info_pattern("jinja2").fullmatch(spelled)
    assert found is not None and found.group(1) == "3.1.6"
    assert dist_info_pattern("jinja2").fullmatch("jinja2_extras-1.0.dist-info") is None
