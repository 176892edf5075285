"""NVRTC: CUDA source -> cubin (or PTX) for one exact architecture, with no GPU or driver needed.

Arch names and options are checked here before NVRTC sees them, so a typo gives a clear
``InvalidArchError`` / ``InvalidOptionError`` instead of an NVRTC failure code.
"""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import InvalidArchError, InvalidCacheEntryError, InvalidOptionError, NvrtcNotFoundError
from ..installed import first_version
from .headers import HeaderDigests, read_headers

_ARCH = re.compile(r"(sm|compute)_([1-9][0-9]{1,2})([af]?)")  # fullmatch: exact, lowercase, ASCII digits
OUTPUTS = ("cubin", "ptx")
# -v: ptxas reports registers and shared memory. -lineinfo: the image carries the #line
# directives' file and line of each instruction, so compute-sanitizer, cuda-gdb and Nsight
# Compute name the user's .py line; it adds a line table to the cubin and changes no instruction.
BASE_OPTIONS = ("-std=c++17", "-Xptxas=-v", "-lineinfo")
_LINE_INFO = ("-lineinfo", "--generate-line-info", "-G", "--device-debug")  # -G carries full debug info

# Options a user may add; anything else (include paths, -arch, output selection) is ours to set.
_ALLOWED_OPTIONS = re.compile(  # fullmatch: nothing after the option, not even a newline
    r"(-D[A-Za-z_][A-Za-z0-9_]*(=.*)?"
    r"|-U[A-Za-z_][A-Za-z0-9_]*"
    r"|--use_fast_math|-use_fast_math"
    r"|-lineinfo|--generate-line-info"
    r"|--(ftz|prec-div|prec-sqrt|fmad)=(true|false)"
    r"|--maxrregcount=[0-9]+|-maxrregcount=[0-9]+"
    r"|--extra-device-vectorization|-extra-device-vectorization"
    r"|--restrict|-restrict"
    r"|--minimal|-minimal"
    r"|-G|--device-debug"
    r"|-Xptxas=.+"
    r"|--std=c\+\+(17|20)|-std=c\+\+(17|20))"
)


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - cuda-bindings is a dependency
        raise NvrtcNotFoundError("cuda-bindings is not installed: pip install 'cuda-bindings>=13'") from exc
    return nvrtc


def _call(api: str, result: tuple[Any, ...]) -> tuple[Any, ...]:
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"{api} failed: {err}")
    return tuple(values)


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    try:
        major, minor = _call("nvrtcVersion", _nvrtc().nvrtcVersion())
    except Exception as exc:
        raise NvrtcNotFoundError(
            f"the NVRTC library could not be loaded ({exc}); install it with: pip install 'nvidia-cuda-nvrtc>=13,<14'"
        ) from exc
    return int(major), int(minor)


@lru_cache(maxsize=1)
def nvrtc_identity() -> str:
    """Which NVRTC compiles here, as cache keys record it, found without loading the library (a
    disk hit then never does): the nvidia-cuda-nvrtc wheel's version, the NVRTC cuda.pathfinder
    loads first; without that wheel, the library's own version. ``compile_source`` checks that
    the library it loads is the one named here."""
    version = _wheel_version()
    return f"nvidia-cuda-nvrtc {version}" if version else "nvrtc {}.{}".format(*nvrtc_version())


_WHEEL = re.compile(r"nvidia_cuda_nvrtc(?:_cu[0-9]+)?-([0-9][0-9A-Za-z.+]*)\.dist-info")


def _wheel_version() -> str | None:
    """The version in the name of the first nvidia-cuda-nvrtc dist-info on ``sys.path``."""
    return first_version(_WHEEL)


def _check_loaded_library() -> None:
    """The library loaded for a compile must be the NVRTC that cache keys name."""
    identity = nvrtc_identity()
    loaded = "{}.{}".format(*nvrtc_version())
    if identity.startswith("nvidia-cuda-nvrtc ") and not identity.split(" ")[1].startswith(loaded + "."):
        raise NvrtcNotFoundError(
            f"the NVRTC library loaded ({loaded}) is not the one installed as {identity}, which cache keys name: "
            "make the nvidia-cuda-nvrtc wheel's library the one cuda.pathfinder finds"
        )


@lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    nvrtc_version()
    (archs,) = _call("nvrtcGetSupportedArchs", _nvrtc().nvrtcGetSupportedArchs())
    return tuple(int(a) for a in archs)


def normalize_arch(arch: str) -> str:
    """``arch`` as a plain str, if spelled exactly ``sm_XY``, ``sm_XYa``, ``sm_XYf`` or ``compute_XY``.
    No other spelling is guessed at: the arch reaches generated sources and cache keys, so one
    arch has one spelling. Whether NVRTC can target it is checked before a compile
    (``require_supported``): a cache hit needs no NVRTC at all."""
    if not isinstance(arch, str):
        raise InvalidArchError(f"arch must be a string such as 'sm_90', not {arch!r}")
    m = _ARCH.fullmatch(arch)
    if not m:
        raise InvalidArchError(
            f"invalid arch {arch!r}: expected exactly sm_XY, sm_XYa, sm_XYf or compute_XY, lowercase, with ASCII "
            "digits and no spaces (e.g. 'sm_90')"
        )
    return f"{m.group(1)}_{int(m.group(2))}{m.group(3)}"


def require_supported(arch: str) -> None:
    """InvalidArchError unless this NVRTC can target ``arch`` (a normalized spelling); the error
    names the arch to use instead when there is one."""
    m = _ARCH.fullmatch(arch)
    if m is not None and int(m.group(2)) in supported_archs():
        return
    version = ".".join(map(str, nvrtc_version()))
    hint = ""
    if m is not None:
        number = int(m.group(2))
        try:
            hint = (
                f": pass arch={arch_for_capability(number // 10, number % 10)!r}, or install a newer nvidia-cuda-nvrtc"
            )
        except InvalidArchError:  # no arch of that generation: the supported list says it all
            hint = ""
    known = ", ".join(f"sm_{a}" for a in supported_archs())
    raise InvalidArchError(f"NVRTC {version} cannot target {arch!r}; it supports {known}{hint}")


