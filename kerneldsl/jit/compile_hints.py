"""What a failed compile says, put for the user: the message of a ``KernelCompileError``, and the
hints for failures whose log is the toolchain's own words with no line of the body to point at.

A hint is given for a failure recognised by its exact wording, never guessed: ptxas's
``uses too much shared data (0x13880 bytes, 0xc000 max)`` becomes the sizes in decimal, the
limit on static shared memory and the way past it (dynamic shared memory, ``extern __shared__``
and ``shared=``). The CPU device, which has no such limit of its own, refuses a kernel past it
with the same words (``host_image``), so a kernel it runs also compiles for a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..runtime.limits import DEFAULT_SHARED_LIMIT

STATIC_SHARED_LIMIT = DEFAULT_SHARED_LIMIT  # 48 KiB: the most a kernel declares statically, too

# ptxas's wording for static shared memory past the limit (hexadecimal sizes).
_TOO_MUCH_SHARED = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) max\)")
OPT_IN_SHARED_KIB = 227  # dynamic shared memory a block may opt in to on H100 and H200 (sm_90)


def compile_error_message(compiler: str, described: str, mapped: Sequence[str], log: str) -> str:
    """The message of a failed compile: the diagnostics mapped onto the body (else the log), the
    hints, then the whole log when the mapped lines left part of it out; the log once, never twice."""
    notes = hints(log)
    parts = [f"{compiler} could not compile {described}:", "\n".join(mapped) if mapped else log.rstrip("\n")]
    parts += [f"hint: {note}" for note in notes]
    return "\n".join(parts) + (f"\n--- {compiler} log ---\n{log}" if mapped else "")


def hints(log: str) -> list[str]:
    """One hint per failure of ``log`` that kerneldsl recognises."""
    found = _TOO_MUCH_SHARED.search(log)
    return [] if found is None else [static_shared_hint(int(found.group(1), 16), int(found.group(2), 16))]


def static_shared_hint(used: int, limit: int = STATIC_SHARED_LIMIT) -> str:
    """Static shared memory past the limit, in decimal, with the way past it."""
    return (
        f"the kernel declares {used} bytes ({used / 1024:.1f} KiB) of static __shared__ memory; a kernel may declare "
        f"at most {limit} bytes ({limit // 1024} KiB) statically. Beyond that, use dynamic shared memory: declare "
        "it `extern __shared__ float buf[];` in the body and give its size in bytes with `shared=` on @kd.kernel "
        "(an int or a shape expression, e.g. shared=kd.sym(n) * 4) or on the call; a block may use up to "
        f"{OPT_IN_SHARED_KIB} KiB of it on H100/H200 (less on older GPUs), and kerneldsl opts the kernel in above "
        "48 KiB"
    )
