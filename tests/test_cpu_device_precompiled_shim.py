"""The CPU device's shim is precompiled once a flag set has compiled a few kernels, and a kernel
built through it is the same image, byte for byte, as one built from the shim's text."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kerneldsl.jit import host_pch
from kerneldsl.jit.host_compile import host_options
from kerneldsl.jit.host_pch import PRECOMPILE_AFTER, PrecompiledShims
from kerneldsl.runtime.host_toolchain import COMMON_FLAGS, HostCompiler, compile_shared, host_compiler, shim_dir

SOURCE = """
typedef int index_t;
extern "C" __global__ void kd_twice(const float* x, float* y, index_t n) {
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
KD_HOST_KERNEL(kd_twice, const float*, float*, index_t)
"""
PLAIN = ("-include", str(shim_dir() / "kd_host.h"))
COMPILE_ONLY = tuple(f for f in COMMON_FLAGS if f != "-shared")


@pytest.fixture
def gcc() -> HostCompiler:
    compiler = host_compiler()
    if not compiler.is_gcc:
        pytest.skip("precompiled shims are GCC's")
    return compiler


@pytest.fixture
def flags() -> tuple[str, ...]:
    return (*host_options(()), "-DKD_HOST_FIBERS=0")


def precompiled(shims: PrecompiledShims, compiler: HostCompiler, flags: tuple[str, ...]) -> tuple[str, ...]:
    for _ in range(PRECOMPILE_AFTER):
        assert shims.include(compiler, flags) == PLAIN
    return shims.include(compiler, flags)


def test_a_flag_set_reads_the_shims_text_until_it_has_compiled_enough_kernels(
    gcc: HostCompiler, flags: tuple[str, ...]
) -> None:
    include = precompiled(PrecompiledShims(), gcc, flags)
    assert include != PLAIN
    assert Path(f"{include[1]}.gch").is_file()


def test_gcc_reads_the_precompiled_shim_in_place_of_its_text(
    gcc: HostCompiler, flags: tuple[str, ...], tmp_path: Path
) -> None:
    include = precompiled(PrecompiledShims(), gcc, flags)
    source = tmp_path / "k.cpp"
    source.write_text(SOURCE)
    done = subprocess.run(
        [*gcc.argv, *COMPILE_ONLY, *flags, *include, "-H", "-fsyntax-only", "-x", "c++", str(source)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"! {include[1]}.gch" in done.stderr


def test_a_kernel_built_through_the_precompiled_shim_is_the_same_image(
    gcc: HostCompiler, flags: tuple[str, ...]
) -> None:
    include = precompiled(PrecompiledShims(), gcc, flags)
    libraries = gcc.module_libraries()
    assert compile_shared(gcc, SOURCE, (*flags, *include), "kd_twice", libraries) == compile_shared(
        gcc, SOURCE, (*flags, *PLAIN), "kd_twice", libraries
    )


def test_each_flag_set_has_its_own_precompiled_shim(gcc: HostCompiler, flags: tuple[str, ...]) -> None:
    shims = PrecompiledShims()
    assert precompiled(shims, gcc, flags) != precompiled(shims, gcc, (*flags, "-DN=3"))


def test_clang_gets_the_shims_text() -> None:
    clang = HostCompiler(("clang++",), "clang version 18.1.8", "x86_64-pc-linux-gnu")
    shims = PrecompiledShims()
    assert all(shims.include(clang, ("-O2",)) == PLAIN for _ in range(PRECOMPILE_AFTER + 2))


def test_a_compiler_that_cannot_precompile_keeps_the_shims_text() -> None:
    refusing = HostCompiler(("false",), "g++ (GCC) 12.2.0", "x86_64-linux-gnu")
    shims = PrecompiledShims()
    assert all(shims.include(refusing, ("-O2",)) == PLAIN for _ in range(PRECOMPILE_AFTER + 2))


def test_a_forked_child_counts_its_own_compiles(
    gcc: HostCompiler, flags: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = PrecompiledShims()
    assert precompiled(shims, gcc, flags) != PLAIN
    monkeypatch.setattr(host_pch.os, "getpid", lambda: -2)
    assert shims.include(gcc, flags) == PLAIN
