"""What the API reference must cover, without Sphinx: the public modules and names, and the
classes whose documented API is a subset of their methods. The reference (``kd_api``) and the
docstring tests (``tests/test_docs_docstrings.py``, which run where Sphinx is not installed) read it."""

from __future__ import annotations

import types
from typing import Any

import kerneldsl


def public_module(name: str) -> types.ModuleType:
    """The module a public dotted name means: ``kd.ops`` in the reference is whichever module of
    the package holds it (autodoc is told the same in ``conf.py``)."""
    module: Any = kerneldsl
    for part in name.split(".")[1:]:
        module = getattr(module, part)
    assert isinstance(module, types.ModuleType), name
    return module


# The modules whose public names the reference must cover: the package, its public submodules (the
# modules among ``kd.__all__``) and the Array API's ``linalg`` extension.
PUBLIC_MODULES = (
    "kerneldsl",
    *sorted(f"kerneldsl.{n}" for n in kerneldsl.__all__ if isinstance(getattr(kerneldsl, n), types.ModuleType)),
    "kerneldsl.array_api.linalg",
)


# Classes whose public API is a subset of their methods (the rest is plumbing other modules call),
# listed with the methods a user calls; inherited ones included (DeviceArray's come from mixins).
MEMBERS = {
    "kerneldsl.Session": (
        "to_device, empty, empty_like, zeros, zeros_like, create_stream, create_event, "
        "capture, capturing, synchronize, memory_info, trim, load_module, close, state"
    ),
    "kerneldsl.DeviceArray": (
        "to_host, copy_to_host, copy_from_host, copy_to, to_device, copy, astype, fill, reshape, ravel, "
        "transpose, squeeze, expand_dims, item, sum, prod, min, max, mean, std, var, argmin, argmax, any, all, "
        "cumsum, cumprod, conj, real, imag, mT, close, closed"
    ),
    "kerneldsl.Kernel": "inspect, compile, explain, launch, resources, occupancy, suggest_block",
    "kerneldsl.Autotuned": "explain, variant, tune, tune_ahead",
    "kerneldsl.Stream": "synchronize, wait, close, closed",
    "kerneldsl.Event": "record, query, synchronize, elapsed_since, elapsed_ms, close, closed",
    "kerneldsl.PinnedArray": "array, close, closed",
}


def public_names(module: types.ModuleType) -> list[str]:
    """``__all__``, or (``kerneldsl.errors``) every public class defined in the module."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return [n for n in names if n != "__version__"]
    return sorted(
        n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", "") == module.__name__
    )
