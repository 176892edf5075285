"""The CPU device's compile: the same rendered CUDA C++ -> a shared library for the host.

The rendered source is compiled as written, behind the shim ``templates/host/kd_host.h`` (the
CUDA built-ins on the host), with ``KD_HOST_EMULATION`` defined so the templates' few host
branches apply. Decided here, in Python, before the compiler runs:

- a plain loop, a split body or fibers: a kernel whose text references no barrier or warp
  collective runs its threads as a loop; one that does is split at its waits (``host_split``:
  ``KD_HOST_SPLIT=1``, passes over a block's threads) in an optimized unchecked build, and runs
  its threads as fibers (``KD_HOST_FIBERS=1``) where its body cannot be split, the split source
  does not compile, or ``-DKD_HOST_SPLIT=0`` (``KERNELDSL_HOST_SPLIT=0``) asks for them;
- ``extern __shared__ T x[];`` becomes ``KD_DYNAMIC_SHARED(T, x);`` in the host copy (a thread-local
  cannot be ``extern``);
- what has no host meaning is refused with the construct named (``UnsupportedOnCpuError``):
  ``#include`` of CUDA headers (CUB, cooperative groups, libcu++), and inline PTX that the
  compiler meets (PTX under ``#ifdef __CUDA_ARCH__`` is never compiled here, so it is fine);
- NVRTC options map to the host's: ``--fmad=false`` keeps its meaning (no contraction is ever
  made), ``-lineinfo`` becomes ``-g``, ``-G`` (device debug) a debug build, ``-D``/``-U`` pass
  through, ``--use_fast_math`` defines ``KD_HOST_FAST_MATH`` (the float ``exp`` inlined and
  vectorized, within the GPU's fast ``__expf`` bound), the rest only shape PTX;
- a debug build (``KERNELDSL_HOST_DEBUG=1`` in the environment, or ``-G`` in a kernel's
  options): ``-O0 -g`` in place of ``-O2``, so a debugger stops at a body's line in the user's
  file (``gdb -ex "break my_kernels.py:42"``: the ``#line`` directives name it) and shows every
  variable. The flags are part of the build's cache key, so debug and optimized images never mix.

The rendered source's ``#line`` directives number each body line in the user's ``.py`` file, so
the compiler's diagnostics, ``assert``/``__trap`` reports (``__FILE__``/``__LINE__``) and a debug
build's line table all name the user's line.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .. import logs
from ..errors import UnsupportedOnCpuError
from ..runtime.checks import HOST, checks_of, compile_flags
from ..runtime.host_toolchain import (
    HOST_ABI,
    HostCompileFailure,
    HostCompiler,
    compile_shared,
    host_compiler,
    shim_dir,
)
from .compiler import CompiledCode
from .host_pch import shims
from .host_split import split_identity, split_kernel

log = logs.get("host_compile")

HOST_OUTPUT = HOST
# -march=native: this host's vector units (the key records its ISA).
# -fvisibility=hidden: only a module's kd_host_fn_<entry> is exported (the shim marks it), so the
# compiler may inline kernels and device functions.
BASE_FLAGS = (
    "-O2",
    "-march=native",
    "-ffp-contract=off",
    "-fvisibility=hidden",
    "-DKD_HOST_EMULATION=1",
)
# The option of a kernel whose loops vectorize (kd.ops' host plans): its float math functions
# call libmvec's vector variants where the host has them (see the shim's "The CUDA math API").
SIMD_MATH = "-DKD_HOST_SIMD_MATH=1"
# With it, a loop rounds (floor, ceil, trunc) and selects (the shim's branch-free math) in vector
# registers: GCC otherwise keeps what could raise a floating-point flag scalar and in order, and a
# CUDA kernel observes no flags.
NO_TRAPS = "-fno-trapping-math"
# The host plans' loops (`#pragma GCC ivdep`) are vectorized whatever -O2's cost model says, their
# selects of several cases included (the shim's special values); a loop along a view's row gets a
# version for the unit strides it usually has (the strides are run-time values); on a host with
# AVX-512 in 64-byte vectors (GCC's default keeps 32), which doubles the math functions' throughput
# as NumPy's own loops have it (`kerneldsl bench cpu --only layouts` measures them against NumPy).
VECTORIZE = (
    "-fvect-cost-model=unlimited",
    "--param=max-tree-if-conversion-phi-args=64",
    "-fversion-loops-for-strides",
    "-mprefer-vector-width=512",
)
# libmvec by its runtime name, so no development link is needed; glibc 2.35 added the functions
# beyond exp, log, sin, cos and pow (tanhf among them), which the shim's list needs.
_LIBMVEC = "libmvec.so.1"
_LIBMVEC_SINCE_2_35 = "_ZGVdN8v_tanhf"
DEBUG_ENV = "KERNELDSL_HOST_DEBUG"
# KERNELDSL_HOST_SPLIT=0 keeps every kernel with barriers or warp collectives on fibers (for
# comparison and debugging): its flag is part of the build's key.
SPLIT_ENV = "KERNELDSL_HOST_SPLIT"
NO_SPLIT = "-DKD_HOST_SPLIT=0"
SPLIT_FLAGS = ("-DKD_HOST_FIBERS=0", "-DKD_HOST_SPLIT=1")
DEBUG_FLAGS = ("-O0", "-g")  # in place of -O2: every body line and variable where the debugger looks
# GCC on x86-64 reaches a dlopened module's thread-locals (the shim's __shared__ variables) with a
# call to __tls_get_addr at every access, none hoisted out of a loop; through TLS descriptors it
# takes the address once (AArch64 uses descriptors by default; Clang hoists either way). Not for
# the race and init checks: glibc may place such a module in static TLS, where the checks cannot
# find its shared memory.
TLS_DESCRIPTORS = "-mtls-dialect=gnu2"
# CUDA's local memory a thread (512 KiB, its documented limit): a larger frame would overflow a
# fiber's stack on the CPU device, which holds that much and the runtime's own frames, so the host
# compiler refuses one (ptxas compiles such a frame for sm_90; a GPU cannot run more than the limit).
LOCAL_MEMORY_LIMIT = 512 << 10
STACK_PROBES = "-fstack-clash-protection"
_DEVICE_DEBUG = ("-G", "--device-debug")
_FAST_MATH = ("--use_fast_math", "-use_fast_math")

_WARP_COLLECTIVE = (
    r"__syncwarp|__shfl\w*_sync|__ballot_sync|__any_sync|__all_sync|__uni_sync"
    r"|__activemask|__match_(?:any|all)_sync|__reduce_\w+_sync"
)
_COLLECTIVE = re.compile(rf"\b(?:__syncthreads\w*|__nanosleep|{_WARP_COLLECTIVE})\b")
_WARP = re.compile(rf"\b(?:{_WARP_COLLECTIVE})\b")
_INDEX_TYPEDEF = re.compile(r"^typedef (?:int|long long) index_t;$", re.MULTILINE)
_ALIGN = r"(?:__align__\s*\(\s*\d+\s*\)\s+)?"
_NAME = r"[A-Za-z_]\w*"
_DYNAMIC_SHARED = re.compile(rf"\bextern\s+__shared__\s+{_ALIGN}({_NAME}[\w:<>, ]*?)\s+{_ALIGN}({_NAME})\s*\[\s*\]\s*;")
_INLINE_ASM = re.compile(r"\basm\s*(?:volatile\s*)?\(|\b__asm__\b")


def _kernel_text_matches(pattern: re.Pattern[str], source: str) -> bool:
    """Whether the kernel's own text (after the prelude, whose complex shuffle overloads are only
    templates) matches ``pattern``."""
    start = _INDEX_TYPEDEF.search(source)
    return pattern.search(source, start.start() if start else 0) is not None


def uses_collectives(source: str) -> bool:
    """Whether the kernel references a barrier or warp collective: then its threads run as fibers."""
    return _kernel_text_matches(_COLLECTIVE, source)


def fiber_flags(source: str) -> tuple[str, ...]:
    """The shim's switches for ``source``: fibers where it has a collective, and each thread's exit
    recorded only where it has a warp collective (which reads the exits)."""
    fibers = uses_collectives(source)
    return (f"-DKD_HOST_FIBERS={int(fibers)}", f"-DKD_HOST_WARPS={int(fibers and _kernel_text_matches(_WARP, source))}")


def host_source(source: str) -> str:
    """The host copy of ``source``: dynamic shared arrays spelled the shim's way."""
    return _DYNAMIC_SHARED.sub(r"KD_DYNAMIC_SHARED(\1, \2);", source)


