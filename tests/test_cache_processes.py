"""One disk cache shared by several processes: each keeps its SQLite locks while the cache
opens new connections, a writer killed mid-write leaves a usable cache, and a corrupt database
is recoverable with ``kerneldsl cache clear``."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from kerneldsl import cli
from kerneldsl.cache import DiskCache, cache_key, get_default_cache

REPO = Path(__file__).resolve().parents[1]

WRITER = """
import os, sys
from kerneldsl.cache import DiskCache, cache_key
cache = DiskCache(sys.argv[1])
count = int(sys.argv[3])
i = 0
while count < 0 or i < count:
    material = {"kernel": sys.argv[2], "i": i}
    cache.put(cache_key(material), os.urandom(3000), material)
    if i == 0:
        print("writing", flush=True)
    i += 1
cache.close()
"""


def _writer(directory: Path, name: str, count: int) -> subprocess.Popen[str]:
    """A process writing ``count`` entries (forever if negative) to the cache at ``directory``."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(directory), name, str(count)],
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=REPO,
    )


def _put(cache: DiskCache, name: str, i: int) -> None:
    material = {"kernel": name, "i": i}
    cache.put(cache_key(material), os.urandom(3000), material)


def _integrity(directory: Path) -> list[tuple[str]]:
    with contextlib.closing(sqlite3.connect(directory / "cache.db")) as con:
        return con.execute("PRAGMA integrity_check").fetchall()


def test_new_connections_keep_the_locks_that_protect_the_database_from_other_processes(tmp_path: Path) -> None:
    # A connection opened on a new thread (Dask's, the autotuner's) re-checks the location. Were
    # that check to open and close cache.db, this process would lose its SQLite locks on it, and
    # a writer closing its last connection would checkpoint and delete the WAL under ours.
    directory = tmp_path / "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # degrading to memory is the failure
        with DiskCache(directory) as cache:
            for round_ in range(3):
                _put(cache, "main", -1)
                connect = threading.Thread(target=_put, args=(cache, f"thread{round_}", 0))
                connect.start()
                connect.join(timeout=60)
                with _writer(directory, f"writer{round_}", 20) as writer:
                    assert writer.wait(timeout=120) == 0
                for i in range(20):
                    _put(cache, f"main{round_}", i)
                assert not cache.in_memory
            assert len(cache.entries()) == 3 * (1 + 20 + 20) + 1
    assert _integrity(directory) == [("ok",)]


def test_a_writer_killed_mid_write_leaves_a_usable_cache(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with DiskCache(directory) as cache:
            _put(cache, "main", 0)
            with _writer(directory, "killed", -1) as writer:
                assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
                os.kill(writer.pid, signal.SIGKILL)
                writer.wait(timeout=60)
            for i in range(1, 20):
                _put(cache, "main", i)
            names = [entry.material["kernel"] for entry in cache.entries()]
            assert not cache.in_memory and names.count("main") == 20 and names.count("killed") >= 1
    assert _integrity(directory) == [("ok",)]


def _not_a_database(directory: Path) -> None:
    (directory / "cache.db").write_bytes(b"this is not a database" * 1000)


def _malformed(directory: Path) -> None:
    """A database whose pages after the first are overwritten, as a torn copy leaves it."""
    with DiskCache(directory) as cache:
        for i in range(40):
            _put(cache, "before", i)
    size = (directory / "cache.db").stat().st_size
    with open(directory / "cache.db", "r+b") as database:
        database.seek(4096)
        database.write(b"\xff" * (size - 4096))


CORRUPTIONS = [pytest.param(_not_a_database, id="not-a-database"), pytest.param(_malformed, id="malformed")]


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
def test_a_corrupt_database_degrades_with_a_warning_that_says_how_to_recover(
    tmp_path: Path, corrupt: Callable[[Path], None]
) -> None:
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    corrupt(directory)
    with pytest.warns(RuntimeWarning, match=r"unusable .*run `kerneldsl cache clear` to delete its database"):
        cache = DiskCache(directory)
        _put(cache, "after", 0)
    assert cache.in_memory


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
def test_cache_clear_recovers_a_corrupt_database(isolated_cache: Path, corrupt: Callable[[Path], None]) -> None:
    isolated_cache.mkdir(mode=0o700)
    corrupt(isolated_cache)
    with pytest.warns(RuntimeWarning, match="kerneldsl cache clear"):
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            assert cli.main(["cache", "clear"]) == 0
    assert printed.getvalue() == f"removed 0 entries ({isolated_cache})\n"
    assert not get_default_cache().in_memory
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with DiskCache(isolated_cache) as reopened:
            _put(reopened, "after", 0)
            assert [entry.material["kernel"] for entry in reopened.entries()] == ["after"]


def test_cache_clear_deletes_the_value_files_of_a_corrupt_database(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    with DiskCache(directory) as cache:
        material = {"kernel": "large"}
        cache.put(cache_key(material), os.urandom(100_000), material)  # large enough for a value file
    value_files = list(directory.glob("*/*/*.val"))
    assert value_files
    _not_a_database(directory)
    with pytest.warns(RuntimeWarning, match="kerneldsl cache clear"):
        cache = DiskCache(directory)
    assert cache.clear() == 0 and not cache.in_memory
    assert not any(path.exists() for path in value_files)