def arch_for_capability(major: int, minor: int) -> str:
    """The newest arch NVRTC supports that a device of this compute capability runs as cubin."""
    wanted = major * 10 + minor
    usable = [a for a in supported_archs() if a // 10 == major and a <= wanted]
    if not usable:
        raise InvalidArchError(f"this NVRTC cannot build cubins for compute capability {major}.{minor}")
    return f"sm_{max(usable)}"


def check_options(options: Sequence[str]) -> tuple[str, ...]:
    if isinstance(options, str):
        raise InvalidOptionError(f"options is a list of option strings, e.g. options=[{options!r}], not a str")
    for opt in options:
        if not isinstance(opt, str) or not _ALLOWED_OPTIONS.fullmatch(opt):
            raise InvalidOptionError(
                f"compiler option {opt!r} is not accepted (allowed: -D/-U macros, --use_fast_math, -lineinfo, "
                "--ftz/--prec-div/--prec-sqrt/--fmad=true|false, --maxrregcount=N, -Xptxas=..., -G, --std=c++17|20, "
                "--minimal)"
            )
    return tuple(options)


def build_options(arch: str, output: str, user_options: Sequence[str] = ()) -> tuple[str, ...]:
    """The full, normalized NVRTC option list: the same inputs always give the same tuple."""
    if output not in OUTPUTS:
        raise InvalidOptionError(f"output must be one of {OUTPUTS}, not {output!r}")
    arch = normalize_arch(arch)
    if output == "ptx":
        arch = arch.replace("sm_", "compute_")
    elif arch.startswith("compute_"):
        raise InvalidArchError(f"a cubin needs a real arch (sm_XY), not {arch!r}")
    user = check_options(user_options)
    std = tuple(o for o in user if "std=" in o)
    lines = any(o in _LINE_INFO for o in user)
    base = tuple(o for o in BASE_OPTIONS if not (std and "std=" in o) and not (lines and o == "-lineinfo"))
    return (f"--gpu-architecture={arch}",) + base + user


@dataclass(frozen=True)
class CompiledCode:
    """A compiled image plus what ptxas said about it, and the header files it was compiled from
    with their digests (``headers.read_headers``; None: not known), which a disk hit checks."""

    image: bytes
    output: str
    log: str
    registers: int | None
    shared_bytes: int | None
    spill_bytes: int | None
    headers: HeaderDigests | None = ()

    def __repr__(self) -> str:
        """Sizes and resources, not the image's bytes (``image``) or ptxas's log (``log``)."""
        return (
            f"<CompiledCode {self.output} {len(self.image)} bytes, registers={self.registers}, "
            f"shared_bytes={self.shared_bytes}, spill_bytes={self.spill_bytes}, log {len(self.log.splitlines())} lines>"
        )

    def to_bytes(self) -> bytes:
        meta = json.dumps(
            {
                "output": self.output,
                "log": self.log,
                "registers": self.registers,
                "shared_bytes": self.shared_bytes,
                "spill_bytes": self.spill_bytes,
                "headers": None if self.headers is None else [list(read) for read in self.headers],
            },
            sort_keys=True,
        ).encode()
        return _META_LENGTH.pack(len(meta)) + meta + self.image

    @classmethod
    def from_bytes(cls, data: bytes, output: str) -> CompiledCode:
        """The image ``to_bytes`` stored for an ``output`` build; ``InvalidCacheEntryError`` for
        anything else (the caller evicts it and compiles): every metadata field is checked for
        type and range, none is passed on unchecked."""
        if len(data) < _META_LENGTH.size:
            raise InvalidCacheEntryError(f"image entry truncated to {len(data)} bytes")
        (n,) = _META_LENGTH.unpack_from(data)
        end = _META_LENGTH.size + n
        if end >= len(data):
            raise InvalidCacheEntryError(f"image metadata of {n} bytes leaves no image in {len(data)} bytes")
        try:
            meta = json.loads(data[_META_LENGTH.size : end])
        except (ValueError, RecursionError):
            raise InvalidCacheEntryError("image metadata is not valid JSON") from None
        if not isinstance(meta, dict) or meta.keys() != _META_FIELDS:
            raise InvalidCacheEntryError("image metadata has the wrong fields")
        if meta["output"] != output:
            raise InvalidCacheEntryError(f"image metadata says output {meta['output']!r} for a {output} entry")
        if type(meta["log"]) is not str:
            raise InvalidCacheEntryError("image metadata's log is not text")
        for name, top in _META_COUNTS.items():
            value = meta[name]
            if value is not None and (type(value) is not int or not 0 <= value <= top):
                raise InvalidCacheEntryError(f"image metadata's {name} {value!r} is not an int in [0, {top}]")
        headers = meta["headers"]
        if headers is not None and not (type(headers) is list and all(map(_is_header_digest, headers))):
            raise InvalidCacheEntryError("image metadata's headers are not [path, sha256] pairs")
        return cls(
            bytes(data[end:]),
            output,
            meta["log"],
            meta["registers"],
            meta["shared_bytes"],
            meta["spill_bytes"],
            None if headers is None else tuple((path, digest) for path, digest in headers),
        )


def _is_header_digest(read: object) -> bool:
    return (
        type(read) is list
        and len(read) == 2
        and type(read[0]) is str
        and os.path.isabs(read[0])
        and type(read[1]) is str
        and _SHA256.fullmatch(read[1]) is not None
    )


_META_LENGTH = struct.Struct("<I")
_META_FIELDS = {"output", "log", "registers", "shared_bytes", "spill_bytes", "headers"}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_META_COUNTS = {"registers": 255, "shared_bytes": 2**32 - 1, "spill_bytes": 2**32 - 1}  # 255: ptxas's most per thread


class NvrtcFailure(Exception):
    """Compilation failed; carries NVRTC's log for the caller to map onto user code."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


def compile_source(source: str, program_name: str, options: Sequence[str], output: str = "cubin") -> CompiledCode:
    """``source`` compiled with ``options``; the result names the files NVRTC read for it.

    NVRTC looks for a quoted ``#include`` of the program's source in the directory of its name,
    the process's working directory for a bare name: whoever can write there would choose the
    device code. So the program is named inside an empty directory of ours, and NVRTC's log is
    given back with that directory left out. (``--no-source-include`` would also stop a header's
    quoted includes from being looked for beside it, which CUDA's own headers rely on.)"""
    nvrtc = _nvrtc()
    _check_loaded_library()
    with tempfile.TemporaryDirectory(prefix="kerneldsl-nvrtc-") as scratch:
        beside_source = os.path.join(scratch, "source", "")
        os.mkdir(beside_source, 0o700)
        trace = os.path.join(scratch, "includes")
        named = (beside_source + program_name).encode()
        (prog,) = _call("nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(source.encode(), named, 0, [], []))
        try:
            encoded = [o.encode() for o in (*options, *_include_trace(trace))]
            began = time.time_ns()
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
            log = _program_log(nvrtc, prog).replace(beside_source, "")
            if int(err) != 0:
                raise NvrtcFailure(log)
            image = _image(nvrtc, prog, output)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
        headers = read_headers(_traced_files(trace), began)
    return CompiledCode(image, output, log, *_resource_usage(log), headers)


# NVRTC has no dependency output (no -M, -MD or -MF; no API call): its front end lists the files it
# reads with --trace_includes, written with its diagnostics to --error_output, a file of ours (not
# the process's stderr); NVRTC's log keeps the diagnostics either way. Neither option reaches the key.
def _include_trace(path: str) -> tuple[str, ...]:
    return ("-Xcudafe", "--trace_includes", "-Xcudafe", f"--error_output={path}")


def _traced_files(path: str) -> tuple[str, ...] | None:
    """The files NVRTC's include trace at ``path`` names (one a line, indented by depth), each
    once, in order; None without a trace. A name without a directory is one of NVRTC's built-in
    headers, held in memory: a file read from disk is named by its directory (an include
    directory or its includer's, all absolute)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return None
    names = (os.fsdecode(line.lstrip(b" ")) for line in lines)
    files = (name if os.path.isabs(name) else os.path.join(os.getcwd(), name) for name in names if "/" in name)
    return tuple(dict.fromkeys(files))


# NVRTC writes into the buffers below: each is a fresh bytearray, never a bytes object (``b" " * 1``
# is CPython's shared one-byte ``b" "``, which an empty log would turn into ``b"\x00"`` process-wide).


def _program_log(nvrtc: Any, prog: Any) -> str:
    (size,) = _call("nvrtcGetProgramLogSize", nvrtc.nvrtcGetProgramLogSize(prog))
    buf = bytearray(size)
    _call("nvrtcGetProgramLog", nvrtc.nvrtcGetProgramLog(prog, buf))
    return buf.rstrip(b"\x00").decode(errors="replace")


def _image(nvrtc: Any, prog: Any, output: str) -> bytes:
    if output == "ptx":
        (size,) = _call("nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(prog))
        buf = bytearray(size)
        _call("nvrtcGetPTX", nvrtc.nvrtcGetPTX(prog, buf))
        return bytes(buf)
    (size,) = _call("nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(prog))
    buf = bytearray(size)
    _call("nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(prog, buf))
    return bytes(buf)


_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes spill stores")


def _resource_usage(log: str) -> tuple[int | None, int | None, int | None]:
    def first(pattern: re.Pattern[str]) -> int | None:
        m = pattern.search(log)
        return int(m.group(1)) if m else None

    registers = first(_REGISTERS)
    shared = first(_SMEM)
    return registers, (shared if shared is not None else (0 if registers is not None else None)), first(_SPILL)
