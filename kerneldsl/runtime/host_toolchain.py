"""The host C++ compiler the CPU device builds with: which one, who it is, and one compile.

The CPU device compiles the same rendered CUDA C++ into shared libraries behind a shim header
(``templates/host/kd_host.h``) and runs them on the host. The compiler is
``$KERNELDSL_HOST_CXX`` (may hold arguments, e.g. ``python -m ziglang c++``), else ``$CXX``, else
the first of ``c++``, ``g++``, ``clang++`` on PATH, else the ``ziglang`` wheel's clang
(``pip install 'kerneldsl[cpu]'``; it builds its libc++ once, on first use). Its identity (first ``--version`` line and
``-dumpmachine``'s target triple) is part of every host build's cache key, so a compiler change
is a miss that ``explain`` names.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import CheckConfigError, HostCompilerNotFoundError

HOST_CXX_ENV = "KERNELDSL_HOST_CXX"
_CANDIDATES = ("c++", "g++", "clang++")
_INSTALL_HINT = (
    "the CPU device compiles kernels with a host C++ compiler and found none: install one "
    "(Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install), set "
    f"{HOST_CXX_ENV}=/path/to/c++, or pip install 'kerneldsl[cpu]' for a compiler from PyPI "
    f"({HOST_CXX_ENV}='python -m ziglang c++')"
)
# Flags every host image is built with: -fno-strict-aliasing because the templates pun vector
# loads; never -ffast-math, since kernels test x != x; ABI is the host runtime's contract version.
COMMON_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-fno-strict-aliasing", "-fno-math-errno")
HOST_ABI = 5
# What a kernel module links on a GNU/Linux target: libm and libc (their versioned symbols, so
# expf binds to glibc's current expf, not a compatibility one) and libgcc's static helpers. The
# shim uses nothing of the C++ runtime, and the driver's default libraries (libstdc++ above all)
# cost more to scan than the rest of the link.
MODULE_LIBRARIES = ("-nodefaultlibs", "-lm", "-lc", "-lgcc")


@dataclass(frozen=True)
class HostCompiler:
    """A host C++ compiler: the argv that runs it, and what it says it is."""

    argv: tuple[str, ...]
    version: str  # the first line of ``--version``
    target: str  # ``-dumpmachine``: the target triple

    def identity(self) -> dict[str, str]:
        """What a host build's key records of the compiler (no path: the same compiler anywhere)."""
        return {"version": self.version, "target": self.target, "abi": str(HOST_ABI)}

    @property
    def is_gcc(self) -> bool:
        """Whether this is GCC (its flags, its precompiled headers), not Clang or zig's Clang."""
        return "clang" not in self.version.lower() and not self.is_zig

    @property
    def is_zig(self) -> bool:
        """Whether this is the ``ziglang`` wheel's compiler, which brings its own C and C++ libraries."""
        return any(Path(arg).name in ("zig", "ziglang") for arg in self.argv)

    def module_libraries(self) -> tuple[str, ...]:
        """The link flags of a kernel module: ``MODULE_LIBRARIES`` where GCC or Clang link for
        glibc, the driver's defaults anywhere else."""
        return MODULE_LIBRARIES if self.target.endswith("-linux-gnu") and not self.is_zig else ()


