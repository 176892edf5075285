"""Splitting a kernel's body at its barriers and warp collectives, so the CPU device runs a block's
threads as passes of a loop instead of as fibers.

A CUDA thread that waits at ``__syncthreads`` or a warp collective must let the others run. Fibers
do that by switching stacks, which costs a thread several nanoseconds to start and to wait
(``kerneldsl bench cpu --only fibers``). A split kernel instead runs once a block: it loops over
the block's threads, and each runs from where it last waited to its next wait, which is a store
of where to resume (a ``case`` label of one ``switch`` around the body) and a jump to the next
thread. The variables that live across a wait move to per-thread columns (each renamed to a
reference into its column), so no wait bypasses a declaration. The runtime completes, between
passes, what every thread has reached (``kd_host.h`` "Split blocks").

Only what this module can read with certainty is split: the body's statements (blocks, ``if``,
``for``, ``while``, ``do``, declarations, expression statements, ``return;``), with each wait a
whole statement or one call in one. Anything else (a lambda, a local type, ``goto``, a wait in a
condition or inside ``switch``, a variable of ``auto`` or reference type that lives across a
wait, ``__activemask``, ``__nanosleep``, a collective in a device function) keeps fibers:
``split_kernel`` returns None, and a split source that the compiler refuses is built again
unsplit (``host_compile``), so splitting can make a kernel faster but never unbuildable.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

BARRIERS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or"})
WARP_COLLECTIVES = frozenset(
    {
        "__syncwarp",
        "__shfl_sync",
        "__shfl_up_sync",
        "__shfl_down_sync",
        "__shfl_xor_sync",
        "__ballot_sync",
        "__any_sync",
        "__all_sync",
        "__uni_sync",
        "__match_any_sync",
        "__match_all_sync",
        "__reduce_add_sync",
        "__reduce_min_sync",
        "__reduce_max_sync",
        "__reduce_and_sync",
        "__reduce_or_sync",
        "__reduce_xor_sync",
    }
)
WAITS = BARRIERS | WARP_COLLECTIVES
# Names whose meaning a split cannot keep: which lanes are converged, a thread yielding to others,
# code the compiler alone reads.
_KEEP_FIBERS = frozenset({"__activemask", "__nanosleep", "asm", "__asm__", "__asm", "goto", "co_await", "co_yield"})
_LOCAL_TYPES = frozenset({"typedef", "using", "struct", "class", "union", "enum", "template", "namespace", "try"})
_NOT_A_TYPE = frozenset(
    {
        "return", "delete", "throw", "sizeof", "new", "this", "true", "false", "nullptr", "static_cast",
        "reinterpret_cast", "const_cast", "dynamic_cast", "typeid", "alignof", "noexcept", "operator", "case",
        "default", "else", "do", "if", "for", "while", "switch", "break", "continue", "static_assert",
    }
)  # fmt: skip
_STATIC = frozenset({"__shared__", "static", "extern", "thread_local"})
_ASSIGNING = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"})
_KERNEL = re.compile(r'extern "C" __global__ void \w+\(')
_INDEX_TYPEDEF = re.compile(r"^typedef (?:int|long long) index_t;$", re.MULTILINE)
_INCLUDE = re.compile(r"^\s*#\s*include\b", re.MULTILINE)
_LINE = re.compile(r'#\s*line\s+(\d+)\s+"([^"]*)"')
_TOKEN = re.compile(
    r"""(?P<newline>\n)|(?P<space>[ \t\r\f\v]+|\\\n)|(?P<comment>//[^\n]*|/\*.*?\*/)
    |(?P<raw>\bR")
    |(?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*"|(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
    |(?P<number>\.?\d(?:[\w.']|[eEpP][+-])*)|(?P<name>[A-Za-z_]\w*)
    |(?P<punct>>>=|<<=|->\*|\.\.\.|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|\.\*
        |[{}\[\]();:,.?~!%^&*+\-=<>|/#])""",
    re.X | re.S,
)


class Unsplittable(Exception):
    """The body holds something a split could change the meaning of: the kernel keeps fibers."""


@dataclass(frozen=True)
class Token:
    kind: str  # name, number, string, punct, pp (a preprocessor line)
    text: str
    start: int
    end: int
    line: int
    file: str


@dataclass
class Declarator:
    name: int  # token index of the declared name
    pointer: tuple[int, int]  # [lo, hi) of the `*`, `&` and qualifiers before the name
    dims: tuple[int, int]  # [lo, hi) of its `[...]`s
    init: str  # "", "=", "(" or "{"
    value: tuple[int, int]  # [lo, hi) of the initializer (inside the parentheses or braces)


@dataclass
class Declaration:
    base: tuple[int, int]  # [lo, hi) of the specifiers and type before the first declarator
    declarators: list[Declarator]
    static: bool  # __shared__, static, extern: never a per-thread column
    constexpr: bool


@dataclass
class Stmt:
    kind: str  # block, if, for, while, do, switch, decl, expr, return, jump, empty
    first: int  # token indices, inclusive
    last: int
    children: list[Stmt | None] = field(default_factory=list)
    parts: list[tuple[int, int]] = field(default_factory=list)  # conditions, for's init/cond/inc: [lo, hi)
    declaration: Declaration | None = None
    pragmas: list[int] = field(default_factory=list)
    waits: bool = False  # holds a wait (at any depth)


@dataclass(frozen=True)
class Column:
    type: str
    name: str


@dataclass(frozen=True)
class Site:
    """A wait, for the runtime's errors: the collective's name, where, and a barrier's mode (-1: a
    warp collective)."""

    name: str
    file: str
    line: int
    mode: int


_BARRIER_MODES = {"__syncthreads": 0, "__syncthreads_count": 1, "__syncthreads_and": 2, "__syncthreads_or": 3}


def split_kernel(source: str) -> str | None:
    """``source`` with its kernel's body split at its waits, or None where it keeps fibers (no wait,
    or something ``Unsplittable``)."""
    try:
        return _Splitter(source).split()
    except Unsplittable:
        return None


def _tokenize(text: str, offset: int = 0) -> list[Token]:
    tokens: list[Token] = []
    line, file, at_line_start, pos = 1, "", True, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise Unsplittable(f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind == "punct" and m.group() == "#" and at_line_start:
            end = pos
            while True:  # a preprocessor line, continuations included
                end = text.find("\n", end)
                if end < 0:
                    end = len(text)
                    break
                if text[end - 1] != "\\":
                    break
                end += 1
            directive = text[pos:end]
            tokens.append(Token("pp", directive, offset + pos, offset + end, line, file))
            found = _LINE.match(directive)
            if found:
                line, file = int(found.group(1)) - 1, found.group(2)  # (the newline after it adds one)
            pos = end
            continue
        if kind == "raw":
            raise Unsplittable("a raw string literal")
        if kind == "newline":
            line += 1
            at_line_start = True
        elif kind == "space" and m.group() == "\\\n":
            line += 1
        elif kind not in ("space", "comment"):
            tokens.append(Token(kind, m.group(), offset + m.start(), offset + m.end(), line, file))
            at_line_start = False
        elif kind == "comment":
            line += m.group().count("\n")
        pos = m.end()
    return tokens


class _Splitter:
    def __init__(self, source: str) -> None:
        self.source = source

    # --- finding the body ---------------------------------------------------------------------
    def split(self) -> str | None:
        typedef = _INDEX_TYPEDEF.search(self.source)
        kernels = list(_KERNEL.finditer(self.source))
        if typedef is None or len(kernels) != 1:
            raise Unsplittable("not one kernel of kernel.cu.j2")
        before = self.source[typedef.start() : kernels[0].start()]
        if any(name in before for name in WAITS):
            raise Unsplittable("a wait outside the kernel's body")
        if _INCLUDE.search(self.source, 0, typedef.start()):
            raise Unsplittable("a header, whose functions may wait")
        open_paren = kernels[0].end() - 1
        body_open = self._after_group(open_paren)
        if self.source[body_open] != "{":
            raise Unsplittable("no body")
        tokens = _tokenize(self.source[body_open:], body_open)
        close = self._match(tokens, 0)
        marks = [i for i in range(close) if tokens[i].kind == "pp" and _LINE.match(tokens[i].text)]
        if len(marks) < 2:
            raise Unsplittable("no #line-marked body")
        self.tokens = tokens[marks[0] + 1 : marks[-1]]
        if not any(t.kind == "name" and t.text in WAITS for t in self.tokens):
            return None
        for t in self.tokens:
            if t.kind == "name" and (t.text in _KEEP_FIBERS or t.text in _LOCAL_TYPES):
                raise Unsplittable(t.text)
        self._refuse_lambdas()
        self.declared: list[tuple[int, int]] = []  # every declarator's (name token, end of its scope)
        body = self._statements(0, len(self.tokens))
        self._scope(list(body), len(self.tokens) - 1)
        self.columns: list[Column] = []
        self.renames: dict[int, str] = {}
        self.spans: dict[int, tuple[int, str]] = {}  # a wait's call [start, end] -> its result
        self.sites: list[Site] = []
        self._columns_of(body, len(self.tokens) - 1)
        text = "\n".join(self._emit(s) for s in body)
        warps = any(t.kind == "name" and t.text in WARP_COLLECTIVES for t in self.tokens)
        block = str(_template().block(self.columns, self.sites, warps, text))
        start, end = tokens[marks[0]].start, tokens[marks[-1]].start
        return f"{self.source[:start]}{block}\n{self.source[end:]}"

    def _after_group(self, open_paren: int) -> int:
        """The offset of the first character after the parenthesized group at ``open_paren``,
        whitespace skipped."""
        depth, pos = 0, open_paren
        while True:
            c = self.source[pos]
            depth += c == "("
            depth -= c == ")"
            pos += 1
            if depth == 0:
                break
        while self.source[pos].isspace():
            pos += 1
        return pos

    @staticmethod
    def _match(tokens: list[Token], i: int) -> int:
        """The index of the bracket closing the one at ``i``."""
        pairs = {"(": ")", "[": "]", "{": "}"}
        stack = [pairs[tokens[i].text]]
        for j in range(i + 1, len(tokens)):
            text = tokens[j].text
            if tokens[j].kind != "punct":
                continue
            if text in pairs:
                stack.append(pairs[text])
            elif text in (")", "]", "}"):
                if stack.pop() != text:
                    raise Unsplittable("unbalanced brackets")
                if not stack:
                    return j
        raise Unsplittable("unbalanced brackets")

    def _refuse_lambdas(self) -> None:
        toks = self.tokens
        for i, t in enumerate(toks):
            if t.text == "[" and t.kind == "punct":
                prev = toks[i - 1] if i else None
                if prev is None or not (prev.kind in ("name", "number", "string") or prev.text in (")", "]")):
                    raise Unsplittable("a lambda or attribute")

    # --- statements ---------------------------------------------------------------------------
    def _statements(self, i: int, end: int) -> list[Stmt]:
        out: list[Stmt] = []
        while i < end:
            stmt, i = self._statement(i, end)
            if stmt is not None:
                out.append(stmt)
        return out

    def _statement(self, i: int, end: int) -> tuple[Stmt | None, int]:
        toks = self.tokens
        pragmas: list[int] = []
        while i < end and toks[i].kind == "pp":
            if toks[i].text.lstrip("# \t").startswith("pragma"):
                pragmas.append(i)
            elif not _LINE.match(toks[i].text):
                raise Unsplittable(f"a preprocessor directive in the body: {toks[i].text}")
            i += 1
        if i >= end:
            return None, i
        stmt, nxt = self._bare_statement(i, end)
        stmt.pragmas = pragmas
        return stmt, nxt

    def _bare_statement(self, i: int, end: int) -> tuple[Stmt, int]:
        toks = self.tokens
        t = toks[i]
        if t.text == "{":
            close = self._match(toks, i)
            s = Stmt("block", i, close, list(self._statements(i + 1, close)))
            s.waits = any(c.waits for c in s.children if c)
            self._scope(s.children, close)
            return s, close + 1
        if t.text == ";":
            return Stmt("empty", i, i), i + 1
        if t.kind == "name" and t.text == "if":
            j = i + 1
            if toks[j].text == "constexpr":
                raise Unsplittable("if constexpr")
            close = self._paren(j)
            then, nxt = self._sub(close + 1, end)
            s = Stmt("if", i, then.last, [then, None], [(j + 1, close)])
            if nxt < end and toks[nxt].text == "else":
                other, nxt = self._sub(nxt + 1, end)
                s.children[1] = other
                s.last = other.last
            self._mark(s)
            return s, nxt
        if t.kind == "name" and t.text in ("while", "switch"):
            close = self._paren(i + 1)
            body, nxt = self._sub(close + 1, end)
            s = Stmt(t.text, i, body.last, [body], [(i + 2, close)])
            self._mark(s)
            return s, nxt
        if t.kind == "name" and t.text == "do":
            body, nxt = self._sub(i + 1, end)
            if toks[nxt].text != "while":
                raise Unsplittable("do without while")
            close = self._paren(nxt + 1)
            if toks[close + 1].text != ";":
                raise Unsplittable("do-while without ;")
            s = Stmt("do", i, close + 1, [body], [(nxt + 2, close)])
            self._mark(s)
            return s, close + 2
        if t.kind == "name" and t.text == "for":
            return self._for(i, end)
        if t.kind == "name" and t.text == "return":
            if toks[i + 1].text != ";":
                raise Unsplittable("return with a value")
            return Stmt("return", i, i + 1), i + 2
        if t.kind == "name" and t.text in ("break", "continue"):
            return Stmt("jump", i, i + 1), i + 2
        if t.kind == "name" and toks[i + 1].text == ":" and t.text not in ("default", "case"):
            raise Unsplittable("a label")
        if t.kind == "name" and t.text in ("case", "default"):
            raise Unsplittable("a case label")
        semi = self._end_of_simple(i, end)
        declaration = self._declaration(i, semi)
        s = Stmt("decl" if declaration else "expr", i, semi, declaration=declaration)
        s.waits = self._has_wait(i, semi)
        return s, semi + 1

    def _for(self, i: int, end: int) -> tuple[Stmt, int]:
        toks = self.tokens
        close = self._paren(i + 1)
        semis = [j for j in range(i + 2, close) if toks[j].text == ";" and self._depth(i + 2, j) == 0]
        if len(semis) != 2:
            raise Unsplittable("a range-based for")
        body, nxt = self._sub(close + 1, end)
        parts = [(i + 2, semis[0]), (semis[0] + 1, semis[1]), (semis[1] + 1, close)]
        s = Stmt("for", i, body.last, [body], parts)
        s.declaration = self._declaration(i + 2, semis[0]) if semis[0] > i + 2 else None
        if s.declaration:
            for d in s.declaration.declarators:
                self.declared.append((d.name, s.last))
        self._mark(s)
        if any(self._has_wait(lo, hi) for lo, hi in parts):
            raise Unsplittable("a wait in a for's header")
        return s, nxt

    def _sub(self, i: int, end: int) -> tuple[Stmt, int]:
        """A statement that is a sub-statement (its own scope: a declaration there ends with it)."""
        stmt, nxt = self._statement(i, end)
        if stmt is None:
            raise Unsplittable("a missing statement")
        self._scope([stmt], stmt.last)
        return stmt, nxt

    def _scope(self, statements: list[Stmt | None], scope_end: int) -> None:
        for s in statements:
            if s is not None and s.kind == "decl" and s.declaration:
                for d in s.declaration.declarators:
                    self.declared.append((d.name, scope_end))

    def _mark(self, s: Stmt) -> None:
        s.waits = any(c.waits for c in s.children if c) or any(self._has_wait(lo, hi) for lo, hi in s.parts)
        if s.waits and s.kind in ("if", "while", "do", "switch") and any(self._has_wait(lo, hi) for lo, hi in s.parts):
            raise Unsplittable("a wait in a condition")
        if s.waits and s.kind == "switch":
            raise Unsplittable("a wait inside switch")

    def _paren(self, i: int) -> int:
        if self.tokens[i].text != "(":
            raise Unsplittable("expected (")
        return self._match(self.tokens, i)

    def _end_of_simple(self, i: int, end: int) -> int:
        toks = self.tokens
        j = i
        while j < end:
            text = toks[j].text
            if toks[j].kind == "punct" and text in ("(", "[", "{"):
                j = self._match(toks, j) + 1
                continue
            if toks[j].kind == "punct" and text == ";":
                return j
            if toks[j].kind == "pp":
                raise Unsplittable("a directive inside a statement")
            j += 1
        raise Unsplittable("a statement without ;")

    def _depth(self, lo: int, j: int) -> int:
        depth = 0
        for k in range(lo, j):
            text = self.tokens[k].text
            depth += text in ("(", "[", "{")
            depth -= text in (")", "]", "}")
        return depth

    def _has_wait(self, lo: int, hi: int) -> bool:
        return any(self.tokens[k].kind == "name" and self.tokens[k].text in WAITS for k in range(lo, hi))

    # --- declarations -------------------------------------------------------------------------
    def _declaration(self, lo: int, hi: int) -> Declaration | None:
        """The declaration [lo, hi) is, or None for an expression."""
        toks = self.tokens
        first = toks[lo]
        if first.kind != "name" or first.text in _NOT_A_TYPE:
            return None
        j, angle, names = lo, 0, 0
        while j < hi:  # up to the first declarator's end (its name, then = ( { [ , or the end)
            t = toks[j]
            if angle == 0 and t.text in ("=", "(", "{", "[", ","):
                break
            if t.text == "<" and j > lo and toks[j - 1].kind == "name":
                angle += 1
            elif t.text == ">" and angle:
                angle -= 1
            elif t.text == ">>" and angle >= 2:
                angle -= 2
            elif angle == 0 and not (t.kind == "name" or t.text in ("::", "*", "&", "&&")):
                return None
            names += t.kind == "name" and angle == 0
            j += 1
        if angle or names < 2 or toks[j - 1].kind != "name":
            return None
        pointer = next((k for k in range(lo, j) if toks[k].text in ("*", "&", "&&")), j - 1)
        words = {toks[k].text for k in range(lo, pointer)}
        declarators = [self._declarator(pointer, hi)]
        while declarators[-1] is not None and self._declarator_end(declarators[-1]) < hi:
            comma = self._declarator_end(declarators[-1])
            if toks[comma].text != ",":
                raise Unsplittable("a declaration this splitter cannot read")
            declarators.append(self._declarator(comma + 1, hi))
        if any(d is None for d in declarators):
            raise Unsplittable("a declaration this splitter cannot read")
        return Declaration((lo, pointer), [d for d in declarators if d], bool(words & _STATIC), "constexpr" in words)

    def _declarator(self, lo: int, hi: int) -> Declarator | None:
        toks = self.tokens
        j = lo
        while j < hi and (toks[j].text in ("*", "&", "&&", "const", "volatile", "__restrict__", "__restrict")):
            j += 1
        if j >= hi or toks[j].kind != "name":
            return None
        name = j
        j += 1
        dims_lo = j
        while j < hi and toks[j].text == "[":
            j = self._match(toks, j) + 1
        dims = (dims_lo, j)
        if j >= hi or toks[j].text == ",":
            return Declarator(name, (lo, name), dims, "", (j, j))
        if toks[j].text == "=":
            k = j + 1
            while k < hi and toks[k].text != ",":
                if toks[k].text in ("(", "[", "{"):
                    k = self._match(toks, k) + 1
                    continue
                k += 1
            return Declarator(name, (lo, name), dims, "=", (j + 1, k))
        if toks[j].text in ("(", "{"):
            close = self._match(toks, j)
            return Declarator(name, (lo, name), dims, toks[j].text, (j + 1, close))
        return None

    def _declarator_end(self, d: Declarator) -> int:
        """The index after the declarator (its `,` or the declaration's end)."""
        if d.init in ("(", "{"):
            return d.value[1] + 1
        if d.init == "=":
            return d.value[1]
        return d.dims[1]

    # --- columns: what lives across a wait ------------------------------------------------------
    def _columns_of(self, statements: list[Stmt], scope_end: int) -> None:
        """Gives a column to each declarator of ``statements`` that a later statement's wait
        outlives, and to a waiting ``for``'s own variables; recurses into statements with waits."""
        for k, s in enumerate(statements):
            later = any(o.waits for o in statements[k + 1 :])
            if s.kind == "decl" and s.declaration and later and not s.declaration.static:
                if s.declaration.constexpr:
                    continue  # (emitted static: its value is the same for every thread)
                self._give_columns(s.declaration, scope_end)
            if s.kind == "for" and s.waits and s.declaration:
                self._give_columns(s.declaration, s.last)
            if s.waits:
                for c in s.children:
                    if c is not None:
                        inner = [x for x in c.children if x is not None] if c.kind == "block" else [c]
                        self._columns_of(inner, c.last)

    def _give_columns(self, declaration: Declaration, scope_end: int) -> None:
        toks = self.tokens
        base = self._text(*declaration.base, renamed=False)
        if "auto" in base.split() or "decltype" in base:
            raise Unsplittable("a variable of deduced type lives across a wait")
        for d in declaration.declarators:
            pointer = self._text(*d.pointer, renamed=False)
            if "&" in pointer:
                raise Unsplittable("a reference lives across a wait")
            if d.dims[0] != d.dims[1] and d.init:
                raise Unsplittable("an initialized array lives across a wait")
            name = toks[d.name].text
            column = Column(
                f"{base} {pointer}{self._text(*d.dims, renamed=False)}", f"kd_split_v{len(self.columns)}_{name}"
            )
            self.columns.append(column)
            self._rename(d.name, scope_end, column.name)

    def _rename(self, at: int, scope_end: int, new: str) -> None:
        """Every use of the name declared at token ``at`` within its scope, except where a nested
        declaration of the same name hides it."""
        toks = self.tokens
        name = toks[at].text
        hidden = [(n, e) for n, e in self.declared if n != at and toks[n].text == name and at < n <= scope_end]
        for k in range(at, scope_end + 1):
            t = toks[k]
            if t.kind != "name" or t.text != name or (k and toks[k - 1].text in (".", "->", "::")):
                continue
            if any(n <= k <= e for n, e in hidden):
                continue
            self.renames[k] = new

    # --- emitting -----------------------------------------------------------------------------
    def _text(self, lo: int, hi: int, renamed: bool = True) -> str:
        """The source text of tokens [lo, hi), spacing and comments kept, names renamed and
        ``return`` a jump to the thread's exit."""
        if lo >= hi:
            return ""
        toks = self.tokens
        out: list[str] = []
        k = lo
        while k < hi:
            if k > lo:
                out.append(self.source[toks[k - 1].end : toks[k].start])
            t = toks[k]
            if renamed and k in self.spans:
                end, text = self.spans[k]
                out.append(text)
                k = end + 1
                continue
            if renamed and k in self.renames:
                out.append(self.renames[k])
            elif renamed and t.kind == "name" and t.text == "return":
                out.append("goto kd_split_exit")
            else:
                out.append(t.text)
            k += 1
        return "".join(out)

    def _line(self, k: int) -> str:
        t = self.tokens[k]
        return f'\n#line {t.line} "{t.file}"\n'

    def _emit(self, s: Stmt | None, braces: bool = False) -> str:
        if s is None:
            return ""
        toks = self.tokens
        pragmas = "".join(
            f"\n{toks[p].text}\n" for p in s.pragmas if not (s.waits and s.kind in ("for", "while", "do"))
        )
        if not s.waits and s.kind != "decl":
            return pragmas + self._line(s.first) + self._text(s.first, s.last + 1)
        if s.kind == "block":
            return "{" + "".join(self._emit(c) for c in s.children) + "\n}"
        if s.kind == "if":
            (lo, hi) = s.parts[0]
            text = self._line(s.first) + f"if ({self._text(lo, hi)}) " + self._emit(s.children[0], braces=True)
            if s.children[1] is not None:
                text += "\nelse " + self._emit(s.children[1], braces=True)
            return text
        if s.kind == "while":
            (lo, hi) = s.parts[0]
            return self._line(s.first) + f"while ({self._text(lo, hi)}) " + self._emit(s.children[0], braces=True)
        if s.kind == "do":
            (lo, hi) = s.parts[0]
            return f"do {self._emit(s.children[0], braces=True)}{self._line(lo)}while ({self._text(lo, hi)});"
        if s.kind == "for":
            init, cond, step = s.parts
            head = self._assignments(s.declaration, ",") if s.declaration else self._text(*init)
            return (
                self._line(s.first)
                + f"for ({head}; {self._text(*cond)}; {self._text(*step)}) "
                + self._emit(s.children[0], braces=True)
            )
        if not s.waits:
            return pragmas + self._line(s.first) + self._simple(s)
        return ("{" if braces else "") + "\n" + self._wait(s) + ("\n}" if braces else "")

    def _simple(self, s: Stmt) -> str:
        """A declaration or expression statement (a declaration with columns as assignments to
        them), without its #line."""
        d = s.declaration
        if d is None or d.static or not any(k.name in self.renames for k in d.declarators):
            static = "static " if d is not None and d.constexpr and not d.static else ""
            return static + self._text(s.first, s.last + 1)
        return self._assignments(d, ";") + ";"

    def _assignments(self, d: Declaration, separator: str) -> str:
        """Declaration ``d``'s initializers as assignments to its columns."""
        parts = []
        for k in d.declarators:
            if not k.init:
                continue
            target, value = self.renames[k.name], self._text(*k.value)
            slot = (
                f"kd_host::split_slot_t<{self._text(*d.base, renamed=False)} {self._text(*k.pointer, renamed=False)}>"
            )
            if k.init == "=" and not self.tokens[k.value[0]].text == "{":
                parts.append(f"{target} = ({value})")
            elif k.init == "(":
                parts.append(f"{target} = {slot}({value})")
            else:
                braced = value if k.init == "=" else "{" + value + "}"
                parts.append(f"{target} = {slot}{braced}")
        return f"{separator} ".join(parts) if parts else "(void)0"

    def _wait(self, s: Stmt) -> str:
        """Statement ``s`` with its one wait: the call made to record what the thread brings, the
        wait, and the statement with the call's result in place of the call."""
        toks = self.tokens
        calls = [k for k in range(s.first, s.last + 1) if toks[k].kind == "name" and toks[k].text in WAITS]
        if len(calls) != 1 or toks[calls[0] + 1].text != "(":
            raise Unsplittable("not one wait in a statement")
        at = calls[0]
        close = self._match(toks, at + 1)
        outside = [k for k in range(s.first, s.last + 1) if not at <= k <= close]
        if any(toks[k].text in ("?", "&&", "||") for k in outside):
            raise Unsplittable("a wait evaluated conditionally within its statement")
        if any(toks[k].text in _ASSIGNING for k in range(at, close + 1)):
            raise Unsplittable("a wait's operands assign")
        name = toks[at].text
        if name == "__match_all_sync":
            raise Unsplittable("__match_all_sync (it also writes through a pointer)")
        self.sites.append(Site(name, toks[at].file, toks[at].line, _BARRIER_MODES.get(name, -1)))
        site = len(self.sites)
        whole = s.kind == "expr" and at == s.first and close + 1 == s.last
        if whole and name == "__syncthreads":
            return str(_template().barrier(site))
        call = self._text(at, close + 1)
        self.spans[at] = (close, str(_template().result(name in BARRIERS, call)))
        statement = "" if whole else self._simple(s)
        return str(_template().wait(site, toks[at], call, toks[s.first], statement))


def split_identity() -> str:
    """A digest of how kernels are split (this module and its template), for the build's key: a
    change to either rebuilds what was split before."""
    from .codegen import templates_dir

    material = Path(__file__).read_bytes() + (templates_dir() / "host" / "split_block.cu.j2").read_bytes()
    return hashlib.sha256(material).hexdigest()


@lru_cache(maxsize=1)
def _template() -> Any:
    from .codegen import template_macros  # (Jinja loads only when a kernel is split)

    return template_macros("host/split_block.cu.j2")
