"""The C launch path: its one home in Python.

``_fastlaunch.c`` runs the warm path of kernel, op and gemm calls without a Python frame. It
only recognises calls the Python path has already accepted once, and hands everything else
back to the caller's ``_call``, so both paths raise the same errors. This module owns its
contract: the launch tables (the generated adapter restated as integers), the opcode and
slot-kind numbers they use (checked against the C module's in a test), the ``Front`` base
class calls enter through, and ``CLaunchSlot``, where whatever made a C entry keeps it.

Without the compiled module (no C compiler when the package was built) or with
``KERNELDSL_C_LAUNCH=0``, every call takes the Python path.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import logs
from .runtime import memory
from .runtime.memory import DeviceArray
from .runtime.stream import Stream
from .signature import ArrayParam, Expr
from .specialize import Specialization

if TYPE_CHECKING:
    from .launch import BoundLaunch

log = logs.get("fastpath")


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("kerneldsl._fastlaunch")
    except ImportError:  # built without a C compiler: the Python path does everything
        return None


_fastlaunch = _compiled()

ENABLED = _fastlaunch is not None and os.environ.get("KERNELDSL_C_LAUNCH", "1") != "0"

OPCODES = {"end": 0, "int": 1, "sym": 2, "add": 3, "sub": 4, "mul": 5, "floordiv": 6, "cdiv": 7, "min": 8, "max": 9}
SLOT_KINDS = {
    "ptr": 0,
    "sym32": 1,
    "sym64": 2,
    "bool": 3,
    "int8": 4,
    "int16": 5,
    "int32": 6,
    "int64": 7,
    "uint8": 8,
    "uint16": 9,
    "uint32": 10,
    "uint64": 11,
    "float16": 12,
    "float32": 13,
    "float64": 14,
}

# The C Launch's fixed table sizes (checked against the C module's in a test): a specialization
# past any of them stays on the Python path, so making its Launch cannot fail after a launch.
LIMITS = {
    "MAX_ARGS": 64,
    "MAX_ARRAYS": 16,
    "MAX_NDIM": 8,
    "MAX_SYMS": 16,
    "MAX_CHECKS": 64,
    "MAX_ALIASES": 64,
    "MAX_PROGRAM": 128,
    "MAX_STACK": 16,
    "MAX_SLOTS": 64,
}
_INT64 = (-(2**63), 2**63 - 1)


def status() -> str:
    """One line for ``kerneldsl info``: whether warm calls take the C path, and if not, why."""
    if ENABLED:
        return "on"
    if _fastlaunch is None:
        return "off: kerneldsl._fastlaunch was not built (no C compiler at install time); calls take the Python path"
    return "off: KERNELDSL_C_LAUNCH=0; calls take the Python path"


def native() -> ModuleType | None:
    """The compiled module when the C path is on, else None."""
    return _fastlaunch if ENABLED else None


class PyFront:
    """The callables' base when the C path is off: every call goes straight to ``_call``."""

    __slots__ = ()
    _remembered_launches = 0
    _call: Callable[..., Any]  # the subclass's Python path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def _remember_launch(self, launch: Any) -> None:
        pass

    def _forget_launches(self) -> None:
        pass


if _fastlaunch is not None and ENABLED and not TYPE_CHECKING:
    _fastlaunch.configure(DeviceArray)
    memory.use_native_allocator(_fastlaunch.Allocator)
    Front = _fastlaunch.Front
else:
    Front = PyFront


class CLaunchSlot:
    """Where a bound kernel, an array plan or a gemm configuration keeps its C entry: None until
    a call made one, False once it turned out the C path cannot take it. Calls with ``stream=``
    get an entry per stream, in ``on_stream``."""

    __slots__ = ("entry", "_streams")

    def __init__(self) -> None:
        self.entry: Any = None
        self._streams: dict[Stream, CLaunchSlot] = {}

    def on_stream(self, stream: Stream | None) -> CLaunchSlot:
        """The slot for calls with ``stream=stream`` (``None``: this one). At most
        ``STREAM_SLOTS`` streams are kept, closed ones dropped first, then the oldest."""
        if stream is None:
            return self
        slot = self._streams.get(stream)
        if slot is None:
            if len(self._streams) >= STREAM_SLOTS:
                closed = [s for s in self._streams if s.closed]
                for s in closed or list(self._streams)[:1]:
                    del self._streams[s]
            slot = self._streams[stream] = CLaunchSlot()
        return slot

    def clear(self) -> None:
        """Forget every entry (what they were made for is gone)."""
        self.entry = None
        self._streams.clear()


