"""Scalars whose conversion runs Python code (``__float__`` / ``__index__``), for the attacks on
both launch paths: a test arms ``Hook.action`` and the next conversion runs it, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class Hook:
    """What a scalar's conversion does once armed: the test sets ``action``."""

    action: Callable[[], Any] | None = None

    @classmethod
    def fire(cls) -> None:
        action, cls.action = cls.action, None  # once: the Python path converts the value again
        if action is not None:
            action()


class HookFloat32(np.float32):
    def __float__(self) -> float:
        Hook.fire()
        return float(np.float32(self))


class HookInt32(np.int32):
    def __index__(self) -> int:
        Hook.fire()
        return int(np.int32(self))
