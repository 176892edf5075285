"""Where each line of a kernel's body sits in the user's ``.py`` file, for the ``#line`` directives.

The body is the string the decorated function returns. When that string is one of the
function's own string literals (a plain literal or an f-string, written as a ``return`` value or
assigned to a name), the literal's source text is read back from the file and split into what
it spells: literal text, each piece on a known file line, and replacement fields (``{x}``),
whose text is only known at run time. The pieces are matched against the returned string, so
every line of the body is placed exactly:

- a line that starts in literal text is on that text's file line (escapes such as ``\\n`` and
  line continuations are decoded the way Python does, so they shift nothing);
- a line that starts inside a field's text (a field that inserts several lines) is placed on the
  field's line: that is where the user's file produced it.

Anything else is not placed (the body keeps its own ``<kernel>.body`` numbering): a body built by
other means, a returned string that none of the literals spells, a match that two readings of the
fields place differently, a file name outside the form a C string literal takes verbatim, and
kerneldsl's own generated bodies (they are never the user's text). Nothing is ever placed on a
line it does not come from.
"""

from __future__ import annotations

import ast
import bisect
import inspect
import linecache
import re
import sys
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType

# A file name a C string literal holds verbatim: printable ASCII without '"' and '\'.
_SAFE_FILENAME = re.compile(r"[ !#-\[\]-~]+")
_MAX_FILENAME = 4096
_PREFIX = re.compile(r"(?P<prefix>[rRbBuUfF]*)(?P<quote>'''|\"\"\"|'|\")")
_SIMPLE_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
_ESCAPE = re.compile(
    r"\\(?:(?P<newline>\n)|(?P<octal>[0-7]{1,3})|x(?P<hex>[0-9a-fA-F]{2})|u(?P<u4>[0-9a-fA-F]{4})"
    r"|U(?P<u8>[0-9a-fA-F]{8})|(?P<other>.))",
    re.S,
)
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True)
class LineMap:
    """The user's file (validated for a ``#line`` directive) and the file line of each body line
    (``lines[k - 1]`` for body line ``k``; None: not placed)."""

    filename: str
    lines: tuple[int | None, ...]


def safe_filename(filename: object) -> str | None:
    """``filename`` when a C string literal holds it verbatim (printable ASCII, no quote or
    backslash, bounded), else None: nothing else reaches a ``#line`` directive."""
    if type(filename) is not str or len(filename) > _MAX_FILENAME or not _SAFE_FILENAME.fullmatch(filename):
        return None
    return filename


