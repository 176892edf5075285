"""The C launch path: its one home in Python.

``_fastlaunch.c`` runs the warm path of kernel, op and gemm calls without a Python frame. It
only recognises calls the Python path has already accepted once, and hands everything else
back to the caller's ``_call``, so both paths raise the same errors. This module owns its
contract: the launch tables (a specialization's ``LaunchContract``, the one the generated adapter is
rendered from, as integers, in the opcode and slot-kind numbers and within the table sizes the C
module defines and exports), the ``FastPathCallable`` base class calls enter through (a front,
in ``warm``'s words), a bound kernel's C entry (``kernel_launch``) and ``GridFront``. Where C
entries are kept and remembered is ``warm``'s. The C module is handed the launch limits
(``runtime.limits``) when it is configured.

Without the compiled module (no C compiler when the package was built) or with
``KERNELDSL_C_LAUNCH=0``, every call takes the Python path.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..jit.launch_contract import LaunchContract, ShapeCheck
from ..jit.signature import Expr
from ..runtime import memory, nvtx
from ..runtime.limits import LAUNCH_LIMITS
from ..runtime.memory import ARRAY_TYPES, DeviceBuffer
from ..runtime.stream import Stream
from . import warm

if TYPE_CHECKING:
    from .bound import BoundLaunch


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("kerneldsl._fastlaunch")
    except ImportError:  # built without a C compiler: the Python path does everything
        return None


_fastlaunch = _compiled()

ENABLED = _fastlaunch is not None and os.environ.get("KERNELDSL_C_LAUNCH", "1") != "0"

# The C module's table encoding and fixed table sizes: a specialization past any size stays on
# the Python path, so making its Launch cannot fail after a launch.
TABLE_SIZES = (
    "MAX_ARGS",
    "MAX_ARRAYS",
    "MAX_NDIM",
    "MAX_SYMS",
    "MAX_CHECKS",
    "MAX_ALIASES",
    "MAX_PROGRAM",
    "MAX_STACK",
    "MAX_SLOTS",
)
OPCODES: dict[str, int] = {} if _fastlaunch is None else _fastlaunch.OPCODES
SLOT_KINDS: dict[str, int] = {} if _fastlaunch is None else _fastlaunch.SLOT_KINDS
LIMITS: dict[str, int] = {} if _fastlaunch is None else {name: getattr(_fastlaunch, name) for name in TABLE_SIZES}
_INT64 = (-(2**63), 2**63 - 1)
# A check row's symbol for a computed extent; None from a module built without computed extents,
# whose tables leave such launches to the Python path.
CHECK_COMPUTED: int | None = getattr(_fastlaunch, "CHECK_COMPUTED", None)


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


class PythonPathCallable:
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
    memory.on_array_type(_fastlaunch.configure)  # the class arrays are made as: now, and once registered
    _fastlaunch.set_launch_limits(LAUNCH_LIMITS)
    memory.use_native_allocator(_fastlaunch.Allocator)
    FastPathCallable = _fastlaunch.FastPathCallable
else:
    FastPathCallable = PythonPathCallable


class GridFront(FastPathCallable):
    """The front of a kernel launched at a grid decided once (a reduction's, a scan's, a fused
    pipeline's ``warm.GridLaunch``): through the adapter the first time, then from C, where the
    grid is a constant of the C entry, as a kernel's calls are."""

    __slots__ = ("bound", "grid", "c_entry")

    def __init__(self, bound: BoundLaunch, grid: tuple[int, int, int]) -> None:
        super().__init__()
        self.bound = bound
        self.grid = grid
        self.c_entry = warm.CEntry()

    def _call(self, *args: Any) -> None:
        bound, grid = self.bound, self.grid
        bound.call(*args, grid, None, None, None)
        if not nvtx.ON:
            warm.remember(self, self.c_entry, lambda: kernel_launch(bound, args, grid=grid))


def kernel_launch(
    bound: BoundLaunch,
    args: tuple[Any, ...],
    out_keyword: bool = False,
    stream: Stream | None = None,
    allocate: Callable[[], DeviceBuffer] | None = None,
    template: DeviceBuffer | None = None,
    pinned: dict[str, int] | None = None,
    grid: tuple[int, int, int] | None = None,
) -> Any | None:
    """A C Launch of ``bound`` for calls dispatched like ``args``; None when the C path cannot
    take it (disabled, a specialization it does not cover, a driver without an entry point).
    With ``out_keyword`` the last argument comes as ``out=`` and the call returns it (kd.ops);
    with ``allocate`` as well, calls pass no ``out=`` and get ``allocate()``'s new array (like
    the last of ``args``), made in C like ``template`` (``DeviceBuffer.template``) where the
    session allows it; with ``stream`` the calls pass that very stream as ``stream=`` (kernels).
    Calls whose numpy scalars need a value check (``BoundLaunch.scalar_checks``) get none. With
    ``pinned`` (shape symbol: extent) the entry takes only calls of those extents (a tuned
    kernel's key), declining the others to the caller's Python path; with ``grid`` it launches
    that grid, decided once (a reduction's warm entry), instead of the contract's."""
    module = native()
    contract = bound.build.launch_contract
    table = _table(contract) if module is not None and not bound.scalar_checks else None
    if table is not None and pinned:
        table = _pinned(contract, table, pinned)
    if table is not None and grid is not None:
        table = _with_grid(table, grid)
    if module is None or table is None:
        return None
    session = bound.session
    entry = session.entry_point("cuLaunchKernel")
    extended = extended_launch(bound) if contract.extended else None
    if not entry or (contract.extended and extended is None):
        return None
    guards = tuple(a.dispatch_tag if type(a) in ARRAY_TYPES else type(a) for a in args)
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
        extended=extended,
    )


