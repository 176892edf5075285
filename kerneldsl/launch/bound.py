"""The bridge from a Build to a session: a loaded kernel with its parameter buffer and adapter.

``BoundLaunch`` is created once per (specialization, session, thread) and then called on the
warm path: everything that can be done once (module load, function lookup, buffer and pointer
array allocation, adapter construction) happens in its constructor. ``stage_host_call`` is the
numpy path: copy in, launch, copy back, free, all within the call.
"""

from __future__ import annotations

import ctypes
import math
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import to_bfloat16_bits, to_complex
from ..errors import AliasingError, BindingError, ReadOnlyArrayError, ShapeMismatchError, WrongSessionError
from ..jit.launch_contract import launch_dims
from ..jit.signature import ArrayParam, Signature
from ..jit.specialize import ScalarCheck, check_scalar_value
from ..runtime import memory
from ..runtime.limits import MAX_INDEX32_THREADS
from ..runtime.selection import CPU
from ..runtime.staging import Region, staged_bytes
from .warm import CEntry, Declined

if TYPE_CHECKING:
    from ..jit.build import Build
    from ..jit.specialize import Specialization


def unusable_array(kernel: str, param: str, array: Any, session: Any) -> None:
    """The adapter's slow path for an array it cannot launch with: say exactly why."""
    array._check()
    raise WrongSessionError(
        f"argument {param!r} of kernel {kernel!r} belongs to session {array.session.session_id} "
        f"(device {array.device}), the call runs in session {session.session_id} (device {session.device})"
    )


class WideIndexNeeded(Declined):
    """Raised by a 32-bit-index adapter, before anything is packed or launched, for a launch with
    more threads along an axis than int32 can number; dispatch then takes the 64-bit build (a
    warm entry declines the call to the full path, which does)."""


ADAPTER_RUNTIME = types.SimpleNamespace(
    WideIndexNeeded=WideIndexNeeded,
    ShapeMismatchError=ShapeMismatchError,
    BindingError=BindingError,
    AliasingError=AliasingError,
    unusable_array=unusable_array,
    to_bfloat16_bits=to_bfloat16_bits,
    to_complex=to_complex,
    index=operator.index,
    ldexp=math.ldexp,
)


class BoundLaunch:
    """A build loaded into one session, ready to launch with device arguments."""

    __slots__ = ("build", "session", "function", "_buffer", "_pointers", "call", "c_entry", "wide", "scalar_checks")

    def __init__(self, build: Build, session: Any) -> None:
        self.build = build
        self.session = session
        module = session.load_module(build.image)
        self.function = module.function(build.generated.entry)
        slots = max(len(build.generated.abi), 1)
        self._buffer = (ctypes.c_char * (8 * slots))()
        base = ctypes.addressof(self._buffer)
        self._pointers = (ctypes.c_void_p * slots)(*[base + 8 * i for i in range(slots)])
        self.call: Callable[..., None] = build.launch_factory()(
            ADAPTER_RUNTIME, session, self.function, self._buffer, ctypes.addressof(self._pointers)
        )
        self.c_entry = CEntry()
        self.wide: BoundLaunch | None = None  # the 64-bit-index build, once a launch needed it
        self.scalar_checks: tuple[ScalarCheck, ...] = ()

    def check_scalars(self, checks: tuple[ScalarCheck, ...]) -> None:
        """Have every call check these scalar arguments' values first (``specialize.scalar_checks``:
        numpy scalars that may change value); such calls stay on the Python path."""
        self.scalar_checks = checks
        if not checks:
            return
        adapter = self.call
        kernel = self.build.specialization.signature.name

        def call(*args: Any) -> None:
            for index, param, et in checks:
                check_scalar_value(kernel, param, et, args[index])
            adapter(*args)

        self.call = call


def resolved_launch_dims(
    spec: Specialization, args: tuple[Any, ...], grid: Any, block: Any, shared: Any
) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    """The grid, block and shared bytes a call with ``args`` (bound to ``spec``) launches, each
    the override where one is given, computed as the generated adapter computes them."""
    sig = spec.signature
    values = {n: v for n, v in spec.consts if type(v) is int}  # launch dimensions take int constants
    by_name = dict(zip((p.name for p in sig.runtime_params), args))
    for symbol, (param, axis) in sig.symbols.items():
        values[symbol] = int(by_name[param].shape[axis])
    dims = [e.evaluate(values) for e in launch_dims(sig)]
    return (
        tuple(dims[0:3]) if grid is None else grid,
        tuple(dims[3:6]) if block is None else block,
        dims[6] if shared is None else shared,
    )


