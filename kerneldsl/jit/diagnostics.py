"""Mapping NVRTC's and the host C++ compiler's diagnostics back to the user's Python file.

The generated source numbers each body line with ``#line`` directives (``source_lines``): a line
placed in the user's file under that file and line, any other under ``<kernel>.body`` and its
body line, and generated code under the generated file's own lines. A compiler reports a body
line as ``file.py(L)`` (NVRTC) or ``file.py:L:C`` (the host compiler), which the places the
directives gave (``places``) turn back into the body line; a body line numbered in
``<kernel>.body`` (kerneldsl's generated bodies, which embed a user's expression) is placed by
``BodyOrigin``, which matches the literal text of the function the code came from.

Two things NVRTC does are undone here. A missing token (``expected a ";"``) is reported at the
*next* token: when that starts a line, the culprit is the line before; after the body's last
line it is the generated ``}``, still numbered in the body file (past its end), so such a
report goes to the last body line. And a generated body may
hold the same user text more than once (a vector loop and a scalar loop over it): the
same message on the same text is reported once.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

_DIAGNOSTIC = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)(?P<rest>.*)$")
# The host compiler's (GCC, Clang): file:line:column: kind: message.
_HOST_DIAGNOSTIC = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?:\d+:)? (?P<kind>error|warning|fatal error)(?P<rest>.*)$"
)
_GUTTER = re.compile(r"^\s*\d+\s*\|(.*)$")  # GCC's and Clang's echo of a source line: "   16 |     text"
# A diagnostic NVRTC cannot place on a line: an unbalanced "{" is only noticed at the source's end.
_AT_END = re.compile(r"^At end of source: (?P<kind>error|warning|catastrophic error)(?P<rest>.*)$")
_PLACEHOLDER = re.compile(r"\\\{[^}]*\\\}")
# A one-line string literal in the source: generated text (a user's expression) embeds it.
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


def map_log(
    log: str,
    body_file: str,
    body: str,
    origin: BodyOrigin | None,
    source: str,
    places: tuple[tuple[str, int], ...] = (),
) -> list[str]:
    """One entry per distinct diagnostic: the user's file:line when known, the message, the
    offending line. ``places``: the (file, line) the source's ``#line`` directives give each body
    line (without them, body lines are numbered in ``body_file``)."""
    body_lines = body.splitlines()
    source_lines = source.splitlines()
    places = places or tuple((body_file, k) for k in range(1, len(body_lines) + 1))
    body_lines_at: dict[tuple[str, int], list[int]] = {}
    for k, place in enumerate(places, start=1):
        body_lines_at.setdefault(place, []).append(k)
    located = origin.locate(body_lines) if origin else {}
    generated_at = _generated_lines(source_lines, places)
    mapped: list[str] = []
    seen: set[tuple[str, str]] = set()
    log_lines = log.splitlines()
    for i, raw in enumerate(log_lines):
        end = _AT_END.match(raw.strip())
        if end is not None:
            mapped.append(
                _end_entry(f"{end.group('kind')}{end.group('rest')}", body_lines, located, origin, places, body_file)
            )
            continue
        m = _DIAGNOSTIC.match(raw.strip()) or _HOST_DIAGNOSTIC.match(raw.strip())
        if not m:
            continue
        file, reported = m.group("file"), int(m.group("line"))
        message = f"{m.group('kind')}{m.group('rest')}"
        in_body = _which(body_lines_at.get((file, reported), []), body_lines, _echo(log_lines, i))
        if in_body is None and file == body_file and reported > len(body_lines):
            in_body = reported  # past the body's end, still numbered in its file
        if in_body is None and _closes_body(source_lines, file, reported):
            in_body = len(body_lines) + 1  # the generated "}" after the body: a token missing at its end
        at = None if in_body is None else _body_line(body_lines, in_body, _missing_token(message, log_lines, i))
        if at is not None and in_body is not None:
            text = body_lines[at - 1].strip()
            where = _where(at, located, origin, places, body_file)
            entry = _body_entry(where, message, at, text, in_body, generated_at.get(at))
        elif file not in {f for f, _ in places} and 1 <= reported <= len(source_lines):
            text = source_lines[reported - 1].strip()
            entry = f"generated line {reported}: {message}\n    {text}"
        else:
            text = ""
            entry = f"{file}:{reported}: {message}"
        if (message, text or entry) not in seen:
            seen.add((message, text or entry))
            mapped.append(entry)
    stray = stray_brace(body_lines) if mapped else None
    if stray is not None:  # the errors after it are its consequence: name the cause first
        where = _where(stray, located, origin, places, body_file)
        cause = f'{where}: error: this "}}" closes nothing the body opened, so it ends the kernel\'s function'
        mapped.insert(0, f"{cause}\n    body line {stray}: {body_lines[stray - 1].strip()}")
    return mapped


def _which(candidates: list[int], body_lines: list[str], echo: str | None) -> int | None:
    """The body line a report at one (file, line) is about: lines a field inserted share their
    field's line, so the one whose text the compiler echoed, else the first."""
    if len(candidates) > 1 and echo is not None:
        for k in candidates:
            if body_lines[k - 1].strip() == echo:
                return k
    return candidates[0] if candidates else None


