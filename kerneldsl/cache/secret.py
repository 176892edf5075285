"""This user's secret, which seals every stored value: a private file outside any cache
directory, made on first use, refused unless it is ours alone, replaced if others can read it."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from ..errors import CacheError, UnsafeCacheDirError
from .notice import logger, warn
from .safety import CREATE_FLAGS, make_private_dir, open_no_symlink, vet

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
    make_private_dir(directory)
    path = directory / path.name
    secret = _read_private_secret(path)
    if secret is None:
        warn(
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
        fd = open_no_symlink(str(path), os.O_RDONLY, UnsafeCacheDirError)
    except FileNotFoundError:
        _create_secret(path)
        fd = open_no_symlink(str(path), os.O_RDONLY, UnsafeCacheDirError)
    with os.fdopen(fd, "rb") as reader:
        info = os.fstat(reader.fileno())
        vet(info, str(path), "file", UnsafeCacheDirError)
        if os.name == "posix" and info.st_mode & 0o044:
            return None
        return reader.read(_SECRET_BYTES + 1)


def _create_secret(path: Path, replace: bool = False) -> None:
    """Write a fresh secret beside ``path`` and link it into place: a concurrent creator's link
    wins and both read the same secret; a reader never sees a partial one. ``replace`` renames
    it over an existing secret instead."""
    import secrets

    staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staging, CREATE_FLAGS, 0o600)
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
