"""Shared test configuration.

* ``isolated_cache``: a private, empty kerneldsl disk cache for one test.
* ``isolated_cache_module``: the same for a whole module (for module-scoped build fixtures).
* ``rng``: a NumPy generator seeded from the test's node id, the same in every process.
* Tests marked ``gpu`` run on the GPU when there is one; without one they run on the CPU device
  (marked ``cpu_device``), except those ``cpu_device_exclusions`` lists with the reason, and are
  skipped under ``-m gpu``, which asks for a real GPU.
* The whole session uses a private disk cache and data directory (the sealing secret), never the user's.
* ``drv``: the recording driver double (``driver_double.FakeDriver``) installed for one test;
  sessions still open at its end are closed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CACHE_ENV = "KERNELDSL_CACHE_DIR"


def pytest_configure(config: pytest.Config) -> None:
    """Tests never read or write the user's own kernel cache, nor the secret that seals stored
    sources: the session gets a private cache and data directory."""
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="kerneldsl-test-cache-")
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="kerneldsl-test-data-")


def pytest_report_header(config: pytest.Config) -> str:
    """Say which launch path the run exercises: without the compiled module its tests skip."""
    from kerneldsl.launch import fastpath

    return f"kerneldsl C launch path: {fastpath.status()}"


def seed_for(nodeid: str) -> int:
    """A CRC-32 of the test's node id: each test its own data, the same in every process
    (``hash()`` of a string changes with ``PYTHONHASHSEED``)."""
    return zlib.crc32(nodeid.encode())


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded by ``seed_for`` the requesting test."""
    return np.random.default_rng(seed_for(request.node.nodeid))


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the process-wide disk cache at a fresh temporary directory for one test."""
    import kerneldsl.cache

    directory = tmp_path / "kerneldsl-cache"
    monkeypatch.setenv(CACHE_ENV, str(directory))
    kerneldsl.cache.set_default_cache(None)
    try:
        yield directory
    finally:
        kerneldsl.cache.set_default_cache(None)


@pytest.fixture(scope="module")
def isolated_cache_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Like ``isolated_cache``, shared by every test of one module."""
    import kerneldsl.cache

    directory = tmp_path_factory.mktemp("kerneldsl-cache-module") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(directory))
        kerneldsl.cache.set_default_cache(None)
        try:
            yield directory
        finally:
            kerneldsl.cache.set_default_cache(None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    try:
        from kerneldsl.runtime.driver import driver_available

        available = driver_available()
        reason = "no CUDA driver or device on this machine"
    except Exception as exc:  # an import problem must not hide every other test
        available = False
        reason = f"the CUDA driver could not be queried: {type(exc).__name__}: {exc}"
    if available:
        _import_interop_libraries()
        return
    if "gpu" in (config.option.markexpr or "") or not _cpu_device_available():
        skip = pytest.mark.skip(reason=reason)  # ``-m gpu`` asks for a real GPU
        for item in gpu_items:
            item.add_marker(skip)
        return
    from checked_exclusions import checked_exclusion
    from cpu_device_exclusions import exclusion

    checked = bool(os.environ.get("KERNELDSL_CHECKS"))  # CI's checked run of the suite
    for item in gpu_items:
        item.add_marker(pytest.mark.cpu_device)
        _CPU_DEVICE_MODULES.add(item.nodeid.split("::", 1)[0])
        why = exclusion(item.nodeid)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=f"not on the CPU device: {why}"))
        elif checked and (why := checked_exclusion(item.nodeid)) is not None:
            item.add_marker(pytest.mark.skip(reason=f"not with checks on: {why}"))


_CPU_DEVICE_MODULES: set[str] = set()  # test files with a gpu test that runs on the CPU device


def _cpu_device_available() -> bool:
    from kerneldsl.runtime.selection import is_available

    return is_available("cpu")


@pytest.fixture(scope="module", autouse=True)
def _on_the_cpu_device(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test file of ``gpu`` tests on a machine without a GPU runs on the CPU device:
    ``KERNELDSL_DEVICE=cpu`` while it runs, set before its module fixtures open sessions, so
    ``Session(0)`` and the default session are the CPU device's."""
    if request.node.nodeid.split("::", 1)[0] not in _CPU_DEVICE_MODULES:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELDSL_DEVICE", "cpu")
        yield


def _import_interop_libraries() -> None:
    """Import CuPy and PyTorch before any GPU test runs: PyTorch's first import failed on the
    H200 when it happened after other GPU tests in the same process (a schema-parse error
    inside torch), and a failed import leaves the module half-initialized for the session."""
    import importlib

    for name in ("torch", "cupy"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def in_threads(work: Callable[[int], None], count: int = 4) -> None:
    """Run ``work(k)`` for ``k`` in ``range(count)``, each on its own thread, all at once; an
    exception in any of them is raised here, in the test's thread."""
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@contextlib.contextmanager
def installed_driver(fake: Any, *kernels: Any) -> Iterator[Any]:
    """Route driver calls to ``fake``; afterwards close the sessions still open and make
    ``kernels`` forget what they bound to them (both launch paths)."""
    from kerneldsl.runtime import open_sessions, use_driver

    with use_driver(fake):
        try:
            yield fake
        finally:
            for s in open_sessions():
                try:
                    s.close()
                except Exception:
                    pass
            for k in kernels:
                k._bound.clear()
                k._forget_launches()


@pytest.fixture
def drv() -> Iterator[object]:
    from driver_double import FakeDriver

    with installed_driver(FakeDriver()) as fake:
        yield fake


def launch_outcome(drv: Any, call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call on the driver double did: its result's shape, dtype and launched grids, or its
    error (what the warm-path tests compare between the warm and the full path)."""
    before = len(drv.launches)
    try:
        result = call()
    except Exception as e:  # noqa: BLE001  # the error is the outcome compared
        return ("error", type(e), str(e))
    return ("ok", result.shape, result.dtype, tuple(launch[1] for launch in drv.launches[before:]))


@pytest.fixture
def lib(drv: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The cuBLAS double (``blas_double.FakeCublas``) in place of nvmath's binding, over ``drv``."""
    from blas_double import install

    from kerneldsl import blas

    yield install(drv, monkeypatch)
    blas.gemm._forget_launches()
