"""Mapping NVRTC diagnostics back to the user's Python file.

The generated source marks the body with ``#line 1 "<kernel>.body"``, so NVRTC reports body
errors as ``<kernel>.body(K)``. The body is usually an f-string inside the decorated function;
``BodyOrigin`` finds which source line produced body line K by matching the f-string's literal
parts, and the error message then points at ``file.py:LINE``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)(?P<rest>.*)$"
)
_PLACEHOLDER = re.compile(r"\\\{[^}]*\\\}")


@dataclass(frozen=True)
class BodyOrigin:
    """Where the body function lives: its file and source lines with their line numbers."""

    filename: str
    first_line: int
    lines: tuple[str, ...]

    @classmethod
    def of(cls, func: Callable[..., object]) -> BodyOrigin | None:
        try:
            lines, first = inspect.getsourcelines(func)
            filename = inspect.getsourcefile(func) or "<unknown>"
        except (OSError, TypeError):
            return None
        return cls(filename, first, tuple(line.rstrip("\n") for line in lines))

    def locate(self, body_lines: list[str]) -> dict[int, int]:
        """Body line number (1-based) -> file line number, for lines that can be matched in order."""
        patterns = [_line_pattern(src) for src in self.lines]
        found: dict[int, int] = {}
        cursor = 0
        for k, text in enumerate(body_lines, start=1):
            stripped = text.strip()
            if not stripped:
                continue
            for i in range(cursor, len(patterns)):
                pattern = patterns[i]
                if pattern is not None and pattern.fullmatch(stripped):
                    found[k] = self.first_line + i
                    cursor = i + 1
                    break
        return found


def _line_pattern(source_line: str) -> re.Pattern[str] | None:
    stripped = source_line.strip()
    if not stripped:
        return None
    escaped = re.escape(stripped.replace("{{", "\x00").replace("}}", "\x01"))
    pattern = _PLACEHOLDER.sub(".*?", escaped).replace("\x00", r"\{").replace("\x01", r"\}")
    return re.compile(pattern)


def map_log(log: str, body_file: str, body: str, origin: BodyOrigin | None, source: str) -> list[str]:
    """One line per diagnostic: the user's file:line when known, the message, the offending line."""
    body_lines = body.splitlines()
    source_lines = source.splitlines()
    located = origin.locate(body_lines) if origin else {}
    body_start = _body_start(source_lines, body_file)
    mapped = []
    for raw in log.splitlines():
        m = _DIAGNOSTIC.match(raw.strip())
        if not m:
            continue
        line = int(m.group("line"))
        message = f"{m.group('kind')}{m.group('rest')}"
        if m.group("file") == body_file and 1 <= line <= len(body_lines):
            where = f"{origin.filename}:{located[line]}" if origin and line in located else f"{body_file}:{line}"
            generated = body_start + line if body_start is not None else None
            mapped.append(
                f"{where}: {message}\n    body line {line}: {body_lines[line - 1].strip()}"
                + (f"\n    generated line {generated}" if generated else "")
            )
        elif 1 <= line <= len(source_lines):
            mapped.append(f"generated line {line}: {message}\n    {source_lines[line - 1].strip()}")
        else:
            mapped.append(f"{m.group('file')}:{line}: {message}")
    return mapped


def _body_start(source_lines: list[str], body_file: str) -> int | None:
    marker = f'#line 1 "{body_file}"'
    for i, text in enumerate(source_lines, start=1):
        if text.strip() == marker:
            return i
    return None
