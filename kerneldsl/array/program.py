"""Programs: a small SSA graph of per-element expressions, and the builder that traces one.

Every elementwise thing kerneldsl runs is a ``Program``: leaves (array or scalar inputs) and
nodes (an operator's C expression over earlier values). ``ProgramBuilder`` records operator
applications in creation order; ``Traced`` is a value being built (``kd.fuse`` gives it
operators, see ``fusion.Tracer``).

Dtype semantics: each node converts its operands to its loop dtype and computes; float16 and
bfloat16 values are computed in float32 and rounded back after every node, like NumPy's loops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .. import dtypes
from ..errors import FusionError
from . import promotion

SCALAR_TYPES = (bool, int, float, complex, np.generic)


class RecordedFunction(Protocol):
    """What the builder records of an elementwise function (``elementwise.ElementwiseFunction``,
    which builds its kernels from programs): its name and parameters, the result and loop dtypes
    it resolves for operands, and its C expression."""

    @property
    def name(self) -> str: ...
    @property
    def params(self) -> tuple[str, ...]: ...
    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]: ...
    def expression(self, dtype: np.dtype, loops: tuple[np.dtype, ...] = ()) -> str: ...


_HALF = ("float16", "bfloat16")
_UNSIGNED = {
    "bool": "unsigned char",
    "int8": "unsigned char",
    "int16": "unsigned short",
    "int32": "unsigned int",
    "int64": "unsigned long long",
}


@dataclass(frozen=True)
class Leaf:
    """An input of a program: an array read per element, or a scalar kernel parameter."""

    kind: str  # "array" or "scalar"
    dtype: np.dtype


@dataclass(frozen=True)
class Node:
    """One operator application: ``expr`` names its operands ``params``; ``args`` are value ids."""

    op: str
    params: tuple[str, ...]
    expr: str
    args: tuple[int, ...]
    loop: tuple[np.dtype, ...]  # the dtype each operand is converted to
    dtype: np.dtype  # the result; also the type the expression computes in (kdT)


@dataclass(frozen=True)
class Program:
    """Leaves are values ``0..L-1``, node ``k`` is value ``L + k``; ``root`` is the result."""

    name: str
    leaves: tuple[Leaf, ...]
    nodes: tuple[Node, ...]
    root: int

    def dtype_of(self, value: int) -> np.dtype:
        if value < len(self.leaves):
            return self.leaves[value].dtype
        return self.nodes[value - len(self.leaves)].dtype

    @property
    def dtype(self) -> np.dtype:
        return self.dtype_of(self.root)


def compute_ctype(dt: np.dtype) -> str:
    """The C type values of ``dt`` are held in: 16-bit floats compute in float."""
    et = dtypes.element_type(dt)
    return "float" if et.name in _HALF else et.ctype


def storage_ctype(dt: np.dtype) -> str:
    return dtypes.element_type(dt).ctype


def unsigned_ctype(dt: np.dtype) -> str:
    et = dtypes.element_type(dt)
    return _UNSIGNED.get(et.name, compute_ctype(dt))


def kind(dt: np.dtype) -> str:
    return dtypes.element_type(dt).kind


def program_context(p: Program, round_halves: bool = True, bool_bytes: bool = False) -> dict[str, Any]:
    """What the ``element`` template macro needs of a program. ``round_halves=False`` keeps
    float16/bfloat16 intermediates in float32 (rounded only where stored), as fused kernels do.
    ``bool_bytes``: bool leaves are read as bytes (the prelude's kd_bool), which the host compiler
    vectorizes in an elementwise loop (a reduction's unrolled lanes vectorize the plain load)."""
    leaves = [
        {"id": i, "cctype": compute_ctype(leaf.dtype), "bool": bool_bytes and leaf.dtype == np.bool_}
        for i, leaf in enumerate(p.leaves)
    ]
    kinds = [leaf.dtype.kind for leaf in p.leaves] + [n.dtype.kind for n in p.nodes]

    def widened_bool(source: int, loop: np.dtype) -> bool:
        """A bool value taken as a number: the cast goes through int (element.cuh.j2)."""
        return kinds[source] == "b" and loop.kind in "fiu"

    nodes = []
    for k, n in enumerate(p.nodes):
        name = dtypes.element_type(n.dtype).name
        nodes.append(
            {
                "id": len(p.leaves) + k,
                "op": n.op,
                "cctype": compute_ctype(n.dtype),
                "kdT": compute_ctype(n.dtype),
                "kdU": unsigned_ctype(n.dtype),
                "operands": [
                    {"name": pn, "cctype": compute_ctype(dt), "src": a, "from_bool": widened_bool(a, dt)}
                    for pn, a, dt in zip(n.params, n.args, n.loop)
                ],
                "expr": n.expr,
                "round": storage_ctype(n.dtype) if round_halves and name in _HALF else None,
            }
        )
    return {"leaves": leaves, "nodes": nodes, "root": p.root}


# --- tracing ---------------------------------------------------------------------------------------


class Traced:
    """A value of a program being built."""

    __slots__ = ("builder", "id", "dtype", "shape", "reduction", "argument")

    def __init__(self, builder: ProgramBuilder, id: int, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.builder = builder
        self.id = id
        self.dtype = dtype
        self.shape = shape
        self.reduction: Any = None  # (Reduction, axis, keepdims, reduced value) when this ends a chain
        self.argument: Any = None  # (position, value) of a scalar argument of the traced function

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass
class ProgramBuilder:
    """A program under construction: values (leaves and nodes) in creation order.

    ``sources`` says where each leaf's value comes from at call time: ``("arg", position)`` or
    ``("const", value)`` (a scalar written in the traced function).
    """

    name: str
    values: list[Leaf | Node] = field(default_factory=list)
    sources: list[tuple[str, Any]] = field(default_factory=list)
    shapes: list[tuple[int, ...] | None] = field(default_factory=list)  # per leaf; None for scalars
    make: Callable[..., Traced] = Traced

    def leaf(self, kind: str, dtype: np.dtype, source: tuple[str, Any], shape: tuple[int, ...] | None) -> int:
        self.values.append(Leaf(kind, np.dtype(dtype)))
        self.sources.append(source)
        self.shapes.append(shape)
        return len(self.values) - 1

    def value(self, id: int, dtype: np.dtype, shape: tuple[int, ...]) -> Traced:
        return self.make(self, id, dtype, shape)

    def array(self, position: int, operand: Any) -> Traced:
        """A leaf for the array argument at ``position`` (anything with ``shape`` and ``dtype``)."""
        dt = promotion.copyable(operand.dtype)  # what an op takes, its resolve decides
        shape = tuple(operand.shape)
        return self.value(self.leaf("array", dt, ("arg", position), shape), dt, shape)

    def operands(self, values: Sequence[Any], what: str) -> list[Any]:
        """Trace call operands: arrays become leaves, scalars stay (``apply`` makes them leaves)."""
        traced: list[Any] = []
        for i, v in enumerate(values):
            if isinstance(v, SCALAR_TYPES):
                traced.append(v)
            elif hasattr(v, "shape") and hasattr(v, "dtype"):
                traced.append(self.array(i, v))
            else:
                raise TypeError(f"{what}: operand {i} of type {type(v).__name__} is neither an array nor a scalar")
        return traced

    def scalars_from_arguments(self, values: Sequence[Any]) -> None:
        """Scalar operands of a direct call were traced as constants: take them from the arguments."""
        scalars = iter(i for i, v in enumerate(values) if isinstance(v, SCALAR_TYPES))
        self.sources = [("arg", next(scalars)) if kind == "const" else (kind, s) for kind, s in self.sources]

    def apply(self, fn: RecordedFunction, operands: Sequence[Any]) -> Traced:
        """Record ``fn(*operands)``: traced values, scalars (new scalar leaves), nothing else."""
        for o in operands:
            if isinstance(o, Traced):
                if o.builder is not self:
                    raise FusionError(f"{fn.name}: a value traced by another kd.fuse function was used here")
                if o.reduction is not None:
                    raise FusionError(
                        f"{fn.name} is applied to the result of reduction {o.reduction[0].name!r}: "
                        "a reduction can only end a fused chain (split the function, or reduce last)"
                    )
            elif not isinstance(o, SCALAR_TYPES):
                raise FusionError(
                    f"{fn.name}: an operand of type {type(o).__name__} cannot be fused; pass arrays as arguments "
                    "of the fused function"
                )
        result, loops = fn.resolve([_promoted(o) for o in operands])
        args = []
        for o, loop in zip(operands, loops):
            if not isinstance(o, Traced):
                args.append(self.leaf("scalar", loop, ("const", o), None))
            elif o.argument is not None:  # a scalar argument: its dtype is decided here, by promotion
                args.append(self.leaf("scalar", loop, ("arg", o.argument[0]), None))
            else:
                args.append(o.id)
        shape = broadcast_shape([o.shape for o in operands if isinstance(o, Traced)], fn.name)
        converted = tuple(loops)
        self.values.append(Node(fn.name, fn.params, fn.expression(result, converted), tuple(args), converted, result))
        return self.value(len(self.values) - 1, result, shape)

    def program(self, root: Traced) -> Program:
        """Freeze, renumbering leaves ahead of nodes (the layout kernels expect)."""
        leaves = [i for i, v in enumerate(self.values) if isinstance(v, Leaf)]
        nodes = [i for i, v in enumerate(self.values) if isinstance(v, Node)]
        new = {old: k for k, old in enumerate(leaves + nodes)}
        renumbered = []
        for i in nodes:
            n = self.values[i]
            assert isinstance(n, Node)
            renumbered.append(Node(n.op, n.params, n.expr, tuple(new[a] for a in n.args), n.loop, n.dtype))
        frozen_leaves = tuple(v for v in (self.values[i] for i in leaves) if isinstance(v, Leaf))
        return Program(self.name, frozen_leaves, tuple(renumbered), new[root.id])


def _promoted(operand: Any) -> Any:
    """What promotion sees: a traced array's dtype, a scalar's (weak or numpy) value."""
    if isinstance(operand, Traced):
        return operand.dtype if operand.argument is None else operand.argument[1]
    return operand


def broadcast_shape(shapes: Sequence[tuple[int, ...]], what: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else ()
    except ValueError:
        raise ValueError(
            f"{what}: operands could not be broadcast together with shapes {' '.join(map(str, shapes))}"
        ) from None
