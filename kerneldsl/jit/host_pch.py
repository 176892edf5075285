"""The CPU device's shim, precompiled: a process that compiles many kernels parses it once.

Parsing ``kd_host.h`` is about half of a small kernel's host compile with GCC. GCC reads a
precompiled header in its place when ``<header>.gch`` sits beside the ``-include``d file and was
built with the same flags; when it does not match, GCC parses the text as before, so a stale or
missing one costs time, never a wrong image. The generated code is the same either way (the
module's visibility is a flag, ``-fvisibility=hidden``, because a ``#pragma`` in the shim does not
survive precompiling).

Precompiled headers live in a private folder of this process (removed at exit, and never shared
with a forked child, which makes its own), one per flag set, and are built only once a flag set
has compiled ``PRECOMPILE_AFTER`` kernels: a script that compiles one kernel pays nothing extra
(the first-call figure of ``kerneldsl bench cpu`` checks it). Only for GCC; other compilers get
the plain ``-include``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .. import logs
from ..runtime.host_toolchain import COMMON_FLAGS, HostCompiler, shim_dir

log = logs.get("host_compile")

PRECOMPILE_AFTER = 2  # kernels a flag set compiles from the shim's text before it is precompiled
_SHIM = "kd_host.h"


class PrecompiledShims:
    """This process's precompiled shims, one folder per flag set: ``<n>/kd_host.h`` (a link to the
    shim) and ``<n>/kd_host.h.gch``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._root: Path | None = None
        self._compiles: dict[tuple[str, ...], int] = {}
        self._ready: dict[tuple[str, ...], Path] = {}
        self._refused: set[tuple[str, ...]] = set()

    def include(self, compiler: HostCompiler, flags: tuple[str, ...]) -> tuple[str, ...]:
        """The ``-include`` flags for a kernel compiled with ``flags``: the precompiled shim's
        folder once this flag set has earned one, else the shim itself."""
        plain = ("-include", str(shim_dir() / _SHIM))
        if not compiler.is_gcc:
            return plain
        key = (*compiler.argv, "--", *flags)
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            ready = self._ready.get(key)
            if ready is not None:
                return ("-include", str(ready))
            seen = self._compiles.get(key, 0)
            self._compiles[key] = seen + 1
            if seen < PRECOMPILE_AFTER or key in self._refused:
                return plain
            built = self._build(compiler, flags)
            if built is None:
                self._refused.add(key)
                return plain
            self._ready[key] = built
            return ("-include", str(built))

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._root = None
        self._compiles.clear()
        self._ready.clear()
        self._refused.clear()

    def _build(self, compiler: HostCompiler, flags: tuple[str, ...]) -> Path | None:
        """Precompile the shim for ``flags`` (under the lock: one build per flag set); None when
        the compiler refuses (the flag set keeps the plain shim)."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="kerneldsl-shim-"))
            atexit.register(shutil.rmtree, self._root, True)
        folder = self._root / str(len(self._ready) + len(self._refused))
        folder.mkdir()
        header = folder / _SHIM
        header.symlink_to(shim_dir() / _SHIM)
        compile_flags = [f for f in COMMON_FLAGS if f != "-shared"]
        argv = [*compiler.argv, *compile_flags, *flags, "-x", "c++-header", str(header), "-o", f"{header}.gch"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        except OSError as exc:
            log.debug("the shim was not precompiled: %s", exc)
            return None
        if done.returncode:
            log.debug("the shim was not precompiled: %s", done.stderr.strip()[:500])
            return None
        return header


shims = PrecompiledShims()
