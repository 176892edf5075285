"""The public face of reductions: ``Reduction`` (what ``kd.ops.sum`` and friends are) and
``kd.reduction``, which declares one from C expressions. A call with numpy, device or remote
operands runs a plan (``plan.py``); a call on traced values (inside ``@kd.fuse``) records the
reduction for the fused program."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ...errors import FusionError
from ...jit.build import Build
from ...launch.routing import public
from ...launch.warm import WarmPath, call_key, exact_axis
from ...runtime import memory
from ...runtime.selection import host_plans
from ..elementwise import ElementwiseFunction
from ..plan import PlanCache
from ..program import ProgramBuilder, Traced
from .axes import check_keepdims, memory_order, normalize_axes, result_shape
from .plan import ReductionPlan, plan_reduction
from .reducers import Reducer, user_reducer
from .strategy import Step, extents, planning_multiprocessors

if TYPE_CHECKING:
    from ..ndarray import DeviceArray
    from ..operands import DeviceOperand, HostArray, HostOperand, RemoteArrayT, RemoteOperand, TracedOperand


class Reduction:
    """A callable reduction: ``f(x, axis=None, out=None)`` (``map`` may take several operands)."""

    def __init__(
        self, reducer: Reducer, map: ElementwiseFunction | None = None, operands: int = 1, home: str | None = None
    ) -> None:
        """``home``: the module that holds this reduction under its name (``kd.ops``'s pickle by name)."""
        self.home = home
        self.reducer = reducer
        self.name = reducer.name
        self.__name__ = reducer.name
        self.map = map
        self.operands = operands
        self._plans = PlanCache()
        self._warm = WarmPath()  # launch.warm: prebuilt launches of calls a plan ran once

    def __repr__(self) -> str:
        return f"<kd reduction {self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by name when a module holds it, else as its declaration, without the plans compiled here."""
        if self.home is not None:
            return (public, (self.home, self.name))
        return (Reduction, (self.reducer, self.map, self.operands))

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, *operands: HostOperand, axis: Any = None, out: HostArray | None = None, keepdims: bool = False
    ) -> HostArray: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, *operands: TracedOperand, axis: Any = None, out: None = None, keepdims: bool = False
    ) -> Traced: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self,
        *operands: RemoteOperand[RemoteArrayT],
        axis: Any = None,
        out: RemoteArrayT | None = None,
        keepdims: bool = False,
    ) -> RemoteArrayT: ...
    @overload
    def __call__(
        self, *operands: DeviceOperand, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray: ...
    def __call__(self, *operands: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        """The operands' kind decides the result's (``operands``): numpy, DeviceArray or RemoteArray."""
        key = None
        if len(operands) == self.operands and type(keepdims) is bool and exact_axis(axis):
            key = call_key(operands, out, axis, keepdims)
            if key is not None:
                result = self._warm.run(key, operands, out)
                if result is not None:
                    return result
        if len(operands) != self.operands:
            raise TypeError(f"{self.name}() takes {self.operands} operand(s), got {len(operands)}")
        keepdims = check_keepdims(keepdims, self.name)
        if any(isinstance(o, Traced) for o in operands):
            return self._trace(operands, axis, out, keepdims)
        if len(operands) == 1 and type(operands[0]) is memory.array_type:
            reordered = None if operands[0].is_contiguous else self._in_memory_order(operands[0], axis, out, keepdims)
            if reordered is None:
                reordered = self._grouped(operands[0], axis, out, keepdims)
            if reordered is not None:
                return reordered
        make = lambda values, o: self._plan(values, axis, o, keepdims)  # noqa: E731
        remote = {k: v for k, v in (("axis", axis), ("keepdims", keepdims)) if v is not None and v is not False}
        warm = None if key is None else self._warm
        return self._plans.call(self.name, operands, out, (axis, keepdims), make, warm, key, remote=(self, remote))

    def inspect(
        self, *operands: Any, axis: Any = None, out: Any = None, keepdims: bool = False, arch: str | None = None
    ) -> Build:
        """The Build (source, cubin, ``decisions``) of the kernel a call with these operands runs;
        no GPU needed. Operands may be numpy arrays or anything with ``shape`` and ``dtype``
        (and ``ptr`` to control alignment)."""
        return self._plan(operands, axis, out, keepdims).inspect(operands, out, arch)

    def strategy(
        self,
        *operands: Any,
        axis: Any = None,
        keepdims: bool = False,
        multiprocessors: int | None = None,
        host: bool = False,
    ) -> Step:
        """The launch a call with these operands makes on a GPU with ``multiprocessors`` SMs (by
        default the device a call would run on; without one, ``INSPECT_MULTIPROCESSORS``): the
        kernel's variant (stage, lanes, split), its grid and how many blocks share an output. A
        strided DeviceArray view gets the launch that reads it in place, or the contiguous one
        with ``variant.copy`` saying why it is copied first. ``host``: the CPU device's plan
        instead (its ``multiprocessors`` are cores), which it runs unless ``KERNELDSL_CPU_PLAN=gpu``."""
        plan = self._plan(operands, axis, None, keepdims)
        return plan.choose(plan.values(operands), planning_multiprocessors(multiprocessors), host)

    def _root(self, builder: ProgramBuilder, traced: Sequence[Any]) -> Traced:
        if self.map is not None:
            return builder.apply(self.map, traced)
        (root,) = traced
        if not isinstance(root, Traced):
            raise TypeError(f"{self.name}: expected an array, got {type(root).__name__}")
        return root

    def _in_memory_order(self, value: Any, axis: Any, out: Any, keepdims: bool) -> Any:
        """On the CPU device, a transposed view reduced as the C-contiguous array it permutes
        (its host stages read memory in order; a view's strided stages are a GPU's, whose
        blocks run as fibers there), where that visits each output's values in the same order;
        None otherwise."""
        if not host_plans(value.session):
            return None
        axes = normalize_axes(axis, value.ndim, self.name)
        if axes is None or (keepdims and out is not None):
            return None
        order = memory_order(value.shape, value.strides, value.itemsize, axes)
        if order is None:
            return None
        permutation, reduced = order
        result = self(value.transpose(permutation), axis=reduced if isinstance(axis, tuple) else reduced[0], out=out)
        return result.reshape(result_shape(value.shape, axes, True)) if keepdims else result

    def _grouped(self, value: Any, axis: Any, out: Any, keepdims: bool) -> Any:
        """On the CPU device, reduced axes that kept ones interleave (``axis=(0, 2)`` of a 3-D
        array; such a layout would run the GPU's stage, its blocks as fibers) reduced as the host
        stages take them, one run of reduced axes at a time. A reduction whose partial results
        are its values (sum, prod, max, min of a dtype they keep) reduces the first run (whole
        slabs combined element by element, as NumPy goes), then the rest of that result; another
        reduces a copy with the reduced axes side by side, the last axis still last (the copy
        reads and writes whole rows). The kept axes keep their order, and so the result's shape.
        None for other calls."""
        if not host_plans(value.session) or (keepdims and out is not None):
            return None
        axes = normalize_axes(axis, value.ndim, self.name)
        if axes is None or not extents(value.shape, axes).gather:
            return None
        if self._nests(value.dtype):
            run = axes[:1]
            while run[-1] + 1 in axes:
                run = (*run, run[-1] + 1)
            rest = tuple(a - len(run) for a in axes[len(run) :])
            result = self(self(value, axis=run), axis=rest if len(rest) > 1 else rest[0], out=out)
        else:
            kept = tuple(a for a in range(value.ndim) if a not in axes)
            last_reduced = value.ndim - 1 in axes
            permutation = (*kept, *axes) if last_reduced else (*axes, *kept)
            first = len(kept) if last_reduced else 0
            result = self(value.transpose(permutation).copy(), axis=tuple(range(first, first + len(axes))), out=out)
        return result.reshape(result_shape(value.shape, axes, True)) if keepdims else result

    def _nests(self, dtype: np.dtype) -> bool:
        """Whether reducing this reduction's results again gives its result over their union: the
        values pass unchanged (no map, pre or post) and its result keeps the accumulation dtype."""
        r = self.reducer
        plain = self.map is None and not r.indexed and r.pre == r.pre_param and r.post == "r"
        return plain and r.result(dtype) == r.accumulate(dtype)

    def _trace(self, operands: Sequence[Any], axis: Any, out: Any, keepdims: bool) -> Traced:
        if out is not None:
            raise FusionError(f"{self.name}: out= cannot be used inside a fused function")
        t = next(o for o in operands if isinstance(o, Traced))
        for o in operands:
            if isinstance(o, Traced) and o.reduction is not None:
                raise FusionError(
                    f"{self.name} is applied to the result of reduction {o.reduction[0].name!r}: "
                    "a reduction can only end a fused chain"
                )
        root = self._root(t.builder, operands)
        if root.argument is not None:
            raise FusionError(f"{self.name}: a scalar argument cannot be reduced")
        axes = normalize_axes(axis, root.ndim, self.name, single=self.reducer.indexed)
        shape = result_shape(tuple(root.shape), tuple(range(root.ndim)) if axes is None else axes, keepdims)
        result = t.builder.value(root.id, self.reducer.result(root.dtype), shape)
        result.reduction = (self, axis, keepdims, root)
        return result

    def _plan(self, values: Sequence[Any], axis: Any, out: Any, keepdims: bool = False) -> ReductionPlan:
        builder = ProgramBuilder(self.name)
        root = self._root(builder, builder.operands(values, self.name))
        builder.scalars_from_arguments(values)
        return plan_reduction(builder, root, self.reducer, axis, out, keepdims)


def reduction(
    map: str = "x",
    reduce: str = "a + b",
    identity: str = "0",
    post: str = "r",
    dtype: Any = None,
    name: str = "reduction",
) -> Reduction:
    """Declare a reduction from C expressions.

    ``map``: the contribution of element ``x`` (in the accumulation type); ``reduce``: combines two
    partial results ``a`` and ``b`` (must be associative and commutative); ``identity``: the
    neutral value (C expression, or ``"max"`` / ``"min"`` for the dtype's largest / smallest);
    ``post``: the output from the total ``r`` and the count ``n``. The accumulation dtype is the
    input's (float16/bfloat16 -> float32); the result dtype is ``dtype`` or the input's; ``name``
    names the reduction in its kernels and errors.

    Returns
    -------
    Reduction
        Called as ``f(x, axis=None, out=None, keepdims=False)``, like ``kd.ops.sum``.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        norm2 = kd.reduction(map="x * x", reduce="a + b", identity="0", post="sqrt(r)", name="norm2")
        print(norm2(np.arange(4.0)))
    """
    return Reduction(user_reducer(name, reduce, identity, map, dtype, post))
