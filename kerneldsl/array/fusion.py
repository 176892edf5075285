"""``@kd.fuse``: a Python function over ``kd.ops`` (and ``@kd.elementwise`` functions) becomes one kernel.

The function is traced once per argument specialization (dtypes and shapes): array arguments
become ``Tracer`` values, every op call records a node instead of running, and the returned
value's program is compiled as one elementwise kernel (no temporaries) or, when the chain ends
in a reduction (``kd.ops.sum`` ...), as one elementwise-plus-reduction kernel. Kernels are
cached per dtypes and layout, so a new shape re-traces (cheap) but does not recompile.

What cannot be fused raises ``FusionError`` at trace time, naming the culprit: a numpy function
called on a traced value, a reduction in the middle of the chain, Python control flow on traced
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

from .. import ops
from ..build import Build
from ..errors import FusionError
from .elementwise import plan_elementwise
from .placement import is_array
from .plan import Plan, PlanCache
from .program import SCALAR_TYPES, ProgramBuilder, Traced
from .reduction import plan_reduction


def _refuse(what: str) -> NoReturn:
    raise FusionError(
        f"{what} cannot be fused: inside @kd.fuse use kd.ops functions and @kd.elementwise functions only"
    )


class Tracer(Traced):
    """A traced array: supports arithmetic operators; everything that needs real data raises."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return ops.add(self, other)

    def __radd__(self, other: Any) -> Any:
        return ops.add(other, self)

    def __sub__(self, other: Any) -> Any:
        return ops.subtract(self, other)

    def __rsub__(self, other: Any) -> Any:
        return ops.subtract(other, self)

    def __mul__(self, other: Any) -> Any:
        return ops.multiply(self, other)

    def __rmul__(self, other: Any) -> Any:
        return ops.multiply(other, self)

    def __truediv__(self, other: Any) -> Any:
        return ops.divide(self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return ops.divide(other, self)

    def __pow__(self, other: Any) -> Any:
        return ops.power(self, other)

    def __rpow__(self, other: Any) -> Any:
        return ops.power(other, self)

    def __lt__(self, other: Any) -> Any:
        return ops.less(self, other)

    def __le__(self, other: Any) -> Any:
        return ops.less_equal(self, other)

    def __gt__(self, other: Any) -> Any:
        return ops.greater(self, other)

    def __ge__(self, other: Any) -> Any:
        return ops.greater_equal(self, other)

    def __eq__(self, other: Any) -> Any:  # elementwise, like numpy's
        return ops.equal(self, other)

    def __ne__(self, other: Any) -> Any:
        return ops.not_equal(self, other)

    __hash__ = Traced.__hash__

    def __neg__(self) -> Any:
        return ops.negative(self)

    def __abs__(self) -> Any:
        return ops.abs(self)

    def astype(self, dtype: Any) -> Any:
        return ops.astype(self, dtype)

    def sum(self, axis: Any = None) -> Any:
        return ops.sum(self, axis=axis)

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

    def __repr__(self) -> str:
        return f"<kd.fuse {self.name}>"

    def __call__(self, *args: Any, out: Any = None) -> Any:
        return self._plans.call(self.name, args, out, None, self.plan, remote=(self, {}))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the function it fuses: the receiver traces and compiles for itself."""
        return (Fused, (self.func,))

    def trace(self, *args: Any) -> tuple[ProgramBuilder, Tracer]:
        """Run the function on tracers; returns the builder and the traced result."""
        builder = ProgramBuilder(self.name, make=Tracer)
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
        if not isinstance(result, Tracer) or result.builder is not builder or result.argument is not None:
            raise FusionError(
                f"{self.name} must return one array computed from its array arguments by kd.ops / @kd.elementwise "
                f"calls, not {type(result).__name__}"
            )
        return builder, result

    def plan(self, values: Any, out: Any) -> Plan:
        builder, result = self.trace(*values)
        if result.reduction is not None:
            reduction, axis, keepdims, root = result.reduction
            return plan_reduction(builder, root, reduction.reducer, axis, out, keepdims)
        return plan_elementwise(builder, result, values, out)

    def inspect(self, *args: Any, out: Any = None, arch: str | None = None) -> Build:
        """The Build a call with these arguments runs: ``.cuda_source``, ``.host_adapter_source``,
        ``.cubin``, ``.decisions``. No GPU needed."""
        return self.plan(args, out).inspect(args, out, arch)


def fuse(func: Callable[..., Any]) -> Fused:
    """Fuse a function over kd.ops into one kernel per argument specialization (see the module doc)."""
    return Fused(func)