class HostCompileFailure(Exception):
    """The compiler refused a source; carries its log for the caller to map onto user code."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


def _configured_argv() -> tuple[str, ...]:
    for variable in (HOST_CXX_ENV, "CXX"):
        value = os.environ.get(variable, "").strip()
        if value:
            argv = tuple(shlex.split(value))
            if shutil.which(argv[0]) is None:
                raise HostCompilerNotFoundError(f"{variable}={value!r} names no program on PATH; {_INSTALL_HINT}")
            return argv
    for name in _CANDIDATES:
        if shutil.which(name) is not None:
            return (name,)
    if importlib.util.find_spec("ziglang") is not None:  # kerneldsl[cpu]: clang from PyPI
        return (sys.executable, "-m", "ziglang", "c++")
    raise HostCompilerNotFoundError(_INSTALL_HINT)


def _ask(argv: tuple[str, ...], flag: str) -> str:
    try:
        done = subprocess.run([*argv, flag], capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        raise HostCompilerNotFoundError(f"{' '.join(argv)} could not run ({exc}); {_INSTALL_HINT}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise HostCompilerNotFoundError(f"{' '.join(argv)} {flag} failed: {done.stderr.strip()[:500]}")
    return lines[0].strip()


@lru_cache(maxsize=4)
def _compiler(argv: tuple[str, ...], remember: bool) -> HostCompiler:
    """Who ``argv`` is. A plain program's answer is kept in the disk cache under its resolved
    path, size, inode and change time, so a fresh process whose kernels all hit the disk cache
    runs no compiler at all (a replaced or updated binary is asked again)."""
    program = shutil.which(argv[0]) if len(argv) == 1 and remember else None
    if program is None:
        return HostCompiler(argv, _ask(argv, "--version"), _ask(argv, "-dumpmachine"))
    from .. import cache as disk_cache

    real = os.path.realpath(program)
    st = os.stat(real)
    material = {"output": "host-compiler-identity", "program": real, "stat": [st.st_size, st.st_ino, st.st_ctime_ns]}
    key = disk_cache.cache_key(material)
    store = disk_cache.get_default_cache()
    kept = store.get(key, material)
    if kept is not None:
        version, _, target = kept.decode(errors="replace").partition("\n")
        if version and target:
            return HostCompiler(argv, version, target)
    found = HostCompiler(argv, _ask(argv, "--version"), _ask(argv, "-dumpmachine"))
    store.put(key, f"{found.version}\n{found.target}".encode(), material)
    return found


def host_compiler(remember: bool = True) -> HostCompiler:
    """The configured compiler, asked who it is once per process and configuration; with
    ``remember=False`` (``kerneldsl info``) the disk cache is neither read nor created."""
    return _compiler(_configured_argv(), remember)


def shim_dir() -> Path:
    """The folder of ``kd_host.h`` and ``kd_host_runtime.cpp``: inside an installed wheel's
    templates, or at the top of a checkout."""
    here = Path(__file__).resolve().parent.parent
    packaged = here / "templates" / "host"
    return packaged if packaged.is_dir() else here.parent / "templates" / "host"


def compile_shared(
    compiler: HostCompiler, source: str, flags: tuple[str, ...], name: str = "module", libraries: tuple[str, ...] = ()
) -> bytes:
    """Compile ``source`` (C++) into a shared library and return its bytes; ``HostCompileFailure``
    with the compiler's log when it refuses. One run of the driver compiles and links, with
    ``libraries`` after the source (the driver's defaults when empty). Runs in a private
    temporary folder."""
    with tempfile.TemporaryDirectory(prefix="kerneldsl-host-") as scratch:
        src = Path(scratch) / f"{name}.cpp"
        out = Path(scratch) / f"{name}.so"
        src.write_text(source)
        # Instrumented builds (checked execution) compile and link in two steps, so the library
        # links no sanitizer runtime: the CPU device's runtime library provides the entries.
        instrumented = any(flag.startswith("-fsanitize=") for flag in flags)
        obj = Path(scratch) / f"{name}.o"
        steps = [[*compiler.argv, *COMMON_FLAGS, *flags, "-x", "c++", str(src), "-o", str(out), *libraries]]
        if instrumented:
            compile_flags = [f for f in COMMON_FLAGS if f != "-shared"]
            steps = [
                [*compiler.argv, *compile_flags, *flags, "-c", "-x", "c++", str(src), "-o", str(obj)],
                [*compiler.argv, "-shared", "-fPIC", str(obj), "-o", str(out)],
            ]
        for argv in steps:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=scratch)
            except OSError as exc:
                raise HostCompilerNotFoundError(
                    f"{' '.join(compiler.argv)} could not run ({exc}); {_INSTALL_HINT}"
                ) from None
            if done.returncode:
                raise HostCompileFailure((done.stderr + done.stdout).replace(str(src), f"{name}.cpp"))
        if not out.is_file():
            raise HostCompileFailure(f"{' '.join(compiler.argv)} wrote no {out.name}")
        return out.read_bytes()


ADDRESS_EXIT = 86  # the exit status AddressSanitizer ends a script with when it finds something


def address_sanitizer_environment() -> dict[str, str]:
    """What a process needs to run kernels built with ``checks="address"``: ASan's runtime (the
    host compiler's) preloaded, leak detection off (the interpreter keeps memory until exit)."""
    compiler = host_compiler()
    done = subprocess.run(
        [*compiler.argv, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=60, check=False
    )
    library = done.stdout.strip()
    if done.returncode or not library or not Path(library).is_file():
        raise CheckConfigError(
            f"checks='address' needs AddressSanitizer's runtime, which {' '.join(compiler.argv)} does not have "
            "(Debian/Ubuntu: apt-get install libasan8, or the gcc package's)"
        )
    return {
        "LD_PRELOAD": library,
        "ASAN_OPTIONS": f"detect_leaks=0:exitcode={ADDRESS_EXIT}:allocator_may_return_null=1",
    }
