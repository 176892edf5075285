"""What a failed compile says, put for the user: the message of a ``KernelCompileError``, and the
hints for failures whose log is the toolchain's own words with no line of the body to point at.

A hint is given for a failure recognised by its exact wording, never guessed: ptxas's
``uses too much shared data (0x13880 bytes, 0xc000 max)`` becomes the sizes in decimal, the
limit on static shared memory and the way past it (dynamic shared memory, ``extern __shared__``
and ``shared=``). The CPU device, which has no such limit of its own, refuses a kernel past it
with the same words (``host_image``), so a kernel it runs also compiles for a GPU. The CPU device
compiles kernels with CUDA's limit on local memory a thread (512 KiB) on each frame: the host
compiler's frame-size error becomes the size in decimal, the limit and the ways past it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..runtime.limits import DEFAULT_SHARED_LIMIT

STATIC_SHARED_LIMIT = DEFAULT_SHARED_LIMIT  # 48 KiB: the most a kernel declares statically, too

# ptxas's wording for static shared memory past the limit (hexadecimal sizes).
_TOO_MUCH_SHARED = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) max\)")
# A frame past the CPU device's limit on local memory a thread: GCC's wording, then Clang's.
_TOO_MUCH_LOCAL = (
    re.compile(r"the frame size of (\d+) bytes is larger than (\d+) bytes"),
    re.compile(r"stack frame size \((\d+)\) exceeds limit \((\d+)\)"),
)
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
    notes = []
    found = _TOO_MUCH_SHARED.search(log)
    if found is not None:
        notes.append(static_shared_hint(int(found.group(1), 16), int(found.group(2), 16)))
    for pattern in _TOO_MUCH_LOCAL:
        found = pattern.search(log)
        if found is not None:
            notes.append(local_memory_hint(int(found.group(1)), int(found.group(2))))
            break
    return notes


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


def local_memory_hint(used: int, limit: int) -> str:
    """A frame past the CPU device's limit on local memory a thread, in decimal, with the ways past it."""
    return (
        f"a thread of the kernel needs {used} bytes ({used / 1024:.1f} KiB) of local memory (its local arrays and "
        f"variables) in one frame; CUDA allows {limit} bytes ({limit // 1024} KiB) a thread, and the CPU device "
        "holds each frame to that. Keep a large per-thread array in global memory (an array parameter or a "
        "scratch DeviceArray indexed by the thread), or share it in the block's shared memory"
    )
