"""The installed wheel, used as a user would from outside the source tree (.ci/run, step 2): every
module of the package imports, each public area that needs no GPU answers one call, and a kernel
runs on the CPU device.

    python .ci/wheel_smoke.py CHECKOUT

CHECKOUT is the source tree the wheel was built from: kerneldsl must not be imported from there,
and every module it holds must be in the wheel. A module may fail to import only with an
``ExtraNotInstalledError``, for an extra this environment lacks (the wheel is installed without any).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any, NewType, TypeVar

import numpy as np

import kerneldsl as kd
from kerneldsl.errors import DistributedNotAvailableError, ExtraNotInstalledError

ARCH = "sm_90"  # compiling needs no GPU: NVRTC ships in a wheel
T = TypeVar("T")
n = NewType("n", int)


def check(condition: bool, what: str) -> None:
    if not condition:
        sys.exit(f"wheel smoke: {what}")


def modules_in(checkout: Path) -> set[str]:
    """The module names of the checkout's kerneldsl/ (``pkg/__init__.py`` is ``pkg``)."""
    names = set()
    for path in (checkout / "kerneldsl").rglob("*.py"):
        parts = path.relative_to(checkout).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def import_every_module(checkout: Path) -> None:
    """Walk the installed package and import each module; a package needing a missing extra is
    skipped with its modules, and nothing else may fail."""
    check(not Path(kd.__file__).resolve().is_relative_to(checkout), f"kerneldsl imported from {kd.__file__}")
    imported: set[str] = set()
    lacking_extra: dict[str, ExtraNotInstalledError] = {}
    for module in pkgutil.walk_packages(kd.__path__, "kerneldsl."):
        try:
            importlib.import_module(module.name)
        except ExtraNotInstalledError as exc:
            lacking_extra[module.name] = exc
            continue
        imported.add(module.name)
    not_shipped = {
        name for name in modules_in(checkout) - imported - {"kerneldsl"} if not name.startswith(tuple(lacking_extra))
    }
    check(not not_shipped, f"modules of the checkout missing from the wheel: {sorted(not_shipped)}")
    print(f"imported {len(imported) + 1} modules of kerneldsl")
    for name, error in lacking_extra.items():
        print(f"skipped {name} and its modules: {error}")


@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
    """


@kd.elementwise(result=T)
def axpy(a: kd.Scalar[T], x: kd.In[T], y: kd.In[T]) -> str:
    return "a * x + y"


@kd.fuse
def softplus(x: Any) -> Any:
    return kd.ops.log(kd.ops.exp(x) + 1)


def compile_each_public_area() -> None:
    """Kernels, kd.ops, elementwise, reductions, fusion and the Array API compile for a GPU that
    is not there, and the disk cache holds what they built."""
    x = np.ones(1000, np.float32)
    rows = np.ones((64, 100), np.float32)
    builds = {
        "kd.kernel compile": saxpy.compile(T=np.float64, arch=ARCH),
        "kd.kernel inspect": saxpy.inspect(x.copy(), x, np.float32(2.0), arch=ARCH),
        "kd.ops.add": kd.ops.add.inspect(x, x, arch=ARCH),
        "kd.ops.sum": kd.ops.sum.inspect(rows, axis=1, arch=ARCH),
        "kd.ops.cumsum": kd.ops.cumsum.inspect(x, arch=ARCH),
        "kd.elementwise": axpy.inspect(np.float32(2.0), x, x, arch=ARCH),
        "kd.fuse": softplus.inspect(x, arch=ARCH),
    }
    for area, build in builds.items():
        check(len(build.cubin) > 0, f"{area} built no cubin")
        print(f"{area}: cubin {len(build.cubin)} bytes ({build.origin})")

    import kerneldsl.array_api as xp

    check(xp.result_type(xp.float32, xp.float64) == xp.float64, "xp.result_type(float32, float64) is not float64")
    check(xp.finfo(xp.float32).eps == np.finfo(np.float32).eps, "xp.finfo(float32).eps differs from NumPy's")
    check(xp.add.inspect(x, x, arch=ARCH).cubin == builds["kd.ops.add"].cubin, "xp.add is not kd.ops.add")
    defaults = xp.__array_namespace_info__().default_dtypes()
    print(f"kerneldsl.array_api: result_type, finfo and add answer; default dtypes {defaults}")

    cache = kd.cache.get_default_cache()
    check(str(cache.directory) == os.environ["KERNELDSL_CACHE_DIR"], f"the cache is at {cache.directory}")
    check(len(cache.entries()) >= len(builds), f"the cache holds {len(cache.entries())} entries")
    print(f"kd.cache: {len(cache.entries())} entries, {cache.volume()} bytes in {cache.directory}")


def missing_extra_names_its_install() -> None:
    try:
        kd.distributed  # noqa: B018 - the access imports the extra
    except DistributedNotAvailableError as exc:
        check("pip install 'kerneldsl[distributed]'" in str(exc), f"no install hint: {exc}")
        print(f"kd.distributed without the extra: {exc}")
    else:
        check(False, "kd.distributed imported without the distributed extra")


def run_on_the_cpu_device() -> None:
    """A kernel executes on the CPU device: the wheel's host header and runtime (templates/host)
    compile with the system C++ compiler, and the result is NumPy's."""
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, np.float32)
    with kd.Session(device="cpu") as session:
        out = session.to_device(y)
        saxpy(out, session.to_device(x), np.float32(2.0))
        result = out.to_host()
    check(np.array_equal(result, 2 * x + y), "saxpy on the CPU device differs from NumPy")
    print("kd.Session(device='cpu'): saxpy ran on the host and matches NumPy")


def main() -> None:
    checkout = Path(sys.argv[1]).resolve()
    import_every_module(checkout)
    compile_each_public_area()
    missing_extra_names_its_install()
    run_on_the_cpu_device()


if __name__ == "__main__":
    main()
