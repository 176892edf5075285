"""Cold start: a fresh process, from its first line to its first numpy result (GPU required).

Each figure is the median over fresh interpreter processes, measured inside the process from its
first statement (interpreter start-up is the same for everyone and left out):

- ``import numpy`` and ``import kerneldsl`` alone;
- kerneldsl: declare saxpy, call it on 1,024 float32 numpy elements, get the result back, with
  the disk cache warm (the usual case) and with an empty one (NVRTC compiles);
- the floor: the same work with ``cuda.bindings`` and the cubin kerneldsl built, loaded from a file;
- CuPy: ``RawKernel`` on the same source (its kernel cache warm), ``asarray``, launch, ``asnumpy``.

A warm-up run of every script comes first, so the OS file cache is warm for all of them alike,
and every script reads its modules' bytecode from one private cache that the warm-up fills (an
installed package's is compiled at install), whatever ``PYTHONDONTWRITEBYTECODE`` says: a checkout
run with it set would otherwise compile kerneldsl's modules in every process, and only kerneldsl's.

The kerneldsl figure is also split where the script marks it: numpy, then ``import kerneldsl``
and the declaration, then the first call (session, disk hit, launch, copy back).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from ..cache import signing_key
from .report import Report, print_report

SOURCE = """
index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
if (i < n) y[i] = a * x[i] + y[i];
"""

TIMED = """
import time
_start = time.perf_counter()
{body}
print(time.perf_counter() - _start)
"""

IMPORT_NUMPY = "import numpy"
IMPORT_KERNELDSL = "import kerneldsl"

KERNELDSL = f"""
from typing import NewType, TypeVar
import numpy as np
print(time.perf_counter() - _start)
import kerneldsl as kd
T = TypeVar("T")
n = NewType("n", int)
@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], a: kd.Scalar[T]) -> str:
    return {SOURCE!r}
print(time.perf_counter() - _start)
y, x = np.ones(1024, np.float32), np.arange(1024, dtype=np.float32)
saxpy(y, x, np.float32(2))
if not (y == 1 + 2 * x).all(): raise SystemExit("saxpy gave a wrong result")
"""

FLOOR = """
import numpy as np
from cuda.bindings import driver as cu
def ok(result):
    if result[0] != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(result[0])
    return result[1] if len(result) == 2 else result[1:]
ok(cu.cuInit(0))
dev = ok(cu.cuDeviceGet(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))
module = ok(cu.cuModuleLoadData(open({cubin!r}, "rb").read()))
function = ok(cu.cuModuleGetFunction(module, {entry!r}.encode()))
y, x = np.ones(1024, np.float32), np.arange(1024, dtype=np.float32)
dy, dx = ok(cu.cuMemAlloc(y.nbytes)), ok(cu.cuMemAlloc(x.nbytes))
ok(cu.cuMemcpyHtoD(dy, y.ctypes.data, y.nbytes))
ok(cu.cuMemcpyHtoD(dx, x.ctypes.data, x.nbytes))
import ctypes
args = [ctypes.c_void_p(int(dy)), ctypes.c_void_p(int(dx)), ctypes.c_float(2.0), ctypes.c_int(1024)]
pointers = (ctypes.c_void_p * 4)(*[ctypes.addressof(a) for a in args])
ok(cu.cuLaunchKernel(function, 4, 1, 1, 256, 1, 1, 0, 0, ctypes.addressof(pointers), 0))
ok(cu.cuMemcpyDtoH(y.ctypes.data, dy, y.nbytes))
if not (y == 1 + 2 * x).all(): raise SystemExit("saxpy gave a wrong result")
"""

CUPY = f"""
import numpy as np
import cupy as cp
kernel = cp.RawKernel(r'''
typedef int index_t;
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {{ {SOURCE} }}
''', "saxpy")
y, x = np.ones(1024, np.float32), np.arange(1024, dtype=np.float32)
dy, dx = cp.asarray(y), cp.asarray(x)
kernel((4,), (256,), (dy, dx, np.float32(2), np.int32(1024)))
y = cp.asnumpy(dy)
if not (y == 1 + 2 * x).all(): raise SystemExit("saxpy gave a wrong result")
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per figure (median reported)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _seconds(script: str, env: dict[str, str]) -> list[float]:
    """The times the script printed (its marks, then the total), in seconds."""
    code = TIMED.format(body=textwrap.dedent(script))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"a cold-start script failed:\n{out.stderr}")
    return [float(line) for line in out.stdout.split()]


