"""Headers a build includes: the CUDA runtime's and CCCL's (CUB, libcu++, Thrust) from the
``kerneldsl[headers]`` wheels, found with cuda-pathfinder, and the user's own ``include_dirs=``.

Every header is in the image's key: the wheels by their versions (read from their metadata
directories, so a disk hit imports neither cuda-pathfinder nor NVRTC), the user's headers by
the sha256 of each file the build can open, found by following their ``#include`` lines.

Following ``#include`` lines cannot see every file the compiler opens (an ``#include MACRO``, a
path through a symlink), so the key is not all: a compile records each file NVRTC reports it read
(``read_headers``), the image is stored with those outside the wheels and their digests, and a
disk hit reads them again (``headers_unchanged``): a header that changed is a miss. What a build
tests but does not read (``__has_include``) is not recorded.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import HeadersNotAvailableError
from ..installed import dist_info_pattern, first_version
from .device_code import DeviceCode

# An #include line with a literal target; fullmatch per line so a computed include is left as is.
_INCLUDE = re.compile(r'[ \t]*#[ \t]*include[ \t]*(<[^<>"\n]+>|"[^<>"\n]+")[ \t]*(//.*)?')
_INCLUDE_ANYWHERE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(<[^<>"\n]+>|"[^<>"\n]+")', re.M)
# library -> (wheel, cuda-pathfinder's name, a header whose bytes stand for a non-wheel copy)
_LIBRARIES = {
    "cccl": ("nvidia-cuda-cccl", "cccl", "cuda/std/__cccl/version.h"),
    "cudart": ("nvidia-cuda-runtime", "cudart", "cuda_runtime_api.h"),
}
_INSTALL = "pip install 'kerneldsl[headers]'"
# How far a file's modification time may trail the moment it was written: the kernel stamps files
# from a clock that lags ``time.time_ns()`` by up to a tick (10 ms at HZ=100).
_STAMP_LAG_NS = 20_000_000

HeaderDigests = tuple[tuple[str, str], ...]  # (path, sha256 of its bytes), in the order compiled


def hoist_includes(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` with its ``#include`` lines blanked (so line numbers stay), and what they name
    (``<cub/cub.cuh>``, ``"mine.cuh"``), in order: the template places them at file scope."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        match = _INCLUDE.fullmatch(line)
        if match:
            found.append(match.group(1))
            lines[i] = ""
    return "\n".join(lines), tuple(found)


@dataclass(frozen=True)
class Headers:
    """What a build includes: the wheels' identity when it needs them, each user header's digest."""

    system: str | None  # "nvidia-cuda-cccl 13.3.5, nvidia-cuda-runtime 13.5.37"; None: not needed
    user: tuple[tuple[str, str], ...]  # (directory index:path in it, sha256 of its bytes)
    include_dirs: tuple[str, ...]

    def material(self) -> dict[str, Any]:
        """The key material's ``headers`` field."""
        return {"system": self.system, "user": dict(self.user)}

    def options(self) -> tuple[str, ...]:
        """NVRTC's ``-I`` options, the user's directories first (located only for a compile)."""
        dirs = self.include_dirs + (system_include_dirs() if self.system is not None else ())
        return tuple(f"-I{d}" for d in dirs)

    def outside_wheels(self, read: HeaderDigests | None) -> HeaderDigests | None:
        """The files of ``read`` (what a compile read) that a disk hit reads again: all but the
        wheels' headers, which the key names by version (after the compile, so located)."""
        if read is None or self.system is None:
            return read
        wheels = tuple(os.path.join(os.path.realpath(d), "") for d in system_include_dirs())
        return tuple((path, digest) for path, digest in read if not os.path.realpath(path).startswith(wheels))


NO_HEADERS = Headers(None, (), ())


def resolve(code: DeviceCode, targets: Sequence[str]) -> Headers:
    """The headers of a build whose body and device functions include ``targets``: each found in
    an include directory is hashed and followed; any other, or ``includes=``, needs the wheels.
    The include directories reach the compiler even without such a target (``#include MACRO``)."""
    if not targets and not code.includes and not code.include_dirs:
        return NO_HEADERS
    system = bool(code.includes)
    digests: dict[str, str] = {}
    pending: list[tuple[str, str | None]] = [(target, None) for target in targets]
    while pending:
        target, beside = pending.pop()
        located = _locate(target, beside, code.include_dirs)
        if located is None:
            system = True
            continue
        name, path = located
        if name in digests:
            continue
        data = _read(path)
        digests[name] = hashlib.sha256(data).hexdigest()
        text = data.decode("utf-8", errors="replace")
        pending.extend((m.group(1), os.path.dirname(path)) for m in _INCLUDE_ANYWHERE.finditer(text))
    return Headers(system_identity() if system else None, tuple(sorted(digests.items())), code.include_dirs)


