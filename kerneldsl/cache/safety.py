"""Whether a location can be trusted: private directories whose ancestors nobody else can
rename, files of ours that nobody else can write, and opens that follow no symlink and never
block on a FIFO. diskcache connects to SQLite by path, so ``verify_location`` runs again before
each new connection."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

import diskcache
from diskcache.core import DBNAME

from ..errors import CacheError, UnsafeCacheDirError

_OPEN_FLAGS = (  # O_NONBLOCK: opening a FIFO must not wait for a writer
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
) | getattr(os, "O_BINARY", 0)
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS
_SYMLINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK})  # O_NOFOLLOW met a link (Linux, BSD)
_KINDS: dict[str, Callable[[int], bool]] = {"directory": stat.S_ISDIR, "file": stat.S_ISREG}


def make_private_dir(path: Path) -> os.stat_result:
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


def vet(info: os.stat_result, path: str, kind: str, error: type[CacheError]) -> None:
    """Raise ``error`` unless ``info`` (from lstat or fstat: a symlink is refused as one) is
    of ``kind``, ours and writable by nobody else."""
    if stat.S_ISLNK(info.st_mode):
        raise error(f"{path} is a symlink")
    reason = None if _KINDS[kind](info.st_mode) else f"is not a {kind}"
    reason = reason or _distrust(info)
    if reason:
        raise error(f"{path} {reason}")


def open_no_symlink(path: str, flags: int, error: type[CacheError]) -> int:
    """``os.open`` refusing, with ``error``, a symlink as the last component."""
    try:
        return os.open(path, flags | _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in _SYMLINK_ERRNOS:
            raise error(f"{path} is a symlink") from None
        raise


def prepare_database(directory: Path) -> os.stat_result:
    """Create ``cache.db`` 0o600 before SQLite does (it would follow the umask; its -wal and
    -shm files take the database's mode), or refuse an existing one, or its -wal or -shm,
    that is a symlink, not a regular file (a FIFO would block SQLite's open), not ours or
    writable by others: its rows could be forged.

    An existing ``cache.db`` is only ever ``lstat``-ed, never opened: closing any descriptor of
    a file drops every POSIX lock this process holds on it, so opening and closing it while a
    connection of this process holds SQLite's locks would let other processes write, checkpoint
    and delete the WAL under that connection, and corrupt the database
    (https://www.sqlite.org/howtocorrupt.html, section 2.2). A new one is made under a private
    name, closed, and linked into place, so no descriptor of ``cache.db`` is closed here."""
    path = str(directory / DBNAME)
    if not os.path.lexists(path):
        _create_empty(path)
    info = os.lstat(path)
    vet(info, path, "file", UnsafeCacheDirError)
    for companion in (path + "-wal", path + "-shm"):
        try:
            vet(os.lstat(companion), companion, "file", UnsafeCacheDirError)
        except FileNotFoundError:
            pass
    return info


def _create_empty(path: str) -> None:
    """An empty file (an empty SQLite database) at ``path``, mode 0o600; a concurrent
    creator's file wins."""
    staging = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    os.close(os.open(staging, CREATE_FLAGS, 0o600))
    try:
        with contextlib.suppress(FileExistsError):
            os.link(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)


def verify_location(directory: Path) -> None:
    """Check, before SQLite opens ``cache.db`` by path, everything checked when the cache was
    opened: its ancestors, the directory and the database."""
    _check_ancestors(directory)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeCacheDirError(f"cache directory {directory} is no longer a directory")
    _check_private(directory)
    prepare_database(directory)


def check_opened(cache: diskcache.Cache, directory: Path, checked: os.stat_result, database: os.stat_result) -> None:
    """diskcache rewrites the path it is given: make sure it opened the directory and the
    database that were checked, not others."""
    opened = cache.directory
    if opened != str(directory) or not os.path.samestat(os.stat(opened), checked):
        raise UnsafeCacheDirError(f"diskcache opened {opened!r}, not the checked cache directory {str(directory)!r}")
    if not os.path.samestat(os.lstat(os.path.join(opened, DBNAME)), database):
        raise UnsafeCacheDirError(f"{opened}/{DBNAME} was replaced while opening it")