def host_debug_requested() -> bool:
    """Whether ``KERNELDSL_HOST_DEBUG`` asks for debug builds (read at each build, never at a call)."""
    return os.environ.get(DEBUG_ENV, "0").strip() not in ("", "0")


def host_options(user_options: Sequence[str], output: str = HOST_OUTPUT) -> tuple[str, ...]:
    """The compiler flags for a kernel built with NVRTC options ``user_options`` (already checked),
    for image kind ``output`` (``host``, or ``host+<checks>`` for checked execution)."""
    mapped: list[str] = []
    debug = host_debug_requested()
    for option in user_options:
        if option == SIMD_MATH:
            mapped.extend((NO_TRAPS, *VECTORIZE))
            if simd_math_available():
                mapped.append(option)
        elif option.startswith(("-D", "-U")):
            mapped.append(option)
        elif option in _DEVICE_DEBUG:
            debug = True
        elif option in ("-lineinfo", "--generate-line-info"):
            mapped.append("-g")
        elif option in _FAST_MATH:
            mapped.append("-DKD_HOST_FAST_MATH=1")
    base = (*DEBUG_FLAGS, *BASE_FLAGS[1:]) if debug else BASE_FLAGS
    compiler = host_compiler()
    gcc = compiler.is_gcc
    checked = compile_flags(checks_of(output))
    if gcc and compiler.target.startswith("x86_64") and "-fsanitize=thread" not in checked:
        base = (*base, TLS_DESCRIPTORS)
    if "-fsanitize=thread" in checked and gcc:
        # The runtime's entry and exit hooks do nothing; volatile accesses are told apart (strong
        # accesses do not race across blocks).
        checked += ("--param=tsan-instrument-func-entry-exit=0", "--param=tsan-distinguish-volatile=1")
    if not any(flag.startswith("-fsanitize=") for flag in checked):  # (instrumentation enlarges frames)
        base = (*base, *frame_limit_flags(gcc))
    if os.environ.get(SPLIT_ENV, "1").strip() == "0":
        mapped.append(NO_SPLIT)
    return tuple(dict.fromkeys((*base, *mapped, *checked)))