def _locate(target: str, beside: str | None, include_dirs: tuple[str, ...]) -> tuple[str, str] | None:
    """(key name, path) of ``target`` as NVRTC finds it: a quoted name beside its includer
    first, then the include directories in order; None when none holds it (a system header)."""
    relative = target[1:-1]
    if os.path.isabs(relative):
        return None
    places = ([beside] if target.startswith('"') and beside is not None else []) + list(include_dirs)
    for place in places:
        path = os.path.join(place, relative)  # not normalized: "lnk/../h.h" is where the OS takes it
        if os.path.isfile(path):
            return _key_name(path, include_dirs), path
    return None


def _key_name(path: str, include_dirs: tuple[str, ...]) -> str:
    """A user header's name in key material: its path inside the first include directory that
    holds it, prefixed by that directory's position (no machine's absolute path)."""
    for index, directory in enumerate(include_dirs):
        inside = os.path.relpath(path, directory)
        if not inside.startswith(".."):
            return f"{index}:{inside}"
    return f"0:{os.path.relpath(path, include_dirs[0])}"


def _read(path: str) -> bytes:
    try:
        return _regular_file_bytes(path)[0]
    except OSError as exc:
        raise HeadersNotAvailableError(f"header {path!r} cannot be read: {exc}") from None


def read_headers(paths: Sequence[str] | None, since_ns: int) -> HeaderDigests | None:
    """(path, sha256) of each file a compile that began at ``since_ns`` (``time.time_ns()``)
    read; None when the compiler did not say which (``paths`` None), or when one cannot be read
    again or was modified once the compile had begun: its bytes now may not be those compiled."""
    if paths is None:
        return None
    read = []
    for path in paths:
        try:
            data, modified_ns = _regular_file_bytes(path)
        except OSError:
            return None
        if modified_ns >= since_ns - _STAMP_LAG_NS:
            return None
        read.append((path, hashlib.sha256(data).hexdigest()))
    return tuple(read)


def headers_unchanged(recorded: HeaderDigests | None) -> bool:
    """Whether each file an image was compiled from still holds the bytes it was compiled from
    (None: not known, so never)."""
    if recorded is None:
        return False
    for path, digest in recorded:
        try:
            data, _ = _regular_file_bytes(path)
        except OSError:
            return False
        if hashlib.sha256(data).hexdigest() != digest:
            return False
    return True


def _regular_file_bytes(path: str) -> tuple[bytes, int]:
    """The bytes of the regular file at ``path`` and its modification time in ns; OSError for
    anything else. Opened without blocking, so a FIFO put in a header's place is refused, not
    waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read(), info.st_mtime_ns


@lru_cache(maxsize=1)
def system_identity() -> str:
    """Which CUDA runtime and CCCL headers compile here: each wheel's version, or for a copy
    found elsewhere (a toolkit), the sha256 of its version header."""
    parts = []
    for library, (wheel, _, stamp) in sorted(_LIBRARIES.items()):
        version = first_version(dist_info_pattern(wheel))
        if version is None:
            with open(os.path.join(_located(library), stamp), "rb") as f:
                version = "sha256:" + hashlib.sha256(f.read()).hexdigest()[:16]
        parts.append(f"{wheel} {version}")
    return ", ".join(parts)


@lru_cache(maxsize=1)
def system_include_dirs() -> tuple[str, ...]:
    """CCCL's include directory, then the CUDA runtime's."""
    return (_located("cccl"), _located("cudart"))


def _located(library: str) -> str:
    try:
        from cuda.pathfinder import locate_nvidia_header_directory
    except ImportError:  # pragma: no cover - cuda-pathfinder is a dependency
        raise HeadersNotAvailableError(f"cuda-pathfinder is not installed: {_INSTALL}") from None
    wheel, name, _ = _LIBRARIES[library]
    found = locate_nvidia_header_directory(name)
    if found is None or found.abs_path is None:
        raise HeadersNotAvailableError(f"the {wheel} headers are not installed; CUDA headers need: {_INSTALL}")
    return str(found.abs_path)
