"""What a kernel's build takes beside its body: shared device functions (``kd.device_function``,
listed in ``uses=``), the header libraries it names (``includes=``) and the user's own header
directories (``include_dirs=``), all validated at declaration.

Light on purpose: declaring a kernel imports this, never the headers' lookup (``headers.py``),
which the first build does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import DeclarationError

# The header libraries ``includes=`` may name; every one comes from the kerneldsl[headers] wheels.
HEADER_LIBRARIES = ("cccl", "cooperative_groups", "cub", "cuda_runtime", "libcudacxx", "thrust")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: an ASCII C identifier
_MAX_TEXT = 1 << 20  # longest device function text, in characters


@dataclass(frozen=True)
class DeviceFunction:
    """CUDA text declared once (``__device__`` functions, constants, structs) that kernels list
    in ``uses=``; rendered above each kernel that uses it, after the functions it uses itself."""

    name: str
    text: str
    uses: tuple[DeviceFunction, ...] = ()

    def __repr__(self) -> str:
        return f"<kd.device_function {self.name}: {len(self.text.splitlines())} lines>"


def device_function(name: str, text: str, *, uses: Sequence[DeviceFunction] = ()) -> DeviceFunction:
    """Declare shared CUDA text: ``kd.device_function("clamp01", "__device__ float clamp01(float v) {...}")``.
    ``name`` (a C identifier) names it in compile errors and ``explain``; ``#include`` lines in
    ``text`` are placed at file scope, like a body's; ``uses=[...]`` lists the device functions
    this text calls, rendered above it. Kernels name it in ``@kd.kernel(..., uses=[f])``; its
    text is part of their cache key.

    Raises
    ------
    kerneldsl.errors.DeclarationError
        A name that is not a C identifier, or empty text.
    """
    if type(name) is not str or not _NAME.fullmatch(name):
        raise DeclarationError(name if type(name) is str else "?", None, "a device function's name is a C identifier")
    if type(text) is not str or not text.strip() or len(text) > _MAX_TEXT or "\x00" in text:
        raise DeclarationError(name, None, f"a device function's text is non-empty CUDA text under {_MAX_TEXT} chars")
    return DeviceFunction(name, text, _checked_uses(name, uses))


@dataclass(frozen=True)
class DeviceCode:
    """A kernel's ``includes=``, ``include_dirs=`` and ``uses=``, as validated plain values."""

    includes: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    uses: tuple[DeviceFunction, ...] = ()

    def ordered(self) -> tuple[DeviceFunction, ...]:
        """Every device function a build renders, each once, after those it uses."""
        seen: dict[DeviceFunction, None] = {}

        def visit(function: DeviceFunction) -> None:
            if function not in seen:
                for used in function.uses:
                    visit(used)
                seen[function] = None

        for function in self.uses:
            visit(function)
        return tuple(seen)


NO_DEVICE_CODE = DeviceCode()


def declared(
    kernel: str, includes: Sequence[str], include_dirs: Sequence[str | os.PathLike[str]], uses: Sequence[DeviceFunction]
) -> DeviceCode:
    """The declaration's device code, checked: known header libraries, existing absolute
    directories (they reach NVRTC's options as plain str), DeviceFunction objects with
    distinct names."""
    if isinstance(includes, str) or not all(type(i) is str and i in HEADER_LIBRARIES for i in includes):
        raise DeclarationError(kernel, None, f"includes= names header libraries among {HEADER_LIBRARIES}")
    if isinstance(include_dirs, (str, os.PathLike)):
        raise DeclarationError(kernel, None, "include_dirs= is a list of directories, not one path")
    return DeviceCode(
        tuple(dict.fromkeys(includes)),
        tuple(_checked_dir(kernel, d) for d in include_dirs),
        _checked_uses(kernel, uses),
    )


def _checked_dir(kernel: str, directory: str | os.PathLike[str]) -> str:
    if not isinstance(directory, (str, os.PathLike)):
        raise DeclarationError(kernel, None, f"include directory {directory!r} is not a path")
    path = os.fspath(directory)
    if type(path) is not str or not os.path.isabs(path) or not os.path.isdir(path):
        raise DeclarationError(kernel, None, f"include directory {path!r} is not an existing absolute directory")
    if any(c in path for c in "\x00\n\r"):
        raise DeclarationError(kernel, None, f"include directory {path!r} holds a control character")
    return str(os.path.normpath(path))


def _checked_uses(owner: str, uses: Sequence[DeviceFunction]) -> tuple[DeviceFunction, ...]:
    if isinstance(uses, DeviceFunction) or not all(type(u) is DeviceFunction for u in uses):
        raise DeclarationError(owner, None, "uses= is a list of kd.device_function objects")
    found = tuple(dict.fromkeys(uses))
    names = [u.name for u in found]
    if len(set(names)) != len(names):
        raise DeclarationError(owner, None, f"uses= names two different device functions alike: {names}")
    return found
