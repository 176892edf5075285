"""Checked execution on the CPU device: which checks a session runs, how they reach its builds, and
how the runtime's reports become typed errors that name lines.

``kd.Session(device="cpu", checks="bounds,races")`` or ``KERNELDSL_CHECKS=all``; off by default, so
the unchecked CPU device keeps its speed. The checks (docs/checks.md):

- ``bounds``: every access through a declared array parameter against its extent, and (through
  ``-fsanitize=bounds``) every index into a fixed-size array, ``__shared__`` ones included;
- ``races``: a shared-memory or array address written by one thread of a block and read or written
  by another with no barrier (or warp collective) between them; atomics never race;
- ``init``: a read of shared memory that no thread of the block wrote, and a kernel's read of a
  buffer made by ``empty()`` (``kd.empty``, ``session.empty``) where nothing (no kernel, copy or
  fill) wrote; ``init=nan`` fills such buffers with signalling NaNs instead (``NAN_FILL``), and
  keeps reporting shared memory's;
- ``sync``: a barrier some threads of the block never reach, or reach at another ``__syncthreads``
  (divergent code); a warp collective whose mask leaves out the calling lane or names lanes that
  exited or are elsewhere;
- ``undefined``: UndefinedBehaviorSanitizer's checks (overflow, bad shifts, ...), handled by the
  runtime, so no sanitizer library is loaded;
- ``seed=N``: run each block's threads in an order drawn from seed N (between barriers, too), so an
  order-dependent kernel shows its bug deterministically under some seed.

A session's checks are part of the image kind it loads (``output``), so checked and unchecked
images never mix, in memory or in the disk cache. Reports are ``CheckError`` subclasses naming the
kernel, the block and thread(s), the array and index, and the line: the runtime names sites by
their return addresses, and this module maps them to ``file:line`` with the module's line table
(``addr2line``; the ``#line`` directives in the source make those the body's lines).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import (
    BoundsCheckError,
    CheckConfigError,
    CheckError,
    InitCheckError,
    KernelFaultError,
    RaceCheckError,
    SyncCheckError,
    UndefinedBehaviorError,
)

CHECKS_ENV = "KERNELDSL_CHECKS"
REPORT_ENV = "KERNELDSL_CHECK_REPORT"  # ``kerneldsl check``: a file each finding is appended to, one JSON line each
HOST = "host"
BITS = {"bounds": 1, "races": 2, "init": 4, "sync": 8, "address": 16, "undefined": 32}
EVERY = ("bounds", "races", "init", "sync")  # ``all``: what needs no sanitizer runtime and no recompile of the process
_SEED = re.compile(r"seed=(\d{1,18})")
INIT_NAN = "init=nan"
# ``init=nan``: what fills a buffer made by ``empty()``, by dtype kind and item size. Floats get a
# signalling NaN (quiet bit clear, payload nonzero), which any arithmetic turns into a NaN in the
# result; integers and the rest get 0xA5 in every byte (a value far from 0 and 1 that is easy to
# spot: int32 -1515870811, uint8 165).
NAN_FILL: dict[tuple[str, int], int] = {
    ("f", 2): 0x7D01,
    ("f", 4): 0x7FA00001,
    ("f", 8): 0x7FF4000000000001,
    ("V", 2): 0x7FA1,  # bfloat16 (ml_dtypes' kind)
}
POISON_BYTE = 0xA5


@dataclass(frozen=True)
class Checks:
    """A set of checks, a schedule seed (0: threads in order), and whether ``empty()`` buffers are
    filled with signalling NaNs (``init=nan``) rather than their unwritten reads reported."""

    names: frozenset[str] = frozenset()
    seed: int = 0
    nan_fill: bool = False

    def __bool__(self) -> bool:
        return bool(self.names) or self.seed != 0

    @property
    def bits(self) -> int:
        return sum(BITS[name] for name in self.names)

    @property
    def empty_buffers(self) -> str:
        """What a session does with a buffer ``empty()`` makes: ``""`` nothing, ``"track"`` report
        reads of what nothing wrote, ``"nan"`` fill it with signalling NaNs."""
        if "init" not in self.names:
            return ""
        return "nan" if self.nan_fill else "track"

    def spelled(self) -> str:
        """The canonical spelling: the checks in a fixed order, then the seed."""
        parts = [INIT_NAN if name == "init" and self.nan_fill else name for name in BITS if name in self.names]
        return ",".join(parts + ([f"seed={self.seed}"] if self.seed else []))

    def built(self) -> Checks:
        """The checks an image is built with (the fill is the session's, not the image's)."""
        return Checks(self.names, self.seed)


NO_CHECKS = Checks()


def parse_checks(spec: str | Checks | None) -> Checks:
    """``"bounds,races"``, ``"all"`` (bounds, races, init, sync), ``"all,seed=3"``, ``""``/``"none"``
    (no checks); ``CheckConfigError`` names an unknown check."""
    if spec is None:
        return NO_CHECKS
    if isinstance(spec, Checks):
        return spec
    if not isinstance(spec, str):
        raise CheckConfigError(f"checks= takes a string such as 'bounds,races' or 'all', not {type(spec).__name__}")
    names: set[str] = set()
    seed = 0
    nan_fill = False
    for word in (w.strip().lower() for w in spec.split(",")):
        if word in ("", "none", "off"):
            continue
        if word == "all":
            names.update(EVERY)
        elif word in BITS:
            names.add(word)
        elif word == INIT_NAN:
            names.add("init")
            nan_fill = True
        elif (found := _SEED.fullmatch(word)) is not None:
            seed = int(found.group(1))
        else:
            raise CheckConfigError(
                f"unknown check {word!r} in checks={spec!r}: the checks are {', '.join(BITS)}, 'all' "
                f"({', '.join(EVERY)}), {INIT_NAN} (init, filling empty() buffers with signalling NaNs) and seed=N"
            )
    if "address" in names and names & {"races", "init"}:
        raise CheckConfigError(
            "checks='address' cannot be combined with races or init (AddressSanitizer and the race check's "
            "instrumentation exclude each other): run them in two sessions"
        )
    return Checks(frozenset(names), seed, nan_fill)


def environment_checks() -> Checks:
    """The checks ``$KERNELDSL_CHECKS`` asks for (none when unset)."""
    return parse_checks(os.environ.get(CHECKS_ENV, ""))


def require_address_sanitizer() -> None:
    """CheckConfigError unless AddressSanitizer's runtime is in the process: it must be loaded
    before anything else (``kerneldsl check --address`` preloads it)."""
    import ctypes

    if not hasattr(ctypes.CDLL(None), "__asan_init"):
        raise CheckConfigError(
            "checks='address' needs AddressSanitizer's runtime loaded before Python starts: run the script with "
            "`kerneldsl check --address SCRIPT`, or with LD_PRELOAD=$(c++ -print-file-name=libasan.so) "
            "ASAN_OPTIONS=detect_leaks=0"
        )


def output_for(checks: Checks) -> str:
    """The image kind a CPU-device session with ``checks`` loads: ``host``, or ``host+<checks>``."""
    return f"{HOST}+{checks.built().spelled()}" if checks else HOST


def is_host_output(output: str) -> bool:
    return output == HOST or output.startswith(HOST + "+")


def checks_of(output: str) -> Checks:
    """The checks a host image kind was built with."""
    return parse_checks(output.partition("+")[2]) if output.startswith(HOST + "+") else NO_CHECKS


def compile_flags(checks: Checks) -> tuple[str, ...]:
    """The compiler flags of a checked build: the checks' macros, line tables (reports name lines),
    no merging of the checks' failure calls (each keeps its own line), and the instrumentation."""
    if not checks:
        return ()
    flags = [f"-DKD_CHECKS={checks.bits}", f"-DKD_CHECK_SEED={checks.seed}", "-g1", "-fno-crossjumping"]
    flags += ["-fno-tree-tail-merge", "-fno-ipa-icf"]
    if checks.names & {"races", "init"}:
        flags.append("-fsanitize=thread")
    sanitized = ["bounds"] if "bounds" in checks.names else []
    if "undefined" in checks.names:
        sanitized = ["undefined"]
        flags.append("-fno-sanitize=vptr")
    if sanitized:
        flags += [f"-fsanitize={','.join(sanitized)}", "-fno-sanitize-recover=all"]
    if "address" in checks.names:
        flags.append("-fsanitize=address")
    return tuple(flags)


