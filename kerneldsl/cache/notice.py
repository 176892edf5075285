"""The cache's warnings: logged, and raised as a ``RuntimeWarning`` at the user's line."""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

from .. import logs

logger = logs.get("cache")


def warn(message: str) -> None:
    logger.warning("%s", message)
    warnings.warn(message, RuntimeWarning, stacklevel=_user_stacklevel())


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_stacklevel() -> int:
    """``stacklevel`` of the first frame outside kerneldsl: the user's line that needed the cache,
    however deep in kerneldsl the cache was opened (a fixed number would point into the cache package)."""
    level = 1  # warn, which calls warnings.warn
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    return level
