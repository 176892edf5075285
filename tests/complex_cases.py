"""The Array API standard's complex special cases as concrete inputs and expected results.

``complex_special_cases.txt`` holds the 2024.12 text verbatim; each sentence becomes the inputs its
conditions name (sampled: "a finite number" is zeros, tiny, subnormal, ordinary and huge values of
both signs) with the result it states. The standard's symmetries add their images: every function
with a table has ``f(conj(z)) = conj(f(z))``; asinh, atanh, sinh and tanh are odd, cosh is even. sin,
cos and tan take sinh's, cosh's and tanh's cases through ``sin(z) = -i sinh(iz)``, ``cos(z) =
cosh(iz)`` and ``tan(z) = -i tanh(iz)``, as the standard defines theirs. Where two sentences cover
one input (sqrt's ``NaN + inf j``), the earlier one (with its images) holds, as in C99.

A part matches bit for bit (the sign of a zero included; any NaN matches NaN) except where the
standard leaves the sign unspecified (then the magnitude must match) and a multiple of pi (the
nearest value of the dtype, within one ulp).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

TEXT = Path(__file__).with_name("complex_special_cases.txt")
NAN, INF = float("nan"), float("inf")
CONJ_SYMMETRIC = {"acos", "acosh", "asinh", "atanh", "cosh", "exp", "expm1", "log", "log1p", "sinh", "sqrt", "tanh"}
ODD, EVEN = {"asinh", "atanh", "sinh", "tanh"}, {"cosh"}
THROUGH_HYPERBOLIC = {"sin": ("sinh", True), "cos": ("cosh", False), "tan": ("tanh", True)}


@dataclass(frozen=True)
class Part:
    """One part of an expected result."""

    value: float
    any_sign: bool = False
    pi: bool = False

    def __neg__(self) -> Part:
        return replace(self, value=-self.value)

    def matches(self, got: float, dtype: np.dtype) -> bool:
        if math.isnan(self.value):
            return math.isnan(got)
        if math.isnan(got):
            return False
        want, have = (abs(self.value), abs(got)) if self.any_sign else (self.value, got)
        if self.pi:
            return abs(have - want) <= float(np.spacing(dtype.type(abs(want))))
        return have == want and (self.any_sign or math.copysign(1, have) == math.copysign(1, want))


@dataclass(frozen=True)
class Case:
    function: str
    rule: str
    z: complex
    re: Part
    im: Part

    def check(self, got: complex, dtype: np.dtype) -> bool:
        return self.re.matches(got.real, dtype) and self.im.matches(got.imag, dtype)

    def __str__(self) -> str:
        return f"{self.function}({self.z!r}): {self.rule}"


def _samples(condition: str, dtype: np.dtype) -> list[float]:
    info = np.finfo(dtype)
    positive = [0.5, 1.0, 2.5, 3.0, 7.0, 1e-30, 1e30, float(info.tiny), float(info.smallest_subnormal)]
    positive += [float(info.max), float(info.eps)]
    nonzero = positive + [-v for v in positive]
    finite = [0.0, -0.0, *nonzero]
    named = {
        "``+0``": [0.0],
        "``-0``": [-0.0],
        "``1``": [1.0],
        "``-1``": [-1.0],
        "``NaN``": [NAN],
        "``+infinity``": [INF],
        "``-infinity``": [-INF],
        "either ``+0`` or ``-0``": [0.0, -0.0],
        "either ``-0`` or ``+0``": [-0.0, 0.0],
        "either ``+infinity`` or ``-infinity``": [INF, -INF],
        "a finite number": finite,
        "a nonzero finite number": nonzero,
        "a positive (i.e., greater than ``0``) finite number": positive,
        "a positive finite number": positive,
        "a nonzero number": [*nonzero, INF, -INF],
        "not equal to ``0``": [*nonzero, INF, -INF, NAN],
        "any value": [*finite, INF, -INF, NAN],
        "any value (including ``NaN``)": [*finite, INF, -INF, NAN],
    }
    return [float(dtype.type(v)) for v in named[condition]]


_MAGNITUDES = {"0": 0.0, "1": 1.0, "infinity": INF, "NaN": NAN, "π": math.pi, "π/2": math.pi / 2}
_MAGNITUDES |= {"π/4": math.pi / 4, "3π/4": 3 * math.pi / 4}


def _part(sign: str, magnitude: str, any_sign: bool, dtype: np.dtype) -> Part:
    value = float(dtype.type(_MAGNITUDES[magnitude]))
    return Part(-value if sign == "-" else value, any_sign or sign == "±", "π" in magnitude)


def _result(text: str, z: complex, dtype: np.dtype) -> tuple[Part, Part]:
    """The expected (re, im) of one sentence's result at input ``z``."""
    if (m := re.fullmatch(r"equal to ``abs\(([ab])\)``", text)) is not None:
        return Part(abs(z.real if m[1] == "a" else z.imag)), Part(0.0)
    value = re.search(r"``([^`]+)``", text)
    assert value is not None, text
    v = value[1]
    if v in ("+infinity", "NaN"):  # abs's real results
        return Part(INF if v == "+infinity" else NAN), Part(0.0)
    if (m := re.fullmatch(r"(\+0|\+infinity) \* cis\(b\)( - 1\.0)?", v)) is not None:
        scale = 0.0 if m[1] == "+0" else INF
        c, s = float(np.cos(dtype.type(z.imag))), float(np.sin(dtype.type(z.imag)))
        real = (scale * c - 1.0) if m[2] else scale * c
        return Part(real), Part(scale * s)
    tokens = v.split(" ")
    real, sign, imag = tokens[0], tokens[1], "".join(tokens[2:]).replace("j", "")
    notes = text[value.end() :]
    both = "signs of real and imaginary components are unspecified" in notes
    real_free = both or re.search(r"sign of (the )?real component is unspecified", notes) is not None
    imag_free = both or re.search(r"sign of (the )?imaginary component is unspecified", notes) is not None
    real_sign, real_magnitude = (real[0], real[1:]) if real[0] in "+-±" else ("+", real)
    return _part(real_sign, real_magnitude, real_free, dtype), _part(sign, imag, imag_free, dtype)