def _echo(log_lines: list[str], i: int) -> str | None:
    """The source line the compiler echoes under diagnostic ``i``: NVRTC's as is, GCC's and
    Clang's after the ``N |`` gutter."""
    if i + 1 >= len(log_lines):
        return None
    echo = log_lines[i + 1]
    gutter = _GUTTER.match(echo)
    return (gutter.group(1) if gutter else echo).strip()


def _closes_body(source_lines: list[str], file: str, reported: int) -> bool:
    """Whether generated line ``reported`` of ``file`` is the first "}" after the body's directive
    back to the generated file: the kernel's own, or (in a checked CPU-device build) the close of
    the checked arrays' scope, with only that scope's conditional lines in between."""
    if not 2 <= reported <= len(source_lines) or source_lines[reported - 1].strip() != "}":
        return False
    line = reported - 1
    while line > 1 and (source_lines[line - 1].strip() == "}" or source_lines[line - 1].startswith(("#if", "#endif"))):
        line -= 1
    return source_lines[line - 1] == f'#line {line + 1} "{file}"'


def _end_entry(
    message: str,
    body_lines: list[str],
    located: dict[int, int],
    origin: BodyOrigin | None,
    places: tuple[tuple[str, int], ...],
    body_file: str,
) -> str:
    """An 'at end of source' diagnostic: a "{" the body leaves open is the usual cause, so the
    entry points at it (NVRTC's own note points at the generated function's brace)."""
    at = unclosed_brace(body_lines)
    if at is None:
        return f"end of the generated source: {message}"
    where = _where(at, located, origin, places, body_file)
    text = body_lines[at - 1].strip()
    return f'{where}: {message}: the "{{" on body line {at} is never closed\n    body line {at}: {text}'


def _where(
    at: int, located: dict[int, int], origin: BodyOrigin | None, places: tuple[tuple[str, int], ...], body_file: str
) -> str:
    """Body line ``at`` as the user's ``file.py:LINE`` when known (from its directive, else from
    ``BodyOrigin``), else ``<kernel>.body:LINE``."""
    file, line = places[at - 1]
    if file == body_file and origin and at in located:
        return f"{origin.filename}:{located[at]}"
    return f"{file}:{line}"


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


def _body_entry(where: str, message: str, at: int, text: str, reported: int, generated: int | None) -> str:
    entry = f"{where}: {message}\n    body line {at}: {text}"
    if at != reported:
        entry += f"\n    (NVRTC reports it at the next token, body line {reported})"
    if generated is not None:
        entry += f"\n    generated line {generated}"
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


def _generated_lines(source_lines: list[str], places: tuple[tuple[str, int], ...]) -> dict[int, int]:
    """Body line -> its line in the generated source: the lines after the body's first
    directive, directives skipped (none when the source holds no such directive)."""
    if not places:
        return {}
    marker = f'#line {places[0][1]} "{places[0][0]}"'
    start = next((i for i, text in enumerate(source_lines, start=1) if text.strip() == marker), None)
    if start is None:
        return {}
    found: dict[int, int] = {}
    for i in range(start, len(source_lines)):
        if len(found) == len(places):
            break
        if not source_lines[i].startswith("#line "):
            found[len(found) + 1] = i + 1
    return found
