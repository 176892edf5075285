"""Reduction plans: a reduction compiled for one combination of argument dtypes and shapes, its
launch decided once per SM count (``strategy.decide``) and made from the session's scratch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ...build import Build
from ...dispatch import Kernel
from ...runtime.session import default_session
from ..kernels import vector_width
from ..placement import check_out
from ..plan import Plan
from ..program import Program, ProgramBuilder, Traced
from ..scratch import SCRATCH
from .axes import normalize_axes, result_shape
from .kernel import Geometry, reduction_kernel
from .reducers import Reducer
from .strategy import INSPECT_MULTIPROCESSORS, Extents, Step, Variant, decide, device_multiprocessors, extents

_INT64 = np.dtype(np.int64)
_UINT32 = np.dtype(np.uint32)
_FULL = ("direct", "partial")


@dataclass(eq=False)
class ReductionPlan(Plan):
    """A compiled reduction for one combination of argument dtypes and shapes."""

    name: str
    reducer: Reducer
    sources: tuple[tuple[str, Any], ...]
    program: Program
    geometry: Geometry
    value_shape: tuple[int, ...]
    axes: tuple[int, ...]  # reduced axes, sorted
    shape: tuple[int, ...]
    acc: np.dtype
    dtype: np.dtype  # of the output
    _steps: dict[int, Step] = field(default_factory=dict, init=False, repr=False)  # by SM count

    def run_host(self, values: list[Any], out: Any) -> Any:
        session = default_session()
        device = [session.to_device(v) if isinstance(v, np.ndarray) else v for v in values]
        result = session.empty(self.shape, self.dtype)
        try:
            self.launch(device, result, session)
            host = result.to_host()
        finally:
            result.close()
            for d, v in zip(device, values):
                if d is not v:
                    d.close()
        if out is not None:
            out[...] = host
            return out
        return host[()] if host.ndim == 0 else host

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        self._check_not_empty(out.size)
        if out.size == 0:
            return
        step = self.step(device_multiprocessors(session))
        scratch: tuple[Any, ...] = ()
        if step.partials:
            scratch = (SCRATCH.get(session, "values", self.acc, step.partials),)
            if self.reducer.indexed:
                scratch += (SCRATCH.get(session, "indices", _INT64, step.partials),)
            scratch += (SCRATCH.get(session, "tickets", _UINT32, step.tickets, zeroed=True),)
        step.kernel(*values, *self._output_arguments(step, scratch, out), grid=(step.blocks, 1, 1))

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        """The Build of the kernel a call with these operands runs (``decisions.stage`` names it)."""
        step = self.step(INSPECT_MULTIPROCESSORS)
        scratch: tuple[Any, ...] = ()
        if step.partials:
            index = [np.empty(1, np.int64)] if self.reducer.indexed else []
            scratch = (np.empty(1, self.acc), *index, np.zeros(1, np.uint32))
        target = out if out is not None else np.empty(self.shape, self.dtype)
        return step.kernel.inspect(*self.values(args), *self._output_arguments(step, scratch, target), arch=arch)

    def _check_not_empty(self, outputs: int) -> None:
        if self.extents.count == 0 and self.reducer.needs_values and (outputs or not self.shape):
            raise ValueError(f"zero-size array to reduction operation {self.reducer.name} which has no identity")

    def _output_arguments(self, step: Step, before: tuple[Any, ...], out: Any) -> tuple[Any, ...]:
        """The arguments from the partials on: ``before``, the output, counts and extents."""
        e = self.extents
        if step.variant.stage in _FULL:
            return (*before, out, e.count, *self.value_shape)
        return (*before, out, e.count, e.outer, e.inner, step.splits, *self.value_shape)

    def _kernel(self, variant: Variant) -> Kernel:
        return reduction_kernel(self.program, self.reducer, self.geometry, variant, self.acc, self.dtype)

    @cached_property
    def extents(self) -> Extents:
        return extents(self.value_shape, self.axes)

    def step(self, sms: int) -> Step:
        """The strategy for this shape on a device with ``sms`` multiprocessors (see ``Variant``),
        decided once per plan and SM count: warm calls only look it up."""
        found = self._steps.get(sms)
        if found is None:
            acc_bytes = self.acc.itemsize + (8 if self.reducer.indexed else 0)
            vec = vector_width(self.program)
            found = decide(self.extents, vec, self.geometry.broadcast, acc_bytes, sms, self._kernel)
            self._steps[sms] = found
        return found


def plan_reduction(
    builder: ProgramBuilder, root: Traced, reducer: Reducer, axis: Any, out: Any, keepdims: bool = False
) -> ReductionPlan:
    """Compile ``reducer`` over the values of ``builder``'s ``root`` for these arguments."""
    program = builder.program(root)
    value_shape = tuple(int(d) for d in root.shape)
    ndim = len(value_shape)
    axes = normalize_axes(axis, ndim, reducer.name, single=reducer.indexed)
    reduced = tuple(range(ndim)) if axes is None else axes
    shape = result_shape(value_shape, reduced, keepdims)
    value = program.dtype
    acc = reducer.accumulate(value)
    result = reducer.result(value)
    if out is not None:
        check_out(out, shape, result, reducer.name)
        result = np.dtype(out.dtype)
    shapes = builder.shapes
    broadcast = any(s is not None and s != value_shape for s in shapes)
    ranks = tuple(None if s is None else len(s) for s in shapes)
    geometry = Geometry(ndim, broadcast, ranks, len(shape))
    return ReductionPlan(
        reducer.name, reducer, tuple(builder.sources), program, geometry, value_shape, reduced, shape, acc, result
    )
