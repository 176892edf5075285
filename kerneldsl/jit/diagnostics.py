"""Mapping NVRTC diagnostics back to the user's Python file.

The generated source marks the body with ``#line 1 "<kernel>.body"``, so NVRTC reports body
errors as ``<kernel>.body(K)``. The body is usually an f-string inside the decorated function;
``BodyOrigin`` finds which source line produced body line K by matching the f-string's literal
parts, and the error message then points at ``file.py:LINE``.

Two things NVRTC does are undone here. A missing token (``expected a ";"``) is reported at the
*next* token: when that starts a line, the culprit is the line before; after the body's last
line it is the generated ``}``, still numbered in the body file (past its end), so such a
report goes to the last body line. And a generated body may
hold the same user text more than once (an elementwise kernel's vector and scalar loops): the
same message on the same text is reported once.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)(?P<rest>.*)$"
)
# A diagnostic NVRTC cannot place on a line: an unbalanced "{" is only noticed at the source's end.
_AT_END = re.compile(r"^At end of source: (?P<kind>error|warning|catastrophic error)(?P<rest>.*)$")
_PLACEHOLDER = re.compile(r"\\\{[^}]*\\\}")
# A one-line string literal in the source: generated text (an elementwise expression) embeds it.
_LITERAL = re.compile(r"""(?P<quote>["'])(?P<text>(?:\\.|(?!(?P=quote)).)+)(?P=quote)""")
_MIN_LITERAL = 4  # shorter literals ("i", "; ") would match unrelated generated lines


@dataclass(frozen=True)
class BodyOrigin:
    """Where the body function lives: its file and source lines with their line numbers."""

    filename: str
    first_line: int
    lines: tuple[str, ...]

    @classmethod
    def of(cls, func: Callable[..., object]) -> BodyOrigin | None:
        """Source of ``func``, or of what it wraps (``__wrapped__``): a generated body function
        names the user function its text comes from that way."""
        func = inspect.unwrap(func)
        try:
            lines, first = inspect.getsourcelines(func)
            filename = inspect.getsourcefile(func) or "<unknown>"
        except (OSError, TypeError):
            return None
        return cls(filename, first, tuple(line.rstrip("\n") for line in lines))

    def locate(self, body_lines: list[str]) -> dict[int, int]:
        """Body line number (1-based) -> file line number.

        Lines of an f-string body match source lines in order; a body line the order does not
        place, but that contains a string literal of the source, goes to that literal's line.
        """
        found = self._in_order(body_lines)
        literals = [(self.first_line + i, p) for i, src in enumerate(self.lines) for p in _literal_patterns(src)]
        for k, text in enumerate(body_lines, start=1):
            hit = None if k in found or not text.strip() else next((n for n, p in literals if p.search(text)), None)
            if hit is not None:
                found[k] = hit
        return found

    def _in_order(self, body_lines: list[str]) -> dict[int, int]:
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


def _literal_patterns(source_line: str) -> list[re.Pattern[str]]:
    texts = (m.group("text").strip() for m in _LITERAL.finditer(source_line))
    return [p for t in texts if len(t) >= _MIN_LITERAL and (p := _line_pattern(t)) is not None]


def map_log(log: str, body_file: str, body: str, origin: BodyOrigin | None, source: str) -> list[str]:
    """One entry per distinct diagnostic: the user's file:line when known, the message, the offending line."""
    body_lines = body.splitlines()
    source_lines = source.splitlines()
    located = origin.locate(body_lines) if origin else {}
    body_start = _body_start(source_lines, body_file)
    mapped: list[str] = []
    seen: set[tuple[str, str]] = set()
    log_lines = log.splitlines()
    for i, raw in enumerate(log_lines):
        end = _AT_END.match(raw.strip())
        if end is not None:
            mapped.append(_end_entry(f"{end.group('kind')}{end.group('rest')}", body_lines, located, origin, body_file))
            continue
        m = _DIAGNOSTIC.match(raw.strip())
        if not m:
            continue
        reported = int(m.group("line"))
        message = f"{m.group('kind')}{m.group('rest')}"
        at = (
            _body_line(body_lines, reported, _missing_token(message, log_lines, i))
            if m.group("file") == body_file
            else None
        )
        if at is not None:
            text = body_lines[at - 1].strip()
            where = _where(at, located, origin, body_file)
            entry = _body_entry(where, message, at, text, reported, body_start)
        elif m.group("file") != body_file and 1 <= reported <= len(source_lines):
            text = source_lines[reported - 1].strip()
            entry = f"generated line {reported}: {message}\n    {text}"
        else:
            text = ""
            entry = f"{m.group('file')}:{reported}: {message}"
        if (message, text or entry) not in seen:
            seen.add((message, text or entry))
            mapped.append(entry)
    stray = stray_brace(body_lines) if mapped else None
    if stray is not None:  # the errors after it are its consequence: name the cause first
        where = _where(stray, located, origin, body_file)
        cause = f'{where}: error: this "}}" closes nothing the body opened, so it ends the kernel\'s function'
        mapped.insert(0, f"{cause}\n    body line {stray}: {body_lines[stray - 1].strip()}")
    return mapped


def _end_entry(
    message: str, body_lines: list[str], located: dict[int, int], origin: BodyOrigin | None, body_file: str
) -> str:
    """An 'at end of source' diagnostic: a "{" the body leaves open is the usual cause, so the
    entry points at it (NVRTC's own note points at the generated function's brace)."""
    at = unclosed_brace(body_lines)
    if at is None:
        return f"end of the generated source: {message}"
    where = _where(at, located, origin, body_file)
    text = body_lines[at - 1].strip()
    return f'{where}: {message}: the "{{" on body line {at} is never closed\n    body line {at}: {text}'


def _where(at: int, located: dict[int, int], origin: BodyOrigin | None, body_file: str) -> str:
    """Body line ``at`` as the user's ``file.py:LINE`` when known, else ``<kernel>.body:LINE``."""
    return f"{origin.filename}:{located[at]}" if origin and at in located else f"{body_file}:{at}"


_LEXEME = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|[{}]", re.S)


def unclosed_brace(body_lines: list[str]) -> int | None:
    """The body line of the first "{" the body never closes (comments and literals skipped), or None."""
    return _brace_balance(body_lines)[0]


def stray_brace(body_lines: list[str]) -> int | None:
    """The body line of the first "}" that closes nothing the body opened (it ends the kernel's function)."""
    return _brace_balance(body_lines)[1]


def _brace_balance(body_lines: list[str]) -> tuple[int | None, int | None]:
    open_lines: list[int] = []
    stray: int | None = None
    starts = [0]
    for text in body_lines:
        starts.append(starts[-1] + len(text) + 1)
    text = "\n".join(body_lines)
    line = 1
    for m in _LEXEME.finditer(text):
        while starts[line] <= m.start():
            line += 1
        if m.group() == "{":
            open_lines.append(line)
        elif m.group() != "}":
            continue  # a comment or a literal
        elif open_lines:
            open_lines.pop()
        elif stray is None:
            stray = line
    return (open_lines[0] if open_lines else None), stray


def _body_entry(where: str, message: str, at: int, text: str, reported: int, body_start: int | None) -> str:
    entry = f"{where}: {message}\n    body line {at}: {text}"
    if at != reported:
        entry += f"\n    (NVRTC reports it at the next token, body line {reported})"
    if body_start is not None:
        entry += f"\n    generated line {body_start + at}"
    return entry


def _missing_token(message: str, log_lines: list[str], i: int) -> bool:
    """Whether diagnostic ``i`` is a missing token reported at the first token of a line
    (NVRTC echoes the line and puts a caret under the token): the line before lacks it."""
    if not message.startswith("error: expected") or i + 2 >= len(log_lines):
        return False
    echo, caret = log_lines[i + 1], log_lines[i + 2]
    return caret.strip() == "^" and caret.index("^") == len(echo) - len(echo.lstrip())


def _body_line(body_lines: list[str], reported: int, missing_token: bool) -> int | None:
    """The body line a body diagnostic belongs to: the last non-blank one at or before the
    reported line, or before it for a missing token (past the body's end, NVRTC reports at
    the generated ``}``, so that is the body's last line with text)."""
    line = reported - 1 if missing_token and reported > 1 else reported
    for k in range(min(line, len(body_lines)), 0, -1):
        if body_lines[k - 1].strip():
            return k
    return None


def _body_start(source_lines: list[str], body_file: str) -> int | None:
    marker = f'#line 1 "{body_file}"'
    for i, text in enumerate(source_lines, start=1):
        if text.strip() == marker:
            return i
    return None
