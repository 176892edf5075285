"""Versions of installed distributions, as cache keys record them: read from the names of their
metadata directories on ``sys.path``, without importing the package or ``importlib.metadata``
(a fresh process pays for every import before its first result)."""

from __future__ import annotations

import os
import re
import sys
from functools import cache


def dist_info_pattern(name: str) -> re.Pattern[str]:
    """Matches ``NAME-VERSION.dist-info`` for a distribution name spelled as pip writes it
    (any case; ``-``, ``_`` and ``.`` alike), capturing the version."""
    spelled = "[-_.]+".join(re.escape(part) for part in re.split(r"[-_.]+", name))
    return re.compile(rf"(?i:{spelled})-([0-9][0-9A-Za-z.+!]*)\.dist-info")


def first_version(pattern: re.Pattern[str]) -> str | None:
    """The version captured from the first directory on ``sys.path`` holding a match: the
    distribution that imports first."""
    for entry in sys.path:
        for name in _names(entry or "."):
            found = pattern.fullmatch(name)
            if found:
                return found.group(1)
    return None


@cache
def _names(directory: str) -> tuple[str, ...]:
    """A ``sys.path`` directory's entries, listed once per process (each version asked for is
    kept for the process too)."""
    try:
        return tuple(os.listdir(directory))
    except OSError:
        return ()
