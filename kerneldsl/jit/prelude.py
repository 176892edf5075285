"""The prelude's optional parts (``templates/prelude.cuh.j2``): the Philox generator and the
complex functions (``complex_math.cuh.j2``) are rendered only into a kernel whose body or device
functions name one of their helpers, so a kernel that draws no random numbers and calls no
complex function carries neither.

The decision reads the text the body's author wrote (a ``@kd.kernel`` body, a device function,
or the body an array family rendered for an op), never the generated source; the names are the
helpers each part defines, which ``tests/test_codegen.py`` keeps equal to the templates'."""

from __future__ import annotations

import re
from collections.abc import Iterable

RANDOM_HELPERS = frozenset(
    {
        "kd_philox",
        "kd_philox4",
        "kd_philox4x32_10",
        "kd_uniform_float",
        "kd_uniform_double",
        "kd_normal_float2",
        "kd_normal_double2",
        "kd_bounded32",
        "kd_bounded64",
    }
)
COMPLEX_FUNCTIONS = frozenset(
    f"kd_{name}"
    for name in (
        "abs arg exp expm1 log log1p log2 log10 sqrt sinh cosh tanh sin cos tan"
        " asinh asin acos acosh atanh atan sign pow"
    ).split()
)
_HELPER_NAME = re.compile(r"\bkd_\w+")


def helpers_named(texts: Iterable[str]) -> frozenset[str]:
    """The ``kd_`` names the texts mention (the prelude's helpers among them)."""
    return frozenset(name for text in texts for name in _HELPER_NAME.findall(text))


def prelude_parts(texts: Iterable[str], uses_complex: bool) -> dict[str, bool]:
    """The kernel template's switches for the optional parts ``texts`` (the body and the device
    functions) call for; the complex functions need the complex type (``uses_complex``)."""
    named = helpers_named(texts)
    return {
        "uses_random": not RANDOM_HELPERS.isdisjoint(named),
        "uses_complex_math": uses_complex and not COMPLEX_FUNCTIONS.isdisjoint(named),
    }
