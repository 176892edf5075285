"""The plan of a fused pipeline through reductions: its kernel for one argument specialization
(``fused_rows``), the launch (grid from the rows and the SM count, decided once per plan) and
the call: one output array or a tuple of them, all written by the one launch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import FusionError
from ..jit.build import Build
from ..launch.dispatch import Kernel
from ..launch.fastpath import GridFront
from ..launch.warm import GridLaunch, WarmPath
from ..runtime import memory, nvtx
from ..runtime.selection import host_plans
from ..runtime.session import default_session
from .fused_rows import (
    CLUSTER_MAJOR,
    RowsGeometry,
    Strategy,
    decide,
    fused_rows_kernel,
    held_leaves,
    host_strategy,
    reads,
)
from .pipeline import Leaf, Pipeline
from .placement import check_out, check_placement, contiguous, device_operand, host_result, is_strided, release
from .plan import Plan
from .reduction import INSPECT_MULTIPROCESSORS, device_multiprocessors

BLOCKS_PER_SM = 32  # grid cap per SM: rows beyond it are taken by a grid-stride loop


@dataclass(frozen=True)
class Step:
    """The launch a call makes on one kind of device: the kernel, its strategy and its grid."""

    kernel: Kernel
    strategy: Strategy
    blocks: int


@dataclass(eq=False)
class FusedRowsPlan(Plan):
    """A fused pipeline compiled for one combination of argument dtypes and shapes."""

    name: str
    pipeline: Pipeline
    geometry: RowsGeometry  # its strategy as planned for ``INSPECT_MULTIPROCESSORS`` SMs with clusters
    sources: tuple[tuple[str, Any], ...]
    shapes: tuple[tuple[int, ...], ...]  # per output
    dtypes: tuple[np.dtype, ...]
    single: bool  # the function returned one array, not a tuple
    held_bytes: int
    shape: tuple[int, ...] = ()
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    _steps: dict[tuple[int, bool, bool], Step] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.shape, self.dtype = self.shapes[0], self.dtypes[0]
        p = self.pipeline
        empty = p.count == 0 and p.rows > 0
        self._no_identity = next((r.reducer.name for r in p.reductions if empty and r.reducer.needs_values), None)

    def step(self, sms: int, clusters: bool, host: bool = False) -> Step:
        """The kernel and grid for a device with ``sms`` SMs (``clusters``: sm_90+; ``host``: the
        CPU device's plan), decided once per plan and kind of device: warm calls only look it up."""
        found = self._steps.get((sms, clusters, host))
        if found is None:
            p, s = self.pipeline, self.geometry.strategy
            if host:
                strategy = host_strategy(p.count, s.width, self.held_bytes, max(1, reads(p)))
            else:
                strategy = decide(p.count, s.width, self.held_bytes, max(1, reads(p)), p.rows, sms, clusters)
            geometry = replace(self.geometry, strategy=strategy)
            per = strategy.threads // strategy.lanes
            blocks = max(1, min(_ceil(p.rows, per), sms * BLOCKS_PER_SM // strategy.cluster)) * strategy.cluster
            found = self._steps[(sms, clusters, host)] = Step(fused_rows_kernel(p, geometry), strategy, blocks)
        return found

    @property
    def kernel(self) -> Kernel:
        """The kernel ``inspect`` shows (an H100/H200's SM count)."""
        return self.step(INSPECT_MULTIPROCESSORS, True).kernel

    def _check(self) -> None:
        if self._no_identity is not None:
            raise ValueError(f"zero-size array to reduction operation {self._no_identity} which has no identity")

    def _outputs(self, out: Any, make: Any) -> list[Any]:
        if out is None:
            return [make(s, d) for s, d in zip(self.shapes, self.dtypes)]
        return [out]

    def run(self, args: Sequence[Any], out: Any, session: Any) -> Any:
        values = self.values(args)
        self._check()
        if out is not None:
            check_placement(out, session, self.name)
        if session is None:
            return self.run_host(values, out)
        if self.copies:
            values = contiguous(values)
        outs = self._outputs(out, session.empty)
        if out is not None and is_strided(out):
            temporary = session.empty(out.shape, out.dtype)
            self.launch(values, [temporary], session)
            temporary.copy_to(out)
            temporary.close()
        else:
            self.launch(values, outs, session)
        return outs[0] if self.single else tuple(outs)

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        if self.pipeline.rows == 0:
            return
        step = self._device_step(session)
        step.kernel(*values, *out, *self.pipeline.shape, grid=(step.blocks, 1, 1))

    def warm_entry(
        self, warm: WarmPath, values: Sequence[Any], out: Any, session: Any, stream: Any, result: Any
    ) -> GridLaunch | None:
        """The prebuilt launch of calls like this one: device arguments that are the kernel's
        first leaves in call order (its constants after them), read in place, contiguous
        outputs, outside graph capture."""
        if session is None or stream is not None or session.capturing:
            return None
        n = sum(kind == "arg" for kind, _ in self.sources)
        constants = tuple(value for _, value in self.sources[n:])
        in_order = self.sources[:n] == tuple(("arg", i) for i in range(n)) and n == len(values)
        if nvtx.ON or self.copies or not in_order or not self.pipeline.rows:
            return None
        outs = [result] if self.single else list(result)
        if not all(type(o) is memory.array_type and o.is_contiguous for o in outs):
            return None
        step = self._device_step(session)
        extents = tuple(self.pipeline.shape)
        found = step.kernel.lookup((*values, *constants, *outs, *extents), {})
        if found is None or found[1]:
            return None
        front = GridFront(found[0], (step.blocks, 1, 1))
        outputs = tuple(zip(self.shapes, self.dtypes))
        return GridLaunch(front, session, constants, extents, outputs, single=self.single, in_place=None)

    def _device_step(self, session: Any) -> Step:
        """The step for ``session``'s device: clusters on a GPU of sm_90+, the host's plan on the CPU device."""
        gpu = session.gpu
        clusters = gpu.compute_capability[0] >= CLUSTER_MAJOR and not gpu.host
        return self.step(device_multiprocessors(session), clusters, host_plans(session))

    def run_host(self, values: list[Any], out: Any) -> Any:
        session = default_session()
        device = [device_operand(session, v) for v in values]
        results = self._outputs(None, lambda shape, dtype: host_result(session, shape, dtype))
        outs = [result for result, _ in results]
        try:
            self.launch(device, outs, session)
            hosts = [o.to_host() if host is None else host for o, (_, host) in zip(outs, results)]
        finally:
            release([*outs, *device])
        if out is not None:
            out[...] = hosts[0]
            return out
        hosts = [h[()] if h.ndim == 0 else h for h in hosts]
        return hosts[0] if self.single else tuple(hosts)

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        """The Build of the one kernel a call runs on an H100/H200's SM count (``decisions.strategy``,
        ``passes``, ``items``); clusters (the split strategy) only for an ``arch`` that has them."""
        digits = (arch or "sm_90").removeprefix("sm_").rstrip("af")
        clusters = digits.isdigit() and int(digits) // 10 >= CLUSTER_MAJOR
        kernel = self.step(INSPECT_MULTIPROCESSORS, clusters).kernel
        return kernel.inspect(*self.values(args), *self._outputs(out, np.empty), *self.pipeline.shape, arch=arch)


def plan_fused_rows(pipeline: Pipeline, args: Sequence[Any], out: Any, single: bool) -> FusedRowsPlan:
    """Compile the pipeline for these call arguments (``out=``: only for one output)."""
    ndim = len(pipeline.shape)
    dtypes = [pipeline.values[o].dtype for o in pipeline.outputs]
    if out is not None:
        if not single:
            raise FusionError(f"{pipeline.name}: out= cannot be given to a fused function that returns a tuple")
        check_out(out, pipeline.output_shapes[0], dtypes[0], pipeline.name)
        dtypes = [np.dtype(out.dtype)]
    leaves = []
    for v, source in zip(pipeline.leaf_ids, pipeline.sources):
        leaf = pipeline.values[v]
        assert isinstance(leaf, Leaf)
        if leaf.kind == "array":
            rank = len(args[source[1]].shape) if source[0] == "arg" else 0
            # an axis where the reduced shape is 1 counts as varying when the leaf has it (its stride exists)
            own = [
                d != 1 or (extent == 1 and j >= ndim - rank)
                for j, (d, extent) in enumerate(zip(pipeline.padded[v], pipeline.shape))
            ]
            leaves.append((v, rank, tuple(own)))
    full = [pipeline.full(o) for o in pipeline.outputs]
    sizes = [pipeline.values[v].dtype.itemsize for v, _, varies in leaves if any(varies[a] for a in pipeline.axes)]
    sizes += [d.itemsize for d, f in zip(dtypes, full) if f]
    width = max(1, 16 // max(sizes, default=16))
    held = held_leaves(pipeline, leaves, pipeline.axes)
    held_bytes = sum(pipeline.values[v].dtype.itemsize for v in held)
    p = pipeline
    strategy = decide(p.count, width, held_bytes, max(1, reads(p)), p.rows, INSPECT_MULTIPROCESSORS, True)
    geometry = RowsGeometry(
        pipeline.axes,
        ndim,
        tuple(pipeline.full(v) for v in range(len(pipeline.values))),
        tuple(leaves),
        tuple(zip(dtypes, full)),
        pipeline.count % width == 0,
        strategy,
    )
    sources = tuple(s for v, s in zip(pipeline.leaf_ids, pipeline.sources) if s[0] != "reduced")
    return FusedRowsPlan(
        pipeline.name, pipeline, geometry, sources, pipeline.output_shapes, tuple(dtypes), single, held_bytes
    )


def _ceil(a: int, b: int) -> int:
    return -(-a // b)