STREAM_SLOTS = 8  # streams per slot with their own C entry (as many as a Front remembers)


def stream_entry_ok(stream: Any, session: Any) -> bool:
    """Whether a call's ``stream=`` can have a C entry: None, or an open Stream of ``session``
    (the C path reads its ``_closed`` where it reads a DeviceArray's: the member is Handle's)."""
    return stream is None or (type(stream) is Stream and stream.session is session and not stream.closed)


def remember(front: Any, slot: CLaunchSlot, make: Callable[[], Any]) -> None:
    """Have ``front`` try ``slot``'s C entry first from now on; ``make()`` builds it on the first
    call (a falsy result is kept as False: the C path cannot take it).

    The call has already launched by now, so a failure to make the entry must not fail it (a
    retry would launch twice): it is logged and the slot stays on the Python path.
    """
    if slot.entry is None:
        try:
            slot.entry = make() or False
        except Exception:
            log.debug("no C launch entry; calls stay on the Python path", exc_info=True)
            slot.entry = False
    if slot.entry:
        front._remember_launch(slot.entry)


def kernel_launch(
    bound: BoundLaunch,
    args: tuple[Any, ...],
    out_keyword: bool = False,
    stream: Stream | None = None,
    allocate: Callable[[], DeviceArray] | None = None,
    template: DeviceArray | None = None,
) -> Any | None:
    """A C Launch of ``bound`` for calls dispatched like ``args``; None when the C path cannot
    take it (disabled, a specialization it does not cover, a driver without an entry point).
    With ``out_keyword`` the last argument comes as ``out=`` and the call returns it (kd.ops);
    with ``allocate`` as well, calls pass no ``out=`` and get ``allocate()``'s new array (like
    the last of ``args``), made in C like ``template`` (``DeviceArray.template``) where the
    session allows it; with ``stream`` the calls pass that very stream as ``stream=`` (kernels).
    Calls whose numpy scalars need a value check (``BoundLaunch.scalar_checks``) get none."""
    module = native()
    table = launch_table(bound.build.specialization) if module is not None and not bound.scalar_checks else None
    if module is None or table is None:
        return None
    session = bound.session
    entry = session.entry_point("cuLaunchKernel")
    if not entry:
        return None
    guards = tuple(a.dispatch_tag if type(a) is DeviceArray else type(a) for a in args)
    return module.Launch(
        table=table,
        session=session,
        guards=guards,
        launch=entry,
        function=int(bound.function),
        stream=int((session.stream if stream is None else stream).handle),
        out_keyword=out_keyword,
        stream_object=stream,
        allocate=allocate,
        template=template,
        allocator=None if template is None else session.native_allocator(),
    )


# --- the adapter as tables -----------------------------------------------------------------------


class _Untabled(Exception):
    """Something only the Python adapter handles (e.g. a bfloat16 scalar)."""


def launch_table(spec: Specialization) -> tuple[Any, ...] | None:
    """What the generated adapter checks, computes and packs, as integer tables the C launch
    path runs, ``(nargs, arrays, binds, checks, aliases, programs, slots, index_bits)``:

    - ``nargs``: the runtime parameter count;
    - ``arrays``: per array parameter, ``(argument index, ndim)``;
    - ``binds``: per shape symbol, ``(symbol, array, axis)`` it is read from;
    - ``checks``: ``(array, axis, symbol, value)``, the extent equals the symbol (or ``value`` when
      the symbol is -1);
    - ``aliases``: ``(array, array)`` pairs that may not overlap;
    - ``programs``: grid x/y/z, block x/y/z and shared as postfix ``(opcode, operand)`` programs;
    - ``slots``: per 8-byte parameter slot, ``(SLOT_KINDS kind, array/argument/symbol index)``;
    - ``index_bits``: 32 or 64; a 32-bit build cannot address more than 2**31-1 threads per axis.

    None when the specialization needs something only the adapter does, or exceeds ``LIMITS``;
    such calls stay on the Python path.
    """
    from .codegen import alias_pairs, launch_dims, shape_checks, symbol_binds  # once per specialization

    sig = spec.signature
    if not sig.arrays:
        return None
    arg_index = {p.name: i for i, p in enumerate(sig.runtime_params)}
    array_index = {a.name: j for j, a in enumerate(sig.arrays)}
    binds = symbol_binds(spec)
    symbol_index = {b["symbol"]: k for k, b in enumerate(binds)}
    try:
        programs = _programs(spec, launch_dims(sig), symbol_index)
        slots = _slots(spec, array_index, symbol_index, arg_index)
    except _Untabled:
        return None
    table = (
        len(sig.runtime_params),
        tuple((arg_index[a.name], len(a.shape)) for a in sig.arrays),
        tuple((symbol_index[b["symbol"]], array_index[b["array"]], b["axis"]) for b in binds),
        tuple(_check(c, array_index, symbol_index) for c in shape_checks(spec)),
        tuple((array_index[a], array_index[b]) for a, b in ([] if sig.allow_alias else alias_pairs(sig))),
        programs,
        slots,
        spec.index_bits,
    )
    return table if _within_limits(table) else None


