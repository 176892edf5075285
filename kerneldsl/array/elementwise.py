"""Elementwise functions (``kd.ops`` math, ``@kd.elementwise``) and the kernels that run programs
element by element.

A program (``array.program``) plus a layout becomes a ``Kernel`` whose body is rendered from
``templates/elementwise.cu.j2``, so it gets the same binding, NVRTC, disk cache, adapter and
warm dispatch as ``@kd.kernel``.

Semantics (documented, tested against NumPy):

- Dtypes follow NumPy 2 (``kerneldsl.array.promotion``); each node converts its operands to its loop
  dtype, computes, and float16/bfloat16 values are computed in float32 and rounded back to
  their dtype after every node, exactly like NumPy's loops. Kernels are compiled with
  ``--fmad=false`` so ``a * x + y`` rounds twice, as in NumPy: fused and unfused results agree
  bit for bit for + - * / and differ only where CUDA's math functions (sin, exp, ...) differ from
  NumPy's (a few ulp).
- Broadcasting follows NumPy. Layout ``flat``: every array has the result's shape (one flat
  grid-stride loop; 16-byte vector loads/stores when every pointer is 16-byte aligned, scalar
  tail). Layout ``broadcast``: offsets are decomposed per element from the result index.
  Layout ``strided``: some operand or ``out=`` is a strided view (``a[::2]``, ``a.T``); every
  array is then a ``strided`` kernel parameter whose element strides the launch passes, so one
  kernel serves every stride (64-bit offsets; no C launch path).
  An input that overlaps ``out=`` without being exactly it is copied first, as NumPy does.
- Indexing is 32-bit whenever every size fits in int32 (the specializer decides), else 64-bit.
- Results: DeviceArray in -> DeviceArray out (async on the session stream); numpy in -> numpy
  out (copied in and back within the call); ``out=`` follows NumPy's ``same_kind`` casting.
  Foreign CUDA arrays (CAI / DLPack) are adopted zero-copy; a strided one is refused; strided
  numpy inputs are materialized; strided DeviceArray views are read and written in place. A new
  result is C-contiguous, or laid out as its operands where they share another memory order
  (``placement.memory_order``: NumPy's ``order="K"``).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .. import dtypes
from ..errors import ComplexUnsupportedError, DeclarationError, FusionError
from ..jit.build import Build
from ..jit.codegen import GeneratedBody, render
from ..jit.host_compile import SIMD_MATH
from ..jit.signature import RESERVED_NAMES, ArrayAnnotation, Expr, ScalarAnnotation, as_expr, cdiv, dmin, spelled, sym
from ..launch import fastpath
from ..launch.dispatch import Kernel
from ..launch.warm import CEntry, WarmPath, stream_entry_ok
from ..runtime import memory, views
from ..runtime.limits import MAX_GRID
from ..runtime.memory import DeviceBuffer
from ..runtime.selection import host_plans
from ..runtime.session import default_session
from . import promotion
from .decisions import ElementwiseDecisions

if TYPE_CHECKING:
    from ..runtime.stream import Stream
    from .ndarray import DeviceArray
    from .operands import DeviceOperand, HostArray, HostOperand, RemoteArrayT, RemoteOperand, TracedOperand
    from .program import Traced
from .kernels import (
    BLOCK,
    KERNELS,
    OPTIONS,
    OperandLayout,
    all_aligned,
    array_leaves,
    array_param,
    leaf_params,
    leaf_strides,
    loads,
    make_kernel,
    out_dims,
    vector_width,
)
from .placement import check_out, check_placement, memory_order, shares_memory, staged_or_borrowed, unalias
from .plan import Plan, PlanCache, host_target
from .program import Program, ProgramBuilder, Traced, compute_ctype, program_context, storage_ctype

MAX_BLOCKS = MAX_GRID[0]  # one 16-byte vector per thread up to grid.x's limit, then a grid-stride loop
# The CPU device's plan: a thread a run of consecutive elements. Flat, the run is one loop the
# compiler vectorizes (math functions through their vector variants, where the host has them);
# broadcast and strided, offsets are decomposed once a piece of a row (a GPU's thread an element
# decomposes them at every element, a division per axis), and an operand whose step along the row
# is not 1 is gathered into a buffer a chunk at a time, so that loop vectorizes too; an operand
# read across its rows (a transposed view) is gathered a 16 x 64 tile at a time instead, each
# cache line once. The ops and layouts sections of `kerneldsl bench cpu` check it.
HOST_RUN = 128
HOST_RUNS = {
    "flat": "a thread a run of {run} elements, vectorized",
    "broadcast": "a thread a run of {run} elements, a row's operands gathered to unit stride a chunk at a time",
    "strided": "a thread a run of {run} elements, a row's operands gathered to unit stride a chunk at a time",
}
# The strided plan when an operand is read across its rows (a transposed view).
HOST_TILES = "a thread a tile of 16 rows by 64 columns, a transposed operand gathered into it a cache line at a time"


# --- kernels ------------------------------------------------------------------------------------------


def layout_of(
    shapes: Sequence[tuple[int, ...] | None],
    out_shape: tuple[int, ...],
    strided: bool = False,
    across: tuple[int, ...] = (),
) -> OperandLayout:
    """Flat when every array has the result's shape, or the others are 0-d arrays (``zero_d``,
    read at their one element: ``alpha * x`` with a 0-d ``alpha`` stays flat, vectorized and on
    the C launch path), else broadcast; strided when some array is a strided view (``across``:
    the leaves read across their rows)."""
    ranks = tuple(None if s is None else len(s) for s in shapes)
    if strided:
        return OperandLayout("strided", len(out_shape), ranks=ranks, across=across if len(out_shape) >= 2 else ())
    if all(s is None or s == out_shape for s in shapes):
        return OperandLayout("flat", len(out_shape))
    if all(s is None or s == out_shape or s == () for s in shapes):
        return OperandLayout("flat", len(out_shape), zero_d=tuple(i for i, s in enumerate(shapes) if s == ()))
    return OperandLayout("broadcast", len(out_shape), ranks=ranks)


def elementwise_kernel(
    program: Program,
    layout: OperandLayout,
    out_dtype: np.dtype,
    source: Callable[..., object] | None = None,
    host_run: int | None = None,
) -> Kernel:
    """The (cached) Kernel that evaluates ``program`` into an output of ``out_dtype``; its
    launcher computes the grid itself: one 16-byte vector per thread, or with ``host_run`` (the
    CPU device's plan) a run of that many elements."""
    key = ("elementwise", program, layout, out_dtype, host_run)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build_elementwise(program, layout, out_dtype, source, host_run))
    return kernel


