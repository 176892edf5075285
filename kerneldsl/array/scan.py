"""Scans: running folds along one axis (``kd.ops.cumsum``, ``kd.ops.cumprod``, ``kd.scan``).

``f(x, axis=None, out=None, exclusive=False)``: inclusive by default (NumPy's ``cumsum``);
``exclusive=True`` gives each position the fold of the values before it (the identity first).
``axis=None`` scans the flattened array, like NumPy.

One launch per call, from ``templates/scan.cu.j2``:
- "lookback" when the scanned axis is innermost and long: a single pass over the data (read
  once, written once) in tiles chained by a decoupled look-back, made deterministic by always
  folding a fixed window of predecessors in index order (see the template);
- "lines" otherwise: one thread per scanned line, walking it in order (coalesced across
  threads when the axis is not innermost);
- on the CPU device every scan takes "host-lines" in blocks of one thread (``HOST_LINES``): a
  thread walks up to ``host_width`` adjacent lines together down the axis, each step reading one
  contiguous run (a line alone when the axis is innermost), where a look-back tile's barriers and
  shuffles would run as fibers (``KERNELDSL_CPU_PLAN=gpu`` keeps the GPU's plan).

Accumulation and result dtypes follow ``kd.ops.sum`` / ``prod`` (NumPy's ``cumsum`` rules:
small integers widen, float16/bfloat16 accumulate in float32 and round each output once).
Float results are deterministic run to run; they differ from NumPy's sequential sums by
association only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ..errors import FusionError
from ..jit.build import Build
from ..jit.codegen import GeneratedBody, render
from ..launch.dispatch import Kernel
from ..launch.fastpath import GridFront
from ..launch.routing import public
from ..launch.warm import GridLaunch, WarmPath, call_key, exact_axis, overlaps_out
from ..runtime import memory, nvtx
from ..runtime.selection import host_plans
from ..runtime.session import default_session
from . import promotion
from .decisions import ScanDecisions
from .kernels import BLOCK, KERNELS, array_param, make_kernel, scalar_param
from .placement import check_out, device_operand, host_result, release, unalias
from .plan import Plan, PlanCache
from .program import Traced, compute_ctype, storage_ctype
from .reduction.axes import normalize_axes
from .reduction.reducers import REDUCERS, Reducer, accumulator_context, user_reducer
from .reduction.strategy import (
    HOST_BLOCKS_PER_CORE,
    HOST_COLUMN_BYTES,
    HOST_ITEMS_PER_CORE,
    INSPECT_MULTIPROCESSORS,
    device_multiprocessors,
    planning_multiprocessors,
)
from .scratch import SCRATCH

if TYPE_CHECKING:
    from .ndarray import DeviceArray
    from .operands import DeviceOperand, HostArray, HostOperand, RemoteArrayT

LINES_MAX = 64  # innermost lines up to this long are scanned one thread each
WINDOW = 1024  # predecessors a look-back tile folds: inclusive(c - WINDOW) and WINDOW - 1 aggregates
ITEMS_BYTES = 128  # accumulator bytes each thread of a look-back tile holds (and stages in shared memory)
MAX_ITEMS = 32  # values per thread at most
HOST_LINES = "a thread scans {items} adjacent lines together in order, blocks of one thread (no barrier or collective)"
HOST_LINES_MIN = 16  # fewest adjacent lines a host-lines thread takes when the axis is not innermost

_UINT32 = np.dtype(np.uint32)
_UINT64 = np.dtype(np.uint64)
_INT64 = np.dtype(np.int64)


@dataclass(frozen=True)
class ScanVariant:
    """Compile-time choices of a scan kernel: the stage, inclusive or exclusive, and values per
    thread (lookback; host-lines: adjacent lines a thread takes)."""

    stage: str
    exclusive: bool
    items: int = 1


def scan_kernel(
    reducer: Reducer, ndim: int, out_ndim: int, variant: ScanVariant, value: np.dtype, acc: np.dtype, result: np.dtype
) -> Kernel:
    key = ("scan", reducer, ndim, out_ndim, variant, value, acc, result)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build(reducer, ndim, out_ndim, variant, value, acc, result))
    return kernel


def _params(
    ndim: int, out_ndim: int, variant: ScanVariant, value: np.dtype, acc: np.dtype, result: np.dtype
) -> list[tuple[str, Any]]:
    params: list[tuple[str, Any]] = [
        ("kdx", array_param("in", value, tuple(f"kdn{j}" for j in range(ndim)))),
        ("kdout", array_param("out", result, tuple(f"kdy{j}" for j in range(out_ndim)))),
    ]
    if variant.stage == "lookback":
        params += [
            ("kdagg", array_param("inout", _UINT64, "kdt")),
            ("kdincl", array_param("inout", _UINT64, "kdt")),
            ("kdcounter", array_param("inout", _UINT32, "kdc")),
        ]
    params += [("kdcount", scalar_param(_INT64)), ("kdouter", scalar_param(_INT64))]
    params.append(
        ("kdepoch", scalar_param(_UINT32)) if variant.stage == "lookback" else ("kdinner", scalar_param(_INT64))
    )
    return params


def _build(
    reducer: Reducer, ndim: int, out_ndim: int, variant: ScanVariant, value: np.dtype, acc: np.dtype, result: np.dtype
) -> Kernel:
    def body(proxies: dict[str, Any]) -> GeneratedBody:
        text = render(
            "scan.cu.j2",
            name=reducer.name,
            stage=variant.stage,
            exclusive=variant.exclusive,
            items=variant.items,
            block=BLOCK,
            tile=BLOCK * variant.items,
            window=WINDOW,
            status_words=status_words(acc),
            input={"cctype": compute_ctype(value), "storage": storage_ctype(value), "itemsize": value.itemsize},
            acc=accumulator_context(acc),
            result={"storage": storage_ctype(result), "cctype": compute_ctype(result)},
            combine=reducer.expression(acc),
            identity=reducer.identity_text(acc),
            pre=reducer.pre,
            pre_param=reducer.pre_param,
        )
        host_plan = HOST_LINES.format(items=variant.items) if variant.stage == "host-lines" else None
        decisions = ScanDecisions(stage=variant.stage, accumulation=acc, items=variant.items, host_plan=host_plan)
        return GeneratedBody(text, decisions)

    name = f"{reducer.name}_scan_{variant.stage}"
    block = 1 if variant.stage == "host-lines" else BLOCK
    return make_kernel(name, _params(ndim, out_ndim, variant, value, acc, result), body, block=block)


def status_words(acc: np.dtype) -> int:
    """64-bit words of a look-back tile status: the flag beside a value of up to 4 bytes, or two."""
    return 1 if acc.itemsize <= 4 else 2


@dataclass(frozen=True)
class ScanStep:
    """The one launch a scan call makes: its kernel and grid, and for look-back the tiles."""

    variant: ScanVariant
    kernel: Kernel
    blocks: int
    tiles: int = 0


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def host_width(outer: int, inner: int, acc_itemsize: int, cores: int) -> int:
    """Adjacent lines a host-lines thread scans together: 1 along the innermost axis, else a power
    of two from ``HOST_LINES_MIN`` up to ``HOST_COLUMN_BYTES`` of running values (and ``BLOCK``),
    as wide as leaves ``HOST_ITEMS_PER_CORE`` tiles a core."""
    if inner == 1:
        return 1
    widest = min(BLOCK, HOST_COLUMN_BYTES // acc_itemsize)
    share = max(1, outer * inner // (cores * HOST_ITEMS_PER_CORE))
    return max(HOST_LINES_MIN, min(widest, 1 << (share.bit_length() - 1)))


@dataclass(eq=False)
class ScanPlan(Plan):
    """A compiled scan for one input dtype and shape, axis and inclusiveness."""

    name: str
    reducer: Reducer
    sources: tuple[tuple[str, Any], ...]
    value_shape: tuple[int, ...]
    axis: int | None
    exclusive: bool
    shape: tuple[int, ...]
    value: np.dtype
    acc: np.dtype
    dtype: np.dtype
    _steps: dict[tuple[int, bool], ScanStep] = field(default_factory=dict, init=False, repr=False)  # by SMs, host

    @cached_property
    def extents(self) -> tuple[int, int, int]:
        """(outer, count, inner): the scanned axis with what comes before and after it."""
        if self.axis is None:
            return 1, int(np.prod(self.value_shape, dtype=np.int64)), 1
        outer = int(np.prod(self.value_shape[: self.axis], dtype=np.int64))
        inner = int(np.prod(self.value_shape[self.axis + 1 :], dtype=np.int64))
        return outer, self.value_shape[self.axis], inner

    def step(self, sms: int, host: bool = False) -> ScanStep:
        """The launch for this shape on a device with ``sms`` multiprocessors (``host``: the CPU
        device's plan), decided once per plan and kind of device: warm calls only look it up."""
        found = self._steps.get((sms, host))
        if found is None:
            found = self._steps[(sms, host)] = self._decide(sms, host)
        return found

    @cached_property
    def status_roles(self) -> tuple[str, str]:
        """Scratch roles of the look-back statuses (one layout per status word count)."""
        words = status_words(self.acc)
        return f"scan-aggregates-{words}", f"scan-inclusive-{words}"

    def _decide(self, sms: int, host: bool) -> ScanStep:
        outer, count, inner = self.extents
        ndim, out_ndim = len(self.value_shape), len(self.shape)
        if host:
            width = host_width(outer, inner, self.acc.itemsize, sms)
            variant = ScanVariant("host-lines", self.exclusive, width)
            kernel = scan_kernel(self.reducer, ndim, out_ndim, variant, self.value, self.acc, self.dtype)
            tiles = outer * _ceil(inner, width)
            return ScanStep(variant, kernel, max(1, min(tiles, sms * HOST_BLOCKS_PER_CORE)))
        if inner == 1 and count > LINES_MAX:
            items = max(1, min(MAX_ITEMS, ITEMS_BYTES // max(self.value.itemsize, self.acc.itemsize)))
            variant = ScanVariant("lookback", self.exclusive, items)
            tiles = outer * _ceil(count, BLOCK * items)
            kernel = scan_kernel(self.reducer, ndim, out_ndim, variant, self.value, self.acc, self.dtype)
            return ScanStep(variant, kernel, tiles, tiles)
        variant = ScanVariant("lines", self.exclusive)
        kernel = scan_kernel(self.reducer, ndim, out_ndim, variant, self.value, self.acc, self.dtype)
        return ScanStep(variant, kernel, max(1, min(_ceil(outer * inner, BLOCK), sms * 16)))

    def run_host(self, values: list[Any], out: Any) -> Any:
        session = default_session()
        (value,) = values
        device = device_operand(session, value)
        result, host = host_result(session, self.shape, self.dtype)
        try:
            self.launch([device], result, session)
            if host is None:
                host = result.to_host()
        finally:
            release([result, device])
        if out is not None:
            out[...] = host
            return out
        return host

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        """The scan into ``out``, reading an input that overlaps it at other elements from a copy
        (tiles would read what other tiles already wrote). An input that is exactly ``out`` is
        scanned in place: both stages read each element before they write it, in the thread
        that writes it, as an elementwise kernel does."""
        if out.size == 0:
            return
        step = self.step(device_multiprocessors(session), host_plans(session))
        (value,) = values
        step.kernel(unalias(value, out, session), out, *self._after(step, session), grid=(step.blocks, 1, 1))

    def _after(self, step: ScanStep, session: Any) -> tuple[Any, ...]:
        """The arguments after the output: the extents, and for look-back its scratch and epoch."""
        outer, count, inner = self.extents
        if step.variant.stage != "lookback":
            return (count, outer, inner)
        epoch, wrapped = SCRATCH.next_epoch(session)
        words = status_words(self.acc)
        roles = self.status_roles
        if wrapped:
            for role in roles:
                SCRATCH.discard(session, role, _UINT64)
        status = tuple(SCRATCH.get(session, role, _UINT64, step.tiles * words, zeroed=True) for role in roles)
        counter = SCRATCH.get(session, "scan-counter", _UINT32, 1, zeroed=True)
        return (*status, counter, count, outer, epoch)

    def warm_entry(
        self, warm: WarmPath, values: Sequence[Any], out: Any, session: Any, stream: Any, result: Any
    ) -> GridLaunch | None:
        """The prebuilt launch of calls like this one (contiguous operand and result, outside
        graph capture), as reductions have."""
        if session is None or stream is not None or session.capturing:
            return None
        if nvtx.ON or self.copies or type(result) is not memory.array_type or not result.size:
            return None
        if out is not None and overlaps_out(values, out, in_place=True):  # the full path reads a copy
            return None
        step = self.step(device_multiprocessors(session), host_plans(session))
        after = self._after(step, session)
        found = step.kernel.lookup((*values, result, *after), {})
        if found is None or found[1]:
            return None
        lookback = step.variant.stage == "lookback"
        front = GridFront(found[0], (step.blocks, 1, 1))
        return GridLaunch(
            front,
            session,
            (),
            after,
            ((self.shape, self.dtype),),
            scratch=after[:3] if lookback else (),
            epoch=self._next_epoch if lookback else None,
            in_place=True,
        )

    def _next_epoch(self, session: Any) -> int | None:
        """A look-back launch's epoch; None when the epochs start over: the status buffers are
        dropped and the full path makes zeroed ones."""
        epoch, wrapped = SCRATCH.next_epoch(session)
        if wrapped:
            for role in self.status_roles:
                SCRATCH.discard(session, role, _UINT64)
            return None
        return epoch

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        step = self.step(INSPECT_MULTIPROCESSORS)
        outer, count, inner = self.extents
        target = out if out is not None else np.empty(self.shape, self.dtype)
        (value,) = self.values(args)
        if step.variant.stage == "lines":
            return step.kernel.inspect(value, target, count, outer, inner, arch=arch)
        status = (np.zeros(2, _UINT64), np.zeros(2, _UINT64), np.zeros(1, _UINT32))
        return step.kernel.inspect(value, target, *status, count, outer, 1, arch=arch)


class Scan:
    """A callable scan: ``f(x, axis=None, out=None, exclusive=False)``."""

    def __init__(self, reducer: Reducer, home: str | None = None) -> None:
        """``home``: the module that holds this scan under its name (``kd.ops``'s pickle by name)."""
        self.reducer = reducer
        self.name = self.__name__ = reducer.name
        self.home = home
        self._plans = PlanCache()
        self._warm = WarmPath()  # launch.warm: prebuilt launches of calls a plan ran once

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by name when a module holds it, else as its declaration, without its plans."""
        if self.home is not None:
            return (public, (self.home, self.name))
        return (Scan, (self.reducer,))

    def __repr__(self) -> str:
        return f"<kd scan {self.name}>"

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, x: HostOperand, axis: Any = None, out: HostArray | None = None, exclusive: bool = False
    ) -> HostArray: ...
    @overload
    def __call__(
        self, x: RemoteArrayT, axis: Any = None, out: RemoteArrayT | None = None, exclusive: bool = False
    ) -> RemoteArrayT: ...
    @overload
    def __call__(
        self, x: DeviceOperand, axis: Any = None, out: DeviceArray | None = None, exclusive: bool = False
    ) -> DeviceArray: ...
    def __call__(self, x: Any, axis: Any = None, out: Any = None, exclusive: bool = False) -> Any:
        """The operand's kind decides the result's (``operands``): numpy, DeviceArray or RemoteArray."""
        if isinstance(x, Traced):
            raise FusionError(f"{self.name}: a scan cannot be fused; call it on the fused function's result")
        key = None
        if type(exclusive) is bool and exact_axis(axis):
            key = call_key((x,), out, axis, exclusive)
            if key is not None:
                result = self._warm.run(key, (x,), out)
                if result is not None:
                    return result
        exclusive = _check_flag(exclusive, "exclusive", self.name)
        make = lambda values, o: self._plan(values, axis, o, exclusive)  # noqa: E731
        remote = {k: v for k, v in (("axis", axis), ("exclusive", exclusive)) if v is not None and v is not False}
        warm = None if key is None else self._warm
        return self._plans.call(self.name, (x,), out, (axis, exclusive), make, warm, key, remote=(self, remote))

    def inspect(
        self, x: Any, axis: Any = None, out: Any = None, exclusive: bool = False, arch: str | None = None
    ) -> Build:
        """The Build of the kernel a call with this operand runs; no GPU needed."""
        return self._plan((x,), axis, out, exclusive).inspect((x,), out, arch)

    def strategy(
        self, x: Any, axis: Any = None, exclusive: bool = False, multiprocessors: int | None = None
    ) -> ScanStep:
        """The launch a call with this operand makes (stage, items per thread, tiles) on a GPU with
        ``multiprocessors`` SMs (by default the device a call would run on, as for reductions)."""
        return self._plan((x,), axis, None, exclusive).step(planning_multiprocessors(multiprocessors))

    def _plan(self, values: Sequence[Any], axis: Any, out: Any, exclusive: bool) -> ScanPlan:
        (x,) = values
        if not (hasattr(x, "shape") and hasattr(x, "dtype")) or isinstance(x, (bool, int, float, complex)):
            raise TypeError(f"{self.name}: expected an array, got {type(x).__name__}")
        value = promotion.supported(x.dtype)
        promotion.refuse_complex(self.name, value, why="scans take real and integer dtypes only")
        shape = tuple(int(d) for d in x.shape)
        axes = normalize_axes(axis, len(shape), self.name, single=True) if shape else None
        ax = None if axes is None else axes[0]
        result_shape = (int(np.prod(shape, dtype=np.int64)),) if ax is None else shape
        result = self.reducer.result(value)
        if out is not None:
            check_out(out, result_shape, result, self.name)
            result = np.dtype(out.dtype)
        acc = self.reducer.accumulate(value)
        return ScanPlan(self.name, self.reducer, (("arg", 0),), shape, ax, exclusive, result_shape, value, acc, result)


def _check_flag(flag: Any, what: str, name: str) -> bool:
    if not isinstance(flag, (bool, np.bool_)):
        raise TypeError(f"{name}: {what} must be True or False, not {flag!r}")
    return bool(flag)


cumsum = Scan(replace(REDUCERS["sum"], name="cumsum"), home="kerneldsl.array.ops")
cumprod = Scan(replace(REDUCERS["prod"], name="cumprod"), home="kerneldsl.array.ops")


def scan(op: str = "a + b", identity: str = "0", map: str = "x", dtype: Any = None, name: str = "scan") -> Scan:
    """Declare a scan from C expressions: ``op`` combines the running value ``a`` with the next
    ``b`` (associative; it need not commute: values combine in index order), ``identity`` is its
    neutral value (or ``"max"``/``"min"``), ``map`` the contribution of element ``x``. The
    accumulation dtype is the input's (float16/bfloat16 -> float32), the result ``dtype`` or the
    input's; ``name`` names the scan in its kernels and errors.

    Returns
    -------
    Scan
        Called as ``f(x, axis=None, out=None, exclusive=False)``, like ``kd.ops.cumsum``.

    Examples
    --------
    .. code-block:: python

        import numpy as np

        import kerneldsl as kd

        running_max = kd.scan(op="a > b ? a : b", identity="min", name="running_max")
        print(running_max(np.array([3.0, 1.0, 4.0, 1.0, 5.0])))
    """
    return Scan(user_reducer(name, op, identity, map, dtype))