def _pinned(contract: LaunchContract, table: tuple[Any, ...], pinned: dict[str, int]) -> tuple[Any, ...] | None:
    """``table`` with a check per pinned symbol: the extent it is read from equals the value."""
    array_index = {a.name: j for j, a in enumerate(contract.arrays)}
    read_at = {b.symbol: (array_index[b.array], b.axis) for b in contract.binds}
    if not pinned.keys() <= read_at.keys():
        return None  # a symbol the specialization fixed: no entry, the Python path decides
    nargs, arrays, binds, checks, *rest = table
    pins = tuple((*read_at[s], -1, v) for s, v in sorted(pinned.items()))
    widened = (nargs, arrays, binds, checks + pins, *rest)
    return widened if _within_limits(widened) else None


def _with_grid(table: tuple[Any, ...], grid: tuple[int, int, int]) -> tuple[Any, ...] | None:
    """``table`` whose grid x, y and z programs are the constants ``grid``."""
    nargs, arrays, binds, checks, aliases, programs, slots, bits = table
    end = (OPCODES["end"], 0)
    dims: list[tuple[tuple[int, int], ...]] = []
    current: list[tuple[int, int]] = []
    for op in programs:
        current.append(op)
        if op == end:
            dims.append(tuple(current))
            current = []
    fixed = [((OPCODES["int"], g), end) for g in grid] + dims[3:]
    widened = (nargs, arrays, binds, checks, aliases, tuple(op for d in fixed for op in d), slots, bits)
    return widened if _within_limits(widened) else None


def extended_launch(bound: BoundLaunch) -> tuple[int, bool, int, int, int, int] | None:
    """What the C path needs for a cooperative or cluster launch, ``(cuLaunchKernelEx, cooperative,
    cluster x, y, z, co-resident blocks)``: only for a contract whose block, shared memory and cluster
    are constants (then the first call's checks hold for every call but the grid's, which the C
    path makes); None otherwise, and such calls stay on the Python path."""
    contract = bound.build.launch_contract
    constants = dict(contract.constants)
    try:
        block = [d.evaluate(constants) for d in contract.dims[3:6]]
        shared = contract.dims[6].evaluate(constants)
        cluster = [c.evaluate(constants) for c in contract.cluster] or [0, 0, 0]
    except KeyError:  # a dimension read from the call's shapes
        return None
    session = bound.session
    launch_ex = session.entry_point("cuLaunchKernelEx")
    if not launch_ex:
        return None
    threads = block[0] * block[1] * block[2]
    co_resident = session.co_resident_blocks(bound.function, threads, shared) if contract.cooperative else 0
    return (launch_ex, contract.cooperative, cluster[0], cluster[1], cluster[2], co_resident)


# --- the launch contract as tables ----------------------------------------------------------------


class _PythonAdapterOnly(Exception):
    """Something only the Python adapter handles (a bfloat16 scalar, a strided array's strides)."""


