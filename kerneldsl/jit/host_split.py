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
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import logs
from .body_statements import (
    BARRIERS,
    LINE_DIRECTIVE,
    WAITS,
    WARP_COLLECTIVES,
    BodyParser,
    Declaration,
    Stmt,
    Unsplittable,
    match_bracket,
    tokenize,
)

# Names whose meaning a split cannot keep: which lanes are converged, a thread yielding to others,
# code the compiler alone reads.
log = logs.get("host_split")
_KEEP_FIBERS = frozenset({"__activemask", "__nanosleep", "asm", "__asm__", "__asm", "goto", "co_await", "co_yield"})
_KERNEL = re.compile(r'extern "C" __global__ void \w+\(')
_INDEX_TYPEDEF = re.compile(r"^typedef (?:int|long long) index_t;$", re.MULTILINE)
_INCLUDE = re.compile(r"^\s*#\s*include\b", re.MULTILINE)


@dataclass(frozen=True)
class Column:
    """A variable that lives across a wait: its slot's type and the reference its uses are renamed to."""

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
    except Unsplittable as why:
        log.debug("kept on fibers: %s", why)
        return None


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
        tokens = tokenize(self.source[body_open:], body_open)
        close = match_bracket(tokens, 0)
        marks = [i for i in range(close) if tokens[i].kind == "pp" and LINE_DIRECTIVE.match(tokens[i].text)]
        if len(marks) < 2:
            raise Unsplittable("no #line-marked body")
        self.tokens = tokens[marks[0] + 1 : marks[-1]]
        if not any(t.kind == "name" and t.text in WAITS for t in self.tokens):
            return None
        for t in self.tokens:
            if t.kind == "name" and t.text in _KEEP_FIBERS:
                raise Unsplittable(t.text)
        parser = BodyParser(self.tokens)
        body = parser.parse()
        self.declared = parser.declared  # every declarator's (name token, end of its scope)
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
        if any(word in base for word in ("alignas", "__align__", "__attribute__", "__declspec")):
            raise Unsplittable("a variable with its own alignment lives across a wait")
        for d in declaration.declarators:
            pointer = self._text(*d.pointer, renamed=False)
            if "&" in pointer:
                raise Unsplittable("a reference lives across a wait")
            if d.dims[0] != d.dims[1] and d.init:
                raise Unsplittable("an initialized array lives across a wait")
            name = toks[d.name].text
            if not self._only_declaration(d.name, scope_end):
                name = f"kd_split_v{len(self.columns)}_{name}"
            column = Column(f"{base} {pointer}{self._text(*d.dims, renamed=False)}", name)
            self.columns.append(column)
            self._rename(d.name, scope_end, column.name)

    def _only_declaration(self, at: int, scope_end: int) -> bool:
        """Whether the name declared at token ``at`` is the body's only declaration of it and used
        only in its scope: its column's reference, declared for the whole pass, keeps the user's
        name (which an ``assert``'s message shows)."""
        toks = self.tokens
        name = toks[at].text
        if sum(toks[n].text == name for n, _ in self.declared) != 1:
            return False
        return all(
            at <= k <= scope_end
            for k, t in enumerate(toks)
            if t.kind == "name" and t.text == name and not (k and toks[k - 1].text in (".", "->", "::"))
        )

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
        close = match_bracket(toks, at + 1)
        outside = [k for k in range(s.first, s.last + 1) if not at <= k <= close]
        if any(toks[k].text in ("?", "&&", "||") for k in outside):
            raise Unsplittable("a wait evaluated conditionally within its statement")
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
    """A digest of how kernels are split (this module, the body's reader and the template), for the
    build's key: a change to any rebuilds what was split before."""
    from . import body_statements
    from .codegen import templates_dir

    sources = (Path(__file__), Path(body_statements.__file__), templates_dir() / "host" / "split_block.cu.j2")
    return hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()


@lru_cache(maxsize=1)
def _template() -> Any:
    from .codegen import template_macros  # (Jinja loads only when a kernel is split)

    return template_macros("host/split_block.cu.j2")