def _median_ms(script: str, env: dict[str, str], runs: int, fresh_cache: bool = False) -> list[float]:
    """Per printed time (marks, then the total), its median over ``runs`` fresh processes, in ms."""
    samples = []
    for _ in range(runs):
        if fresh_cache:
            with tempfile.TemporaryDirectory() as empty:
                samples.append(_seconds(script, {**env, "KERNELDSL_CACHE_DIR": empty}))
        else:
            samples.append(_seconds(script, env))
    return [statistics.median(column) * 1e3 for column in zip(*samples)]


def _environment(cache: str, work: Path) -> dict[str, str]:
    """The scripts' environment: the kernel cache, and one bytecode cache for every module."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "KERNELDSL_CACHE_DIR": cache, "PYTHONPYCACHEPREFIX": str(work / "bytecode")}


def _floor_script(cache: str, work: Path) -> str:
    """The floor reads the cubin kerneldsl built for this device (taken from a warm process)."""
    probe = (
        "import time\n_start = time.perf_counter()\n"
        + KERNELDSL
        + "\nb = next(iter(saxpy._builds.values()))\nopen({path!r}, 'wb').write(b.cubin)\nprint(b.generated.entry)"
    )
    cubin = str(work / "saxpy.cubin")
    entry = subprocess.run(
        [sys.executable, "-c", probe.format(path=cubin)],
        env=_environment(cache, work),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    return FLOOR.format(cubin=cubin, entry=entry)


def measure(runs: int) -> Report:
    if signing_key() is None:  # the scripts share this process's environment, and so its secret
        print("note: no usable kerneldsl secret, so disk hits render their sources (imports Jinja)", file=sys.stderr)
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        cache = str(work / "cache")
        env = _environment(cache, work)
        floor = _floor_script(cache, work)  # also fills the cache: the kerneldsl figures are warm
        scripts = {
            "import numpy": IMPORT_NUMPY,
            "import kerneldsl": IMPORT_KERNELDSL,
            "kerneldsl": KERNELDSL,
            "floor": floor,
            "cupy": CUPY,
        }
        for script in scripts.values():  # warm-up: OS file cache, CuPy's kernel cache
            _seconds(script, env)
        times = {name: _median_ms(script, env, runs) for name, script in scripts.items()}
        cold = _median_ms(KERNELDSL, env, max(3, runs // 2), fresh_cache=True)[-1]
    ms = {name: t[-1] for name, t in times.items()}
    numpy_done, declared, _ = times["kerneldsl"]
    return {
        "import (ms)": {"import numpy": ms["import numpy"], "import kerneldsl": ms["import kerneldsl"]},
        "first numpy result in a fresh process (ms)": {
            "kerneldsl, warm disk cache": ms["kerneldsl"],
            "kerneldsl, empty disk cache (NVRTC compiles)": cold,
            "floor: cuda.bindings + prebuilt cubin": ms["floor"],
            "CuPy RawKernel, warm kernel cache": ms["cupy"],
        },
        "kerneldsl, warm disk cache, by phase (ms)": {
            "import numpy": numpy_done,
            "import kerneldsl + declare saxpy": declared - numpy_done,
            "first call: session, disk hit, launch, copy": ms["kerneldsl"] - declared,
        },
        "ratios": {
            "kerneldsl / floor (target <= 1.15)": ms["kerneldsl"] / ms["floor"],
            "kerneldsl / CuPy (target <= 0.8)": ms["kerneldsl"] / ms["cupy"],
            "import kerneldsl / import numpy (target <= 1.3)": ms["import kerneldsl"] / ms["import numpy"],
        },
    }


def run(args: argparse.Namespace) -> Report:
    report = measure(args.runs)
    print_report(report, args)
    return report
