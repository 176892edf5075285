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
import inspect
import io
import re
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
    found = _literals(code)
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
    pieces: tuple[_Piece, ...]
    lazy: re.Pattern[str]
    greedy: re.Pattern[str]

    def place(self, value: str) -> tuple[int | None, ...] | None:
        """The file line of each line of ``value`` when this literal spells it, else None. The
        fields are matched shortest-first and longest-first: lines the two readings place
        differently are not placed."""
        first = self._lines(self.lazy, value)
        if first is None:
            return None
        second = self._lines(self.greedy, value)
        if second is None:
            return None
        return tuple(a if a == b else None for a, b in zip(first, second))

    def _lines(self, pattern: re.Pattern[str], value: str) -> tuple[int | None, ...] | None:
        match = pattern.fullmatch(value)
        if match is None:
            return None
        spans: list[tuple[int, int, int]] = []  # (start, end, file line) of each piece in value
        position, field = 0, 0
        for piece in self.pieces:
            if piece.text is None:
                field += 1
                start, end = match.span(field)
            else:
                start, end = position, position + len(piece.text)
            spans.append((start, end, piece.line))
            position = end
        starts = [0] + [i + 1 for i, c in enumerate(value) if c == "\n"]
        return tuple(_line_at(spans, start) for start in starts)


def _line_at(spans: list[tuple[int, int, int]], position: int) -> int | None:
    """The file line of the piece holding ``position``; at a field's boundary the piece that
    starts there (the line's first character comes from it)."""
    for start, end, line in spans:
        if start <= position < end:
            return line
    return None


@lru_cache(maxsize=256)
def _literals(code: CodeType) -> tuple[str, tuple[_Literal, ...]] | None:
    """The function's file name and the string literals it returns or assigns, parsed from its
    source (one ``getsourcelines``: the function's own block, not the whole file)."""
    filename = safe_filename(code.co_filename)
    if filename is None:
        return None
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
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
            literals.append(_compiled(pieces))
    return filename, tuple(literals)


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
    (implicit concatenation and bytes are not placed). Literal text is split after each source
    newline, so every piece lies on one file line."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    strings = [t for t in tokens if t.type == tokenize.STRING]
    head = _PREFIX.match(text)
    if len(strings) != 1 or strings[0].string != text or head is None or "b" in head.group("prefix").lower():
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
        if formatted and content[i : i + 2] in ("{{", "}}"):
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


def _compiled(pieces: list[_Piece]) -> _Literal:
    """The literal as two patterns over the returned string: each field as any text, shortest
    and longest first."""

    def pattern(field: str) -> re.Pattern[str]:
        return re.compile("".join(field if p.text is None else re.escape(p.text) for p in pieces), re.S)

    return _Literal(tuple(pieces), pattern("(.*?)"), pattern("(.*)"))
