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
  the key, the full key material and the payload's size, then the payload, then an HMAC-SHA256
  of all of it under this user's secret (``signing_key``), which lives outside any cache
  directory, in the user's data directory. The seal is checked before anything is parsed, so a
  torn write, a hash collision, a hand-edited file or a value written elsewhere (a cache
  restored from a CI tarball, copied from another machine or another user: its cubins, PTX and
  generated sources alike) reads as a miss and is evicted, never loaded or run. Without a usable
  secret the cache lives in memory for the process (one warning).
* Only ``str`` keys and ``bytes`` values are ever read back. ``diskcache`` would unpickle
  rows stored in pickle mode; a tampered directory must not turn a cache lookup into code
  execution, so such rows are refused before any deserialization and evicted.
* The directory is private (0o700); one owned by someone else or writable by group/others
  raises ``UnsafeCacheDirError``, and so does a ``cache.db`` (or its ``-wal``/``-shm``) that
  is a symlink, not a regular file (a FIFO), not ours or writable by group/others. So does a
  directory above it that someone else could rename or replace (OpenSSH's rule): every ancestor
  is owned by root or us and writable by nobody else, unless it is sticky like ``/tmp``, where
  others cannot rename what is ours. diskcache connects to SQLite by path once per thread (and
  after a fork), so all of this is checked again before each new connection. A location that merely does not work
  (read-only, under a file, corrupt database) degrades to a per-process in-memory cache with
  one warning.
* The path is resolved once (``~`` expanded, absolute, symlinks resolved) and must not
  contain ``$``: diskcache runs ``os.path.expandvars`` on it and would open wherever the
  variable points, a directory nobody checked. Such a path, an unknown ``~user`` or a
  relative ``KERNELDSL_CACHE_DIR`` raises ``CacheError``; a relative path passed to
  ``DiskCache`` is taken from the current directory at construction. After opening, the
  directory and database diskcache uses must be the ones checked.
* Files are created 0o600 and value subdirectories 0o700 whatever the umask (diskcache
  alone would use 0o666/0o777). A value file or subdirectory that is a symlink, not a regular
  file, not ours or writable by group/others is untrusted: the entry is evicted like a corrupt one.
* Every file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be a regular file on the
  open descriptor before it is read: a FIFO (tar archives carry them) would block ``open()``.
* The secret is refused unless it is a regular file of ours that nobody else can write; one that
  others can read is replaced by a new one with a warning (what it sealed then misses).
* Size is bounded (2 GiB by default) with least-recently-used eviction. Limits above
  SQLite's largest integer (2**63 - 1) mean "unbounded" and are clamped to it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import sqlite3
import stat
import struct
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeGuard, TypeVar

import diskcache
from diskcache.core import DBNAME, MODE_BINARY, MODE_RAW, UNKNOWN

from . import logs
from .errors import CacheError, UnsafeCacheDirError

__all__ = [
    "CACHE_FORMAT_VERSION",
    "CacheEntryInfo",
    "DiskCache",
    "cache_key",
    "default_cache_dir",
    "default_secret_path",
    "get_default_cache",
    "set_default_cache",
    "signing_key",
]

CACHE_FORMAT_VERSION: int = 2

logger = logs.get("cache")

_MAGIC = b"KDSLCACHE"
_PREFIX = struct.Struct(">9sHI")  # magic, format version, header length
_HEADER_TYPES: dict[str, type] = {
    "key": str,
    "material": dict,
    "payload_size": int,
}
_SEAL_BYTES = 32  # HMAC-SHA256, after the payload
_DEFAULT_SIZE_LIMIT = 2 * 1024**3
_MAX_SIZE_LIMIT = 2**63 - 1  # SQLite's largest INTEGER: diskcache stores the limit in its table
_MIN_FILE_SIZE = 2**15  # values at least this large live in their own file
_VALUE_FILENAME = re.compile(r"[0-9a-f]{2}[/\\][0-9a-f]{2}[/\\][0-9a-f]{28}\.val")
_NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs"})
_STORE_ERRORS = (OSError, sqlite3.Error)
_SHORT_VALUE = 40  # longest repr that explain() quotes
_PROCESS_SECRET = os.urandom(32)  # seals the in-memory fallback's values
_VARIABLE_MARKERS = ("$", "%") if os.name == "nt" else ("$",)  # what os.path.expandvars expands
_OPEN_FLAGS = (  # O_NONBLOCK: opening a FIFO must not wait for a writer
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
) | getattr(os, "O_BINARY", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS
_SYMLINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK})  # O_NOFOLLOW met a link (Linux, BSD)
_WRITE_ATTEMPTS = 10  # as diskcache: a concurrent remove() may prune a fresh subdirectory
_KINDS: dict[str, Callable[[int], bool]] = {"directory": stat.S_ISDIR, "file": stat.S_ISREG}

