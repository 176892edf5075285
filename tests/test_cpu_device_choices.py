"""What the CPU device decides in Python: which device a session opens, how a kernel's text is
prepared for the host compiler, and what it refuses. No compiler runs here."""

from __future__ import annotations

import pytest

from kerneldsl.errors import NoDeviceError, UnsupportedOnCpuError
from kerneldsl.jit import host_compile
from kerneldsl.jit.host_compile import (
    BASE_FLAGS,
    TLS_DESCRIPTORS,
    fiber_flags,
    host_options,
    host_source,
    refuse_unsupported,
    uses_collectives,
)
from kerneldsl.runtime import selection
from kerneldsl.runtime.host_toolchain import HostCompiler
from kerneldsl.runtime.selection import CPU, DEVICE_ENV, resolve_device

PRELUDE = "template <class T> T kd_shfl(T v) { return __shfl_xor_sync(0xffffffffu, v, 1); }\n"


def kernel_text(body: str) -> str:
    return f'{PRELUDE}typedef int index_t;\nextern "C" __global__ void kd_k(float* x) {{\n{body}\n}}\n'


def test_a_named_cpu_device_is_the_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert resolve_device("cpu") == CPU
    assert resolve_device("CPU") == CPU


def test_a_named_gpu_ordinal_stays_a_gpu_ordinal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert resolve_device(1) == 1
    assert resolve_device("cuda:2") == 2


def test_the_environment_puts_the_whole_process_on_the_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert resolve_device(None) == CPU
    assert resolve_device(0) == CPU  # code written for GPU 0 runs unchanged


def test_the_environment_names_a_gpu_for_sessions_that_name_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_ENV, "cuda:1")
    assert resolve_device(None) == 1


def test_an_unknown_device_name_is_refused_with_the_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_ENV, "tpu")
    with pytest.raises(NoDeviceError, match="'cpu', 'cuda', 'cuda:N'"):
        resolve_device(None)


def test_without_a_gpu_the_default_is_the_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setattr(selection.driver, "driver_available", lambda: False)
    assert resolve_device(None) == CPU


def test_devices_lists_the_cpu_device_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection.driver, "driver_available", lambda: False)
    assert selection.devices() == ["cpu"]


def test_a_kernel_with_a_barrier_runs_as_fibers() -> None:
    assert uses_collectives(kernel_text("__syncthreads();"))
    assert uses_collectives(kernel_text("float v = __shfl_down_sync(0xffffffffu, 1.0f, 1);"))


def test_a_kernel_without_collectives_runs_as_a_loop_even_beside_the_preludes_shuffles() -> None:
    assert not uses_collectives(kernel_text("x[threadIdx.x] = 1.0f;"))


@pytest.mark.parametrize(
    ("body", "flags"),
    [
        ("x[threadIdx.x] = 1.0f;", ("-DKD_HOST_FIBERS=0", "-DKD_HOST_WARPS=0")),
        ("__syncthreads();", ("-DKD_HOST_FIBERS=1", "-DKD_HOST_WARPS=0")),
        ("float v = __shfl_down_sync(0xffffffffu, 1.0f, 1);", ("-DKD_HOST_FIBERS=1", "-DKD_HOST_WARPS=1")),
        ("unsigned m = __activemask(); __syncthreads();", ("-DKD_HOST_FIBERS=1", "-DKD_HOST_WARPS=1")),
    ],
    ids=["no collective", "barriers only", "a shuffle", "activemask"],
)
def test_threads_record_their_exits_only_where_a_warp_collective_reads_them(body: str, flags: tuple[str, ...]) -> None:
    assert fiber_flags(kernel_text(body)) == flags


def test_dynamic_shared_memory_is_spelled_the_shims_way_on_the_host() -> None:
    text = "extern __shared__ float tile[];\nextern __shared__ __align__(16) unsigned char raw[];"
    assert host_source(text) == "KD_DYNAMIC_SHARED(float, tile);\nKD_DYNAMIC_SHARED(unsigned char, raw);"


def test_static_shared_memory_is_left_as_written() -> None:
    text = "__shared__ float tile[32][33];"
    assert host_source(text) == text


def test_nvrtc_options_map_to_the_host_compilers() -> None:
    flags = host_options(("-DN=4", "--use_fast_math", "-lineinfo", "--fmad=false", "-Xptxas=-v"))
    assert flags[: len(BASE_FLAGS)] == BASE_FLAGS
    assert flags[-3:] == ("-DN=4", "-DKD_HOST_FAST_MATH=1", "-g")


@pytest.mark.parametrize(
    ("version", "target", "descriptors"),
    [
        ("g++ (Debian 12.2.0-14) 12.2.0", "x86_64-linux-gnu", True),
        ("clang version 16.0.6", "x86_64-pc-linux-gnu", False),
        ("g++ (Debian 12.2.0-14) 12.2.0", "aarch64-linux-gnu", False),  # its default already
    ],
)
def test_gcc_on_x86_64_reaches_shared_memory_through_tls_descriptors(
    monkeypatch: pytest.MonkeyPatch, version: str, target: str, descriptors: bool
) -> None:
    monkeypatch.setattr(host_compile, "host_compiler", lambda: HostCompiler(("c++",), version, target))
    assert (TLS_DESCRIPTORS in host_options(())) == descriptors


@pytest.mark.parametrize("checks", ["races", "init"])
def test_the_race_and_init_checks_reach_shared_memory_without_tls_descriptors(
    monkeypatch: pytest.MonkeyPatch, checks: str
) -> None:
    gcc = HostCompiler(("c++",), "g++ (Debian 12.2.0-14) 12.2.0", "x86_64-linux-gnu")
    monkeypatch.setattr(host_compile, "host_compiler", lambda: gcc)
    assert TLS_DESCRIPTORS in host_options((), "host+bounds")
    assert TLS_DESCRIPTORS not in host_options((), f"host+{checks}")


def test_fast_math_never_reaches_the_host_compiler() -> None:
    assert not any("fast-math" in f for f in host_options(("--use_fast_math",)))


def test_fast_math_selects_the_shims_vectorizable_exp() -> None:
    assert "-DKD_HOST_FAST_MATH=1" in host_options(("--use_fast_math",))
    assert "-DKD_HOST_FAST_MATH=1" not in host_options(())


def test_cuda_headers_are_refused_with_their_names() -> None:
    with pytest.raises(UnsupportedOnCpuError, match="<cub/block/block_reduce.cuh>"):
        refuse_unsupported(("<cub/block/block_reduce.cuh>",))


def test_a_kernel_without_includes_is_not_refused() -> None:
    refuse_unsupported(())