def dim3(kernel: str, what: str, value: Any) -> tuple[int, ...]:
    """``value`` as three ints (x, y, z), the missing ones 1."""
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in dims):
        raise BindingError(kernel, None, f"{what} override must be 1 to 3 non-negative ints, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def needs_wide_index(grid: tuple[int, ...], block: tuple[int, ...]) -> bool:
    """The adapter's rule: a 32-bit ``index_t`` cannot number more than 2**31-1 threads along an axis."""
    return any(g * b > MAX_INDEX32_THREADS for g, b in zip(grid, block))


def check_host_arguments(sig: Signature, args: tuple[Any, ...]) -> None:
    """Refuse what the borrowing path cannot honour, before any copy: read-only, strided, aliased."""
    arrays = [(p, a) for p, a in zip(sig.runtime_params, args) if isinstance(p, ArrayParam)]
    for p, a in arrays:
        if not isinstance(a, np.ndarray):
            continue
        if p.writes and not a.flags.writeable:
            raise ReadOnlyArrayError(sig.name, p.name, f"is read-only but the kernel writes it ({p.direction})")
        if p.writes and not a.flags.c_contiguous:
            raise BindingError(
                sig.name,
                p.name,
                "is not C-contiguous and the kernel writes it: pass np.ascontiguousarray(x) and copy the result "
                "back yourself, or pass a DeviceArray",
            )
    if sig.allow_alias:
        return
    for i, (p, a) in enumerate(arrays):
        for q, b in arrays[i + 1 :]:
            if (p.writes or q.writes) and isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                if np.shares_memory(a, b):
                    raise AliasingError(sig.name, q.name, f"shares memory with {p.name!r} and one of them is written")


def stage_host_call(
    bound: BoundLaunch, sig: Signature, args: tuple[Any, ...], grid: Any, block: Any, shared: Any, stream: Any
) -> None:
    """Copy host inputs in, launch, copy host outputs back; the host arrays are not kept.

    On the session stream, transfers that fit one of the session's staging buffers go through
    it (pinned host memory and device memory, both reused: one wait for the whole call); larger
    ones, calls on another stream and calls while every buffer is lent copy directly, with device
    buffers from the session's pool.
    """
    session = bound.session
    if (
        session.device == CPU
        and not session.captures
        and _host_memory_call(bound, sig, args, grid, block, shared, stream)
    ):
        return
    hosts = [a for p, a in zip(sig.runtime_params, args) if isinstance(p, ArrayParam) and isinstance(a, np.ndarray)]
    buf = session.staging.acquire(staged_bytes(hosts)) if stream is None else None
    if buf is None:
        _direct_host_call(bound, sig, args, grid, block, shared, stream)
        return
    done = False
    try:
        regions = iter(buf.regions(hosts))
        device_args: list[Any] = []
        uploads: list[tuple[Region, np.ndarray]] = []
        downloads: list[tuple[Region, np.ndarray]] = []
        for p, a in zip(sig.runtime_params, args):
            if isinstance(p, ArrayParam) and isinstance(a, np.ndarray):
                region = next(regions)
                if p.direction != "out":
                    uploads.append((region, a))
                if p.writes:
                    downloads.append((region, a))
                device_args.append(region[0])
            else:
                device_args.append(a)
        buf.run(uploads, lambda: bound.call(*device_args, grid, block, shared, None), downloads)
        done = True
    finally:
        session.staging.give_back(buf, done)


def _host_memory_call(
    bound: BoundLaunch, sig: Signature, args: tuple[Any, ...], grid: Any, block: Any, shared: Any, stream: Any
) -> bool:
    """``stage_host_call`` on the CPU device, whose memory is the host's: the kernel reads each
    input array where it is, and writes a copy of each array it writes (an ``Out`` one starts
    uninitialized, as staged), copied back once the launch has succeeded: a failed launch leaves
    the caller's arrays as they were. False, having launched nothing, where an input is not
    C-contiguous or not 16-byte aligned, as a staged specialization assumes its arrays are."""
    session = bound.session
    device_args: list[Any] = []
    written: list[tuple[np.ndarray, np.ndarray]] = []
    for p, a in zip(sig.runtime_params, args):
        if isinstance(p, ArrayParam) and isinstance(a, np.ndarray):
            if p.writes:
                work = np.empty_like(a) if p.direction == "out" else a.copy()
                written.append((work, a))
                a = work
            elif not a.flags.c_contiguous:
                return False
            borrowed = memory.borrow_host(session, a)
            if borrowed.ptr % 16:
                return False
            device_args.append(borrowed)
        else:
            device_args.append(a)
    bound.call(*device_args, grid, block, shared, stream)
    for work, a in written:
        np.copyto(a, work)
    return True


def _direct_host_call(
    bound: BoundLaunch, sig: Signature, args: tuple[Any, ...], grid: Any, block: Any, shared: Any, stream: Any
) -> None:
    """``stage_host_call`` with pageable copies, each waited for."""
    session = bound.session
    device_args: list[Any] = []
    temporaries: list[tuple[Any, np.ndarray | None]] = []
    try:
        for p, a in zip(sig.runtime_params, args):
            if isinstance(p, ArrayParam) and isinstance(a, np.ndarray):
                d = session.empty(a.shape, a.dtype) if p.direction == "out" else session.to_device(a)
                temporaries.append((d, a if p.writes else None))
                device_args.append(d)
            else:
                device_args.append(a)
        bound.call(*device_args, grid, block, shared, stream)
        if stream is not None:
            stream.synchronize()
        for d, host in temporaries:
            if host is not None:
                d.copy_to_host(host)
    finally:
        for d, _ in temporaries:
            d.close()