_T = TypeVar("_T")


# --- keys --------------------------------------------------------------------------------


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def cache_key(material: Mapping[str, object]) -> str:
    """sha256 hex of canonical JSON of ``material``: pure, so equal inputs give equal keys
    in every process, whatever the dict order or hash seed."""
    return hashlib.sha256(_canonical(dict(material))).hexdigest()


def default_cache_dir() -> Path:
    """$KERNELDSL_CACHE_DIR if set, else $XDG_CACHE_HOME/kerneldsl, else ~/.cache/kerneldsl.

    A relative $KERNELDSL_CACHE_DIR raises ``CacheError``: it would name a different cache
    in every working directory."""
    explicit = os.environ.get("KERNELDSL_CACHE_DIR")
    if explicit:
        path = _expand_user(Path(explicit))
        if not path.is_absolute():
            raise CacheError(f"KERNELDSL_CACHE_DIR must be an absolute path (or start with ~), got {explicit!r}")
        return path
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative paths
        return Path(xdg) / "kerneldsl"
    return Path.home() / ".cache" / "kerneldsl"


# --- self-validating values --------------------------------------------------------------


def _seal(secret: bytes, body: bytes | memoryview) -> bytes:
    return hmac.digest(secret, body, "sha256")


def _pack(key: str, payload: bytes, material: Mapping[str, object], secret: bytes) -> bytes:
    header = _canonical({"key": key, "material": dict(material), "payload_size": len(payload)})
    body = _PREFIX.pack(_MAGIC, CACHE_FORMAT_VERSION, len(header)) + header + payload
    return body + _seal(secret, body)


@dataclass(frozen=True)
class _Value:
    """A decoded value; ``material_json`` is canonical, encoded once while decoding."""

    key: str
    material: dict[str, object]
    material_json: bytes
    payload: bytes


def _unpack(blob: bytes, secret: bytes) -> _Value:
    """The decoded value; ``CacheError`` saying what is wrong otherwise. The seal is checked
    first: nothing written without this user's secret is parsed."""
    if len(blob) < _PREFIX.size + _SEAL_BYTES:
        raise CacheError(f"value truncated to {len(blob)} bytes")
    magic, version, header_size = _PREFIX.unpack_from(blob)
    if magic != _MAGIC:
        raise CacheError("not a kerneldsl cache value (bad magic)")
    if version != CACHE_FORMAT_VERSION:
        raise CacheError(f"format version {version}, expected {CACHE_FORMAT_VERSION}")
    body = memoryview(blob)[:-_SEAL_BYTES]
    if not hmac.compare_digest(_seal(secret, body), blob[-_SEAL_BYTES:]):
        raise CacheError("not sealed with this user's secret (written elsewhere, or corrupt)")
    header_end = _PREFIX.size + header_size
    if header_end > len(body):
        raise CacheError("header truncated")
    header = _parse_header(blob[_PREFIX.size : header_end])
    payload = blob[header_end:-_SEAL_BYTES]
    if header["payload_size"] != len(payload):
        raise CacheError(f"payload is {len(payload)} bytes, header says {header['payload_size']}")
    try:
        material_json = _canonical(header["material"])
    except RecursionError:
        raise CacheError("material is nested too deeply") from None
    return _Value(header["key"], header["material"], material_json, payload)


