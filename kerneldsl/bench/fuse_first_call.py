"""``kerneldsl bench fuse --only first``: a fused softmax's first call in a fresh process (GPU required).

Each figure is the median over fresh interpreter processes of the first ``softmax(x)`` on a (4096,
4096) float32 device array, synchronized, timed from the call (the session and the upload come
before it; the result is checked after, and a wrong one fails the process and the bench): with an
empty disk cache (trace, render, NVRTC, load, launch) and with the cache that run filled (trace,
disk hit, load, launch). The warm-cache process also says whether the call imported Jinja or NVRTC,
which a disk hit should not need; the empty-cache process, whether the templates' compiled code
(``kerneldsl.jit.template_cache``: built with the package, or written beside a checkout's templates by
its first render) was there, or the call parsed its templates.

Python's bytecode of every module the call imports (Jinja, cuda.pathfinder, kerneldsl's own) is in
place, as an installed environment has it: the processes share a ``PYTHONPYCACHEPREFIX`` that one
untimed process, with its own empty disk cache, fills first, even where the environment says not to
write bytecode (``PYTHONDONTWRITEBYTECODE``). Site-packages without bytecode that Python cannot
write, as on the lent GPU machine, cost 0.1-0.2 s of source compilation a process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROCESSES = 3  # fresh processes per figure (the median is reported)

SCRIPT = """
import json, sys, time
from pathlib import Path
import numpy as np
import kerneldsl as kd
from kerneldsl.bench.fuse_bench import check, expected, softmax
s = kd.default_session()
host = np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32)
x = s.to_device(host)
s.synchronize()
jinja, nvrtc = "jinja2" in sys.modules, "cuda.bindings.nvrtc" in sys.modules
package = Path(kd.__file__).parent  # codegen.templates_dir(), without importing codegen before the call
templates = package / "templates" if (package / "templates").is_dir() else package.parent / "templates"
compiled = any((templates / "__pycache__").glob("*.jinja"))
start = time.perf_counter()
y = softmax(x)
s.synchronize()
elapsed = time.perf_counter() - start
check("the first softmax", y.to_host(), *expected("softmax", host, host, host))
imported = int("jinja2" in sys.modules and not jinja), int("cuda.bindings.nvrtc" in sys.modules and not nvrtc)
Path(sys.argv[1]).write_text(json.dumps([elapsed, *imported, int(compiled)]))
"""


def _first_call(cache_dir: str, bytecode: str) -> tuple[float, int, int, int]:
    """(seconds, whether the call imported jinja2, whether it imported NVRTC, whether the templates'
    compiled code was there before it) in a fresh process, which writes them to a file (whatever
    it prints is not parsed)."""
    env = {**os.environ, "KERNELDSL_CACHE_DIR": cache_dir, "PYTHONPYCACHEPREFIX": bytecode}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else the untimed process leaves the prefix empty
    result = Path(cache_dir) / "first-call.json"
    subprocess.run([sys.executable, "-c", SCRIPT, str(result)], env=env, capture_output=True, text=True, check=True)
    seconds, jinja, nvrtc, compiled = json.loads(result.read_text())
    return float(seconds), int(jinja), int(nvrtc), int(compiled)


def bench_first_call(args: argparse.Namespace) -> dict[str, float]:
    cold, warm, imports, compiled = [], [], [], 0
    with tempfile.TemporaryDirectory() as bytecode:
        with tempfile.TemporaryDirectory() as untimed:
            _first_call(untimed, bytecode)
        for _ in range(PROCESSES):
            with tempfile.TemporaryDirectory() as cache_dir:
                seconds, _, _, was_compiled = _first_call(cache_dir, bytecode)
                cold.append(seconds)
                compiled += was_compiled
                seconds, jinja, nvrtc, _ = _first_call(cache_dir, bytecode)
                warm.append(seconds)
                imports.append((jinja, nvrtc))
    return {
        "first call, empty disk cache (s, target < 0.2)": statistics.median(cold),
        "first call, disk hit (s, target < 0.2)": statistics.median(warm),
        "disk-hit calls that imported jinja2": float(sum(j for j, _ in imports)),
        "disk-hit calls that imported NVRTC": float(sum(n for _, n in imports)),
        f"empty-cache calls with the templates' compiled code (of {PROCESSES})": float(compiled),
    }
