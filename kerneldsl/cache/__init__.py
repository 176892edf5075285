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
  after a fork), so all of this is checked again before each new connection. Those checks
  ``lstat`` ``cache.db`` and never open it: closing any descriptor of a file drops every POSIX
  lock the process holds on it, SQLite's included, and other processes could then corrupt it.
  A location that merely does not work (read-only, under a file, corrupt database) degrades to
  a per-process in-memory cache with one warning; ``kerneldsl cache clear`` deletes a corrupt
  database (and its value files) and starts afresh.
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

Where each part lives: ``keys`` (cache_key), ``seal`` (the value format and its HMAC),
``secret`` (the signing key), ``location`` (the directory, network filesystems), ``safety``
(ownership, ancestors, safe opens), ``values`` (the bytes-only diskcache ``Disk``), ``store``
(SQLite or memory rows), ``explain`` (differences in words, bindings), ``disk_cache``
(``DiskCache``); this module re-exports them and holds the process-wide instance.
"""

from __future__ import annotations

import os
import threading

from ..errors import CacheError
from .disk_cache import DEFAULT_SIZE_LIMIT, CacheEntryInfo, DiskCache
from .explain import BINDING_TEXT_LIMIT
from .keys import cache_key
from .location import default_cache_dir
from .seal import CACHE_FORMAT_VERSION
from .secret import default_secret_path, signing_key

__all__ = [
    "BINDING_TEXT_LIMIT",
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


_default_cache: DiskCache | None = None
_default_lock = threading.Lock()


def _size_limit_from_env() -> int:
    text = os.environ.get("KERNELDSL_CACHE_SIZE")
    if not text:
        return DEFAULT_SIZE_LIMIT
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