def locate_body(func: Callable[..., object], returned: str) -> LineMap | None:
    """The file line of each line of ``returned`` (the string ``func`` returned, before any
    dedent), or None when the function's file is unknown or unfit for a directive."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    if not isinstance(code, CodeType):
        return None
    found = _literals(code.co_filename, code)
    if found is None:
        return None
    filename, literals = found
    placements = {placed for literal in literals if (placed := literal.place(returned)) is not None}
    if len(placements) != 1:  # none spells it, or two spell it differently
        return None
    return LineMap(filename, placements.pop())


# --- a function's string literals, read once per function --------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """Decoded literal text (``text``) or a replacement field (``text`` None), on file line ``line``."""

    text: str | None
    line: int


@dataclass(frozen=True)
class _Literal:
    """A literal as runs of literal text (``runs[k]``: its pieces) with a field between each two."""

    runs: tuple[tuple[_Piece, ...], ...]
    fields: tuple[_Piece, ...]  # the field between run k and run k + 1

    @classmethod
    def of(cls, pieces: list[_Piece]) -> _Literal:
        runs: list[list[_Piece]] = [[]]
        fields = []
        for piece in pieces:
            if piece.text is None:
                fields.append(piece)
                runs.append([])
            else:
                runs[-1].append(piece)
        return cls(tuple(tuple(run) for run in runs), tuple(fields))

    def place(self, value: str) -> tuple[int | None, ...] | None:
        """The file line of each line of ``value`` when this literal spells it, else None. The
        fields are read shortest-first and longest-first (each run of literal text at its first
        and at its last possible place): lines the two readings place differently are not placed."""
        texts = ["".join(p.text or "" for p in run) for run in self.runs]
        if not self.fields:
            return self._lines(value, [0]) if value == texts[0] else None
        head, tail = texts[0], texts[-1]
        if len(value) < len(head) + len(tail) or not value.startswith(head) or not value.endswith(tail):
            return None
        first, position = [0], len(head)
        for text in texts[1:-1]:
            found = value.find(text, position)
            if found < 0:
                return None
            first.append(found)
            position = found + len(text)
        if position > len(value) - len(tail):
            return None
        last, end = [len(value) - len(tail)], len(value) - len(tail)
        for text in reversed(texts[1:-1]):
            end = value.rfind(text, len(head), end)
            if end < 0:
                return None
            last.append(end)
        last.append(0)
        first.append(len(value) - len(tail))
        shortest, longest = self._lines(value, first), self._lines(value, last[::-1])
        return tuple(a if a == b else None for a, b in zip(shortest, longest))

    def _lines(self, value: str, run_starts: list[int]) -> tuple[int | None, ...]:
        """The file line of each line of ``value`` with run k of literal text at ``run_starts[k]``."""
        spans: list[tuple[int, int, int]] = []  # (start, end, file line) of each piece in value, in order
        cursor = 0
        for k, run in enumerate(self.runs):
            position = run_starts[k]
            if k:  # the field before this run fills the gap
                spans.append((cursor, position, self.fields[k - 1].line))
            for piece in run:
                spans.append((position, position + len(piece.text or ""), piece.line))
                position = spans[-1][1]
            cursor = position
        starts = [start for start, _, _ in spans]
        lines: list[int | None] = []
        for line_start in [0] + [i + 1 for i, c in enumerate(value) if c == "\n"]:
            k = bisect.bisect_right(starts, line_start) - 1
            inside = k >= 0 and spans[k][0] <= line_start < spans[k][1]
            lines.append(spans[k][2] if inside else None)
        return tuple(lines)


@lru_cache(maxsize=256)
def _literals(filename: str, code: CodeType) -> tuple[str, tuple[_Literal, ...]] | None:
    """The function's file name and the string literals it returns or assigns, parsed from its
    own lines of the file as ``linecache`` holds them (what ``inspect`` reads). Keyed by the file
    name too: equal code objects (the same function in two files, at the same line) compare equal
    whatever their files."""
    safe = safe_filename(filename)
    if safe is None:
        return None
    first = code.co_firstlineno
    lines = _block(code, linecache.getlines(safe)[first - 1 :])
    if not lines:
        return None
    source = "".join(lines)
    indented = bool(source[:1].isspace())
    parsed = "if 1:\n" + source if indented else source  # an indented def parses inside a block
    try:
        tree = ast.parse(parsed)
    except SyntaxError:
        return None
    offset = first - 1 - int(indented)
    text_lines = [line + "\n" for line in parsed.split("\n")]
    literals = []
    for node in _returned_literals(tree):
        pieces = _pieces(_segment(text_lines, node), node.lineno + offset)
        if pieces is not None:
            literals.append(_Literal.of(pieces))
    return safe, tuple(literals)


def _block(code: CodeType, lines: list[str]) -> list[str]:
    """The function's lines, from its first (decorators included) to the last any of its
    instructions (or a nested function's) spans: the code object's positions say where it ends,
    so no tokenizer runs (``inspect.getblock`` where positions are not kept, before Python 3.11)."""
    if sys.version_info < (3, 11):
        try:
            return list(inspect.getblock(lines))
        except (IndexError, SyntaxError, tokenize.TokenError):
            return []
    last = code.co_firstlineno
    pending = [code]
    while pending:
        current = pending.pop()
        last = max([last, *(end for _, end, _, _ in current.co_positions() if end is not None)])
        pending.extend(c for c in current.co_consts if isinstance(c, CodeType))
    return lines[: last - code.co_firstlineno + 1]


def _returned_literals(tree: ast.AST) -> Iterator[ast.expr]:
    """String literals returned or assigned in the function (a nested function's too: its text
    can only be the body if it is spelled there)."""
    for node in ast.walk(tree):
        value = node.value if isinstance(node, (ast.Return, ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.JoinedStr) or (isinstance(value, ast.Constant) and type(value.value) is str):
            yield value


def _segment(lines: list[str], node: ast.expr) -> str:
    """The node's source text (``ast`` offsets count UTF-8 bytes)."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    chunk = [line.encode() for line in lines[node.lineno - 1 : node.end_lineno]]
    chunk[-1] = chunk[-1][: node.end_col_offset]
    chunk[0] = chunk[0][node.col_offset :]
    return b"".join(chunk).decode()


def _pieces(text: str, line: int) -> list[_Piece] | None:
    """The pieces of a literal that is one string token starting on file line ``line``
    (implicit concatenation and bytes are not placed: the scan meets a closing quote early).
    Literal text is split after each source newline, so every piece lies on one file line."""
    head = _PREFIX.match(text)
    if head is None or "b" in head.group("prefix").lower() or not text.endswith(head.group("quote")):
        return None
    quote, prefix = head.group("quote"), head.group("prefix").lower()
    content = text[head.end() : len(text) - len(quote)]
    raw, formatted = "r" in prefix, "f" in prefix
    pieces: list[_Piece] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            pieces.append(_Piece("".join(literal), line))
            literal.clear()

    i = 0
    while i < len(content):
        c = content[i]
        if content.startswith(quote, i):  # the literal ends before the node does: concatenation
            return None
        if raw and c == "\\":  # kept as written, and the character after it cannot end the literal
            literal.append(content[i : i + 2])
            if content[i + 1 : i + 2] == "\n":
                flush()
                line += 1
            i += 2
        elif formatted and content[i : i + 2] in ("{{", "}}"):
            literal.append(c)
            i += 2
        elif formatted and c == "{":
            flush()
            end = _field_end(content, i)
            pieces.append(_Piece(None, line))
            line += content.count("\n", i, end)
            i = end
        elif c == "\\" and not raw:
            escape = _ESCAPE.match(content, i)
            if escape is None:
                return None
            if escape.group("newline"):  # a line continuation: no text, the next file line
                flush()
                line += 1
            else:
                literal.append(_decoded(escape))
            i = escape.end()
        elif c == "\n":
            literal.append(c)
            flush()
            line += 1
            i += 1
        else:
            literal.append(c)
            i += 1
    flush()
    return pieces


def _field_end(content: str, start: int) -> int:
    """The index after the ``}`` that closes the field opened at ``start`` (brackets and quoted
    strings inside the expression skipped)."""
    depth: list[str] = []
    i = start
    while i < len(content):
        c = content[i]
        if c in "'\"":
            close = content.find(c, i + 1)
            i = len(content) if close < 0 else close + 1
            continue
        if c in _CLOSERS:
            depth.append(_CLOSERS[c])
        elif depth and c == depth[-1]:
            depth.pop()
            if not depth:
                return i + 1
        i += 1
    return len(content)


def _decoded(escape: re.Match[str]) -> str:
    """One of Python's escape sequences; an unknown one (and ``\\N{...}``, which a body then
    fails to match) is kept as written, as Python keeps it."""
    if escape.group("octal"):
        return chr(int(escape.group("octal"), 8))
    for name in ("hex", "u4", "u8"):
        if escape.group(name):
            return chr(int(escape.group(name), 16))
    other = escape.group("other")
    return _SIMPLE_ESCAPES.get(other, "\\" + other)
