"""``[3/8] what, 1.2 s`` redrawn in place on stderr while a long series of builds or
measurements runs: ``kerneldsl compile``'s builds, a tuned kernel's configurations."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    """``[3/8] kernel bindings arch, 1.2 s`` redrawn in place on stderr while builds run.

    Only for more than a few builds (a few finish before anyone waits) and only on a
    terminal: a log file or a pipe gets the table alone, without carriage returns.
    """

    MIN_BUILDS = 4

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream, self.done = total, stream, 0
        self.enabled = total >= self.MIN_BUILDS and stream.isatty()
        self.start = time.perf_counter()
        self.width = 0

    def show(self, current: str) -> None:
        """Announce the next build: ``current`` is what it compiles."""
        self.done += 1
        if self.enabled:
            elapsed = time.perf_counter() - self.start
            self._draw(f"[{self.done}/{self.total}] {current}, {elapsed:.1f} s")

    def close(self) -> None:
        if self.enabled:
            self._draw("")

    def _draw(self, line: str) -> None:
        self.stream.write("\r" + line.ljust(self.width))
        if not line:
            self.stream.write("\r")
        self.stream.flush()
        self.width = len(line)
