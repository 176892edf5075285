"""``kerneldsl bench cpu --only first``: a small kernel's first call on the CPU device in fresh processes.

Three processes share one new disk cache (``KERNELDSL_CACHE_DIR``), each timing the session's start
and the kernel's first call (synchronized; the 1024-element upload comes before it):

1. another kernel into the empty cache: the session builds the host runtime library as well;
2. the small kernel, cold: the runtime library is a disk hit, the kernel compiles (target <= 0.3 s);
3. the small kernel again: a disk hit, which should load no compiler and no Jinja. The process
   records every subprocess it starts (``subprocess.Popen``, hooked before kerneldsl is imported)
   and whether ``jinja2`` is in ``sys.modules`` after the call.

Python's bytecode is in place for all three, as in an installed environment: an untimed process
with its own empty cache fills a shared ``PYTHONPYCACHEPREFIX`` first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NewType

import kerneldsl as kd

n = NewType("n", int)

SCRIPT = """
import json, subprocess, sys, time
spawned = []
_start = subprocess.Popen.__init__
def _record(self, args, *rest, **options):
    spawned.append(args if isinstance(args, str) else " ".join(map(str, args)))
    _start(self, args, *rest, **options)
subprocess.Popen.__init__ = _record
import numpy as np
import kerneldsl as kd
from kerneldsl.bench.cpu_first_call import small_kernel
scale = int(sys.argv[2])
kernel = small_kernel()
t0 = time.perf_counter()
session = kd.Session(device="cpu")
t1 = time.perf_counter()
x = session.to_device(np.arange(1024, dtype=np.float32))
session.synchronize()
before = len(spawned)
jinja_before = "jinja2" in sys.modules
t2 = time.perf_counter()
kernel(x, np.float32(3), SCALE=scale)
session.synchronize()
t3 = time.perf_counter()
if not np.array_equal(x.to_host(), np.arange(1024, dtype=np.float32) * scale + 3):
    raise AssertionError("the small kernel computed a wrong result")
from kerneldsl.runtime.host_toolchain import host_compiler  # asked once a process: no new run here
compiler = " ".join(host_compiler().argv)
result = {
    "compiler_runs": [command for command in spawned if command.startswith(compiler + " ")],
    "session": t1 - t0, "first_call": t3 - t2, "jinja_loaded": "jinja2" in sys.modules,
    "jinja_imported_by_call": "jinja2" in sys.modules and not jinja_before,
    "spawned_by_call": spawned[before:], "spawned": spawned,
}
open(sys.argv[1], "w").write(json.dumps(result))
"""


def small_kernel() -> kd.Kernel:
    """``x = x * SCALE + offset`` a thread an element; each ``SCALE`` is its own build. A new
    kernel object each call, so nothing is shared in-process."""

    @kd.kernel(grid=kd.cdiv(n, 256), block=256)
    def scale_offset(x: kd.InOut[kd.float32, n], offset: kd.Scalar[kd.float32], SCALE: kd.Const[int] = 1) -> str:
        return """
        index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
        if (i < n) x[i] = x[i] * SCALE + offset;
        """

    return scale_offset


def _child(cache_dir: str, bytecode: str, scale: int) -> dict[str, Any]:
    env = {**os.environ, "KERNELDSL_CACHE_DIR": cache_dir, "PYTHONPYCACHEPREFIX": bytecode}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("KERNELDSL_DEVICE", None)  # the script names its device
    result = Path(cache_dir) / "first-call.json"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(result), str(scale)], env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode:
        raise RuntimeError(f"the first-call process failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(result.read_text()))


def first_calls() -> dict[str, dict[str, Any]]:
    """What each of the three processes measured (``empty``, ``cold``, ``hit``): the first builds
    ``SCALE=2``, so the second's ``SCALE=1`` is a miss and the third's a hit."""
    with tempfile.TemporaryDirectory() as bytecode:
        with tempfile.TemporaryDirectory() as untimed:
            _child(untimed, bytecode, 1)
        with tempfile.TemporaryDirectory() as cache_dir:
            return {
                "empty": _child(cache_dir, bytecode, 2),
                "cold": _child(cache_dir, bytecode, 1),
                "hit": _child(cache_dir, bytecode, 1),
            }
