"""Fused pipelines through reductions: the trace of a ``@kd.fuse`` function whose reductions feed
later work, and what each value is over the rows (``Pipeline``).

``PipelineBuilder`` records a reduction's result as a *reduced* leaf: a value per row (per
output of the reduction) that later elementwise ops may use, broadcast back over the row by
``keepdims=True`` or by shape (reducing leading axes). ``analyze`` then checks what one kernel
can run and says what cannot, naming the op: every reduction reduces a value of the same shape
over the same axes, and every value lives either over the whole row (*full*) or once per row.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import FusionError
from .program import Leaf, Node, Program, ProgramBuilder, Traced

__all__ = ["Leaf", "Phase", "Pipeline", "PipelineBuilder", "Reduce", "analyze", "phase"]
from .reduction import Reducer, normalize_axes


@dataclass(frozen=True)
class Reduce:
    """One reduction of the pipeline: ``root`` (a value id) folded by ``reducer`` over ``axes``
    into the reduced leaf ``leaf``."""

    reducer: Reducer
    root: int
    leaf: int
    axes: tuple[int, ...]
    keepdims: bool


class PipelineBuilder(ProgramBuilder):
    """A ``ProgramBuilder`` whose reduction results may be used again (as reduced leaves)."""

    def __init__(self, name: str, make: Any) -> None:
        super().__init__(name, make=make)
        self.reductions: list[Reduce] = []
        self._reduced: dict[int, tuple[Traced, Traced]] = {}  # id(result) -> (result, its leaf's value)

    def reduced(self, value: Traced) -> Traced:
        """The reduced leaf standing for the reduction result ``value`` (made once per result)."""
        found = self._reduced.get(id(value))
        if found is not None:
            return found[1]
        reduction, axis, keepdims, root = value.reduction
        if reduction.reducer.indexed:
            raise FusionError(
                f"{reduction.name}: an index reduction cannot feed later work in a fused function (it can only end one)"
            )
        axes = normalize_axes(axis, root.ndim, reduction.name)
        leaf = self.leaf("reduced", value.dtype, ("reduced", len(self.reductions)), None)
        reduced = tuple(range(root.ndim)) if axes is None else axes
        self.reductions.append(Reduce(reduction.reducer, root.id, leaf, reduced, keepdims))
        traced = self.value(leaf, value.dtype, value.shape)
        self._reduced[id(value)] = (value, traced)
        return traced

    def apply(self, fn: Any, operands: Sequence[Any]) -> Traced:
        converted = [self.reduced(o) if isinstance(o, Traced) and o.reduction is not None else o for o in operands]
        return super().apply(fn, converted)


# --- analysis ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """What one pass over a row evaluates: the per-row values it needs first (``row``, a program
    whose roots are ``row_exports``), then per element the program ``element`` whose leaves are
    the pipeline's full leaves, those per-row values and the full values an earlier pass left in
    registers (``carried``); ``computed`` are the full values it computes itself."""

    row: Program
    row_leaves: tuple[int, ...]  # value id of each leaf of ``row``
    row_exports: tuple[tuple[int, int], ...]  # (value id, id in ``row``)
    element: Program | None
    element_leaves: tuple[int, ...]  # value id of each leaf of ``element``
    element_roots: tuple[int, ...]  # ids in ``element`` of what the phase uses per element
    computed: tuple[tuple[int, int], ...] = ()  # (value id, id in ``element``) of its full nodes


@dataclass(frozen=True)
class Pipeline:
    """A traced pipeline as one kernel sees it.

    ``shape`` is the shape every reduction reduces (P), ``axes`` the reduced axes; each value has a
    shape over P (``padded``: 1 where it does not vary); ``full`` values vary along the reduced
    axes, the others are one value per row. ``outputs`` are value ids with the shapes the
    function returned them in."""

    name: str
    values: tuple[Leaf | Node, ...]
    sources: tuple[tuple[str, Any], ...]  # per leaf id (reduced leaves: ("reduced", k))
    leaf_ids: tuple[int, ...]
    padded: dict[int, tuple[int, ...]]
    reductions: tuple[Reduce, ...]
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    outputs: tuple[int, ...]
    output_shapes: tuple[tuple[int, ...], ...]

    def full(self, value: int) -> bool:
        p = self.padded[value]
        return any(p[a] != 1 for a in self.axes)

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(j for j in range(len(self.shape)) if j not in self.axes)

    @property
    def rows(self) -> int:
        return int(np.prod([self.shape[j] for j in self.kept], dtype=np.int64))

    @property
    def count(self) -> int:
        return int(np.prod([self.shape[a] for a in self.axes], dtype=np.int64))


def _pad(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def analyze(builder: PipelineBuilder, outputs: Sequence[Traced]) -> Pipeline:
    """Check that the traced pipeline runs as one kernel over rows; FusionError says what does not."""
    first = builder.reductions[0]
    name = builder.name
    values = builder.values
    shapes = _value_shapes(builder)
    shape = shapes[first.root]
    ndim = len(shape)
    axes = first.axes
    keep = tuple(1 if j in axes else d for j, d in enumerate(shape))
    kept_shape = tuple(d for j, d in enumerate(shape) if j not in axes)
    padded: dict[int, tuple[int, ...]] = {}
    compact: set[int] = set()  # per-row values in the reduction's shape without keepdims
    reductions = {r.leaf: r for r in builder.reductions}
    leaf_sources = dict(zip((i for i, v in enumerate(values) if isinstance(v, Leaf)), builder.sources))
    for i, v in enumerate(values):
        if isinstance(v, Leaf) and v.kind == "reduced":
            r = reductions[i]
            if shapes[r.root] != shape or r.axes != axes:
                raise FusionError(
                    f"{name}: reduction {r.reducer.name!r} reduces shape {shapes[r.root]} over axes {r.axes}, "
                    f"but the pipeline's first reduction ({first.reducer.name!r}) reduces {shape} over {axes}: "
                    "one fused kernel reduces one shape over one axis set (split the function)"
                )
            padded[i] = keep
            if not r.keepdims:
                compact.add(i)
        elif isinstance(v, Leaf):
            what = f"argument {leaf_sources[i][1]}"
            padded[i] = _fit(_pad(shapes[i], ndim), shape, name, what) if v.kind == "array" else (1,) * ndim
        else:
            arrays = [a for a in v.args if not _is_scalar(builder, a)]
            if arrays and all(a in compact for a in arrays):
                compact.add(i)
                padded[i] = keep
                continue
            for a in arrays:
                if a in compact and _pad(shapes[a], ndim) != keep:
                    raise FusionError(
                        f"{name}: {v.op} broadcasts a reduction result of shape {shapes[a]} (reduced over axes "
                        f"{axes} without keepdims) against values of shape {shape}: that pairs each row with "
                        "another row's result; reduce with keepdims=True"
                    )
            padded[i] = _fit(_pad(shapes[i], ndim), shape, name, f"the result of {v.op}")
    for r in builder.reductions:
        if r.root in compact:
            raise FusionError(f"{name}: reduction {r.reducer.name!r} reduces a value that is already one per row")
    out_shapes = []
    for o in outputs:
        s = tuple(o.shape)
        full = any(padded[o.id][a] != 1 for a in axes)
        if full and s != shape:
            raise FusionError(
                f"{name}: an output of shape {s} is not the reduced shape {shape}: a fused pipeline writes "
                "values over the reduced rows or one per row"
            )
        if not full and s not in (keep, kept_shape, shape):
            raise FusionError(f"{name}: an output of shape {s} is neither {keep} nor {kept_shape} (one value per row)")
        out_shapes.append(s)
    leaf_ids = tuple(i for i, v in enumerate(values) if isinstance(v, Leaf))
    sources = {lid: src for lid, src in zip(leaf_ids, builder.sources)}
    return Pipeline(
        name,
        tuple(values),
        tuple(sources[i] for i in leaf_ids),
        leaf_ids,
        padded,
        tuple(builder.reductions),
        shape,
        axes,
        tuple(o.id for o in outputs),
        tuple(out_shapes),
    )


def _is_scalar(builder: ProgramBuilder, value: int) -> bool:
    v = builder.values[value]
    return isinstance(v, Leaf) and v.kind == "scalar"


def _value_shapes(builder: PipelineBuilder) -> dict[int, tuple[int, ...]]:
    """Each value's traced shape (scalars: ())."""
    shapes: dict[int, tuple[int, ...]] = {}
    reduced = {r.leaf: r for r in builder.reductions}
    leaf_shapes = iter(builder.shapes)
    for i, v in enumerate(builder.values):
        if isinstance(v, Leaf):
            if v.kind == "reduced":
                r = reduced[i]  # its shape: the reduction's result
                root = shapes[r.root]
                shapes[i] = (
                    tuple(1 if j in r.axes else d for j, d in enumerate(root))
                    if r.keepdims
                    else tuple(d for j, d in enumerate(root) if j not in r.axes)
                )
                next(leaf_shapes)
            else:
                leaf_shape = next(leaf_shapes)
                shapes[i] = () if leaf_shape is None else leaf_shape  # a scalar's is None
        else:
            shapes[i] = tuple(np.broadcast_shapes(*(shapes[a] for a in v.args)))
    return shapes