def frame_limit_flags(gcc: bool) -> tuple[str, ...]:
    """The flags that make a function frame over ``LOCAL_MEMORY_LIMIT`` an error (GCC's own
    spelling, else Clang's: the warning, made an error by its group's name), and that probe a large
    frame page by page, so that a stack that overflows meets its guard page, never a neighbour."""
    if gcc:
        return (f"-Werror=frame-larger-than={LOCAL_MEMORY_LIMIT}", STACK_PROBES)
    return (f"-Wframe-larger-than={LOCAL_MEMORY_LIMIT}", "-Werror=frame-larger-than", STACK_PROBES)


@lru_cache(maxsize=1)
def simd_math_available() -> bool:
    """Whether kernels may call libmvec: GCC (whose ``simd`` attribute names its variants) targeting
    x86-64 glibc, whose libmvec has the shim's functions."""
    compiler = host_compiler()
    if not (compiler.is_gcc and compiler.target.startswith("x86_64") and compiler.target.endswith("-linux-gnu")):
        return False
    try:
        return hasattr(ctypes.CDLL(_LIBMVEC), _LIBMVEC_SINCE_2_35)
    except OSError:
        return False


def module_libraries(compiler: HostCompiler, flags: Sequence[str]) -> tuple[str, ...]:
    """What a kernel module built with ``flags`` links: libmvec first where it calls it."""
    libraries = compiler.module_libraries()
    return (f"-l:{_LIBMVEC}", *libraries) if SIMD_MATH in flags else libraries


@lru_cache(maxsize=1)
def host_identity() -> dict[str, Any]:
    """What a host image's key records of where it was built: the compiler, the host CPU's
    instruction set (``-march=native`` targets it), the shim's digest and the runtime ABI."""
    return {
        **host_compiler().identity(),
        "cpu": _cpu_identity(),
        "shim": hashlib.sha256((shim_dir() / "kd_host.h").read_bytes()).hexdigest(),
        "split": split_identity(),
        "host_abi": HOST_ABI,
    }


