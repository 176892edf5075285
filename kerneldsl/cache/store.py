"""Where rows live: SQLite through diskcache (its location verified before each connection,
least-recently-used rows evicted one at a time), or a per-process memory fallback."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import diskcache
from diskcache.core import DBNAME, DEFAULT_SETTINGS, ENOVAL, METADATA

from ..errors import CacheError
from .location import warn_if_network_fs
from .safety import check_opened, make_private_dir, prepare_database, verify_location
from .values import BytesOnlyDisk, remove_value_files

STORE_ERRORS = (OSError, sqlite3.Error)


def is_corrupt(error: BaseException) -> bool:
    """Whether SQLite found the database corrupt or not a database at all: Python raises plain
    ``DatabaseError`` for those, a subclass for locks, I/O errors, a full disk or a read-only file."""
    return type(error) is sqlite3.DatabaseError


def discard_database(directory: Path) -> None:
    """Delete the database in ``directory`` (with its WAL, shared memory and value files),
    which SQLite cannot read: only a user asking to clear the cache does this, as another
    process may still have it open."""
    make_private_dir(directory)
    for name in (DBNAME, f"{DBNAME}-wal", f"{DBNAME}-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / name)
    remove_value_files(str(directory))


class _VerifiedCache(diskcache.Cache):
    """A ``diskcache.Cache`` that verifies its location before each new SQLite connection
    (diskcache connects by path once per thread and again after a fork, long after the check
    that opened the cache) and takes no setting from the database.

    diskcache applies every row of its ``Settings`` table as an attribute of the cache or of
    its Disk (a row named ``_sql`` or ``disk_fetch`` replaces a method, ``_directory`` the
    location) and every ``sqlite_`` row as a PRAGMA, on opening and on each new connection.
    So the table is emptied before diskcache reads it (its counters recomputed from the rows),
    every setting is passed here, and ``reset`` applies only those: a row of the file's own is
    never applied."""

    def __init__(self, directory: Path, **settings: Any) -> None:
        self._verified_directory = directory
        self._own_settings = {**DEFAULT_SETTINGS, **settings}
        _forget_settings(directory / DBNAME)
        super().__init__(str(directory), **self._own_settings)

    def reset(self, key: str, value: Any = ENOVAL, update: bool = True) -> Any:
        if key in METADATA:  # the counters diskcache keeps in the table
            return super().reset(key, value, update)
        if key in self._own_settings:
            return super().reset(key, self._own_settings[key], update)
        return None

    @property
    def _con(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "con", None) is None or getattr(local, "pid", None) != os.getpid():
            verify_location(self._verified_directory)
        con: sqlite3.Connection = super()._con
        return con


def _forget_settings(database: Path) -> None:
    """Empty an existing database's ``Settings`` table in one transaction, leaving diskcache's
    counters computed from the ``Cache`` table (the entries and the bytes of their files)."""
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as con:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "Settings" not in tables:
            return
        con.execute("BEGIN IMMEDIATE")
        try:
            con.execute("DELETE FROM Settings")
            count, size = (0, 0)
            if "Cache" in tables:
                count, size = con.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM Cache").fetchone()
            counters = {**METADATA, "count": count, "size": size}
            con.executemany("INSERT INTO Settings VALUES (?, ?)", counters.items())
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")


class Store(Protocol):
    def get(self, key: str) -> bytes | None: ...
    def set(self, key: str, blob: bytes) -> None: ...
    def delete(self, key: str) -> None: ...
    def rows(self) -> Iterator[tuple[str, float, bytes | None]]: ...
    def volume(self) -> int: ...
    def clear(self) -> int: ...
    def close(self) -> None: ...


class DiskStore:
    """diskcache-backed rows; ``get`` raises ``CacheError`` for a row it refuses to read."""

    def __init__(self, path: Path, size_limit: int) -> None:
        checked = make_private_dir(path)
        database = prepare_database(path)
        warn_if_network_fs(path)
        self._cache = _VerifiedCache(
            path,
            disk=BytesOnlyDisk,
            size_limit=size_limit,
            eviction_policy="least-recently-used",
            cull_limit=0,  # _trim evicts instead: diskcache culls ten rows at a time
            statistics=False,
            tag_index=False,
        )
        try:
            check_opened(self._cache, path, checked, database)
        except BaseException:
            self._cache.close()
            raise

    def get(self, key: str) -> bytes | None:
        blob: bytes | None = self._cache.get(key, default=None, retry=True)
        return blob

    def set(self, key: str, blob: bytes) -> None:
        self._cache.set(key, blob, retry=True)
        self._trim()

    def delete(self, key: str) -> None:
        self._cache.delete(key, retry=True)

    def rows(self) -> Iterator[tuple[str, float, bytes | None]]:
        """Every text-keyed row without touching its access time; ``None`` for refused rows."""
        query = "SELECT key, store_time, mode, filename, value FROM Cache WHERE raw = 1 AND typeof(key) = 'text'"
        for key, stored_at, mode, filename, value in self._cache._sql(query).fetchall():
            try:
                yield key, stored_at, self._cache.disk.fetch(mode, filename, value, False)
            except CacheError:
                yield key, stored_at, None
            except FileNotFoundError:  # replaced by a concurrent writer
                continue

    def volume(self) -> int:
        size: int = self._cache.volume()
        return size

    def clear(self) -> int:
        removed: int = self._cache.clear(retry=True)
        return removed

    def close(self) -> None:
        self._cache.close()

    def _trim(self) -> None:
        """Evict least-recently-used rows one at a time until the volume fits the limit."""
        cache = self._cache
        while cache.volume() > cache.size_limit:
            with cache.transact(retry=True):
                row = cache._sql("SELECT rowid, filename FROM Cache ORDER BY access_time LIMIT 1").fetchone()
                if row is None:
                    return
                cache._sql("DELETE FROM Cache WHERE rowid = ?", (row[0],))
            if row[1] is not None:
                cache.disk.remove(row[1])


class MemoryStore:
    """Per-process fallback with the same LRU bound as the disk store."""

    def __init__(self, size_limit: int) -> None:
        self._size_limit = size_limit
        self._rows: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._volume = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                return None
            self._rows.move_to_end(key)
            return row[1]

    def set(self, key: str, blob: bytes) -> None:
        with self._lock:
            self._pop(key)
            self._rows[key] = (time.time(), blob)
            self._volume += len(blob)
            while self._volume > self._size_limit and self._rows:
                self._pop(next(iter(self._rows)))

    def delete(self, key: str) -> None:
        with self._lock:
            self._pop(key)

    def rows(self) -> Iterator[tuple[str, float, bytes | None]]:
        with self._lock:
            snapshot = [(key, stored_at, blob) for key, (stored_at, blob) in self._rows.items()]
        yield from snapshot

    def volume(self) -> int:
        return self._volume

    def clear(self) -> int:
        with self._lock:
            count = len(self._rows)
            self._rows.clear()
            self._volume = 0
            return count

    def close(self) -> None:
        pass

    def _pop(self, key: str) -> None:
        row = self._rows.pop(key, None)
        if row is not None:
            self._volume -= len(row[1])
