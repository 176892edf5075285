"""Reduction kernels: the parameters a variant takes and its body rendered from the stage's
template (``reduction_full``, ``_rows``, ``_columns``, ``_slabs``, ``_segments``, ``_lines``, ``_gather``,
and the CPU device's ``_host_rows`` and ``_host_columns``.cu.j2 over ``reduction_host.cuh.j2``),
sharing ``reduction.cuh.j2``, with the accumulator's macros chosen here: ``reduction_value.cuh.j2``
or, for argmax/argmin, ``reduction_indexed.cuh.j2``, and likewise how a host row folds a run:
``reduction_host_value.cuh.j2`` or ``reduction_host_indexed.cuh.j2``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...jit.codegen import GeneratedBody, render
from ...launch.dispatch import Kernel
from ..decisions import ReductionDecisions
from ..kernels import (
    BLOCK,
    KERNELS,
    OperandLayout,
    all_aligned,
    array_leaves,
    array_param,
    leaf_params,
    loads,
    make_kernel,
    scalar_param,
    vector_width,
)
from ..program import Program, compute_ctype, program_context, storage_ctype
from .reducers import Reducer, accumulator_context
from .strategy import Variant, column_down, final_fold_depth, slab_values
from .strided import group_names

_INT64 = np.dtype(np.int64)
_TEMPLATES = {
    "direct": "reduction_full.cu.j2",
    "partial": "reduction_full.cu.j2",
    "rows": "reduction_rows.cu.j2",
    "columns": "reduction_columns.cu.j2",
    "gather": "reduction_gather.cu.j2",
    "segments": "reduction_segments.cu.j2",
    "lines": "reduction_lines.cu.j2",
    "slabs": "reduction_slabs.cu.j2",
    "host-rows": "reduction_host_rows.cu.j2",
    "host-columns": "reduction_host_columns.cu.j2",
}
# the CPU device's stages (a thread a run: blocks of one thread), as ReductionDecisions.host_plan says them
HOST_STAGES = {
    "host-rows": "a thread folds each run of a row into {lanes} accumulators (no barrier or collective)",
    "host-columns": "a thread folds a run of {lanes} adjacent columns (no barrier or collective)",
}
# a host stage's view strides (Step.args), of value (o, k, i) of the outer x count x inner problem
HOST_VIEW_STRIDES = ("kdso", "kdsk", "kdsi")
_FULL = ("direct", "partial")
_CANONICAL = ("segments", "lines")  # stages over canonical groups (their offsets from group strides)


@dataclass(frozen=True)
class Geometry:
    """What a reduction kernel's parameters depend on: the value's rank, whether its leaves
    broadcast (and each leaf's rank), and the rank of the output it writes. ``along``: per leaf,
    whether it is one line along the reduced axis of a 2-D value (``plan._along``), which the
    ``along_stage`` stage reads at the reduced index, in vectors where the full leaves are."""

    ndim: int
    broadcast: bool
    ranks: tuple[int | None, ...]
    out_rank: int
    along: tuple[bool, ...] = ()
    along_stage: str = ""


def reduction_kernel(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> Kernel:
    key = ("reduction", program, reducer, geometry, variant, acc, result)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build(program, reducer, geometry, variant, acc, result))
    return kernel


def _params(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> list[tuple[str, Any]]:
    """The value leaves; the partials, their indices and tickets (split stages); the output; the
    count; outer, inner and splits (axis stages; slabs: slabs per tile, no extents); the value's
    extents."""
    kind = "strided" if variant.view else "broadcast"  # contiguous leaves: the C launch path takes them
    params = leaf_params(program, OperandLayout(kind, geometry.ndim, ranks=geometry.ranks))
    if variant.stage == "partial" or variant.split:
        params.append(("kdpart", array_param("out", acc, "kdm")))
        if reducer.indexed:
            params.append(("kdpidx", array_param("out", _INT64, "kdmi")))
        params.append(("kdticket", array_param("inout", np.dtype(np.uint32), "kdt")))
    params.append(("kdout", array_param("out", result, tuple(f"kdq{j}" for j in range(geometry.out_rank)))))
    params.append(("kdcount", scalar_param(_INT64)))
    if variant.stage == "slabs":
        return params + [(f"kd{name}", scalar_param(_INT64)) for name in ("outer", "inner", "slabs")]
    if variant.stage not in _FULL:
        params += [(f"kd{name}", scalar_param(_INT64)) for name in ("outer", "inner", "splits")]
    if variant.stage in _CANONICAL:
        return params + [(name, scalar_param(_INT64)) for name in group_names(variant)]
    params += [(f"kdd{j}", scalar_param(_INT64)) for j in range(geometry.ndim)]
    if variant.view:  # a host stage reading a strided view in place: its outer, reduced and inner strides
        params += [(name, scalar_param(_INT64)) for name in HOST_VIEW_STRIDES]
    return params


def _groups(variant: Variant, ndim: int) -> dict[str, Any]:
    """The index groups a stage's template decomposes: per group, its extent's and strides' names
    (``strided.group_names``); for gather, the kept and reduced axes."""
    kept, reduced = variant.groups
    if variant.stage == "segments":
        return dict(
            kept=[{"extent": f"kdke{j}", "strides": [f"kdks{j}"]} for j in range(kept)],
            others=[{"extent": f"kdqe{j}", "strides": [f"kdqs{j}", f"kdql{j}"]} for j in range(reduced)],
        )
    if variant.stage == "lines":
        return dict(
            kept=[{"extent": f"kdke{j}", "strides": [f"kdks{j}", f"kdko{j}"]} for j in range(kept)],
            reduced=[{"extent": f"kdre{j}", "strides": [f"kdrs{j}"]} for j in range(reduced)],
        )
    return dict(kept=[j for j in range(ndim) if j not in variant.reduced], reduced=list(variant.reduced))


def _context(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> dict[str, Any]:
    """What every stage template is given, but the load choice (``vector``, ``width``).
    ``along``: the leaves read at the reduced index (``Geometry.along``) when this stage is the
    one that reads them so; the value is then indexed as flat, those leaves at ``kdalong``."""
    along = [i for i, a in enumerate(geometry.along) if a] if variant.stage == geometry.along_stage else []
    scalars = along if variant.stage == "columns" else []  # one value per reduced index, for every column
    arrays = array_leaves(program, OperandLayout("broadcast", geometry.ndim, ranks=geometry.ranks))
    return dict(
        name=reducer.name,
        stage=variant.stage,
        lanes=variant.lanes,
        down=column_down(variant.lanes),
        block=BLOCK,
        tile=slab_values(acc.itemsize, variant.double_tile),
        split=variant.split,
        view=variant.view,
        broadcast=geometry.broadcast and not along,
        along=along,
        vec=vector_width(program),
        accumulator="reduction_indexed.cuh.j2" if reducer.indexed else "reduction_value.cuh.j2",
        host_row="reduction_host_indexed.cuh.j2" if reducer.indexed else "reduction_host_value.cuh.j2",
        indexed=reducer.indexed,
        size_expr=" * ".join(f"(index_t)kdd{j}" for j in range(geometry.ndim)) or "1",
        dims=[f"kdd{j}" for j in range(geometry.ndim)],
        team=variant.team,
        wide=variant.wide,
        flat=variant.flat,
        **_groups(variant, geometry.ndim),
        arrays=arrays,
        vector_arrays=[a for a in arrays if a["id"] not in scalars],
        scalar_arrays=[a for a in arrays if a["id"] in scalars],
        program=program_context(program),
        vector_loads=loads(program, lambda i: f"kdl{i}s" if i in scalars else f"kdl{i}.v[kdk]"),
        flat_loads=loads(program, lambda i: f"kdp{i}[kdalong]" if i in along else f"kdp{i}[kdflat]"),
        offset_loads=loads(program, lambda i: f"kdp{i}[kdoff{i}]"),
        accumulation=accumulator_context(acc),
        result={"storage": storage_ctype(result), "cctype": compute_ctype(result)},
        combine=reducer.expression(acc),
        better=reducer.expression(acc),
        identity=reducer.identity_text(acc),
        absorbing=reducer.absorbing_text(acc),
        pre=reducer.pre,
        pre_param=reducer.pre_param,
        post=reducer.post,
    )


def _build(
    program: Program, reducer: Reducer, geometry: Geometry, variant: Variant, acc: np.dtype, result: np.dtype
) -> Kernel:
    context = _context(program, reducer, geometry, variant, acc, result)
    vec = context["vec"]
    stage = variant.stage

    def body(proxies: dict[str, Any]) -> GeneratedBody:
        aligned = all_aligned(proxies, [a["param"] for a in context["arrays"]])
        vector = not context["broadcast"] and aligned and vec > 1 and (stage in _FULL or variant.vector)
        width = vec if vector else 1
        period = variant.period if vector else 1  # values one by one: every row is its own period
        owned = width // period  # the columns a thread writes: a period's values shared by its rows
        depth = final_fold_depth(owned)
        text = render(_TEMPLATES[stage], vector=vector, width=width, depth=depth, period=period, owned=owned, **context)
        decisions = ReductionDecisions(
            layout="broadcast" if geometry.broadcast else "flat",
            vector_width=width,
            stage=stage,
            accumulation=acc,
            group=variant.lanes if stage not in _FULL else None,
            split=variant.split,
            copy=variant.copy or None,
            host_plan=HOST_STAGES[stage].format(lanes=variant.lanes) if stage in HOST_STAGES else None,
        )
        return GeneratedBody(text, decisions)

    name = f"{program.name}_{reducer.name}_{stage.replace('-', '_')}"
    block = 1 if stage in HOST_STAGES else BLOCK
    return make_kernel(name, _params(program, reducer, geometry, variant, acc, result), body, block=block)