def launch_table(contract: LaunchContract) -> tuple[Any, ...] | None:
    """``contract`` (what the generated adapter checks, computes and packs) as the integer tables the
    C launch path runs, ``(nargs, arrays, binds, checks, aliases, programs, slots, index_bits)``:

    - ``nargs``: the runtime parameter count;
    - ``arrays``: per array parameter, ``(argument index, ndim)``;
    - ``binds``: per shape symbol, ``(symbol, array, axis)`` it is read from;
    - ``checks``: ``(array, axis, symbol, value)``, the extent equals the symbol (or ``value`` when
      the symbol is -1, or computed extent number ``value`` when it is ``CHECK_COMPUTED``);
    - ``aliases``: ``(array, array)`` pairs that may not overlap;
    - ``programs``: grid x/y/z, block x/y/z and shared, then the computed extents
      (``kd.Out[T, kd.cdiv(n, 256)]``), as postfix ``(opcode, operand)`` programs;
    - ``slots``: per 8-byte parameter slot, ``(SLOT_KINDS kind, array/argument/symbol index)``;
    - ``index_bits``: 32 or 64; a 32-bit build cannot address more than 2**31-1 threads per axis.

    None without the C module, when the contract needs something only the adapter does (a
    cooperative or cluster launch, ``contract.extended``, whose table goes with ``extended_launch``),
    or when it exceeds ``LIMITS``; such calls stay on the Python path.
    """
    return None if contract.extended else _table(contract)


def _table(contract: LaunchContract) -> tuple[Any, ...] | None:
    """``launch_table`` for any contract, extended ones included."""
    if _fastlaunch is None or not contract.arrays:
        return None
    arg_index = {name: i for i, name in enumerate(contract.params)}
    array_index = {a.name: j for j, a in enumerate(contract.arrays)}
    symbol_index = {b.symbol: k for k, b in enumerate(contract.binds)}
    computed = [c.expr for c in contract.checks if c.expr is not None]
    if computed and CHECK_COMPUTED is None:
        return None
    try:
        programs = _programs(contract, symbol_index, computed)
        slots = _slots(contract, array_index, symbol_index, arg_index)
    except _PythonAdapterOnly:
        return None
    table = (
        len(contract.params),
        tuple((a.argument, a.ndim) for a in contract.arrays),
        tuple((symbol_index[b.symbol], array_index[b.array], b.axis) for b in contract.binds),
        tuple(_check_row(c, array_index, symbol_index, computed) for c in contract.checks),
        tuple((array_index[a], array_index[b]) for a, b in contract.aliases),
        programs,
        slots,
        contract.index_bits,
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


def _check_row(
    check: ShapeCheck, array_index: dict[str, int], symbol_index: dict[str, int], computed: list[Expr]
) -> tuple[int, int, int, int]:
    """``(array, axis, symbol, value)``: symbol -1 compares with ``value``, ``CHECK_COMPUTED``
    with the computed extent whose program ``value`` numbers (after the launch dimensions')."""
    if check.expr is not None and CHECK_COMPUTED is not None:
        return (array_index[check.array], check.axis, CHECK_COMPUTED, computed.index(check.expr))
    symbol = -1 if check.symbol is None else symbol_index[check.symbol]
    return (array_index[check.array], check.axis, symbol, check.value or 0)


def _programs(
    contract: LaunchContract, symbol_index: dict[str, int], computed: list[Expr]
) -> tuple[tuple[int, int], ...]:
    """The launch dimensions (grid, block and shared), then the computed extents, as postfix
    programs, each ended by ``end``."""
    values: dict[str, tuple[int, int]] = {s: (OPCODES["sym"], i) for s, i in symbol_index.items()}
    values.update({n: (OPCODES["int"], v) for n, v in contract.constants})
    code: list[tuple[int, int]] = []
    for expr in (*contract.dims, *computed):
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
    contract: LaunchContract, array_index: dict[str, int], symbol_index: dict[str, int], arg_index: dict[str, int]
) -> tuple[tuple[int, int], ...]:
    symbol_kind = SLOT_KINDS["sym32" if contract.index_bits == 32 else "sym64"]
    slots = []
    for slot in contract.slots:
        if slot.source == "pointer":
            slots.append((SLOT_KINDS["ptr"], array_index[slot.param]))
        elif slot.source == "scalar" and slot.element in SLOT_KINDS:
            slots.append((SLOT_KINDS[slot.element], arg_index[slot.param]))
        elif slot.source == "symbol":
            slots.append((symbol_kind, symbol_index[slot.param]))
        else:
            raise _PythonAdapterOnly(slot.name)
    return tuple(slots)
