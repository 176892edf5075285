"""Programs as Kernels: generated parameters, what the body templates share, and the kernel cache.

A kernel made here is an ordinary ``Kernel`` over generated parameters (``kdp<i>`` per leaf,
``kdout``, shape symbols ``kdn<j>`` / ``kds<i>x<m>`` / ``kdo<j>``) whose body function renders a
template and reports its decisions (``decisions.py``). Kernels are cached per (what, program,
layout, ...): a new shape re-binds an existing kernel, it does not rebuild one.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..jit.codegen import GeneratedBody
from ..jit.signature import ArrayAnnotation, Expr, ScalarAnnotation, parse_signature
from ..launch.dispatch import Kernel
from ..launch.warm import BoundedCache
from .program import Program, storage_ctype

BLOCK = 256
# --fmad=false: NumPy rounds a*b+c twice; so do we. --minimal: NVRTC declares no runtime API,
# textures or device launches, which generated code never uses: a first call compiles faster.
OPTIONS = ("--fmad=false", "--minimal")


@dataclass(frozen=True)
class OperandLayout:
    """How a generated kernel addresses its operands' memory, which its text depends on (the
    extents and strides themselves are runtime parameters). ``kind``: "flat" when every array has
    the result's shape, read at one flat index (the leaves ``zero_d`` are 0-d arrays, read at
    their one element); "broadcast" when each leaf's offset is decomposed from the result index
    over its own extents (``ranks``: per leaf, its rank; None for a scalar); "strided" likewise,
    with every array's element strides runtime parameters (some operand is a strided view;
    ``across``: the leaf ids of operands read across their rows, transposed views)."""

    kind: str  # "flat", "broadcast" or "strided"
    ndim: int  # the result's rank
    ranks: tuple[int | None, ...] = ()  # broadcast and strided: per leaf
    zero_d: tuple[int, ...] = ()  # flat: the leaf ids of 0-d arrays
    across: tuple[int, ...] = ()  # strided: leaves whose elements are adjacent across the rows


KERNELS = BoundedCache()


def _c_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "program"  # an ASCII C identifier
    return cleaned if cleaned[0].isalpha() else f"k{cleaned}"


def make_kernel(
    name: str,
    params: list[tuple[str, Any]],
    body: Callable[[dict[str, Any]], GeneratedBody],
    grid: Expr | int = 1,
    source: Callable[..., object] | None = None,
    block: int = BLOCK,
    options: tuple[str, ...] = OPTIONS,
    cluster: tuple[int, int, int] | None = None,
) -> Kernel:
    """A ``Kernel`` over generated parameters whose body comes from ``body(proxies)``; compile
    errors are reported at ``source``'s lines (the user function the code came from) when given."""

    def kernel_body(**proxies: Any) -> GeneratedBody:
        return body(proxies)

    kernel_body.__name__ = kernel_body.__qualname__ = _c_name(name)
    if source is not None:
        kernel_body.__wrapped__ = source  # type: ignore[attr-defined]  # read by diagnostics.BodyOrigin
    kernel_body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # typeshed: functions lack it
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=a) for n, a in params]
    )
    # No alias checks in the adapter: an input may be exactly the output (an in-place op or
    # scan), and the plans copy any input that overlaps the output otherwise
    # (placement.unalias, launch.warm.overlaps_out) before they launch.
    sig = parse_signature(kernel_body, grid=grid, block=block, allow_alias=True, cluster=cluster)
    return Kernel(kernel_body, sig, options)


def leaf_dims(layout: OperandLayout, i: int) -> tuple[str, ...]:
    if layout.kind == "flat":
        return () if i in layout.zero_d else tuple(f"kdn{j}" for j in range(layout.ndim))
    return tuple(f"kds{i}x{m}" for m in range(layout.ranks[i] or 0))


def out_dims(layout: OperandLayout) -> tuple[str, ...]:
    prefix = "kdn" if layout.kind == "flat" else "kdo"
    return tuple(f"{prefix}{j}" for j in range(layout.ndim))


def array_param(
    direction: str, dtype: np.dtype, dims: tuple[str | int, ...] | str, strided: bool = False
) -> ArrayAnnotation:
    return ArrayAnnotation(direction, dtypes.element_type(dtype).name, dims, strided=strided)


def scalar_param(dtype: np.dtype) -> ScalarAnnotation:
    return ScalarAnnotation(dtypes.element_type(dtype).name)


def leaf_params(program: Program, layout: OperandLayout) -> list[tuple[str, Any]]:
    """One parameter per leaf: an input array over the layout's dims, or a scalar."""
    strided = layout.kind == "strided"
    return [
        (
            f"kdp{i}",
            array_param("in", leaf.dtype, leaf_dims(layout, i), strided)
            if leaf.kind == "array"
            else scalar_param(leaf.dtype),
        )
        for i, leaf in enumerate(program.leaves)
    ]


def leaf_strides(layout: OperandLayout, i: int | str) -> tuple[str, ...]:
    """The C names of leaf ``i``'s element strides (``"o"``: the output's): runtime parameters of
    the strided layout's arrays (declared ``strided``), the contiguous constants otherwise."""
    rank = len(out_dims(layout)) if i == "o" else len(leaf_dims(layout, int(i)))
    param = "kdout" if i == "o" else f"kdp{i}"
    return tuple(f"{param}_stride{m}" for m in range(rank))


def array_leaves(program: Program, layout: OperandLayout) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "param": f"kdp{i}",
            "dims": leaf_dims(layout, i),
            "strides": leaf_strides(layout, i),
            "itemsize": leaf.dtype.itemsize,
            "storage": storage_ctype(leaf.dtype),
        }
        for i, leaf in enumerate(program.leaves)
        if leaf.kind == "array"
    ]


def loads(program: Program, array_load: Callable[[int], str]) -> dict[int, str]:
    """Per leaf, the C expression of its stored value at the current element."""
    return {i: array_load(i) if leaf.kind == "array" else f"kdp{i}" for i, leaf in enumerate(program.leaves)}


def vector_width(program: Program, out_dtype: np.dtype | None = None) -> int:
    """Elements per 16-byte access of the widest array (the output too, for elementwise kernels)."""
    sizes = [leaf.dtype.itemsize for leaf in program.leaves if leaf.kind == "array"]
    if out_dtype is not None:
        sizes.append(out_dtype.itemsize)
    return max(1, 16 // max(sizes, default=1))


def all_aligned(proxies: dict[str, Any], names: list[str]) -> bool:
    """Whether every named array parameter is 16-byte aligned in this specialization."""
    return all(proxies[n].aligned16 for n in names)
