"""``@kd.fuse``: a Python function over ``kd.ops`` (and ``@kd.elementwise`` functions) becomes one kernel.

The function is traced once per argument specialization (dtypes and shapes): array arguments
become ``Tracer`` values, every op call records a node instead of running, and the returned
value's program is compiled as one elementwise kernel (no temporaries) or, when the chain ends
in a reduction (``kd.ops.sum`` ...), as one elementwise-plus-reduction kernel. When reduction
results feed later work (softmax, norms: ``keepdims=True`` or broadcast back by shape) or the
function returns a tuple, the pipeline is one kernel over rows (``pipeline``, ``fused_rows``).
Kernels are cached per dtypes and layout, so a new shape re-traces (cheap) but does not recompile.

What cannot be fused raises ``FusionError`` at trace time, naming the culprit: a numpy function
called on a traced value, reductions over different axis sets in one pipeline, Python control flow on traced
values (``if x``, ``bool(x)``, ``float(x)``), a traced value handed to a ``@kd.kernel`` or
another library, arrays captured from outside instead of passed as arguments.

Scalar arguments stay runtime parameters (not baked in); Python numbers written in the
function are constants of the trace. Fused results equal the unfused ones bit for bit for
+ - * / (both round every float16 intermediate and neither contracts to FMA); math functions
differ from NumPy's by a few ulp, fused or not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from ..errors import FusionError
from ..jit.build import Build
from ..launch.warm import WarmPath, call_key
from . import ops
from .elementwise import plan_elementwise
from .fused_plan import plan_fused_rows
from .operators import Operators
from .pipeline import PipelineBuilder, analyze
from .placement import is_array
from .plan import Plan, PlanCache
from .program import SCALAR_TYPES, Traced
from .reduction import plan_reduction


def _refuse(what: str) -> NoReturn:
    raise FusionError(
        f"{what} cannot be fused: inside @kd.fuse use kd.ops functions and @kd.elementwise functions only"
    )


class Tracer(Traced, Operators):
    """A traced array: its operators record ``kd.ops`` nodes; everything that needs real data raises."""

    __slots__ = ()

    def astype(self, dtype: Any) -> Any:
        return ops.astype(self, dtype)

    def sum(self, axis: Any = None, keepdims: bool = False) -> Any:
        return ops.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Any:
        return ops.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Any:
        return ops.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Any:
        return ops.min(self, axis=axis, keepdims=keepdims)

    def __bool__(self) -> bool:
        _refuse("Python control flow on a traced value (if / while / and / or / bool())")

    def __float__(self) -> float:
        _refuse("float() of a traced value")

    def __int__(self) -> int:
        _refuse("int() of a traced value")

    def __index__(self) -> int:
        _refuse("using a traced value as an index")

    def __len__(self) -> int:
        _refuse("len() of a traced value")

    def __iter__(self) -> Any:
        _refuse("iterating over a traced value")

    def __getitem__(self, item: Any) -> Any:
        _refuse("indexing a traced value")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        _refuse("converting a traced value to a numpy array")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _refuse(f"numpy.{ufunc.__name__} (a NumPy ufunc called on a traced value; use kd.ops.{ufunc.__name__})")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _refuse(f"numpy.{func.__name__} (a NumPy function called on a traced value)")

    @property
    def __cuda_array_interface__(self) -> Any:
        _refuse("passing a traced value to a @kd.kernel or another GPU library")

    def __repr__(self) -> str:
        return f"<traced {self.dtype} {self.shape}>"


class Fused:
    """A fused function: call it like the original; ``inspect`` shows the generated kernel(s)."""

    def __init__(self, func: Callable[..., Any]) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.name = func.__name__
        self._plans = PlanCache()
        self._warm = WarmPath()  # launch.warm: prebuilt launches of calls a rows plan ran once

    def __repr__(self) -> str:
        return f"<kd.fuse {self.name}>"

    def __call__(self, *args: Any, out: Any = None) -> Any:
        key = call_key(args, out)
        if key is not None:
            result = self._warm.run(key, args, out)
            if result is not None:
                return result
        warm = None if key is None else self._warm
        return self._plans.call(self.name, args, out, None, self.plan, warm, key, remote=(self, {}))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the function it fuses: the receiver traces and compiles for itself."""
        return (Fused, (self.func,))

    def trace(self, *args: Any) -> tuple[PipelineBuilder, tuple[Tracer, ...], bool]:
        """Run the function on tracers; returns the builder, the traced results and whether the
        function returned one array (not a tuple)."""
        builder = PipelineBuilder(self.name, make=Tracer)
        traced: list[Any] = []
        t: Traced
        for i, a in enumerate(args):
            if isinstance(a, SCALAR_TYPES):
                t = Tracer(builder, -1, np.asarray(a).dtype, ())  # no leaf yet: each use decides its dtype
                t.argument = (i, a)
            elif hasattr(a, "shape") and hasattr(a, "dtype") and (is_array(a) or hasattr(a, "ptr")):
                t = builder.array(i, a)
            else:
                raise FusionError(
                    f"{self.name}: argument {i} of type {type(a).__name__} is neither an array nor a scalar"
                )
            traced.append(t)
        result = self.func(*traced)
        single = not isinstance(result, tuple)
        results = (result,) if single else result
        for r in results:
            if not isinstance(r, Tracer) or r.builder is not builder or r.argument is not None:
                raise FusionError(
                    f"{self.name} must return an array, or a tuple of arrays, computed from its array arguments "
                    f"by kd.ops / @kd.elementwise calls, not {type(r).__name__}"
                )
        if not results:
            raise FusionError(f"{self.name} must return an array or a non-empty tuple of arrays")
        return builder, results, single

    def plan(self, values: Any, out: Any) -> Plan:
        builder, results, single = self.trace(*values)
        if single and not builder.reductions:
            (result,) = results
            if result.reduction is not None:  # one reduction that ends the chain: the reduction kernels
                reduction, axis, keepdims, root = result.reduction
                return plan_reduction(builder, root, reduction.reducer, axis, out, keepdims)
            return plan_elementwise(builder, result, values, out)
        outputs = [builder.reduced(r) if r.reduction is not None else r for r in results]
        if not builder.reductions:
            raise FusionError(
                f"{self.name} returns a tuple without a reduction: several outputs come from pipelines "
                "through a reduction; return one array, or call one fused function per output"
            )
        return plan_fused_rows(analyze(builder, outputs), values, out, single)

    def inspect(self, *args: Any, out: Any = None, arch: str | None = None) -> Build:
        """The Build a call with these arguments runs: ``.cuda_source``, ``.host_adapter_source``,
        ``.cubin``, ``.decisions``. No GPU needed."""
        return self.plan(args, out).inspect(args, out, arch)


def fuse(func: Callable[..., Any]) -> Fused:
    """Fuse a function over kd.ops into one kernel per argument specialization (see the module doc)."""
    return Fused(func)