def empty_fill(dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """One element of ``dtype`` as ``init=nan`` fills ``empty()`` buffers (``NAN_FILL``), as bytes:
    a complex number's parts are each its float's."""
    size = dtype.itemsize
    if dtype.kind == "c" and ("f", size // 2) in NAN_FILL:
        return np.frombuffer(NAN_FILL["f", size // 2].to_bytes(size // 2, "little") * 2, np.uint8)
    pattern = NAN_FILL.get((dtype.kind, size))
    if pattern is None:
        return np.full(size, POISON_BYTE, np.uint8)
    return np.frombuffer(pattern.to_bytes(size, "little"), np.uint8)


# --- reports -------------------------------------------------------------------------------------

_TAG = re.compile(r"\[(bounds|races|init|sync|undefined)\] ")
_SITE = re.compile(r"\{\{site:([0-9a-f]+):([0-9a-f]+)\}\}")
_TLS = re.compile(r"\{\{tls:([0-9a-f]+):([0-9a-f]+)\}\}")
_SHIM = "kd_host.h"
# A relative #line name (the body file) comes back joined to the compile's scratch folder.
_SCRATCH = re.compile(r"^.*/kerneldsl-host-[^/]+/")


def check_error(code: int, name: str, api: str, detail: str, images: Mapping[int, bytes]) -> KernelFaultError:
    """The error for a failed launch: a ``CheckError`` subclass when a check found it (its sites
    resolved against ``images``, the checked modules' images by load address), else a plain
    ``KernelFaultError``."""
    tag = _TAG.search(detail)
    if tag is None:
        return KernelFaultError(code, name, api, detail)
    text = resolve_sites(detail[: tag.start()] + detail[tag.end() :], images)
    cls: type[CheckError] = {
        "bounds": BoundsCheckError,
        "races": RaceCheckError,
        "init": InitCheckError,
        "sync": SyncCheckError,
        "undefined": UndefinedBehaviorError,
    }[tag.group(1)]
    error = cls(code, name, api, text, tuple(_LINE.findall(text)))
    _record(tag.group(1), text)
    return error


def _record(check: str, text: str) -> None:
    """Append a finding to ``$KERNELDSL_CHECK_REPORT`` (set by ``kerneldsl check``), so findings a
    script catches are reported too."""
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"check": check, "report": text}) + "\n")


_LINE = re.compile(r"(?:at |, )([^\s,():]+:\d+)")


def resolve_sites(text: str, images: Mapping[int, bytes]) -> str:
    """``{{site:BASE:OFFSET}}`` -> ``file:line`` (the first frame outside the shim, inlined frames
    included) and ``{{tls:BASE:OFFSET}}`` -> the ``__shared__`` variable and byte offset."""
    sites: dict[int, list[tuple[str, str]]] = {}
    for base, offset in _SITE.findall(text):
        sites.setdefault(int(base, 16), []).append((base, offset))
    lines: dict[tuple[str, str], str] = {}
    for base, wanted in sites.items():
        image = images.get(base)
        found = _addr2line(image, [int(o, 16) for _, o in wanted]) if image is not None else {}
        for key in wanted:
            lines[key] = found.get(int(key[1], 16), "an unknown line")
    text = _SITE.sub(lambda m: lines.get((m.group(1), m.group(2)), "an unknown line"), text)
    variables: dict[str, str] = {}
    for base, offset in _TLS.findall(text):
        image = images.get(int(base, 16))
        variables[f"{base}:{offset}"] = _tls_variable(image, int(offset, 16)) if image is not None else f"+{offset}"
    return _TLS.sub(lambda m: variables.get(f"{m.group(1)}:{m.group(2)}", "?"), text)


def _tool(name: str) -> str | None:
    return shutil.which(name)


def _addr2line(image: bytes, offsets: list[int]) -> dict[int, str]:
    """Each offset's ``file:line`` in ``image``: the innermost inlined frame outside the shim."""
    tool = _tool("addr2line")
    if tool is None:
        return {}
    with tempfile.TemporaryDirectory(prefix="kerneldsl-check-") as scratch:
        path = Path(scratch) / "module.so"
        path.write_bytes(image)
        done = subprocess.run(
            [tool, "-e", str(path), "-i", "-a", *(hex(o) for o in offsets)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    found: dict[int, str] = {}
    current: int | None = None
    for line in done.stdout.splitlines():
        if line.startswith("0x"):
            current = int(line, 16)
            continue
        if current is None or current in found:
            continue
        place = line.strip().split(" (discriminator")[0]
        file, _, number = place.rpartition(":")
        if not file or file == "??" or Path(file).name == _SHIM or number in ("?", "0"):
            continue
        found[current] = f"{_SCRATCH.sub('', file)}:{number}"
    return found


def tls_symbols(image: bytes) -> list[tuple[int, int, str]]:
    """A module's thread-local symbols: (offset in its TLS block, size, demangled name)."""
    tool = _tool("readelf")
    if tool is None:
        return []
    with tempfile.TemporaryDirectory(prefix="kerneldsl-check-") as scratch:
        path = Path(scratch) / "module.so"
        path.write_bytes(image)
        done = subprocess.run([tool, "-sW", "-C", str(path)], capture_output=True, text=True, timeout=60, check=False)
    found = []
    for row in done.stdout.splitlines():
        parts = row.split(maxsplit=7)
        if len(parts) == 8 and parts[3] == "TLS" and parts[6] != "UND":
            found.append((int(parts[1], 16), int(parts[2], 0), parts[7]))
    return found


def not_shared(symbols: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """The thread-locals of a checked module that are not ``__shared__`` memory: the guards of
    statics' one-time initialization (a ``__shared__`` array of a class type has one)."""
    return [(offset, max(size, 1)) for offset, size, name in symbols if name.startswith("guard variable for")]


def _tls_variable(image: bytes, offset: int) -> str:
    """The ``__shared__`` variable at ``offset`` of the module's thread-local block, and the byte in it."""
    for start, size, name in tls_symbols(image):
        if start <= offset < start + max(size, 1) and not name.startswith("kd_host::"):
            return f"'{name.rpartition('::')[2]}' (byte {offset - start})"
    return f"at byte {offset} of the block's static shared memory"