def _fit(padded: tuple[int, ...], shape: tuple[int, ...], name: str, what: str) -> tuple[int, ...]:
    if len(padded) > len(shape) or any(p not in (1, s) for p, s in zip(padded, shape)):
        raise FusionError(
            f"{name}: {what} has shape {padded}, which does not broadcast into the reduced shape {shape}: "
            "a fused pipeline works over the rows of the values it reduces"
        )
    return padded


def phase(
    pipeline: Pipeline, roots: Sequence[int], row_roots: Sequence[int] = (), carried: Collection[int] = ()
) -> Phase:
    """The pass that evaluates ``roots`` per element (full values) and ``row_roots`` per row;
    ``carried`` full values are read from registers an earlier pass filled, not computed again."""
    full_roots = [r for r in roots if pipeline.full(r)]
    hoisted: set[int] = {r for r in roots if not pipeline.full(r)} | set(row_roots)

    def cut(v: int) -> bool:
        return not pipeline.full(v) or v in carried

    element_cone = _cone(pipeline, full_roots, stop=cut)
    for v in element_cone:
        if not pipeline.full(v) and not _scalar(pipeline, v):
            hoisted.add(v)
    row_cone = _cone(pipeline, sorted(hoisted), stop=lambda v: False)
    row, row_ids = _freeze(pipeline, row_cone, f"{pipeline.name}_row")
    exports = tuple((v, row_ids[v]) for v in sorted(hoisted))
    row_leaves = tuple(v for v in sorted(row_ids, key=row_ids.__getitem__) if row_ids[v] < len(row.leaves))
    if not full_roots:
        return Phase(row, row_leaves, exports, None, (), ())
    element, ids = _freeze(pipeline, element_cone, pipeline.name, cut=cut)
    leaves = tuple(v for v in sorted(ids, key=ids.__getitem__) if ids[v] < len(element.leaves))
    computed = tuple((v, ids[v]) for v in element_cone if ids[v] >= len(element.leaves))
    return Phase(row, row_leaves, exports, element, leaves, tuple(ids[r] for r in full_roots), computed)


