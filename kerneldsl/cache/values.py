"""How rows and value files are written and read back: str keys and bytes values only, in
files 0o600 under 0o700 subdirectories, never a pickled row."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from typing import TypeGuard

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

from ..errors import CacheError, UnsafeCacheDirError
from .safety import CREATE_FLAGS, open_no_symlink, vet

_MIN_FILE_SIZE = 2**15  # values at least this large live in their own file
_VALUE_FILENAME = re.compile(r"[0-9a-f]{2}[/\\][0-9a-f]{2}[/\\][0-9a-f]{28}\.val")
_VALUE_TOP_SUBDIR = re.compile(r"[0-9a-f]{2}")  # the first part of a value file's name
_WRITE_ATTEMPTS = 10  # as diskcache: a concurrent remove() may prune a fresh subdirectory


class BytesOnlyDisk(diskcache.Disk):
    """A ``diskcache.Disk`` that writes and reads back only str keys and bytes values.

    Reading a row stored in pickle or text mode (or under a pickled key) raises
    ``CacheError`` before anything is deserialized; value file names must look like the
    ones diskcache generates, so a tampered row cannot make us read or delete elsewhere.
    Settings from the database (which a tamperer controls) are ignored, here and by the cache
    (``store._VerifiedCache``), which would otherwise set them on this object.
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
    return os.open(os.path.join(directory, filename), CREATE_FLAGS, 0o600)


def _make_value_subdir(path: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        vet(os.lstat(path), path, "directory", UnsafeCacheDirError)


def _read_value_file(directory: str, filename: str) -> bytes:
    """The bytes of a value file; ``CacheError`` (so the entry is evicted) unless it and its
    subdirectories are ours and writable by nobody else, who could swap in their own cubin."""
    for subdir in _value_subdirs(directory, filename):
        vet(os.lstat(subdir), subdir, "directory", CacheError)
    path = os.path.join(directory, filename)
    with os.fdopen(open_no_symlink(path, os.O_RDONLY, CacheError), "rb") as reader:
        vet(os.fstat(reader.fileno()), path, "file", CacheError)
        return reader.read()


def remove_value_files(directory: str) -> None:
    """Delete every value subdirectory of ``directory`` (never following a symlink), for a
    database that is discarded: nothing else names those files."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if _VALUE_TOP_SUBDIR.fullmatch(name) and stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
