"""Dispatch: ``@kd.kernel``, and the Kernel object that ties the pipeline together.

A call computes a small dispatch tuple from its arguments and looks it up; on a hit the
generated adapter validates, packs and launches. On a miss the arguments are bound to a
Specialization, built (disk cache or NVRTC), loaded into the session and remembered.

Declaring imports only what a declaration checks (the signature, the options): the build
pipeline (code generation, the disk cache, diagnostics) is imported by the first build, so a
module that declares many kernels pays for none of them until one is called.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from threading import get_ident
from typing import TYPE_CHECKING, Any

import numpy as np

from . import fastpath
from .compiler import check_options
from .dtypes import INT32_MAX
from .errors import BindingError, CudaError, DeclarationError, WrongSessionError
from .launch import BoundLaunch, WideIndexNeeded, check_host_arguments, stage_host_call
from .routing import find_remote, is_remote, route
from .runtime.foreign import adopt, is_foreign
from .runtime.memory import DeviceArray
from .runtime.session import default_session
from .runtime.stream import Stream
from .signature import ArrayParam, Dim, Signature, parse_signature
from .specialize import Specialization, bind, bind_declared, const_key
from .target import device_arch, resolve_arch

if TYPE_CHECKING:
    from .build import Build
    from .codegen import GeneratedBody

_SCALAR_TYPES = (int, float, bool, np.generic)
_scalar_types: set[type] = {int, float, bool}  # grows with the scalar types calls pass


class Kernel(fastpath.Front):
    """A declared kernel: call it like a function, or ``inspect``/``compile``/``explain`` it.

    Calls enter through ``fastpath.Front``: the C launch path takes warm calls it recognises
    and passes every other call to ``_call``, the Python path described here.
    """

    if TYPE_CHECKING:  # a launch returns nothing; at run time __call__ stays the C (or Py) Front's

        def __call__(self, *args: Any, **kwargs: Any) -> None: ...

    def __init__(
        self,
        func: Callable[..., str | GeneratedBody],
        signature: Signature,
        options: Sequence[str] = (),
        precompile: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        functools.update_wrapper(self, func)
        self.body = func
        self.signature = signature
        self.options = check_options(options)
        self.precompile = tuple(_checked_precompile(signature, p) for p in precompile)
        self._builds: dict[tuple[Specialization, str], Build] = {}
        self._build_locks: dict[tuple[Specialization, str], threading.Lock] = {}
        self._guard = threading.Lock()
        self._bound: dict[tuple[Any, ...], BoundLaunch] = {}
        self._runtime_params = signature.runtime_params
        self._arity = len(self._runtime_params)
        self._c_path = not any(a.strided for a in signature.arrays)  # its tables have no stride slots

    def __repr__(self) -> str:
        return f"<kd.kernel {self.signature.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        """A kernel pickles as its declaration (body, signature, options): whoever unpickles it
        specializes and compiles for its own device, or finds the build in its disk cache."""
        return (Kernel, (self.body, self.signature, self.options, self.precompile))

    # --- building --------------------------------------------------------------------------------

    def get_build(self, spec: Specialization, output: str = "cubin") -> Build:
        """The in-process cache, one lock per key so concurrent threads compile once."""
        key = (spec, output)
        found = self._builds.get(key)
        if found is not None:
            return found
        with self._guard:
            lock = self._build_locks.setdefault(key, threading.Lock())
        with lock:
            found = self._builds.get(key)
            if found is None:
                from .build import build

                found = build(spec, self.body, self.options, output)
                self._builds[key] = found
            return found

    def specialize(self, *args: Any, arch: str | None = None, **consts: Any) -> Specialization:
        args, consts = self.signature.place_arguments(args, consts)
        return bind(self.signature, args, consts, resolve_arch(arch))

    def inspect(self, *args: Any, arch: str | None = None, output: str = "cubin", **consts: Any) -> Build:
        """Build (or fetch) the specialization these arguments select; needs no GPU when arch is known."""
        return self.get_build(self.specialize(*args, arch=arch, **consts), output)

    def compile(self, arch: str | None = None, output: str = "cubin", index_width: int = 32, **bindings: Any) -> Build:
        """Ahead-of-time compile into the disk cache: ``saxpy.compile(T=np.float32, arch="sm_90")``."""
        dtype_vars = set(self.signature.dtype_vars)
        types = {k: v for k, v in bindings.items() if k in dtype_vars}
        consts = {k: v for k, v in bindings.items() if k not in dtype_vars}
        spec = bind_declared(self.signature, types, consts, resolve_arch(arch), index_width)
        return self.get_build(spec, output)

    def explain(self, *args: Any, arch: str | None = None, **consts: Any) -> str:
        """Why these arguments would hit or miss the disk cache."""
        from .build import key_material
        from .cache import get_default_cache
        from .codegen import generate
        from .compiler import build_options

        spec = self.specialize(*args, arch=arch, **consts)
        generated = generate(spec, self.body)
        options = build_options(spec.arch, "cubin", self.options)
        return get_default_cache().explain(key_material(spec, generated, options, "cubin"))

    # --- calling ---------------------------------------------------------------------------------

    def _call(
        self,
        *args: Any,
        grid: Dim | tuple[int, ...] | None = None,
        block: Dim | tuple[int, ...] | None = None,
        shared: int | None = None,
        stream: Any = None,
        **consts: Any,
    ) -> None:
        """Launch: dispatch to the bound specialization, then its generated adapter; a plain
        DeviceArray call is then remembered by the C launch path for the next ones."""
        if consts or len(args) != self._arity:
            args, consts = self.signature.place_arguments(args, consts)
        found = self.lookup(args, consts, stream)
        if found is None and (remote := find_remote(args)) is not None:
            launch = {"grid": grid, "block": block, "shared": shared, "stream": stream}
            return route(remote, self, args, {**{k: v for k, v in launch.items() if v is not None}, **consts})  # type: ignore[no-any-return]
        if found is None:  # foreign arrays: adopt them as DeviceArrays, then dispatch again
            return self(*self._adopt_foreign(args), grid=grid, block=block, shared=shared, stream=stream, **consts)
        bound, staged = found
        if grid is not None:
            grid = _dim3(self.signature.name, "grid", grid)
        if block is not None:
            block = _dim3(self.signature.name, "block", block)
        if staged:
            check_host_arguments(self.signature, args)
            try:
                stage_host_call(bound, self.signature, args, grid, block, shared, stream)
            except WideIndexNeeded:
                stage_host_call(self._wide(bound), self.signature, args, grid, block, shared, stream)
            return
        try:
            bound.call(*args, grid, block, shared, stream)
        except WideIndexNeeded:
            bound = self._wide(bound)
            bound.call(*args, grid, block, shared, stream)
        if bound.session.capturing:
            bound.session.keep_alive(args)
        elif grid is None and block is None and shared is None and not consts and self._c_path:
            if fastpath.stream_entry_ok(stream, bound.session):
                slot = bound.c_slot.on_stream(stream)
                fastpath.remember(self, slot, lambda: fastpath.kernel_launch(bound, args, stream=stream))

    def lookup(
        self, args: tuple[Any, ...], consts: Mapping[str, Any], stream: Any = None
    ) -> tuple[BoundLaunch, bool] | None:
        """The bound specialization these arguments select (binding and building it on a miss),
        and whether numpy arrays make it a staged call (copied in and back by ``stage_host_call``);
        None when foreign arrays need adopting. The session is the first DeviceArray's, else the
        stream's, else the default one.

        The dispatch tuple is cheap enough for every call: DeviceArrays contribute their
        precomputed ``dispatch_tag`` (session, dtype, alignment, index width), scalars their type,
        numpy arrays their dtype, constants their ``const_key``; the thread id keeps parameter
        buffers per thread.
        """
        session = None
        staged = False
        key: list[Any] = [get_ident()]
        add = key.append
        for a in args:
            t = type(a)
            if t is DeviceArray:
                if session is None:
                    session = a.session
                add(a.dispatch_tag)
            elif t in _scalar_types:
                add(t)
            elif isinstance(a, np.ndarray):
                staged = True
                add((t, a.dtype, a.size > INT32_MAX))
            elif isinstance(a, _SCALAR_TYPES) or not (is_foreign(a) or is_remote(a)):
                _scalar_types.add(t)
                add(t)
            else:
                return None
        if session is None:
            session = default_session() if type(stream) is not Stream else stream.session
            add(session.session_id)
        if consts:
            add(const_key(sorted(consts.items())))
        frozen = tuple(key)
        try:
            bound = self._bound.get(frozen)
        except TypeError:  # an unhashable constant (a list, an array): binding names what is wrong
            bind(self.signature, args, consts, _session_arch(session))
            raise
        if bound is None:
            bound = self._bind_call(frozen, session, args, consts)
        return bound, staged

    def _bind_call(
        self, key: tuple[Any, ...], session: Any, args: tuple[Any, ...], consts: Mapping[str, Any]
    ) -> BoundLaunch:
        spec = bind(self.signature, args, consts, _session_arch(session))
        b = self.get_build(spec)
        try:
            bound = BoundLaunch(b, session)
        except CudaError:
            bound = self._reload(spec, session)
        self._bound[key] = bound
        return bound

    def _wide(self, narrow: BoundLaunch) -> BoundLaunch:
        """The 64-bit-index build of ``narrow``'s specialization, for launches with more threads
        along an axis than a 32-bit ``index_t`` can number (the README's index idiom stays exact)."""
        if narrow.wide is None:
            spec = dataclasses.replace(narrow.build.specialization, index_bits=64)
            narrow.wide = BoundLaunch(self.get_build(spec), narrow.session)
        return narrow.wide

    def _reload(self, spec: Specialization, session: Any) -> BoundLaunch:
        """A cached image the driver refused: compile afresh once and replace the cache entry."""
        from .build import build
        from .cache import get_default_cache

        fresh = build(spec, self.body, self.options, use_disk=False)
        get_default_cache().put(fresh.cache_key, fresh.compiled.to_bytes(), fresh.key_material)
        self._builds[(spec, "cubin")] = fresh
        return BoundLaunch(fresh, session)

    def _adopt_foreign(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Wrap CUDA Array Interface / DLPack arrays as zero-copy device views on one session."""
        sessions = {a.session for a in args if type(a) is DeviceArray}
        if len(sessions) > 1:
            raise WrongSessionError(f"arguments of kernel {self.signature.name} come from different sessions")
        session = next(iter(sessions), None)
        adopted = []
        for p, a in zip(self._runtime_params, args):
            if isinstance(a, _SCALAR_TYPES) or type(a) in (DeviceArray, np.ndarray) or not is_foreign(a):
                adopted.append(a)
                continue
            writes = isinstance(p, ArrayParam) and p.writes
            array = adopt(a, session, f"kernel {self.signature.name}", p.name, writes=writes)
            session = array.session
            adopted.append(array)
        return tuple(adopted)


_arch_by_device: dict[int, str] = {}


def _session_arch(session: Any) -> str:
    arch = _arch_by_device.get(session.device)
    if arch is None:
        arch = _arch_by_device[session.device] = device_arch(session.device)
    return arch


def _checked_precompile(sig: Signature, bindings: Mapping[str, Any]) -> dict[str, Any]:
    """One ``precompile=`` entry, bound now so that a bad dtype fails at decoration, not at ``compile``."""
    types = {k: v for k, v in bindings.items() if k in sig.dtype_vars}
    consts = {k: v for k, v in bindings.items() if k not in sig.dtype_vars}
    try:
        bind_declared(sig, types, consts, "sm_90")
    except BindingError as exc:
        raise DeclarationError(sig.name, None, f"precompile entry {dict(bindings)!r}: {exc}") from None
    return dict(bindings)


def _dim3(kernel: str, what: str, value: Any) -> tuple[int, ...]:
    """``value`` as three ints (x, y, z), the missing ones 1."""
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in dims):
        raise BindingError(kernel, None, f"{what} override must be 1 to 3 non-negative ints, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def kernel(
    grid: Dim | tuple[Dim, ...] = 1,
    block: Dim | tuple[Dim, ...] = 1,
    shared: Dim = 0,
    options: Sequence[str] = (),
    specialize: Sequence[str] = (),
    allow_alias: bool = False,
    precompile: Sequence[Mapping[str, Any]] = (),
    strided: Sequence[str] = (),
) -> Callable[[Callable[..., str]], Kernel]:
    """Declare a kernel. The decorated function returns the CUDA body; its annotations declare the rest.

    ``strided=("x",)``: array ``x`` may be a strided view (``a.T``, ``a[::2]``); the body indexes
    it with ``{x.strides[k]}``, its element strides, passed at launch. Other arrays must be
    C-contiguous (a strided view there is a ``StridedArrayError``)."""

    def decorate(func: Callable[..., str]) -> Kernel:
        sig = parse_signature(func, grid, block, shared, tuple(specialize), allow_alias, tuple(strided))
        return Kernel(func, sig, options, precompile)

    return decorate
