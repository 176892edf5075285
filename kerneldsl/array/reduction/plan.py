"""Reduction plans: a reduction compiled for one combination of argument dtypes and shapes, its
launch decided once per SM count (``strategy.decide``, or ``strided.strided_step`` for axis sets
the plain stages do not take) and made from the session's scratch. Strided views are read in
place, their launch decided once per (SM count, strides); a copy is made only where the kernels
cannot read the view (a reversed axis, leaves of different layouts, broadcast leaves) and the
variant says why (``Variant.copy``, ``Build.decisions.copy``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from ...jit.build import Build
from ...launch.dispatch import Kernel
from ...launch.fastpath import GridFront
from ...launch.warm import BoundedCache, GridLaunch, WarmPath, overlaps_out
from ...runtime import memory, nvtx
from ...runtime.selection import host_plans
from ...runtime.session import default_session
from ..kernels import vector_width
from ..placement import check_out, contiguous, device_operand, host_result, into_strided, release
from ..plan import Plan
from ..program import Program, ProgramBuilder, Traced
from ..scratch import SCRATCH
from .axes import normalize_axes, result_shape
from .canonical import Canonical, c_strides, canonicalize
from .kernel import Geometry, reduction_kernel
from .reducers import Reducer
from .strategy import (
    INSPECT_MULTIPROCESSORS,
    ROWS_PER_THREAD,
    Extents,
    Step,
    Variant,
    column_down,
    decide,
    device_multiprocessors,
    extents,
    host_step,
    slabs_fit,
    slabs_step,
)
from .strided import FLAT_BELOW, strided_step

_INT64 = np.dtype(np.int64)
_UINT32 = np.dtype(np.uint32)
_FULL = ("direct", "partial")
_STEP_ARGS = ("segments", "lines", "slabs")  # stages whose integer arguments the Step carries
COPY_REVERSED = "a reversed (negative-stride) axis: read from a contiguous copy"
COPY_LAYOUTS = "operands of different layouts: read from contiguous copies"
COPY_BROADCAST = "broadcast operands of a strided view: read from contiguous copies"
COPY_EMPTY = "an empty view: nothing to read in place"
COPY_HOST = (
    "a view on the CPU device whose kept or reduced axes do not each step by one stride: its host stages read "
    "a contiguous copy (a view's stages are a GPU's)"
)


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
    _steps: dict[tuple[int, bool], Step] = field(default_factory=dict, init=False, repr=False)  # by SMs, host
    _views: BoundedCache = field(default_factory=BoundedCache, init=False, repr=False)  # Steps by SMs, host, strides
    strided_operands = True  # views are read in place, or copied here where the kernels cannot (``Variant.copy``)

    def run_host(self, values: list[Any], out: Any) -> Any:
        session = default_session()
        device = [device_operand(session, v) for v in values]
        result, host = host_result(session, self.shape, self.dtype)
        try:
            self.launch(device, result, session)
            if host is None:
                host = result.to_host()
        finally:
            release([result, *device])
        if out is not None:
            out[...] = host
            return out
        return host[()] if host.ndim == 0 else host

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        """The reduction into ``out``. An operand that overlaps a contiguous ``out`` (which the
        kernel writes directly; a strided one is written through a temporary after the kernel)
        is read from a contiguous copy, made before the launch is chosen for its layout. Unlike
        an elementwise op's, an operand that is exactly ``out`` is copied too: the stages read
        whole vectors and rows that several outputs share, in threads and blocks other than the
        one that writes each output, so none reads an element only before it is written."""
        self._check_not_empty(out.size)
        if out.size == 0:
            return
        if out.is_contiguous and overlaps_out(values, out, in_place=False):
            values = [session.copy(v) if overlaps_out((v,), out, in_place=False) else v for v in values]
        step = self.choose(values, device_multiprocessors(session), host_plans(session))
        if step.variant.copy:
            values = contiguous(values)
        if out.is_contiguous:
            self._launch(step, values, out, session)
        else:
            into_strided(lambda v, o, s: self._launch(step, v, o, s), values, out, session)

    def _launch(self, step: Step, values: list[Any], out: Any, session: Any) -> None:
        scratch = self._scratch(step, session)
        step.kernel(*values, *self._output_arguments(step, scratch, out), grid=(step.blocks, 1, 1))

    def _scratch(self, step: Step, session: Any) -> tuple[Any, ...]:
        if not step.partials:
            return ()
        scratch: tuple[Any, ...] = (SCRATCH.get(session, "values", self.acc, step.partials),)
        if self.reducer.indexed:
            scratch += (SCRATCH.get(session, "indices", _INT64, step.partials),)
        return (*scratch, SCRATCH.get(session, "tickets", _UINT32, step.tickets, zeroed=True))

    def warm_entry(
        self, warm: WarmPath, values: Sequence[Any], out: Any, session: Any, stream: Any, result: Any
    ) -> GridLaunch | None:
        """The prebuilt launch of calls like this one: device operands read in place that are the
        kernel's leaves in call order (the warm call passes them as they are), a contiguous
        non-empty result, outside graph capture."""
        if session is None or stream is not None or session.capturing:
            return None
        if nvtx.ON or self.sources != _in_order(len(values)) or type(result) is not memory.array_type:
            return None
        if not result.size or not result.is_contiguous or not self.extents.count:
            return None
        if out is not None and overlaps_out(values, out, in_place=False):  # the full path reads copies
            return None
        step = self.choose(values, device_multiprocessors(session), host_plans(session))
        if step.variant.copy:
            return None
        scratch = self._scratch(step, session)
        args = (*values, *self._output_arguments(step, scratch, result))
        found = step.kernel.lookup(args, {})
        if found is None or found[1]:
            return None
        after = args[len(values) + len(scratch) + 1 :]
        front = GridFront(found[0], (step.blocks, 1, 1))
        return GridLaunch(front, session, scratch, after, ((self.shape, self.dtype),), scratch=scratch)

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        """The Build of the kernel a call with these operands runs (``decisions.stage`` names it)."""
        values = self.values(args)
        step = self.choose(values, INSPECT_MULTIPROCESSORS)
        if step.variant.copy:
            values = [np.empty(v.shape, v.dtype) if type(v) is memory.array_type else v for v in values]
        scratch: tuple[Any, ...] = ()
        if step.partials:
            index = [np.empty(1, np.int64)] if self.reducer.indexed else []
            scratch = (np.empty(1, self.acc), *index, np.zeros(1, np.uint32))
        target = out if out is not None else np.empty(self.shape, self.dtype)
        return step.kernel.inspect(*values, *self._output_arguments(step, scratch, target), arch=arch)

    def _check_not_empty(self, outputs: int) -> None:
        if self.extents.count == 0 and self.reducer.needs_values and (outputs or not self.shape):
            raise ValueError(f"zero-size array to reduction operation {self.reducer.name} which has no identity")

    def _output_arguments(self, step: Step, before: tuple[Any, ...], out: Any) -> tuple[Any, ...]:
        """The arguments from the partials on: ``before``, the output, counts and extents."""
        e = self.extents
        if step.variant.stage in _STEP_ARGS:
            return (*before, out, *step.args)
        if step.variant.stage in _FULL:
            return (*before, out, e.count, *self.value_shape)
        return (*before, out, e.count, e.outer, e.inner, step.splits, *self.value_shape, *step.args)

    def _kernel(self, variant: Variant) -> Kernel:
        return reduction_kernel(self.program, self.reducer, self.geometry, variant, self.acc, self.dtype)

    @cached_property
    def extents(self) -> Extents:
        return extents(self.value_shape, self.axes)

    def step(self, sms: int, host: bool = False) -> Step:
        """The strategy for this shape on a device with ``sms`` multiprocessors (see ``Variant``),
        the CPU device's own stages when ``host`` (``strategy.host_step``, every layout but the
        gathered one), decided once per plan and kind of device: warm calls only look it up."""
        found = self._steps.get((sms, host))
        if found is None:
            acc_bytes = self._acc_bytes
            vec = vector_width(self.program)
            canonical = None
            if not self.geometry.broadcast and all(self.value_shape):
                canonical = canonicalize(self.value_shape, c_strides(self.value_shape), self.axes)
            if host and not self.extents.gather:
                found = host_step(self.extents, acc_bytes, sms, self._kernel, self.acc.itemsize)
            elif canonical is not None and canonical.plain and slabs_fit(self.extents, self.acc.itemsize):
                found = slabs_step(self.extents, vec, self.acc.itemsize, sms, self._kernel)
            elif canonical is not None and (not canonical.plain or _short_columns(self.extents)):
                found = self._strided_step(canonical, sms)
            else:
                broadcast = self.geometry.broadcast and not self.geometry.along  # lines load as vectors
                phased = not self.reducer.indexed and not self.geometry.broadcast  # no leaf read per row
                found = decide(self.extents, vec, broadcast, acc_bytes, sms, self._kernel, phased)
            self._steps[(sms, host)] = found
        return found

    @property
    def _acc_bytes(self) -> int:
        return self.acc.itemsize + (8 if self.reducer.indexed else 0)

    def _strided_step(self, canonical: Canonical, sms: int, view: bool = False) -> Step:
        """The segments or lines launch; ``view``: the operands are a strided view read in place."""
        vec = vector_width(self.program)
        return strided_step(canonical, vec, self._acc_bytes, self.reducer.indexed, sms, self._kernel, view)

    def choose(self, values: Sequence[Any], sms: int, host: bool = False) -> Step:
        """The launch for these leaf values on ``sms`` SMs (``host``: the CPU device's plans):
        ``step(sms, host)`` when every array leaf is C-contiguous, else the strided views'
        launch, decided once per (SM count, host, strides)."""
        views = [v for v in values if type(v) is memory.array_type and not v.is_contiguous]
        if not views:
            return self.step(sms, host)
        arrays = [v for v in values if type(v) is memory.array_type]
        key = (sms, host, *(a.strides for a in arrays))
        found: Step | None = self._views.get(key)
        if found is None:
            found = self._view_step(arrays, sms, host)
            self._views.put(key, found)
        return found

    def _view_step(self, arrays: list[Any], sms: int, host: bool) -> Step:
        """A view's launch: in place on the canonical groups of its strides, or (``Variant.copy``
        says why) the contiguous launch on copies."""
        layouts = {(tuple(a.shape), tuple(s // a.dtype.itemsize for s in a.strides)) for a in arrays}
        canonical = None
        if self.geometry.broadcast:
            copy = COPY_BROADCAST
        elif len(layouts) > 1:
            copy = COPY_LAYOUTS
        elif not all(self.value_shape):
            copy = COPY_EMPTY
        elif host:
            ((_, strides),) = layouts
            view = _host_view(canonicalize(self.value_shape, strides, self.axes))
            if view is not None and not self.extents.gather:
                return host_step(self.extents, self._acc_bytes, sms, self._kernel, self.acc.itemsize, view)
            copy = COPY_HOST
        else:
            ((_, strides),) = layouts
            canonical = canonicalize(self.value_shape, strides, self.axes)
            copy = COPY_REVERSED if canonical is None else ""
        if canonical is None or canonical.plain:
            contiguous_step = self.step(sms, host)
            variant = replace(contiguous_step.variant, copy=copy or COPY_LAYOUTS)
            return replace(contiguous_step, variant=variant, kernel=self._kernel(variant))
        return self._strided_step(canonical, sms, view=True)


def _host_view(canonical: Canonical | None) -> tuple[int, int, int] | None:
    """The outer, reduced and inner element strides of a view the host stages read in place: at
    most one kept group before the one reduced group and one after it (the outer x count x inner
    problem, each index a fixed stride apart; 0 for an absent group); None for other layouts."""
    if canonical is None:
        return None
    groups = canonical.groups
    kinds = "".join("r" if g.reduced else "k" for g in groups)
    if kinds not in ("r", "kr", "rk", "krk"):
        return None
    outer = groups[0].stride if kinds[0] == "k" else 0
    inner = groups[-1].stride if kinds[-1] == "k" else 0
    return outer, groups[kinds.index("r")].stride, inner


def _in_order(n: int) -> tuple[tuple[str, int], ...]:
    """The sources of a plan whose leaves are its ``n`` call operands, in order."""
    return tuple(("arg", i) for i in range(n))


def _along(
    shapes: list[tuple[int, ...] | None], value_shape: tuple[int, ...], axes: tuple[int, ...]
) -> tuple[tuple[bool, ...], str]:
    """Per leaf, whether it is one line of a 2-D value along its one reduced axis, broadcast over
    the kept one (``v`` of ``A * v`` over axis 1, ``u[:, None]`` of ``u[:, None] * A`` over axis
    0: a matrix-vector product), and the stage that reads such leaves at the reduced index (rows,
    columns) instead of decomposing every element's flat index; ``((), "")`` for other shapes."""
    if len(value_shape) != 2 or len(axes) != 1:
        return (), ""
    rows, cols = value_shape
    lines = [(cols,), (1, cols)] if axes == (1,) else [(rows, 1)]
    along = []
    for s in shapes:
        if s is not None and s != value_shape and s not in lines:
            return (), ""
        along.append(s is not None and s != value_shape)
    return tuple(along), ("rows" if axes == (1,) else "columns")


def _short_columns(e: Extents) -> bool:
    """Columns too narrow for a warp, repeated along a kept outer axis, down a reduced extent too
    short for a columns block's rows of threads: the flat lines stage numbers their outputs
    together (the columns stage would leave most threads idle). Longer columns read whole rows
    coalesced in the columns stage."""
    narrow = e.outer > 1 and 1 < e.inner < FLAT_BELOW
    return narrow and e.count < column_down(e.inner) * ROWS_PER_THREAD


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
    reducer.check(value)
    acc = reducer.accumulate(value)
    result = reducer.result(value)
    if out is not None:
        check_out(out, shape, result, reducer.name)
        result = np.dtype(out.dtype)
    shapes = builder.shapes
    broadcast = any(s is not None and s != value_shape for s in shapes)
    ranks = tuple(None if s is None else len(s) for s in shapes)
    along, stage = _along(shapes, value_shape, reduced) if broadcast else ((), "")
    geometry = Geometry(ndim, broadcast, ranks, len(shape), along, stage)
    return ReductionPlan(
        reducer.name, reducer, tuple(builder.sources), program, geometry, value_shape, reduced, shape, acc, result
    )
