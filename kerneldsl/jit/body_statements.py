"""The statements of a kernel's CUDA C++ body, read with certainty or not at all.

``host_split`` splits a body at its waits (barriers and warp collectives); this module reads the
body into what that needs: tokens that keep their place in the source and the user's line,
statements (blocks, ``if``, ``for``, ``while``, ``do``, ``switch``, declarations, expression
statements, jumps), each declaration's type, declarators and scope, and which statements hold a
wait. What it cannot read with certainty (a lambda, a local type, a label, a range-based ``for``,
a directive other than ``#line`` and ``#pragma``, a declaration it cannot parse) raises
``Unsplittable``: the caller keeps the body as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
_LOCAL_TYPES = frozenset({"typedef", "using", "struct", "class", "union", "enum", "template", "namespace", "try"})
_NOT_A_TYPE = frozenset(
    {
        "return", "delete", "throw", "sizeof", "new", "this", "true", "false", "nullptr", "static_cast",
        "reinterpret_cast", "const_cast", "dynamic_cast", "typeid", "alignof", "noexcept", "operator", "case",
        "default", "else", "do", "if", "for", "while", "switch", "break", "continue", "static_assert",
    }
)  # fmt: skip
_STATIC = frozenset({"__shared__", "static", "extern", "thread_local"})
# Specifiers with a parenthesized argument that a declaration's type may hold.
_SPECIFIER_GROUPS = frozenset({"alignas", "__align__", "__attribute__", "decltype", "__declspec"})
LINE_DIRECTIVE = re.compile(r'#\s*line\s+(\d+)\s+"([^"]*)"')
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


def tokenize(text: str, offset: int = 0) -> list[Token]:
    """``text``'s tokens (comments and spaces dropped, a preprocessor line one token), each with its
    offset (plus ``offset``) and the line and file its ``#line`` directives give it."""
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
            found = LINE_DIRECTIVE.match(directive)
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


def match_bracket(tokens: list[Token], i: int) -> int:
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


class BodyParser:
    """Reads ``tokens`` (a body's, between its braces) into statements; ``declared`` lists every
    declarator's name token and the last token of its scope."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.declared: list[tuple[int, int]] = []

    def parse(self) -> list[Stmt]:
        for t in self.tokens:
            if t.kind == "name" and t.text in _LOCAL_TYPES:
                raise Unsplittable(f"a local {t.text}")
        self._refuse_lambdas()
        body = self._statements(0, len(self.tokens))
        self._scope(list(body), len(self.tokens) - 1)
        return body

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
            elif not LINE_DIRECTIVE.match(toks[i].text):
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
            close = match_bracket(toks, i)
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
        if toks[i + 1].text == "(" and toks[i + 2].text in ("*", "&") and toks[i + 4].text == ")":
            raise Unsplittable("a declarator in parentheses, or a call this splitter cannot tell from one")
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
        return match_bracket(self.tokens, i)

    def _end_of_simple(self, i: int, end: int) -> int:
        toks = self.tokens
        j = i
        while j < end:
            text = toks[j].text
            if toks[j].kind == "punct" and text in ("(", "[", "{"):
                j = match_bracket(toks, j) + 1
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
            if t.text in _SPECIFIER_GROUPS and j + 1 < hi and toks[j + 1].text == "(":
                j = match_bracket(toks, j + 1) + 1  # (alignas(16), __align__(16), decltype(x), ...)
                names += 1
                continue
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
            j = match_bracket(toks, j) + 1
        dims = (dims_lo, j)
        if j >= hi or toks[j].text == ",":
            return Declarator(name, (lo, name), dims, "", (j, j))
        if toks[j].text == "=":
            k = j + 1
            while k < hi and toks[k].text != ",":
                if toks[k].text in ("(", "[", "{"):
                    k = match_bracket(toks, k) + 1
                    continue
                k += 1
            return Declarator(name, (lo, name), dims, "=", (j + 1, k))
        if toks[j].text in ("(", "{"):
            close = match_bracket(toks, j)
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
