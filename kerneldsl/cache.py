"""Persistent cache of compiled kernels (cubins), keyed by everything that shaped them.

Compiling with NVRTC costs tens to hundreds of milliseconds per kernel, so cubins are kept
on disk across processes. The cache is only an optimisation: any entry that cannot be
trusted is evicted and recompiled, never loaded.

Design, and why:

* Storage is ``diskcache`` (SQLite index + value files), which is safe across processes.
  SQLite's locking is unreliable on network filesystems: do not put the cache on NFS
  (or SMB/CIFS). A cache directory on such a mount is detected from ``/proc/mounts`` on
  Linux and warned about once.
* Each value is self-validating: magic, format version, a canonical-JSON header carrying
  the key, the full key material and the payload's size and SHA-256, then the payload.
  A torn write, a hash collision or a hand-edited file reads as a miss.
* Only ``str`` keys and ``bytes`` values are ever read back. ``diskcache`` would unpickle
  rows stored in pickle mode; a tampered directory must not turn a cache lookup into code
  execution, so such rows are refused before any deserialization and evicted.
* The directory is private (0o700); one owned by someone else or writable by group/others
  raises ``UnsafeCacheDirError``. A location that merely does not work (read-only, under
  a file, corrupt database) degrades to a per-process in-memory cache with one warning.
* Size is bounded (2 GiB by default) with least-recently-used eviction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import stat
import struct
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar, cast

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

from .errors import CacheError, UnsafeCacheDirError

__all__ = [
    "CACHE_FORMAT_VERSION",
    "CacheEntryInfo",
    "DiskCache",
    "cache_key",
    "default_cache_dir",
    "get_default_cache",
    "set_default_cache",
]

CACHE_FORMAT_VERSION: int = 1

logger = logging.getLogger("kerneldsl.cache")

_MAGIC = b"KDSLCACHE"
_PREFIX = struct.Struct(">9sHI")  # magic, format version, header length
_HEADER_FIELDS = frozenset({"key", "material", "payload_sha256", "payload_size"})
_DEFAULT_SIZE_LIMIT = 2 * 1024**3
_MIN_FILE_SIZE = 2**15  # values at least this large live in their own file
_VALUE_FILENAME = re.compile(r"[0-9a-f]{2}[/\\][0-9a-f]{2}[/\\][0-9a-f]{28}\.val")
_NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs"})
_STORE_ERRORS = (OSError, sqlite3.Error)
_SHORT_VALUE = 40  # longest repr that explain() quotes

_T = TypeVar("_T")


# --- keys --------------------------------------------------------------------------------


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def cache_key(material: Mapping[str, object]) -> str:
    """sha256 hex of canonical JSON of ``material``: pure, so equal inputs give equal keys
    in every process, whatever the dict order or hash seed."""
    return hashlib.sha256(_canonical(dict(material))).hexdigest()


def default_cache_dir() -> Path:
    """$KERNELDSL_CACHE_DIR if set, else $XDG_CACHE_HOME/kerneldsl, else ~/.cache/kerneldsl."""
    explicit = os.environ.get("KERNELDSL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative paths
        return Path(xdg) / "kerneldsl"
    return Path.home() / ".cache" / "kerneldsl"


# --- self-validating values --------------------------------------------------------------


def _pack(key: str, payload: bytes, material: Mapping[str, object]) -> bytes:
    header = _canonical(
        {
            "key": key,
            "material": dict(material),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
            "payload_size": len(payload),
        }
    )
    return _PREFIX.pack(_MAGIC, CACHE_FORMAT_VERSION, len(header)) + header + payload


def _unpack(blob: bytes) -> tuple[dict[str, object], bytes]:
    """Header and payload of a stored value; ``CacheError`` saying what is wrong otherwise."""
    if len(blob) < _PREFIX.size:
        raise CacheError(f"value truncated to {len(blob)} bytes")
    magic, version, header_size = _PREFIX.unpack_from(blob)
    if magic != _MAGIC:
        raise CacheError("not a kerneldsl cache value (bad magic)")
    if version != CACHE_FORMAT_VERSION:
        raise CacheError(f"format version {version}, expected {CACHE_FORMAT_VERSION}")
    header_end = _PREFIX.size + header_size
    if header_end > len(blob):
        raise CacheError("header truncated")
    try:
        header = json.loads(blob[_PREFIX.size : header_end])
    except (ValueError, RecursionError):
        raise CacheError("header is not valid JSON") from None
    if (
        not isinstance(header, dict)
        or header.keys() != _HEADER_FIELDS
        or not isinstance(header["material"], dict)
    ):
        raise CacheError("header has the wrong fields")
    payload = blob[header_end:]
    if header["payload_size"] != len(payload):
        raise CacheError(f"payload is {len(payload)} bytes, header says {header['payload_size']}")
    if header["payload_sha256"] != hashlib.sha256(payload).hexdigest():
        raise CacheError("payload digest mismatch")
    return header, payload


def _check_identity(header: Mapping[str, object], key: str, material_json: bytes) -> None:
    if header["key"] != key:
        raise CacheError("header names another key")
    if _canonical(header["material"]) != material_json:
        raise CacheError("stored material differs from the requested one")


# --- the directory -----------------------------------------------------------------------


def _make_private_dir(path: Path) -> None:
    """Create ``path`` and the parents it lacks with mode 0o700 (``os.makedirs`` would give
    the parents the umask default), then refuse it unless it is ours alone."""
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:  # another process won the race
            pass
    _check_private(path)


def _check_private(path: Path) -> None:
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    if os.name != "posix":  # no uid, and mode bits do not describe Windows ACLs
        return
    uid = os.getuid()
    if info.st_uid != uid:
        raise UnsafeCacheDirError(
            f"cache directory {path} is owned by uid {info.st_uid}, not by the current "
            f"user (uid {uid}); use a directory of your own (KERNELDSL_CACHE_DIR)"
        )
    if info.st_mode & 0o022:
        raise UnsafeCacheDirError(
            f"cache directory {path} is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):#o}); run: chmod go-w {path}"
        )


def _mount_fstype(path: str, mounts: str) -> str | None:
    """Filesystem type of the longest mount point containing ``path``, from /proc/mounts text."""
    best, fstype = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, fields[2]
    return fstype


def _filesystem_type(path: Path) -> str | None:
    try:
        mounts = Path("/proc/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux, or no /proc: skip the check
        return None
    return _mount_fstype(os.path.realpath(path), mounts)


_warned_network_dirs: set[Path] = set()


def _warn_if_network_fs(path: Path) -> None:
    fstype = _filesystem_type(path)
    if fstype in _NETWORK_FILESYSTEMS and path not in _warned_network_dirs:
        _warned_network_dirs.add(path)
        _warn(
            f"kerneldsl cache directory {path} is on {fstype}; SQLite locking is unreliable "
            "on network filesystems, set KERNELDSL_CACHE_DIR to a local directory"
        )


def _warn(message: str) -> None:
    logger.warning("%s", message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


# --- storage backends --------------------------------------------------------------------


class _BytesOnlyDisk(diskcache.Disk):
    """A ``diskcache.Disk`` that writes and reads back only str keys and bytes values.

    Reading a row stored in pickle or text mode (or under a pickled key) raises
    ``CacheError`` before anything is deserialized; value file names must look like the
    ones diskcache generates, so a tampered row cannot make us read or delete elsewhere.
    Settings from the database (which a tamperer controls) are ignored.
    """

    def __init__(self, directory: str, **_settings: object) -> None:
        super().__init__(directory, min_file_size=_MIN_FILE_SIZE)

    def put(self, key: object) -> tuple[object, bool]:
        if type(key) is not str:
            raise TypeError(f"cache keys must be str, not {type(key).__name__}")
        return super().put(key)

    def get(self, key: object, raw: bool) -> str:
        if not raw or type(key) is not str:
            raise CacheError("refusing a row whose key is not plain text")
        return key

    def store(self, value: object, read: bool, key: object = UNKNOWN) -> tuple[object, ...]:
        if read or type(value) is not bytes:
            raise TypeError(f"cache values must be bytes, not {type(value).__name__}")
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: str | None, value: object, read: bool) -> bytes:
        if mode == MODE_RAW and type(value) is bytes:
            return value
        if mode == MODE_BINARY and not read and _is_value_filename(filename):
            return super().fetch(mode, filename, value, read)
        raise CacheError(f"refusing a row stored in diskcache mode {mode}")

    def remove(self, file_path: str) -> None:
        if _is_value_filename(file_path):
            super().remove(file_path)


def _is_value_filename(filename: object) -> bool:
    return isinstance(filename, str) and _VALUE_FILENAME.fullmatch(filename) is not None


class _Store(Protocol):
    def get(self, key: str) -> bytes | None: ...
    def set(self, key: str, blob: bytes) -> None: ...
    def delete(self, key: str) -> None: ...
    def rows(self) -> Iterator[tuple[str, float, bytes | None]]: ...
    def volume(self) -> int: ...
    def clear(self) -> int: ...
    def close(self) -> None: ...


class _DiskStore:
    """diskcache-backed rows; ``get`` raises ``CacheError`` for a row it refuses to read."""

    def __init__(self, path: Path, size_limit: int) -> None:
        _make_private_dir(path)
        _warn_if_network_fs(path)
        self._cache = diskcache.Cache(
            str(path),
            disk=_BytesOnlyDisk,
            size_limit=size_limit,
            eviction_policy="least-recently-used",
            cull_limit=0,  # _trim evicts instead: diskcache culls ten rows at a time
            statistics=False,
            tag_index=False,
        )

    def get(self, key: str) -> bytes | None:
        return self._cache.get(key, default=None, retry=True)

    def set(self, key: str, blob: bytes) -> None:
        self._cache.set(key, blob, retry=True)
        self._trim()

    def delete(self, key: str) -> None:
        self._cache.delete(key, retry=True)

    def rows(self) -> Iterator[tuple[str, float, bytes | None]]:
        """Every text-keyed row without touching its access time; ``None`` for refused rows."""
        query = (
            "SELECT key, store_time, mode, filename, value FROM Cache"
            " WHERE raw = 1 AND typeof(key) = 'text'"
        )
        for key, stored_at, mode, filename, value in self._cache._sql(query).fetchall():
            try:
                yield key, stored_at, self._cache.disk.fetch(mode, filename, value, False)
            except CacheError:
                yield key, stored_at, None
            except FileNotFoundError:  # replaced by a concurrent writer
                continue

    def volume(self) -> int:
        return self._cache.volume()

    def clear(self) -> int:
        return self._cache.clear(retry=True)

    def close(self) -> None:
        self._cache.close()

    def _trim(self) -> None:
        """Evict least-recently-used rows one at a time until the volume fits the limit."""
        cache = self._cache
        while cache.volume() > cache.size_limit:
            with cache.transact(retry=True):
                row = cache._sql(
                    "SELECT rowid, filename FROM Cache ORDER BY access_time LIMIT 1"
                ).fetchone()
                if row is None:
                    return
                cache._sql("DELETE FROM Cache WHERE rowid = ?", (row[0],))
            if row[1] is not None:
                cache.disk.remove(row[1])


class _MemoryStore:
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


# --- the cache ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntryInfo:
    """One valid entry, for listing; ``stored_at`` (epoch seconds) is for display only."""

    key: str
    material: dict[str, object]
    size: int
    stored_at: float


class DiskCache:
    """Cubins on disk, keyed by ``cache_key(material)``; see the module docstring."""

    directory: Path | None
    in_memory: bool

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        size_limit: int = _DEFAULT_SIZE_LIMIT,
    ) -> None:
        if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit < 0:
            raise ValueError(f"size_limit must be a non-negative int, got {size_limit!r}")
        self.size_limit = size_limit
        self._lock = threading.Lock()
        path = Path(directory if directory is not None else default_cache_dir())
        path = path.expanduser().absolute()
        self.directory, self.in_memory = path, False
        try:
            self._store: _Store = _DiskStore(path, size_limit)
        except UnsafeCacheDirError:
            raise  # insecure is not broken: never silently work around it
        except _STORE_ERRORS as exc:
            self._degrade(exc)

    def get(self, key: str, material: Mapping[str, object]) -> bytes | None:
        """The payload stored for ``key``, or None on a miss or an invalid entry (evicted)."""
        material_json = _canonical(dict(material))
        try:
            blob = self._use(lambda store: store.get(key))
            if blob is None:
                logger.debug("miss %s", key)
                return None
            header, payload = _unpack(blob)
            _check_identity(header, key, material_json)
        except CacheError as exc:
            self._evict(key, str(exc))
            return None
        logger.debug("hit %s", key)
        return payload

    def put(self, key: str, payload: bytes, material: Mapping[str, object]) -> None:
        """Store ``payload`` under ``key``, which must be ``cache_key(material)``."""
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if key != cache_key(material):
            raise ValueError(f"key {key!r} is not cache_key(material)")
        blob = _pack(key, payload, material)
        self._use(lambda store: store.set(key, blob))
        logger.debug("stored %s (%d bytes)", key, len(payload))

    def entries(self) -> list[CacheEntryInfo]:
        """Every valid entry; invalid ones found on the way are evicted."""
        found = []
        for key, stored_at, blob in self._use(lambda store: list(store.rows())):
            try:
                if blob is None:
                    raise CacheError("row is not plain bytes")
                header, payload = _unpack(blob)
                material = cast("dict[str, object]", header["material"])
                if header["key"] != key or cache_key(material) != key:
                    raise CacheError("header does not match the row's key")
            except CacheError as exc:
                self._evict(key, str(exc))
                continue
            found.append(CacheEntryInfo(key, material, len(payload), stored_at))
        return found

    def volume(self) -> int:
        """Bytes used on disk (index and values), or in memory after degrading."""
        return self._use(lambda store: store.volume())

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        return self._use(lambda store: store.clear())

    def explain(self, material: Mapping[str, object]) -> str:
        """Why ``material`` hits or misses: the components in which the nearest entry for
        the same kernel differs (fewest differences, then newest)."""
        material = dict(material)
        kernel = material.get("kernel")
        candidates = [e for e in self.entries() if e.material.get("kernel") == kernel]
        if not candidates:
            return f"miss: no entries for kernel {kernel!r}"
        nearest = min(
            candidates, key=lambda e: (len(_differing(e.material, material)), -e.stored_at)
        )
        differing = _differing(nearest.material, material)
        if not differing:
            return "hit"
        details = ", ".join(
            _describe(name, nearest.material.get(name, _ABSENT), material.get(name, _ABSENT))
            for name in differing
        )
        return f"miss: nearest entry for kernel {kernel!r} differs in: {details}"

    def close(self) -> None:
        """Release the database connection of this thread (reopened on next use)."""
        self._store.close()

    def __enter__(self) -> DiskCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self.in_memory else str(self.directory)
        return f"DiskCache({where}, size_limit={self.size_limit})"

    def _use(self, operation: Callable[[_Store], _T]) -> _T:
        """Run ``operation`` on the store, degrading to memory if the disk breaks under us."""
        store = self._store
        try:
            return operation(store)
        except _STORE_ERRORS as exc:
            with self._lock:
                if self._store is store:
                    self._degrade(exc)
            return operation(self._store)

    def _degrade(self, reason: BaseException) -> None:
        _warn(
            f"kerneldsl cache directory {self.directory} is unusable ({reason}); "
            "compiled kernels are cached in memory for this process only"
        )
        broken = getattr(self, "_store", None)
        self._store = _MemoryStore(self.size_limit)
        self.directory, self.in_memory = None, True
        if broken is not None:
            try:
                broken.close()
            except _STORE_ERRORS:
                pass

    def _evict(self, key: str, reason: str) -> None:
        logger.warning("evicted invalid cache entry %s (%s); it will be recompiled", key, reason)
        self._use(lambda store: store.delete(key))


class _Absent:
    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()
_QUOTABLE = (str, int, float, bool, type(None), _Absent)


def _differing(stored: Mapping[str, object], wanted: Mapping[str, object]) -> list[str]:
    names = sorted(set(stored) | set(wanted))
    return [
        name
        for name in names
        if name not in stored
        or name not in wanted
        or _canonical(stored[name]) != _canonical(wanted[name])
    ]


def _describe(name: str, old: object, new: object) -> str:
    """``name (old -> new)`` for short scalars; just the name for sources, option lists..."""
    shown = [repr(value) for value in (old, new) if isinstance(value, _QUOTABLE)]
    if len(shown) == 2 and max(map(len, shown)) <= _SHORT_VALUE:
        return f"{name} ({shown[0]} -> {shown[1]})"
    return name


# --- the process-wide instance -----------------------------------------------------------

_default_cache: DiskCache | None = None
_default_lock = threading.Lock()


def _size_limit_from_env() -> int:
    text = os.environ.get("KERNELDSL_CACHE_SIZE")
    if not text:
        return _DEFAULT_SIZE_LIMIT
    try:
        size = int(text)
    except ValueError:
        size = -1
    if size < 0:
        raise CacheError(f"KERNELDSL_CACHE_SIZE must be a number of bytes, got {text!r}")
    return size


def get_default_cache() -> DiskCache:
    """The process-wide cache in ``default_cache_dir()``, created on first use."""
    global _default_cache
    with _default_lock:
        if _default_cache is None:
            _default_cache = DiskCache(default_cache_dir(), _size_limit_from_env())
        return _default_cache


def set_default_cache(cache: DiskCache | None) -> None:
    """Replace the process-wide cache (None: recreate lazily); the old one is not closed."""
    global _default_cache
    with _default_lock:
        _default_cache = cache
