"""NVRTC compilation (no GPU needed): cubin/PTX per arch, arch and option checks, error mapping."""

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_codegen import mask_half, saxpy, scale_rows

import kerneldsl as kd
import kerneldsl.jit.build
from kerneldsl.errors import (
    InvalidArchError,
    InvalidCacheEntryError,
    InvalidOptionError,
    KernelCompileError,
    NoDeviceError,
)
from kerneldsl.jit.codegen import generate
from kerneldsl.jit.compiler import CompiledCode, arch_for_capability, build_options, check_options, normalize_arch
from kerneldsl.jit.target import ARCH_ENV, resolve_arch
from kerneldsl.runtime import driver

THIS_FILE = str(Path(__file__).resolve())
ELF_MAGIC = b"\x7fELF"


def f32(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


@pytest.fixture(scope="module")
def builds(isolated_cache_module: Path) -> dict[str, Any]:
    """Every successful compile of this module, made once."""
    return {
        "saxpy_sm90": saxpy.inspect(f32(10), f32(10), 2.0, arch="sm_90"),
        "saxpy_sm80_f64": saxpy.compile(T=np.float64, arch="sm_80"),
        "saxpy_ptx": saxpy.inspect(f32(10), f32(10), 2.0, arch="sm_90", output="ptx"),
        "scale_rows": scale_rows.inspect(f32(3, 5), f32(3, 5), f32(4), 2, arch="sm_80", EPS=0.5),
        "mask_half": mask_half.inspect(
            np.ones(1000, np.float16), np.ones(1000, np.float16), np.ones(1000, bool), np.float16(0.5), arch="sm_90"
        ),
    }


@pytest.fixture
def no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behave as on a machine without a CUDA driver, whatever this machine has."""
    monkeypatch.setattr(driver, "driver_available", lambda: False)
    monkeypatch.delenv(ARCH_ENV, raising=False)


@pytest.fixture
def nvrtc_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("NVRTC must not be reached")

    monkeypatch.setattr(kerneldsl.jit.build, "compile_source", refuse)


# --- successful compiles ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["saxpy_sm90", "saxpy_sm80_f64", "scale_rows", "mask_half"])
def test_cubin_is_an_elf_image(builds: dict[str, Any], name: str) -> None:
    assert builds[name].cubin.startswith(ELF_MAGIC)


def test_cubin_targets_the_requested_arch(builds: dict[str, Any]) -> None:
    assert builds["saxpy_sm90"].arch == "sm_90"
    assert builds["saxpy_sm80_f64"].arch == "sm_80"
    assert "--gpu-architecture=sm_90" in builds["saxpy_sm90"].options
    assert "--gpu-architecture=sm_80" in builds["saxpy_sm80_f64"].options


def test_ahead_of_time_compile_uses_the_bound_dtype(builds: dict[str, Any]) -> None:
    b = builds["saxpy_sm80_f64"]
    assert "typedef double T;" in b.cuda_source
    assert b.specialization.type_vars == (("T", "float64"),)


def test_ptx_output_on_request(builds: dict[str, Any]) -> None:
    b = builds["saxpy_ptx"]
    assert "--gpu-architecture=compute_90" in b.options
    assert ".target sm_90" in b.ptx
    assert ".entry kd_saxpy" in b.ptx
    with pytest.raises(ValueError):
        _ = b.cubin


def test_cubin_build_has_no_ptx(builds: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _ = builds["saxpy_sm90"].ptx


def test_ptx_and_cubin_have_different_cache_keys(builds: dict[str, Any]) -> None:
    assert builds["saxpy_ptx"].cache_key != builds["saxpy_sm90"].cache_key


@pytest.mark.parametrize("name", ["saxpy_sm90", "scale_rows", "mask_half"])
def test_registers_and_shared_memory_are_reported(builds: dict[str, Any], name: str) -> None:
    b = builds[name]
    assert isinstance(b.registers, int) and 0 < b.registers <= 255
    assert b.shared_bytes == 0


def test_inspect_returns_the_generated_sources(builds: dict[str, Any]) -> None:
    b = builds["saxpy_sm90"]
    g = generate(b.specialization, saxpy.body)
    assert b.cuda_source == g.cuda_source
    assert b.host_adapter_source == g.adapter_source


def test_inspect_reuses_the_in_process_build(builds: dict[str, Any], nvrtc_forbidden: None) -> None:
    assert saxpy.inspect(f32(99), f32(99), 1.0, arch="sm_90") is builds["saxpy_sm90"]


def test_compiled_code_round_trips_through_bytes(builds: dict[str, Any]) -> None:
    compiled = builds["scale_rows"].compiled
    assert CompiledCode.from_bytes(compiled.to_bytes(), compiled.output) == compiled


@pytest.mark.parametrize("headers", [None, (("/inc/scale.cuh", "a" * 64), ("/inc/b c.cuh", "0" * 64))])
def test_the_headers_an_image_was_compiled_from_round_trip_through_bytes(headers: Any) -> None:
    compiled = CompiledCode(b"\x7fELF", "cubin", "", 8, 0, 0, headers)
    assert CompiledCode.from_bytes(compiled.to_bytes(), "cubin") == compiled


@pytest.mark.parametrize(
    "headers",
    [
        [["scale.cuh", "a" * 64]],  # a relative path: read where the process happens to be
        [["/inc/scale.cuh", "A" * 64]],
        [["/inc/scale.cuh", "a" * 63]],
        [["/inc/scale.cuh"]],
        [["/inc/scale.cuh", "a" * 64, "extra"]],
        {"/inc/scale.cuh": "a" * 64},
        "/inc/scale.cuh",
    ],
)
def test_stored_headers_of_another_shape_are_refused(headers: Any) -> None:
    meta = json.dumps(
        {"output": "cubin", "log": "", "registers": 8, "shared_bytes": 0, "spill_bytes": 0} | {"headers": headers}
    ).encode()
    with pytest.raises(InvalidCacheEntryError, match="headers"):
        CompiledCode.from_bytes(len(meta).to_bytes(4, "little") + meta + b"\x7fELF", "cubin")


def test_user_options_reach_nvrtc(isolated_cache: Path) -> None:
    @kd.kernel(grid=1, block=1, options=("-DKD_TEST_VALUE=3", "--use_fast_math"))
    def macro(y: kd.Out["float32", "n"]) -> str:
        return f"""
        #if KD_TEST_VALUE != 3
        #error KD_TEST_VALUE did not arrive
        #endif
        {y}[0] = __expf(1.0f);
        """

    b = macro.inspect(f32(1), arch="sm_90")
    assert b.options[-2:] == ("-DKD_TEST_VALUE=3", "--use_fast_math")
    assert b.cubin.startswith(ELF_MAGIC)


EMPTY_LOG_THEN_JOIN = """
from kerneldsl.jit.compiler import compile_source
compiled = compile_source('extern "C" __global__ void k() {}', "k.cu", ["--gpu-architecture=sm_90"])
assert compiled.log == ""
print(b" ".join([b"a", b"b"]))
"""


def test_reading_an_empty_log_leaves_the_interpreters_bytes_alone(tmp_path: Path) -> None:
    """NVRTC writes a one-byte empty log into the buffer it is given: a fresh interpreter whose
    modules compile from source (a new pycache) shares ``b" "`` with every module, so a bytes
    buffer there would make every later ``b" "`` read ``b"\\x00"``."""
    script = tmp_path / "empty_log.py"
    script.write_text(EMPTY_LOG_THEN_JOIN)
    run = subprocess.run(
        [sys.executable, "-X", f"pycache_prefix={tmp_path / 'pycache'}", str(script)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "b'a b'\n"


# --- arch ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_1", "sm_999", "gfx90a", "sm90", "", "sm_90x"])
def test_invalid_arch_is_rejected_before_nvrtc(nvrtc_forbidden: None, arch: str) -> None:
    with pytest.raises(InvalidArchError):
        saxpy.inspect(f32(4), f32(4), 1.0, arch=arch)


def test_invalid_arch_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="gfx90a"):
        normalize_arch("gfx90a")


def test_non_string_arch_is_rejected() -> None:
    with pytest.raises(InvalidArchError):
        normalize_arch(90)  # type: ignore[arg-type]


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "compute_80"])
def test_exactly_spelled_arch_is_accepted_as_is(arch: str) -> None:
    assert normalize_arch(arch) == arch


@pytest.mark.parametrize("arch", ["SM_80", "90", " sm_86 ", "sm_90\n", "sm_090", "sm_\u0669\u0660"])
def test_arch_not_spelled_exactly_is_refused_with_the_accepted_form(arch: str) -> None:
    with pytest.raises(InvalidArchError, match="expected exactly sm_XY"):
        normalize_arch(arch)


def test_cubin_needs_a_real_arch() -> None:
    with pytest.raises(InvalidArchError, match="real arch"):
        build_options("compute_90", "cubin")


def test_arch_env_var_is_used_without_a_device(no_device: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARCH_ENV, "sm_80")
    assert resolve_arch() == "sm_80"
    assert saxpy.specialize(f32(4), f32(4), 1.0).arch == "sm_80"


def test_explicit_arch_wins_over_the_env_var(no_device: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARCH_ENV, "sm_80")
    assert resolve_arch("sm_90") == "sm_90"


def test_invalid_arch_env_var_is_rejected(no_device: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARCH_ENV, "gfx90a")
    with pytest.raises(InvalidArchError):
        resolve_arch()


def test_invalid_arch_env_var_is_named_in_the_error(no_device: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARCH_ENV, "sm_90\n")
    with pytest.raises(InvalidArchError, match=r"^KERNELDSL_ARCH='sm_90\\n': invalid arch 'sm_90\\n'"):
        resolve_arch()


def test_no_arch_and_no_device_raises_no_device_error(no_device: None, nvrtc_forbidden: None) -> None:
    with pytest.raises(NoDeviceError, match=ARCH_ENV):
        saxpy.inspect(f32(4), f32(4), 1.0)


def test_device_arch_is_used_when_a_device_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "driver_available", lambda: True)
    monkeypatch.setattr(driver, "device_count", lambda: 1)
    monkeypatch.setattr(driver, "compute_capability", lambda ordinal: (9, 0))
    monkeypatch.setenv(ARCH_ENV, "sm_80")
    assert resolve_arch() == "sm_90"


def test_capability_maps_to_the_newest_compatible_arch() -> None:
    assert arch_for_capability(9, 0) == "sm_90"
    assert arch_for_capability(8, 9) == "sm_89"
    with pytest.raises(InvalidArchError):
        arch_for_capability(1, 0)


# --- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option", ["-I/usr/include", "--gpu-architecture=sm_80", "-arch=sm_80", "--ptx", "-DBAD NAME", "", 5]
)
def test_invalid_option_is_rejected_at_declaration(option: Any) -> None:
    with pytest.raises(InvalidOptionError):

        @kd.kernel(options=(option,))
        def k(x: kd.In["float32", "n"]) -> str:
            return ""


@pytest.mark.parametrize(
    "option", ["-DX=1", "-UX", "--use_fast_math", "-lineinfo", "--ftz=true", "--maxrregcount=32", "-std=c++20"]
)
def test_valid_option_is_accepted(option: str) -> None:
    assert check_options([option]) == (option,)


@pytest.mark.parametrize("option", ["-lineinfo\n", "-DX=1\n", "--maxrregcount=\u0663\u0662", "-G\n"])
def test_option_with_a_trailing_newline_or_non_ascii_digits_is_refused(option: str) -> None:
    with pytest.raises(InvalidOptionError):
        check_options([option])


def test_user_std_option_replaces_the_default() -> None:
    options = build_options("sm_90", "cubin", ["-std=c++20"])
    assert [o for o in options if "std=" in o] == ["-std=c++20"]


def test_unknown_output_kind_is_rejected() -> None:
    with pytest.raises(InvalidOptionError):
        build_options("sm_90", "sass")


def test_options_are_deterministic() -> None:
    assert build_options("sm_90", "cubin", ["-DX=1"]) == build_options("sm_90", "cubin", ["-DX=1"])


# --- NVRTC errors mapped back to this file ----------------------------------------------------------------


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def broken(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        {y}[i] = {x}[i] * undeclared_zz;
    }}
    """


def line_of(fragment: str) -> int:
    """1-based line of the only line of this file containing ``fragment``."""
    lines = [i for i, text in enumerate(Path(__file__).read_text().splitlines(), start=1) if fragment in text]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def compile_error(isolated_cache_module: Path) -> KernelCompileError:
    with pytest.raises(KernelCompileError) as info:
        broken.inspect(f32(4), f32(4), arch="sm_90")
    return info.value


def test_compile_error_message_points_at_the_offending_line(compile_error: KernelCompileError) -> None:
    where = f"{THIS_FILE}:{line_of('{x}[i] * ' + 'undeclared_zz')}"
    assert where in str(compile_error)
    assert "undeclared_zz" in str(compile_error)


def test_compile_error_mapped_points_at_the_offending_line(compile_error: KernelCompileError) -> None:
    where = f"{THIS_FILE}:{line_of('{x}[i] * ' + 'undeclared_zz')}"
    assert len(compile_error.mapped) == 1
    assert compile_error.mapped[0].startswith(where + ": error")
    assert "body line 3" in compile_error.mapped[0]


def test_compile_error_carries_the_nvrtc_log_naming_this_file(compile_error: KernelCompileError) -> None:
    where = re.escape(f"{THIS_FILE}({line_of('{x}[i] * ' + 'undeclared_zz')})")
    assert re.search(where + r": error: identifier \"undeclared_zz\" is undefined", compile_error.log)
    assert compile_error.log in str(compile_error)


def test_compile_error_carries_the_generated_source(compile_error: KernelCompileError) -> None:
    source = compile_error.source
    assert 'extern "C" __global__ void kd_broken(' in source
    generated_line = int(re.search(r"generated line (\d+)", compile_error.mapped[0]).group(1))
    assert "undeclared_zz" in source.splitlines()[generated_line - 1]


def test_compile_error_is_not_cached(compile_error: KernelCompileError) -> None:
    assert not broken._builds


@kd.kernel(grid=1, block=1)
def broken_twice(y: kd.Out["float32", "n"]) -> str:
    return f"""
    float a = 1.0f;
    {y}[0] = a + missing_one;
    float b = 2.0f;
    {y}[1] = b + missing_two;
    """


def test_every_error_is_mapped_to_its_own_line(isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError) as info:
        broken_twice.inspect(f32(2), arch="sm_80")
    mapped = info.value.mapped
    assert len(mapped) == 2
    assert mapped[0].startswith(f"{THIS_FILE}:{line_of('a + ' + 'missing_one')}:")
    assert mapped[1].startswith(f"{THIS_FILE}:{line_of('b + ' + 'missing_two')}:")


@kd.kernel(grid=1, block=1)
def no_semicolon_at_the_end(y: kd.Out["float32", "n"]) -> str:
    return f"""
    float a = 1.0f;
    {y}[0] = a + 2.0f
    """


@kd.kernel(grid=1, block=1)
def no_semicolon_mid_body(y: kd.Out["float32", "n"]) -> str:
    return f"""
    float b = 5.0f
    {y}[0] = b + 3.0f;
    """


def test_missing_semicolon_on_the_last_body_line_points_at_that_line(isolated_cache: Path) -> None:
    """NVRTC reports it at the generated ``}`` after the body, numbered past the body's end."""
    with pytest.raises(KernelCompileError) as info:
        no_semicolon_at_the_end.inspect(f32(2), arch="sm_90")
    (mapped,) = info.value.mapped
    assert mapped.startswith(f'{THIS_FILE}:{line_of("a + " + "2.0f")}: error: expected a ";"')
    assert "body line 2:" in mapped and "prelude" not in mapped


def test_missing_semicolon_mid_body_points_at_the_line_that_lacks_it(isolated_cache: Path) -> None:
    """NVRTC reports a missing token at the next one, the first of the following line."""
    with pytest.raises(KernelCompileError) as info:
        no_semicolon_mid_body.inspect(f32(2), arch="sm_90")
    assert info.value.mapped[0].startswith(f"{THIS_FILE}:{line_of('float b = ' + '5.0f')}: error: expected")


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_float_constants_compile(value: float, isolated_cache: None) -> None:
    @kd.kernel(grid=1, block=1)
    def fill(out: kd.Out[kd.float64, "n"], C: kd.Const[float]):
        return f"{out}[0] = C;"

    build = fill.inspect(np.zeros(1), C=value, arch="sm_90")
    assert build.cubin.startswith(b"\x7fELF")


def test_the_usual_float_and_int_constants_need_no_headers() -> None:
    @kd.kernel(grid=1, block=1)
    def limits(y: kd.Out[kd.float32, 4], z: kd.Out[kd.float64, 2]):
        return f"""
        {y}[0] = INFINITY; {y}[1] = FLT_MAX; {y}[2] = FLT_EPSILON; {y}[3] = (float)INT_MAX;
        {z}[0] = DBL_MAX; {z}[1] = NAN;
        """

    assert limits.inspect(np.zeros(4, np.float32), np.zeros(2), arch="sm_90").cubin


def test_a_build_keeps_what_the_compiler_said() -> None:
    @kd.kernel(grid=1, block=1, options=["-Xptxas=-v"])
    def noisy(y: kd.Out[kd.float32, 1]):
        return f"{y}[0] = 1.0f;"

    assert "registers" in noisy.inspect(np.zeros(1, np.float32), arch="sm_90").log
