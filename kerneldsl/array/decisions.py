"""Decisions: what a generated array kernel chose for one specialization, one frozen record per
family of kernels, kept on its Build (``build.decisions``, ``f.inspect(...).decisions``) so that
tests and users read the choice instead of the generated text.

A family's body function returns its record beside the CUDA text (``jit.codegen.GeneratedBody``);
the compile pipeline carries the record to the Build without reading it, so each family's fields
are its own; a kernel a user declares reports none (``None``). ``layout`` names the class of
operand layouts the kernel was generated for (``kernels.OperandLayout.kind``; fused rows: where
the reduced axes lie).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ElementwiseDecisions:
    """An elementwise kernel's (``kd.ops``, ``@kd.elementwise``, ``@kd.fuse`` without reductions)
    and a random fill's."""

    layout: str  # "flat" (every array has the result's shape), "broadcast" or "strided"
    vector_width: int = 1  # elements per 16-byte access; 1: the scalar path
    host_plan: str | None = None  # the CPU device's own plan where a GPU would run a thread an element


@dataclass(frozen=True)
class ReductionDecisions:
    """A reduction kernel's (``kd.ops.sum``, ``kd.reduction``, ``@kd.fuse`` ending in one)."""

    stage: str  # direct, partial, rows, columns, slabs, segments, lines, gather, host-rows, host-columns
    layout: str  # "flat" or "broadcast" (the value's leaves broadcast)
    vector_width: int  # elements per 16-byte access; 1: the scalar path
    accumulation: np.dtype  # the dtype the reduction accumulates in
    group: int | None = None  # lanes per row (rows, gather) or across columns (columns); None: full stages
    split: bool = False  # several blocks share one output; the last to finish folds their partials
    copy: str | None = None  # why its operands were read from a contiguous copy (None: in place)
    host_plan: str | None = None  # the CPU device's own plan where a GPU would run another stage


@dataclass(frozen=True)
class ScanDecisions:
    """A scan kernel's (``kd.ops.cumsum``, ``kd.scan``)."""

    stage: str  # lookback, lines, host-lines
    accumulation: np.dtype  # the dtype the running fold is kept in
    items: int  # values a thread takes per tile (lookback), adjacent lines it walks (host-lines), else 1
    host_plan: str | None = None  # the CPU device's own plan where a GPU would run another stage


@dataclass(frozen=True)
class FusedRowsDecisions:
    """A fused pipeline's over rows (``@kd.fuse`` with reductions feeding later work): ``stage``
    is always "fused", and the kernel is always built with ``--use_fast_math`` (PyTorch's
    arithmetic, not NumPy's), which ``fast_math`` records."""

    layout: str  # "rows" (the reduced axes innermost) or "permuted"
    vector_width: int  # elements per 16-byte access; 1: the scalar path
    accumulation: np.dtype  # the dtype the first reduction accumulates in
    group: int  # lanes per row
    split: bool  # a row spread over a thread-block cluster
    strategy: str  # "row-per-warp", "row-per-block", "split" or the CPU device's "row-per-thread"
    passes: int  # reads of each row from memory (1: held in registers)
    items: int | None  # units per thread held in registers (None: re-read)
    shifted: bool  # rows not a multiple of the vector: aligned vectors, per-element edges
    carried: bool  # a full value a later pass reads is kept in registers, not recomputed
    host_plan: str | None = None  # the CPU device's own plan where a GPU would run another strategy
    stage: str = field(default="fused", init=False)
    fast_math: bool = field(default=True, init=False)