def _within_limits(table: tuple[Any, ...]) -> bool:
    """Whether the C Launch can hold ``table``: its sizes within ``LIMITS``, its ints in int64."""
    nargs, arrays, binds, checks, aliases, programs, slots, _ = table
    sizes = {
        "MAX_ARGS": nargs,
        "MAX_ARRAYS": len(arrays),
        "MAX_NDIM": max((ndim for _, ndim in arrays), default=0),
        "MAX_SYMS": len(binds),
        "MAX_CHECKS": len(checks),
        "MAX_ALIASES": len(aliases),
        "MAX_PROGRAM": len(programs),
        "MAX_STACK": _stack_depth(programs),
        "MAX_SLOTS": len(slots),
    }
    if any(size > LIMITS[name] for name, size in sizes.items()):
        return False
    return all(_INT64[0] <= v <= _INT64[1] for row in (*checks, *programs) for v in row)


def _stack_depth(programs: tuple[tuple[int, int], ...]) -> int:
    """The deepest the C evaluator's stack gets running ``programs``."""
    depth = deepest = 0
    for op, _ in programs:
        depth += 1 if op in (OPCODES["int"], OPCODES["sym"]) else -1
        deepest = max(deepest, depth)
    return deepest


def _check(check: dict[str, Any], array_index: dict[str, int], symbol_index: dict[str, int]) -> tuple[int, ...]:
    expected = check["expected"]
    if isinstance(expected, str):  # "s_<symbol>": equal to where the symbol was bound
        return (array_index[check["array"]], check["axis"], symbol_index[expected[2:]], 0)
    return (array_index[check["array"]], check["axis"], -1, int(expected))


def _programs(
    spec: Specialization, dims: tuple[Expr, ...], symbol_index: dict[str, int]
) -> tuple[tuple[int, int], ...]:
    """The launch dimensions ``dims`` (grid, block and shared) as postfix programs, each ended by ``end``."""
    values: dict[str, tuple[int, int]] = {s: (OPCODES["sym"], i) for s, i in symbol_index.items()}
    values.update({s: (OPCODES["int"], int(v)) for s, v in spec.fixed_symbols})
    values.update({n: (OPCODES["int"], v) for n, v in spec.consts if type(v) is int})  # launch dims take ints only
    code: list[tuple[int, int]] = []
    for expr in dims:
        _emit(expr, values, code)
        code.append((OPCODES["end"], 0))
    return tuple(code)


def _emit(expr: Expr, values: dict[str, tuple[int, int]], code: list[tuple[int, int]]) -> None:
    if expr.op == "int":
        code.append((OPCODES["int"], int(expr.args[0])))
    elif expr.op == "sym":
        code.append(values[expr.args[0]])
    else:
        for arg in expr.args:
            _emit(arg, values, code)
        code.append((OPCODES[expr.op], 0))


def _slots(
    spec: Specialization, array_index: dict[str, int], symbol_index: dict[str, int], arg_index: dict[str, int]
) -> tuple[tuple[int, int], ...]:
    slots = []
    for p in spec.signature.runtime_params:
        if isinstance(p, ArrayParam):
            slots.append((SLOT_KINDS["ptr"], array_index[p.name]))
            continue
        kind = SLOT_KINDS.get(spec.element_type(p.name).name)
        if kind is None:
            raise _Untabled(p.name)
        slots.append((kind, arg_index[p.name]))
    width = "sym32" if spec.index_bits == 32 else "sym64"
    slots.extend((SLOT_KINDS[width], i) for i in symbol_index.values())
    return tuple(slots)
