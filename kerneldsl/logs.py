"""kerneldsl's loggers. A library logs but never configures logging: without a handler of the
application's, kerneldsl stays quiet (the NullHandler below), and it costs nothing to import
kerneldsl itself, since only the modules that log import this one."""

from __future__ import annotations

import logging

logging.getLogger("kerneldsl").addHandler(logging.NullHandler())


def get(name: str) -> logging.Logger:
    """The logger of kerneldsl module ``name`` (``"build"``, ``"runtime.session"``)."""
    return logging.getLogger(f"kerneldsl.{name}")