def _scalar(pipeline: Pipeline, v: int) -> bool:
    value = pipeline.values[v]
    return isinstance(value, Leaf) and value.kind == "scalar"


def _cone(pipeline: Pipeline, roots: Sequence[int], stop: Any) -> list[int]:
    """The values ``roots`` depend on, in creation order; the walk does not pass ``stop`` values."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        node = pipeline.values[v]
        if isinstance(node, Node) and not stop(v):
            todo.extend(node.args)
    return sorted(seen)


def _freeze(pipeline: Pipeline, cone: list[int], name: str, cut: Any = None) -> tuple[Program, dict[int, int]]:
    """A ``Program`` of the values ``cone``, leaves first; ``cut`` values (and leaves) become
    leaves. Returns it with each value's id in it. Its root is its last value."""
    as_leaf = [v for v in cone if isinstance(pipeline.values[v], Leaf) or (cut is not None and cut(v))]
    nodes = [v for v in cone if v not in as_leaf]
    ids = {v: k for k, v in enumerate(as_leaf + nodes)}
    leaves = []
    for v in as_leaf:
        value = pipeline.values[v]
        dtype = value.dtype
        leaves.append(Leaf(value.kind if isinstance(value, Leaf) else "row", dtype))
    frozen = []
    for v in nodes:
        n = pipeline.values[v]
        assert isinstance(n, Node)
        frozen.append(Node(n.op, n.params, n.expr, tuple(ids[a] for a in n.args), n.loop, n.dtype))
    root = len(ids) - 1
    return Program(name, tuple(leaves), tuple(frozen), max(root, 0)), ids