HALF_STORAGE = storage_ctype(np.dtype(np.float16))


def _stepped(leaf: dict[str, Any]) -> dict[str, Any]:
    """``leaf`` with ``step`` and ``across``: what its offset advances by along the result's last
    axis and along the one before it (0 where that axis is broadcast to it; None for a 0-d leaf,
    which has no axis)."""

    def along(axis: int) -> str | None:
        dims, strides = leaf["dims"], leaf["strides"]
        if not dims:
            return None
        return f"({dims[axis]} == 1 ? 0 : {strides[axis]})" if len(dims) >= -axis else "0"

    return {**leaf, "step": along(-1), "across": along(-2)}


def _root_rounded_to(context: dict[str, Any], storage: str) -> bool:
    """Whether the program's root is a node whose result is rounded to ``storage`` (a 16-bit
    float's): the flat host plan then leaves that rounding to the store, where rounding in the
    loop and again at the store would double the loop's conversions."""
    return any(node["id"] == context["root"] and node["round"] == storage for node in context["nodes"])


def _build_elementwise(
    program: Program,
    layout: OperandLayout,
    out_dtype: np.dtype,
    source: Callable[..., object] | None,
    host_run: int | None,
) -> Kernel:
    strided = layout.kind == "strided"
    params = leaf_params(program, layout)
    params.append(("kdout", array_param("out", out_dtype, out_dims(layout), strided)))
    zero_d = set(layout.zero_d)
    arrays = [a for a in array_leaves(program, layout) if a["id"] not in zero_d]  # streamed, element by element
    vec = vector_width(program, out_dtype)
    flat = layout.kind == "flat"
    row_leaves = {a["id"] for a in arrays if a["dims"]}  # a host plan's row has an axis of theirs
    # The CPU device's plans convert float16 operands and results a chunk (or a tile's row) at a
    # time, into and out of float buffers.
    staged = [a["id"] for a in arrays if host_run and a["storage"] == HALF_STORAGE and (flat or a["id"] in row_leaves)]
    out_staged = bool(host_run and storage_ctype(out_dtype) == HALF_STORAGE)
    gathered = [_stepped(a) for a in arrays if a["id"] in row_leaves] if host_run else []

    def load(i: int, streamed: str) -> str:
        return f"kdp{i}[0]" if i in zero_d else streamed

    def row_load(i: int, buffered: str) -> str:
        """A broadcast or strided host plan's load: from the float buffer a float16 operand is
        widened into, else the gathered buffer or the row itself, or the leaf's one element."""
        if i in staged:
            return f"kdf{i}[kdk]"
        return buffered if i in row_leaves else f"kdp{i}[kdoff{i}]"

    def body(proxies: dict[str, Any]) -> GeneratedBody:
        vector = flat and not host_run and vec > 1 and all_aligned(proxies, [a["param"] for a in arrays] + ["kdout"])
        stepped = arrays + ([out] if strided else [])
        context = program_context(program, bool_bytes=True)
        text = render(
            "elementwise.cu.j2",
            name=program.name,
            layout=layout.kind,
            vector=vector,
            vec=vec,
            size_expr=" * ".join(f"(index_t){d}" for d in out_dims(layout)) or "1",
            arrays=arrays,
            out=_stepped(out) if host_run else out,
            out_dims=out_dims(layout),
            host_run=host_run,
            stepped=[_stepped(leaf) for leaf in stepped] if host_run else [],
            gathered=gathered,
            offset_type="long long" if strided else "index_t",
            tiled=bool(host_run and layout.across),
            read_across=layout.across,
            program=context,
            staged=staged,
            out_staged=out_staged,
            root_unrounded=out_staged and _root_rounded_to(context, HALF_STORAGE),
            vector_loads=loads(program, lambda i: load(i, f"kd_wide(kdl{i}.v, kdk)")),
            scalar_loads=loads(program, lambda i: load(i, f"kdp{i}[kdi]") if flat else f"kdp{i}[kdoff{i}]"),
            staged_loads=loads(program, lambda i: f"kdw{i}[kdk]" if i in staged else load(i, f"kdp{i}[kdi]")),
            chunk_loads=loads(program, lambda i: row_load(i, f"kdq{i}[kdk]")),
            tile_loads=loads(program, lambda i: row_load(i, f"kdw{i}[kdr][kdk]")),
        )
        host_plan = (HOST_TILES if layout.across else HOST_RUNS[layout.kind].format(run=host_run)) if host_run else None
        decisions = ElementwiseDecisions(layout=layout.kind, vector_width=vec if vector else 1, host_plan=host_plan)
        return GeneratedBody(text, decisions)

    out = {
        "id": "o",
        "param": "kdout",
        "dims": out_dims(layout),
        "strides": leaf_strides(layout, "o"),
        "storage": storage_ctype(out_dtype),
        "cctype": compute_ctype(out_dtype),
        "itemsize": out_dtype.itemsize,
    }
    total: Expr = as_expr(1)
    for d in out_dims(layout):
        total = total * sym(d)
    per_thread = host_run or vec
    options = (*OPTIONS, SIMD_MATH) if host_run else OPTIONS
    return make_kernel(
        program.name,
        params,
        body,
        grid=dmin(cdiv(total, BLOCK * per_thread), MAX_BLOCKS),
        source=source,
        options=options,
    )


