"""kerneldsl's loggers. A library logs but never configures logging: without a handler of the
application's, kerneldsl stays quiet (a NullHandler on ``kerneldsl``).

So the ``logging`` module is imported only once the application (or anything else) has imported
it: before that no handler other than kerneldsl's NullHandler can exist, and a record would reach
no one, so it is dropped unmade. A fresh process that never logs pays nothing for logging.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging


class Logger:
    """The logger of one kerneldsl module, made on the first record anyone could see."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    def debug(self, msg: str, *args: Any, exc_info: bool = False) -> None:
        real = self._real()
        if real is not None:
            real.debug(msg, *args, exc_info=exc_info, stacklevel=2)

    def info(self, msg: str, *args: Any, exc_info: bool = False) -> None:
        real = self._real()
        if real is not None:
            real.info(msg, *args, exc_info=exc_info, stacklevel=2)

    def warning(self, msg: str, *args: Any, exc_info: bool = False) -> None:
        real = self._real()
        if real is not None:
            real.warning(msg, *args, exc_info=exc_info, stacklevel=2)

    def _real(self) -> logging.Logger | None:
        """The ``logging`` logger, or None while nothing has imported ``logging``."""
        if self._logger is None:
            if "logging" not in sys.modules:
                return None
            import logging

            quiet = logging.getLogger("kerneldsl")
            if not any(type(h) is logging.NullHandler for h in quiet.handlers):
                quiet.addHandler(logging.NullHandler())
            self._logger = logging.getLogger(self.name)
        return self._logger


def get(name: str) -> Logger:
    """The logger of kerneldsl module ``name`` (``"build"``, ``"runtime.session"``)."""
    return Logger(f"kerneldsl.{name}")