def _parse_header(text: bytes) -> dict[str, Any]:
    """The JSON header, refused unless it has exactly the expected fields and types: a wrong
    type (``payload_size: 5.0``, ``true``, a list...) must read as corrupt here, not fail or
    pass later."""
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        raise CacheError("header is not valid JSON") from None
    if not isinstance(header, dict) or header.keys() != _HEADER_TYPES.keys():
        raise CacheError("header has the wrong fields")
    wrong = [name for name, kind in _HEADER_TYPES.items() if type(header[name]) is not kind]
    if wrong:
        raise CacheError(f"header fields of the wrong type: {', '.join(wrong)}")
    return header


def _check_identity(value: _Value, key: str, material_json: bytes) -> None:
    if value.key != key:
        raise CacheError("header names another key")
    if value.material_json != material_json:
        raise CacheError("stored material differs from the requested one")


# --- the directory -----------------------------------------------------------------------


def _expand_user(path: Path) -> Path:
    """``path`` with ``~`` or ``~user`` expanded; ``CacheError`` for an unknown user (left
    as is, diskcache would expand nothing either and open a relative ``~user`` directory)."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise CacheError(
            f"cannot expand {path.parts[0]!r} in cache directory {str(path)!r}: no such user or no home directory"
        ) from None


def _resolve_directory(directory: str | os.PathLike[str]) -> Path:
    """The cache path fixed once: ``~`` expanded, absolute (a relative path is taken from the
    current directory now), symlinks resolved, and free of ``$``, which diskcache would
    expand (``os.path.expandvars``) into a directory nobody checked."""
    path = Path(os.path.realpath(_expand_user(Path(directory))))
    for marker in _VARIABLE_MARKERS:
        if marker in str(path):
            raise CacheError(
                f"cache directory {str(path)!r} contains {marker!r}, which diskcache would "
                "expand as an environment variable; use a path without it"
            )
    return path


def _make_private_dir(path: Path) -> os.stat_result:
    """Create ``path`` and the parents it lacks with mode 0o700 (``os.makedirs`` would give
    the parents the umask default), then refuse it unless it and its ancestors are ours alone."""
    _check_ancestors(path)
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
    return _check_private(path)


def _check_private(path: Path) -> os.stat_result:
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    reason = _distrust(info)
    if reason:
        raise UnsafeCacheDirError(
            f"cache directory {path} {reason}; run: chmod go-w {path}, or set "
            "KERNELDSL_CACHE_DIR to a directory of your own"
        )
    return info


def _check_ancestors(path: Path) -> None:
    """Refuse ``path`` (absolute, symlinks resolved) if another user could rename or replace a
    directory above it, and so swap in a directory of their own after the check: every existing
    ancestor must be owned by root or us and writable by nobody else, unless it is sticky (as
    ``/tmp``: others cannot rename or remove what is ours there). OpenSSH checks its files so."""
    if os.name != "posix":
        return
    uid = os.getuid()
    for ancestor in path.parents:
        try:
            info = os.stat(ancestor)
        except FileNotFoundError:  # made below, 0o700
            continue
        if info.st_uid not in (0, uid):
            reason = f"is owned by uid {info.st_uid}, neither root nor the current user (uid {uid})"
        elif info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            reason = f"is writable by group or others and not sticky (mode {stat.S_IMODE(info.st_mode):#o})"
        else:
            continue
        raise UnsafeCacheDirError(
            f"{ancestor}, above {path}, {reason}: another user could replace {path}; set KERNELDSL_CACHE_DIR "
            "(or XDG_DATA_HOME for the secret) to a directory whose parents only you and root can write"
        )


def _distrust(info: os.stat_result) -> str | None:
    """Why someone else could have written this file or directory, or None if nobody could."""
    if os.name != "posix":  # no uid, and mode bits do not describe Windows ACLs
        return None
    uid = os.getuid()
    if info.st_uid != uid:
        return f"is owned by uid {info.st_uid}, not by the current user (uid {uid})"
    if info.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):#o})"
    return None


def _vet(info: os.stat_result, path: str, kind: str, error: type[CacheError]) -> None:
    """Raise ``error`` unless ``info`` (from lstat or fstat, so a symlink is not of any
    kind) is of ``kind``, ours and writable by nobody else."""
    reason = None if _KINDS[kind](info.st_mode) else f"is not a {kind}"
    reason = reason or _distrust(info)
    if reason:
        raise error(f"{path} {reason}")


def _open_no_symlink(path: str, flags: int, error: type[CacheError]) -> int:
    """``os.open`` refusing, with ``error``, a symlink as the last component."""
    try:
        return os.open(path, flags | _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in _SYMLINK_ERRNOS:
            raise error(f"{path} is a symlink") from None
        raise


def _prepare_database(directory: Path) -> os.stat_result:
    """Create ``cache.db`` 0o600 before SQLite does (it would follow the umask; its -wal and
    -shm files take the database's mode), or refuse an existing one, or its -wal or -shm,
    that is a symlink, not a regular file (a FIFO would block SQLite's open), not ours or
    writable by others: its rows could be forged."""
    path = str(directory / DBNAME)
    try:
        fd = os.open(path, _CREATE_FLAGS, 0o600)
    except FileExistsError:
        fd = _open_no_symlink(path, os.O_RDONLY, UnsafeCacheDirError)
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    _vet(info, path, "file", UnsafeCacheDirError)
    for companion in (path + "-wal", path + "-shm"):
        try:
            _vet(os.lstat(companion), companion, "file", UnsafeCacheDirError)
        except FileNotFoundError:
            pass
    return info


def _verify_location(directory: Path) -> None:
    """Check, before SQLite opens ``cache.db`` by path, everything checked when the cache was
    opened: its ancestors, the directory and the database."""
    _check_ancestors(directory)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeCacheDirError(f"cache directory {directory} is no longer a directory")
    _check_private(directory)
    _prepare_database(directory)


class _VerifiedCache(diskcache.Cache):
    """A ``diskcache.Cache`` that verifies its location before each new SQLite connection:
    diskcache connects by path once per thread and again after a fork, long after the check
    that opened the cache."""

    def __init__(self, directory: Path, **settings: Any) -> None:
        self._verified_directory = directory
        super().__init__(str(directory), **settings)

    @property
    def _con(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "con", None) is None or getattr(local, "pid", None) != os.getpid():
            _verify_location(self._verified_directory)
        con: sqlite3.Connection = super()._con
        return con


def _check_opened(cache: diskcache.Cache, directory: Path, checked: os.stat_result, database: os.stat_result) -> None:
    """diskcache rewrites the path it is given: make sure it opened the directory and the
    database that were checked, not others."""
    opened = cache.directory
    if opened != str(directory) or not os.path.samestat(os.stat(opened), checked):
        raise UnsafeCacheDirError(f"diskcache opened {opened!r}, not the checked cache directory {str(directory)!r}")
    if not os.path.samestat(os.lstat(os.path.join(opened, DBNAME)), database):
        raise UnsafeCacheDirError(f"{opened}/{DBNAME} was replaced while opening it")


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
    warnings.warn(message, RuntimeWarning, stacklevel=_user_stacklevel())


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_stacklevel() -> int:
    """``stacklevel`` of the first frame outside kerneldsl: the user's line that needed the cache,
    however deep in kerneldsl the cache was opened (a fixed number would point into cache.py)."""
    level = 1  # _warn, which calls warnings.warn
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    return level


# --- the signing key ------------------------------------------------------------------------

_SECRET_BYTES = 32
_secret_lock = threading.Lock()
_secrets: dict[Path, bytes | None] = {}


def default_secret_path() -> Path:
    """$XDG_DATA_HOME/kerneldsl/secret, else ~/.local/share/kerneldsl/secret: not under a cache
    directory (nor ~/.cache), which CI caches and copies carry from machine to machine."""
    data = os.environ.get("XDG_DATA_HOME")
    base = Path(data) if data and os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "kerneldsl" / "secret"


def signing_key() -> bytes | None:
    """This user's secret for sealing every stored value, made (0o600, in a private directory)
    on first use; None, and the cache is kept in memory, where it cannot be made or read, is not
    a regular file, or others could have written it. One that others can read is replaced."""
    try:
        path = default_secret_path()
    except RuntimeError:  # no home directory to find it in (and no $XDG_DATA_HOME)
        return None
    with _secret_lock:
        if path not in _secrets:
            try:
                _secrets[path] = _read_secret(path)
            except (OSError, CacheError) as exc:
                logger.warning("no kerneldsl secret at %s (%s): generated sources are rendered anew", path, exc)
                _secrets[path] = None
        return _secrets[path]


def _read_secret(path: Path) -> bytes:
    directory = Path(os.path.realpath(path.parent))  # the ancestors checked are the ones used
    _make_private_dir(directory)
    path = directory / path.name
    secret = _read_private_secret(path)
    if secret is None:
        _warn(
            f"kerneldsl secret {path} was readable by group or others: replaced by a new private one "
            "(cache entries sealed with the old one are compiled again)"
        )
        _create_secret(path, replace=True)
        secret = _read_private_secret(path)
        if secret is None:
            raise UnsafeCacheDirError(f"{path} is readable by group or others again after replacing it")
    if len(secret) != _SECRET_BYTES:
        raise CacheError(f"{path} holds {len(secret)} bytes, not {_SECRET_BYTES}")
    return secret


def _read_private_secret(path: Path) -> bytes | None:
    """The secret's bytes (made first if missing); None if others can read it, so it is known
    beyond this user; ``UnsafeCacheDirError`` if it is not a regular file of ours that only we
    can write."""
    try:
        fd = _open_no_symlink(str(path), os.O_RDONLY, UnsafeCacheDirError)
    except FileNotFoundError:
        _create_secret(path)
        fd = _open_no_symlink(str(path), os.O_RDONLY, UnsafeCacheDirError)
    with os.fdopen(fd, "rb") as reader:
        info = os.fstat(reader.fileno())
        _vet(info, str(path), "file", UnsafeCacheDirError)
        if os.name == "posix" and info.st_mode & 0o044:
            return None
        return reader.read(_SECRET_BYTES + 1)


def _create_secret(path: Path, replace: bool = False) -> None:
    """Write a fresh secret beside ``path`` and link it into place: a concurrent creator's link
    wins and both read the same secret; a reader never sees a partial one. ``replace`` renames
    it over an existing secret instead."""
    import secrets

    staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staging, _CREATE_FLAGS, 0o600)
    try:
        with os.fdopen(fd, "wb") as writer:
            writer.write(secrets.token_bytes(_SECRET_BYTES))
        if replace:
            os.replace(staging, path)
            return
        with contextlib.suppress(FileExistsError):
            os.link(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)


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
        self._root = directory

    def put(self, key: object) -> tuple[object, bool]:
        if type(key) is not str:
            raise TypeError(f"cache keys must be str, not {type(key).__name__}")
        stored: tuple[object, bool] = super().put(key)
        return stored

    def get(self, key: object, raw: bool) -> str:
        if not raw or type(key) is not str:
            raise CacheError("refusing a row whose key is not plain text")
        return key

    def store(self, value: object, read: bool, key: object = UNKNOWN) -> tuple[object, ...]:
        if read or type(value) is not bytes:
            raise TypeError(f"cache values must be bytes, not {type(value).__name__}")
        if len(value) < self.min_file_size:
            row: tuple[object, ...] = super().store(value, read, key=key)
            return row
        filename, _ = self.filename(key, value)
        _write_value_file(self._root, filename, value)
        return len(value), MODE_BINARY, filename, None

    def fetch(self, mode: int, filename: str | None, value: object, read: bool) -> bytes:
        if mode == MODE_RAW and type(value) is bytes:
            return value
        if mode == MODE_BINARY and not read and _is_value_filename(filename):
            return _read_value_file(self._root, filename)
        raise CacheError(f"refusing a row stored in diskcache mode {mode}")

    def remove(self, file_path: str) -> None:
        if _is_value_filename(file_path):
            super().remove(file_path)


def _is_value_filename(filename: object) -> TypeGuard[str]:
    return isinstance(filename, str) and _VALUE_FILENAME.fullmatch(filename) is not None


def _value_subdirs(directory: str, filename: str) -> tuple[str, str]:
    return os.path.join(directory, filename[:2]), os.path.join(directory, filename[:5])


def _write_value_file(directory: str, filename: str, data: bytes) -> None:
    """Write a new value file 0o600 in 0o700 subdirectories (diskcache would use 0o666 and
    0o777 less the umask); an existing subdirectory we cannot trust raises
    ``UnsafeCacheDirError``, which degrades the cache to memory."""
    for _ in range(_WRITE_ATTEMPTS - 1):
        with contextlib.suppress(FileNotFoundError):  # a concurrent remove() pruned a subdir
            fd = _create_value_file(directory, filename)
            break
    else:
        fd = _create_value_file(directory, filename)
    with os.fdopen(fd, "wb") as writer:
        writer.write(data)


def _create_value_file(directory: str, filename: str) -> int:
    for subdir in _value_subdirs(directory, filename):
        _make_value_subdir(subdir)
    return os.open(os.path.join(directory, filename), _CREATE_FLAGS, 0o600)


def _make_value_subdir(path: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        _vet(os.lstat(path), path, "directory", UnsafeCacheDirError)


def _read_value_file(directory: str, filename: str) -> bytes:
    """The bytes of a value file; ``CacheError`` (so the entry is evicted) unless it and its
    subdirectories are ours and writable by nobody else, who could swap in their own cubin."""
    for subdir in _value_subdirs(directory, filename):
        _vet(os.lstat(subdir), subdir, "directory", CacheError)
    path = os.path.join(directory, filename)
    with os.fdopen(_open_no_symlink(path, os.O_RDONLY, CacheError), "rb") as reader:
        _vet(os.fstat(reader.fileno()), path, "file", CacheError)
        return reader.read()


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
        checked = _make_private_dir(path)
        database = _prepare_database(path)
        _warn_if_network_fs(path)
        self._cache = _VerifiedCache(
            path,
            disk=_BytesOnlyDisk,
            size_limit=size_limit,
            eviction_policy="least-recently-used",
            cull_limit=0,  # _trim evicts instead: diskcache culls ten rows at a time
            statistics=False,
            tag_index=False,
        )
        try:
            _check_opened(self._cache, path, checked, database)
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
        """``directory`` is resolved once, here (see ``_resolve_directory``); ``size_limit``
        in bytes, clamped to SQLite's largest integer."""
        if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit < 0:
            raise ValueError(f"size_limit must be a non-negative int, got {size_limit!r}")
        self.size_limit = min(size_limit, _MAX_SIZE_LIMIT)
        self._lock = threading.Lock()
        path = _resolve_directory(directory if directory is not None else default_cache_dir())
        self.directory, self.in_memory = path, False
        try:
            self._store: _Store = _DiskStore(path, self.size_limit)
        except UnsafeCacheDirError:
            raise  # insecure is not broken: never silently work around it
        except _STORE_ERRORS as exc:
            self._degrade(exc)

    def get(self, key: str, material: Mapping[str, object]) -> bytes | None:
        """The payload stored for ``key``, or None on a miss or an invalid entry (evicted)."""
        material_json = _canonical(dict(material))
        secret = self._sealing_key()
        try:
            blob = self._use(lambda store: store.get(key))
            if blob is None:
                logger.debug("miss %s", key)
                return None
            value = _unpack(blob, secret)
            _check_identity(value, key, material_json)
        except CacheError as exc:
            self.evict(key, str(exc))
            return None
        logger.debug("hit %s", key)
        return value.payload

    def put(self, key: str, payload: bytes, material: Mapping[str, object]) -> None:
        """Store ``payload`` under ``key``, which must be ``cache_key(material)``."""
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if key != cache_key(material):
            raise ValueError(f"key {key!r} is not cache_key(material)")
        blob = _pack(key, payload, material, self._sealing_key())
        self._use(lambda store: store.set(key, blob))
        logger.debug("stored %s (%d bytes)", key, len(payload))

    def entries(self) -> list[CacheEntryInfo]:
        """Every valid entry; invalid ones found on the way are evicted."""
        secret = self._sealing_key()
        found = []
        for key, stored_at, blob in self._use(lambda store: list(store.rows())):
            try:
                if blob is None:
                    raise CacheError("row is not plain bytes")
                if type(stored_at) not in (int, float):  # would break sorting and explain()
                    raise CacheError(f"store time {stored_at!r} is not a number")
                value = _unpack(blob, secret)
                if value.key != key or hashlib.sha256(value.material_json).hexdigest() != key:
                    raise CacheError("header does not match the row's key")
                _check_bindings(value.material.get("bindings"))
            except CacheError as exc:
                self.evict(key, str(exc))
                continue
            found.append(CacheEntryInfo(key, value.material, len(value.payload), stored_at))
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
        nearest = min(candidates, key=lambda e: (len(_differences(e.material, material)), -e.stored_at))
        differences = _differences(nearest.material, material)
        if not differences:
            return "hit"
        return f"miss: nearest entry for kernel {kernel!r} differs in: {', '.join(differences)}"

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

    def _sealing_key(self) -> bytes:
        """This user's secret; without one, the cache degrades to memory, whose values a
        per-process key seals."""
        secret = signing_key()
        if secret is not None:
            return secret
        with self._lock:
            if not self.in_memory:
                self._degrade(CacheError("there is no usable kerneldsl secret to seal its entries with"))
        return _PROCESS_SECRET

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

    def evict(self, key: str, reason: str) -> None:
        """Remove the entry under ``key``, which its reader found invalid, with one warning."""
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
        if name not in stored or name not in wanted or _canonical(stored[name]) != _canonical(wanted[name])
    ]


def _differences(stored: Mapping[str, object], wanted: Mapping[str, object]) -> list[str]:
    """What differs, in words: each binding by name (``constant TILE: 128 -> 256``), then every
    other component of the key material, which a binding may have changed too (source, abi)."""
    named = _binding_differences(stored.get("bindings"), wanted.get("bindings"))
    others = [
        _describe(name, stored.get(name, _ABSENT), wanted.get(name, _ABSENT))
        for name in _differing(stored, wanted)
        if not (name == "bindings" and named)
    ]
    return named + others


_BINDING_LABELS = {  # field -> how explain() names one of its bindings
    "dtypes": "dtype {}:",
    "constants": "constant {}:",
    "extents": "extent {}:",
    "aligned": "16-byte aligned {}:",
}


def _binding_differences(stored: object, wanted: object) -> list[str]:
    """``dtype T: float32 -> float64``, ``index width 32 -> 64``...; nothing unless both sides
    carry well-formed bindings."""
    try:
        _check_bindings(stored)
        _check_bindings(wanted)
    except CacheError:
        return []
    if not isinstance(stored, dict) or not isinstance(wanted, dict):
        return []
    found = []
    for field, label in _BINDING_LABELS.items():
        old, new = stored[field], wanted[field]
        for name in sorted(set(old) | set(new)):
            if name not in old or name not in new or old[name] != new[name]:
                before, after = (_binding_text(side.get(name, _ABSENT)) for side in (old, new))
                found.append(f"{label.format(name)} {before} -> {after}")
    if stored["index_bits"] != wanted["index_bits"]:
        found.append(f"index width {stored['index_bits']} -> {wanted['index_bits']}")
    return found


def _binding_text(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


_BINDING_TYPES: dict[str, type] = {"dtypes": str, "constants": str, "extents": int, "aligned": bool}
BINDING_TEXT_LIMIT = 80  # longest dtype name or constant repr the bindings hold


def _check_bindings(bindings: object) -> None:
    """Refuse (``CacheError``) key material ``bindings`` of the wrong shape: a kernel's dtype
    variables, constants (as their repr), specialized extents, array alignment and index width,
    which ``cache list`` shows and ``explain`` names. None: material without bindings."""
    if bindings is None:
        return
    if not isinstance(bindings, dict) or bindings.keys() != {*_BINDING_TYPES, "index_bits"}:
        raise CacheError("bindings have the wrong fields")
    if bindings["index_bits"] not in (32, 64) or type(bindings["index_bits"]) is not int:
        raise CacheError(f"index width {bindings['index_bits']!r} is neither 32 nor 64")
    for field, kind in _BINDING_TYPES.items():
        table = bindings[field]
        if not isinstance(table, dict):
            raise CacheError(f"bindings field {field} is not a table")
        for name, value in table.items():
            if not name.isidentifier() or type(value) is not kind:
                raise CacheError(f"binding {name!r} in {field} is not a name with a {kind.__name__}")
            if isinstance(value, str) and not 0 < len(value) <= BINDING_TEXT_LIMIT:
                raise CacheError(f"binding {name!r} in {field} is empty or too long")
            if type(value) is int and not 0 <= value < 2**63:
                raise CacheError(f"extent {name!r} is out of range")


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