# --- plans --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class ElementwisePlan(Plan):
    """One compiled program for one combination of argument dtypes and shapes: the warm path."""

    name: str
    kernel: Kernel
    sources: tuple[tuple[str, Any], ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    size: int
    broadcast: bool  # a layout other than flat: inputs may overlap out at other elements
    shares_memory: bool = False  # some array is a view or borrowed: it may partially overlap out
    direct: bool = False  # every argument is a leaf, in order: no reordering needed
    plain: tuple[int, ...] = ()  # argument positions holding ml_dtypes scalars, passed as float
    host_kernel: Kernel | None = None  # the CPU device's plan
    c_entry: CEntry = field(default_factory=CEntry)  # for ``op(*args, out=out)``
    c_alloc_entry: CEntry = field(default_factory=CEntry)  # for ``op(*args)``
    strided_operands = True  # the strided layout reads and writes views in place

    def values(self, args: Sequence[Any]) -> list[Any]:
        if self.plain:
            args = [float(a) if i in self.plain else a for i, a in enumerate(args)]
        return list(args) if self.direct else super().values(args)

    def warm_entry(
        self, warm: WarmPath, values: Sequence[Any], out: Any, session: Any, stream: Any, result: Any
    ) -> CEntry | None:
        """The C launch of later ``op(*values, out=out, stream=stream)`` calls like this one, for
        a callable with a front (an op; a fused function's warm entries are its rows plans'):
        device operands in kernel order, the same shape everywhere (no broadcasting to check), no
        views or borrowed foreign memory (the C path checks no overlap: arrays that own their
        allocations overlap only when they are the same array) and no ml_dtypes scalars to
        convert. A call without ``out=`` on the session stream gets a launch that allocates its
        result from C (from the pool in C, or through a ``DeviceArray`` constructor bound to
        this plan's shape and dtype)."""
        skip = self.broadcast or self.shares_memory or self.plain
        if warm.front is None or session is None or not self.direct or skip or session.capturing:
            return None
        kernel = self.kernel_on(session)
        if out is None:
            if stream is None and self.size and isinstance(result, memory.DeviceBuffer):
                if type(result) is not memory.array_type:  # made before ``ndarray`` registered its class
                    return None
                allocate = functools.partial(memory.array_type, session, self.shape, self.dtype)
                return self.c_alloc_entry.fill(lambda: self._c_launch(kernel, values, result, None, allocate))
        elif stream_entry_ok(stream, session):
            return self.c_entry.on_stream(stream).fill(lambda: self._c_launch(kernel, values, out, stream))
        return None

    def _c_launch(
        self,
        kernel: Kernel,
        values: Sequence[Any],
        out: Any,
        stream: Any,
        allocate: Callable[[], DeviceBuffer] | None = None,
    ) -> Any:
        found = kernel.lookup((*values, out), {})
        if found is None or found[1]:  # foreign or host operands: the Python path
            return None
        if allocate is None:
            return fastpath.kernel_launch(found[0], (*values, out), out_keyword=True, stream=stream)
        template = out.session.template(self.shape, self.dtype)
        return fastpath.kernel_launch(
            found[0], (*values, out), out_keyword=True, stream=stream, allocate=allocate, template=template
        )

    def kernel_on(self, session: Any) -> Kernel:
        """The kernel a launch on ``session`` runs: the host's plan on the CPU device (unless
        ``KERNELDSL_CPU_PLAN=gpu``), where the layout has one."""
        if self.host_kernel is not None and host_plans(session):
            return self.host_kernel
        return self.kernel

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        if self.size:
            self.kernel_on(session)(*[unalias(v, out, session) for v in values], out)

    def run_on(self, args: Sequence[Any], out: Any, session: Any, stream: Any, placed: bool) -> Any:
        """The kernel on ``stream``. What this call put on the session stream first (uploaded
        operands, the new result, an overlapping input's copy) is waited for there; arrays the
        caller passed are the caller's to order, as with every launch on a stream."""
        values = self.values(args)
        if out is not None:
            check_placement(out, session, self.name)
        if session is None:  # host operands: the call is synchronous, nothing to order
            return self.run_host(values, out)
        fresh = out is None
        if fresh:
            out = session.empty(self.shape, self.dtype)
        if self.size:
            unaliased = [unalias(v, out, session) for v in values]
            placed = placed or any(u is not v for u, v in zip(unaliased, values))
            values = unaliased
            if placed or fresh:
                stream.wait(session.create_event(timing=False).record())
            self.kernel_on(session)(*values, out, stream=stream)
        return out

    def run_host(self, values: list[Any], out: Any) -> Any:
        target = host_target(self.shape, self.dtype, out, values)
        if self.size:
            session = default_session()
            self.kernel_on(session)(*staged_or_borrowed(session, [*values, target]))
        if out is not None and target is not out:
            out[...] = target
            return out
        return target

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        target = out if out is not None else np.empty(self.shape, self.dtype)
        return self.kernel.inspect(*Plan.values(self, args), target, arch=arch)


def plan_elementwise(
    builder: ProgramBuilder, root: Traced, args: Sequence[Any], out: Any, source: Callable[..., object] | None = None
) -> ElementwisePlan:
    """Compile ``builder``'s program (result ``root``) for these call arguments; ``source`` is the
    user function whose lines compile errors are reported at."""
    program = builder.program(root)
    shape = root.shape
    out_dtype = program.dtype
    if out is not None:
        check_out(out, shape, out_dtype, program.name)
        out_dtype = np.dtype(out.dtype)
    sources = tuple(builder.sources)
    operands = {
        leaf: args[i] for leaf, (k, i) in enumerate(sources) if k == "arg" and type(args[i]) is memory.array_type
    }
    arrays = [*operands.values(), *([out] if type(out) is memory.array_type else [])]
    strided = any(not a.is_contiguous for a in arrays)
    across = tuple(
        leaf for leaf, a in operands.items() if views.reads_across_rows(a.shape, a.strides, a.dtype.itemsize)
    )
    layout = layout_of(builder.shapes, shape, strided, across)
    return ElementwisePlan(
        name=program.name,
        kernel=elementwise_kernel(program, layout, out_dtype, source),
        host_kernel=elementwise_kernel(program, layout, out_dtype, source, HOST_RUN),
        sources=sources,
        shape=shape,
        dtype=out_dtype,
        size=int(np.prod(shape, dtype=np.int64)),
        broadcast=layout.kind != "flat",
        shares_memory=any(shares_memory(a) for a in arrays),
        direct=sources == tuple(("arg", i) for i in range(len(args))),
        plain=tuple(
            i for i, a in enumerate(args) if isinstance(a, np.generic) and not isinstance(a, (np.number, np.bool_))
        ),
    )


# --- elementwise functions: ops and user expressions ----------------------------------------------------


class ElementwiseFunction(fastpath.FastPathCallable):
    """Something that maps operands to one result element by element (an op or a user expression).

    Subclasses give ``params`` (the names the expression uses), ``resolve`` (result and loop
    dtypes from the operand dtypes / scalars) and ``expression`` (C text for a loop dtype).
    """

    name: str
    params: tuple[str, ...]

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        raise NotImplementedError

    def expression(self, dtype: np.dtype, loops: tuple[np.dtype, ...] = ()) -> str:
        """C text computing a ``dtype`` result from operands converted to ``loops``."""
        raise NotImplementedError

    def __init__(self) -> None:
        self._plans = PlanCache()
        self._warm = WarmPath(self)  # its plans' C launches, remembered on the op itself

    if TYPE_CHECKING:  # at run time __call__ stays the FastPathCallable's; see ``operands``

        @overload
        def __call__(  # type: ignore[overload-overlap]
            self, *operands: HostOperand, out: HostArray | None = None, stream: None = None
        ) -> HostArray: ...
        @overload
        def __call__(  # type: ignore[overload-overlap]
            self, *operands: TracedOperand, out: None = None, stream: None = None
        ) -> Traced: ...
        @overload
        def __call__(  # type: ignore[overload-overlap]
            self, *operands: RemoteOperand[RemoteArrayT], out: RemoteArrayT | None = None, stream: None = None
        ) -> RemoteArrayT: ...
        @overload
        def __call__(
            self, *operands: DeviceOperand, out: DeviceArray | None = None, stream: Stream | None = None
        ) -> DeviceArray: ...
        def __call__(self, *operands: Any, out: Any = None, stream: Any = None) -> Any: ...

    def _call(self, *operands: Any, out: Any = None, stream: Any = None) -> Any:
        """The Python path of a call (``fastpath.FastPathCallable`` first tries what the C path remembered).
        ``stream``: launch there instead of on the session stream (device operands)."""
        if len(operands) != len(self.params):
            raise TypeError(
                f"{self.name}() takes {len(self.params)} operand(s) ({', '.join(self.params)}), got {len(operands)}"
            )
        for o in operands:
            if isinstance(o, Traced):
                if out is not None or stream is not None:
                    raise FusionError(f"{self.name}: out= and stream= cannot be used inside a fused function")
                return o.builder.apply(self, operands)
        order = memory_order(operands) if out is None else None
        if order is not None:  # NumPy's order="K": the op runs on the operands' memory as contiguous arrays
            ordered = [
                o.transpose(order) if isinstance(o, (memory.array_type, np.ndarray)) and o.ndim else o for o in operands
            ]
            return self._call(*ordered, stream=stream).transpose(np.argsort(order).tolist())
        return self._plans.call(
            self.name, operands, out, None, self._plan, self._warm, stream=stream, remote=(self, {})
        )

    def inspect(self, *operands: Any, out: Any = None, arch: str | None = None) -> Build:
        """The Build (CUDA source, adapter, cubin) a call with these operands runs; no GPU needed.

        Operands may be numpy arrays, scalars, or anything with ``shape`` and ``dtype`` (and
        ``ptr``: a pointer that is not 16-byte aligned selects the scalar path).
        """
        return self._plan(operands, out).inspect(operands, out, arch)

    def _plan(self, values: Sequence[Any], out: Any) -> ElementwisePlan:
        builder = ProgramBuilder(self.name)
        root = builder.apply(self, builder.operands(values, self.name))
        builder.scalars_from_arguments(values)
        return plan_elementwise(builder, root, values, out, getattr(self, "__wrapped__", None))


# --- @kd.elementwise ------------------------------------------------------------------------------------


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Elementwise(ElementwiseFunction):
    """A user elementwise function: ``@kd.elementwise(result=T) def f(a: kd.Scalar[T], x: kd.In[T]) -> str``
    (or, unchecked, ``@kd.elementwise def f(a: kd.Scalar["T"], x: kd.In["T"]) -> kd.Out["T"]``).

    The function returns a C expression in which each parameter name is that operand's value at
    the current element (already converted to the parameter's dtype; float16/bfloat16 values are
    float). A dtype variable binds to the NumPy promotion of every operand declared with it
    (Python scalars are weak); a concrete dtype converts its operand. The result has the return
    annotation's dtype, or ``result``'s. Names starting with ``kd`` are reserved for generated code; ``kdT`` is
    the C type the expression computes in. Statements fit in an immediately invoked lambda:
    ``"[&] { float t = x * x; return t > a ? t : a; }()"``.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its declaration: the receiver compiles for itself."""
        return (Elementwise, self._declared)

    def __init__(self, func: Callable[..., str], result: Any = None) -> None:
        super().__init__()
        self._declared = (func, result)
        self.__wrapped__ = func
        self.__doc__ = func.__doc__
        self.name = func.__name__
        sig = inspect.signature(func, eval_str=True)
        decls = []
        for p in sig.parameters.values():
            ann = p.annotation
            ok = isinstance(ann, ScalarAnnotation) or (isinstance(ann, ArrayAnnotation) and ann.direction == "in")
            if not ok:
                raise DeclarationError(self.name, p.name, "annotate each operand with kd.In[dtype] or kd.Scalar[dtype]")
            if not _NAME.fullmatch(p.name):
                raise DeclarationError(self.name, p.name, "name is not an ASCII identifier ([A-Za-z_][A-Za-z0-9_]*)")
            if p.name in RESERVED_NAMES or p.name.startswith("kd"):
                raise DeclarationError(self.name, p.name, "name clashes with a C++ keyword or the reserved kd prefix")
            decls.append((p.name, self._dtype_spec(p.name, ann.dtype)))
        self.params = tuple(n for n, _ in decls)
        self._decls = tuple(d for _, d in decls)
        self._out = self._dtype_spec("return", self._result_spec(sig.return_annotation, result))
        if not dtypes.is_dtype_name(self._out) and self._out not in self._decls:
            raise DeclarationError(self.name, None, f"the result's dtype variable {self._out!r} is bound by no operand")
        expr = func(*self.params)
        if not isinstance(expr, str) or not expr.strip():
            raise DeclarationError(self.name, None, "the function must return the element expression as a str")
        self._expr = expr.strip()

    def _result_spec(self, annotation: Any, result: Any) -> Any:
        """The result dtype: ``result=`` (the function then returns ``str``) or ``-> kd.Out[dtype]``."""
        declared = isinstance(annotation, ArrayAnnotation) and annotation.direction == "out"
        if result is not None:
            if declared:
                raise DeclarationError(self.name, None, "give the result dtype once: result= or -> kd.Out[...]")
            return spelled(result)
        if not declared:
            raise DeclarationError(
                self.name, None, "declare the result dtype: @kd.elementwise(result=T) or -> kd.Out[T]"
            )
        return annotation.dtype

    def _dtype_spec(self, param: str, spec: Any) -> str:
        if isinstance(spec, str) and not dtypes.is_dtype_name(spec):
            return spec
        try:
            return dtypes.element_type(spec).name
        except KeyError as exc:
            raise DeclarationError(self.name, param, exc.args[0]) from None

    def resolve(self, operands: Sequence[Any]) -> tuple[np.dtype, tuple[np.dtype, ...]]:
        bound: dict[str, np.dtype] = {}
        for var in dict.fromkeys(d for d in self._decls if not dtypes.is_dtype_name(d)):
            members = [promotion._probe(o) for o, d in zip(operands, self._decls) if d == var]
            bound[var] = promotion.supported(np.result_type(*members))

        def concrete(spec: str) -> np.dtype:
            return bound[spec] if spec in bound else dtypes.ELEMENT_TYPES[spec].numpy

        inputs = tuple(concrete(d) for d in self._decls)
        for param, o, dt in zip(self.params, operands, inputs):
            if promotion.is_complex(promotion.operand_dtype(o)) and not promotion.is_complex(dt):
                raise ComplexUnsupportedError(
                    f"{self.name}: a complex operand for {dt} parameter {param!r}: pass z.real, or declare it complex"
                )
        return concrete(self._out), inputs

    def expression(self, dtype: np.dtype, loops: tuple[np.dtype, ...] = ()) -> str:
        return self._expr

    def __repr__(self) -> str:
        return f"<kd.elementwise {self.name}: {self._expr}>"


@overload
def elementwise(func: Callable[..., str], *, result: Any = None) -> Elementwise: ...


@overload
def elementwise(*, result: Any) -> Callable[[Callable[..., str]], Elementwise]: ...


def elementwise(
    func: Callable[..., str] | None = None, *, result: Any = None
) -> Elementwise | Callable[[Callable[..., str]], Elementwise]:
    """Declare an elementwise function from a C expression over its operands (see ``Elementwise``):
    ``@kd.elementwise(result=T)`` or ``@kd.elementwise``."""
    if func is None:
        return lambda f: Elementwise(f, result)
    return Elementwise(func, result)