def _cpu_identity() -> str:
    """The machine and its instruction-set flags (an image built for AVX-512 must not load elsewhere)."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    except OSError:
        pass
    return f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def refuse_unsupported(includes: Sequence[str]) -> None:
    """UnsupportedOnCpuError for a kernel that includes CUDA headers (CUB, cooperative groups,
    libcu++): their device code has no host build."""
    if includes:
        raise UnsupportedOnCpuError(
            f"#include {', '.join(includes)}: CUDA headers (CUB, cooperative groups, libcu++) have no host "
            "build, so the CPU device cannot run this kernel; run it on a GPU"
        )


def splits(options: Sequence[str]) -> bool:
    """Whether a build with ``options`` may split a kernel at its waits (``host_split``): an
    optimized build without checks (they follow threads on fibers), unless the environment said no."""
    return NO_SPLIT not in options and "-O0" not in options and not any(o.startswith("-DKD_CHECK") for o in options)


def compile_host(source: str, program_name: str, options: Sequence[str], output: str = HOST_OUTPUT) -> CompiledCode:
    """Compile ``source`` for the CPU device into an ``output`` image; ``HostCompileFailure``
    carries the compiler's log, ``UnsupportedOnCpuError`` names inline PTX the compiler met."""
    compiler = host_compiler()
    split = split_kernel(source) if splits(options) and uses_collectives(source) else None
    if split is not None:
        flags = (*options, *SPLIT_FLAGS)
        flags = (*flags, *shims.include(compiler, flags))
        name = program_name.removesuffix(".cu")
        try:
            image = compile_shared(compiler, host_source(split), flags, name, module_libraries(compiler, flags))
            return CompiledCode(image, output, "", None, None, None)
        except HostCompileFailure as failure:
            log.debug(
                "%s: the split kernel did not compile, so it runs on fibers (%s)", name, _first_error(failure.log)
            )
    flags = (*options, *fiber_flags(source))
    flags = (*flags, *shims.include(compiler, flags))
    name = program_name.removesuffix(".cu")
    libraries = module_libraries(compiler, flags)
    try:
        try:
            image = compile_shared(compiler, host_source(source), flags, name, libraries)
        except HostCompileFailure as failure:
            if not _checked_pointers(flags):
                raise
            # A body that uses an array parameter as no checked pointer can be used (a template
            # deducing T* from it, ...): the other checks still run, its arrays' bounds do not.
            image = compile_shared(compiler, host_source(source), (*flags, "-DKD_CHECK_POINTERS=0"), name, libraries)
            log.warning(
                "%s: its array parameters' bounds are not checked: the body uses them in a way the checked "
                "pointer cannot follow (%s)",
                name,
                _first_error(failure.log),
            )
    except HostCompileFailure as failure:
        line = _inline_ptx_line(source)
        if line is not None:
            raise UnsupportedOnCpuError(
                f"inline PTX (asm) at {line} has no host equivalent: the CPU device cannot run it; guard it with "
                "#ifdef __CUDA_ARCH__ and give a portable branch, or run on a GPU"
            ) from None
        raise failure
    return CompiledCode(image, output, "", None, None, None)


def _checked_pointers(flags: Sequence[str]) -> bool:
    """Whether ``flags`` build a bounds check with checked array pointers."""
    bits = next((int(f.partition("=")[2]) for f in flags if f.startswith("-DKD_CHECKS=")), 0)
    return bool(bits & 1) and "-DKD_CHECK_POINTERS=0" not in flags


def _first_error(log_text: str) -> str:
    return next((line.strip() for line in log_text.splitlines() if "error:" in line), "the compiler refused it")


def _inline_ptx_line(source: str) -> str | None:
    """``file:line`` (as the ``#line`` directives name it) of the first ``asm`` in the kernel's text."""
    start = _INDEX_TYPEDEF.search(source)
    found = _INLINE_ASM.search(source, start.start() if start else 0)
    if found is None:
        return None
    name, line = "<source>", 1  # the number the next line read has
    for text in source[: found.start()].split("\n")[:-1]:
        directive = re.match(r'#line (\d+) "([^"]+)"', text)
        if directive:
            name, line = directive.group(2), int(directive.group(1))
        else:
            line += 1
    return f"{name}:{line}"
