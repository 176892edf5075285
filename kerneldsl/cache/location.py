"""Where the cache lives: the default directory, the path fixed once, and the network
filesystems SQLite's locking is unreliable on (warned about once)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import CacheError
from .notice import warn

_NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs"})
_VARIABLE_MARKERS = ("$", "%") if os.name == "nt" else ("$",)  # what os.path.expandvars expands


def default_cache_dir() -> Path:
    """$KERNELDSL_CACHE_DIR if set, else $XDG_CACHE_HOME/kerneldsl, else ~/.cache/kerneldsl.

    A relative $KERNELDSL_CACHE_DIR raises ``CacheError``: it would name a different cache
    in every working directory."""
    explicit = os.environ.get("KERNELDSL_CACHE_DIR")
    if explicit:
        path = expand_user(Path(explicit))
        if not path.is_absolute():
            raise CacheError(f"KERNELDSL_CACHE_DIR must be an absolute path (or start with ~), got {explicit!r}")
        return path
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative paths
        return Path(xdg) / "kerneldsl"
    return Path.home() / ".cache" / "kerneldsl"


def expand_user(path: Path) -> Path:
    """``path`` with ``~`` or ``~user`` expanded; ``CacheError`` for an unknown user (left
    as is, diskcache would expand nothing either and open a relative ``~user`` directory)."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise CacheError(
            f"cannot expand {path.parts[0]!r} in cache directory {str(path)!r}: no such user or no home directory"
        ) from None


def resolve_directory(directory: str | os.PathLike[str]) -> Path:
    """The cache path fixed once: ``~`` expanded, absolute (a relative path is taken from the
    current directory now), symlinks resolved, and free of ``$``, which diskcache would
    expand (``os.path.expandvars``) into a directory nobody checked."""
    path = Path(os.path.realpath(expand_user(Path(directory))))
    for marker in _VARIABLE_MARKERS:
        if marker in str(path):
            raise CacheError(
                f"cache directory {str(path)!r} contains {marker!r}, which diskcache would "
                "expand as an environment variable; use a path without it"
            )
    return path


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


def warn_if_network_fs(path: Path) -> None:
    fstype = _filesystem_type(path)
    if fstype in _NETWORK_FILESYSTEMS and path not in _warned_network_dirs:
        _warned_network_dirs.add(path)
        warn(
            f"kerneldsl cache directory {path} is on {fstype}; SQLite locking is unreliable "
            "on network filesystems, set KERNELDSL_CACHE_DIR to a local directory"
        )