_SENTENCES = [
    (re.compile(r"If ``a`` (?:is )?(.+?) and ``b`` is (.+?), the result is (.+)\.$"), "and"),
    (re.compile(r"If ``a`` is (.+?) or ``b`` is (.+?), the result is (.+)\.$"), "or"),
    (re.compile(r"If ``a`` is (.+?), the result is (.+)\.$"), "a"),
    (re.compile(r"If ``b`` is (.+?), the result is (.+)\.$"), "b"),
]


def _inputs(sentence: str, dtype: np.dtype) -> tuple[list[complex], str]:
    for pattern, form in _SENTENCES:
        if (m := pattern.match(sentence)) is None:
            continue
        if form == "and":
            return [complex(a, b) for a in _samples(m[1], dtype) for b in _samples(m[2], dtype)], m[3]
        every = _samples("any value", dtype)
        if form == "or":
            a_side = [complex(a, b) for a in _samples(m[1], dtype) for b in every]
            return a_side + [complex(a, b) for a in every for b in _samples(m[2], dtype)], m[3]
        fixed = _samples(m[1], dtype)
        pairs = [(x, y) for x in fixed for y in every] if form == "a" else [(y, x) for x in fixed for y in every]
        return [complex(a, b) for a, b in pairs], m[2]
    raise ValueError(f"unparsed sentence: {sentence}")


def sentences() -> dict[str, list[str]]:
    """The standard's sentences by function, in its order."""
    table: dict[str, list[str]] = {}
    current: list[str] = []
    for line in TEXT.read_text(encoding="utf-8").splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = table.setdefault(line[1:-1], [])
        elif line and not line.startswith("#"):
            current.append(line)
    return table


def _key(z: complex) -> tuple[int, int]:
    """An input's identity with signed zeros apart and every NaN alike."""
    parts = np.array([z.real, z.imag], np.float64)
    parts[np.isnan(parts)] = NAN
    re_bits, im_bits = parts.view(np.int64)
    return int(re_bits), int(im_bits)


def _images(function: str, z: complex, re_: Part, im: Part) -> Iterator[tuple[complex, Part, Part]]:
    yield z, re_, im
    if function not in CONJ_SYMMETRIC:
        return
    conj = complex(z.real, -z.imag)
    yield conj, re_, -im
    for w, r, i in ((z, re_, im), (conj, re_, -im)):
        if function in ODD:
            yield complex(-w.real, -w.imag), -r, -i
        elif function in EVEN:
            yield complex(-w.real, -w.imag), r, i


def _table_cases(function: str, dtype: np.dtype) -> list[Case]:
    seen: set[tuple[int, int]] = set()
    cases: list[Case] = []
    for sentence in sentences()[function]:
        inputs, result = _inputs(sentence, dtype)
        for z in inputs:
            for w, r, i in _images(function, z, *_result(result, z, dtype)):
                if _key(w) not in seen:
                    seen.add(_key(w))
                    cases.append(Case(function, sentence, w, r, i))
    return cases


def cases(function: str, dtype: np.dtype) -> list[Case]:
    """Every special case of ``function`` (the standard's name) for complex ``dtype``."""
    dtype = np.dtype(np.float32 if np.dtype(dtype) == np.complex64 else np.float64)
    if function not in THROUGH_HYPERBOLIC:
        return _table_cases(function, dtype)
    hyperbolic, rotate = THROUGH_HYPERBOLIC[function]
    derived = []
    for c in _table_cases(hyperbolic, dtype):  # f(z) from h(iz), iz = c.z: z = b - a i
        z = complex(c.z.imag, -c.z.real)
        re_, im = (c.im, -c.re) if rotate else (c.re, c.im)
        derived.append(Case(function, f"{hyperbolic}'s {c.rule}", z, re_, im))
    return derived


FUNCTIONS = sorted([*sentences(), *THROUGH_HYPERBOLIC])
OPS_NAME: dict[str, str] = {"acos": "arccos", "acosh": "arccosh", "asinh": "arcsinh", "atanh": "arctanh"}


def failures(function: str, dtype: np.dtype, run: Callable[[np.ndarray], np.ndarray]) -> list[str]:
    """The cases ``run`` (complex inputs -> results, both in ``dtype``) gets wrong, described."""
    todo = cases(function, dtype)
    got = run(np.array([c.z for c in todo], dtype)).astype(np.complex128)
    parts = np.dtype(np.float32 if np.dtype(dtype) == np.complex64 else np.float64)
    return [f"{c} -> got {complex(g)!r}" for c, g in zip(todo, got) if not c.check(complex(g), parts)]
