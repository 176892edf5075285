"""Shared test configuration.

* ``isolated_cache``: a private, empty kerneldsl disk cache for one test.
* ``isolated_cache_module``: the same for a whole module (for module-scoped build fixtures).
* ``rng``: a NumPy generator seeded from the test's node id, the same in every process;
  ``fresh_rng``: one seeded anew every run (``seed_of`` names its seed in a failure message).
* Sessions: ``fake_session``, a ``Session(0)`` over the driver double ``drv`` for one test;
  ``device_session``, ``Session(0)`` of the device a module's ``gpu`` tests run on (the GPU, or the
  CPU device), shared by the module's tests; ``fresh_device_session``, the same for one test
  alone; ``default_device_session``, kerneldsl's default session (never closed by a test).
* Tests marked ``gpu`` run on the GPU when there is one; without one they run on the CPU device
  (marked ``cpu_device``), except those ``cpu_device_exclusions`` lists with the reason, and are
  skipped under ``-m gpu``, which asks for a real GPU.
* The whole session uses a private disk cache and data directory (the sealing secret), never the user's.
* ``drv``: the recording driver double (``driver_double.FakeDriver``) installed for one test;
  sessions still open at its end are closed.
* ``--render-digests=FILE``: every kernel source this pytest process renders (the CUDA C++ that
  NVRTC or the CPU device's host compiler is given, and its Python host adapter) is hashed, and
  ``FILE`` gets one line per distinct source, ``<sha256>  <entry>.cu`` or ``<entry>.py``, sorted.
  Run the same test files before and after a change and ``diff`` the two files: rendered code is
  byte-identical exactly when they are equal. A source is hashed with the checkout's path (which
  the ``#line`` directives of a test's own kernel bodies name) read as ``<rootdir>``, so two
  checkouts compare; sources rendered in child processes are not recorded. A test that draws
  shapes at random renders other kernels each run: property tests are ``derandomize=True``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CACHE_ENV = "KERNELDSL_CACHE_DIR"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--render-digests",
        metavar="FILE",
        type=Path,
        default=None,
        help="write the sha256 of every kernel source the run renders to FILE, one per line, sorted",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Tests never read or write the user's own kernel cache, nor the secret that seals stored
    sources: the session gets a private cache and data directory. The private cache starts
    empty, so every kernel source the run needs is rendered once in it (``--render-digests``)."""
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="kerneldsl-test-cache-")
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="kerneldsl-test-data-")
    digests_file = config.getoption("render_digests")
    if digests_file is not None:
        _record_render_digests(config, digests_file)


def _record_render_digests(config: pytest.Config, digests_file: Path) -> None:
    """Wrap ``RenderInputs.render``, the one place a kernel's sources are rendered from their
    templates (a disk hit serves text rendered earlier in the run), and write the digests of
    what it returned when the run ends."""
    from kerneldsl.jit.codegen import RenderInputs

    original = RenderInputs.render
    checkout = str(config.rootpath)
    lines: set[str] = set()

    def recording(inputs: Any) -> Any:
        generated = original(inputs)
        for suffix, text in ((".cu", generated.cuda_source), (".py", generated.adapter_source)):
            digest = hashlib.sha256(text.replace(checkout, "<rootdir>").encode()).hexdigest()
            lines.add(f"{digest}  {generated.entry}{suffix}")
        return generated

    def write_digests() -> None:
        RenderInputs.render = original  # type: ignore[method-assign]
        digests_file.write_text("".join(f"{line}\n" for line in sorted(lines)))

    RenderInputs.render = recording  # type: ignore[method-assign]
    config.add_cleanup(write_digests)


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
def fresh_rng() -> np.random.Generator:
    """A generator seeded anew every run, for checks meant to see new data each time."""
    return np.random.default_rng(secrets.randbits(32))


def seed_of(rng: np.random.Generator) -> int:
    """The seed ``fresh_rng`` drew, for a failure message to name."""
    return rng.bit_generator.seed_seq.entropy  # type: ignore[attr-defined,no-any-return]


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
    """Route driver calls to ``fake`` (a default session is made anew, over it); afterwards close
    the sessions still open and make ``kernels`` forget what they bound to them (both launch paths)."""
    from kerneldsl.runtime import open_sessions, use_driver
    from kerneldsl.runtime.session import forget_default_sessions

    with use_driver(fake):
        forget_default_sessions()  # (one an earlier test made is the real device's)
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


@pytest.fixture
def fake_session(drv: Any) -> Iterator[Any]:
    """``Session(0)`` over the driver double ``drv`` (a test file's own ``drv`` where it has one),
    closed after the test."""
    import kerneldsl as kd

    with kd.Session(0) as session:
        yield session


@pytest.fixture(scope="module")
def device_session() -> Iterator[Any]:
    """``Session(0)`` of the device the module's tests run on, shared by them and closed after the
    last (``_on_the_cpu_device``, an autouse fixture of the same scope, picks the device first)."""
    import kerneldsl as kd

    with kd.Session(0) as session:
        yield session


@pytest.fixture(scope="module")
def cpu() -> Iterator[Any]:
    """A CPU-device session, shared by the module's tests and closed after the last."""
    import kerneldsl as kd

    with kd.Session(device="cpu") as session:
        yield session


@pytest.fixture
def fresh_device_session() -> Iterator[Any]:
    """``Session(0)`` of the device, opened for one test and closed after it."""
    import kerneldsl as kd

    with kd.Session(0) as session:
        yield session


@pytest.fixture(scope="module")
def default_device_session() -> Any:
    """kerneldsl's default session (the one a call without ``session=`` uses); never closed here."""
    from kerneldsl.runtime.session import default_session

    return default_session()


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
