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
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from threading import get_ident
from typing import TYPE_CHECKING, Any, Generic, cast

import numpy as np

from ..dtypes import INT32_MAX
from ..errors import (
    BindingError,
    CudaError,
    DeclarationError,
    DriverNotFoundError,
    KernelDSLError,
    LaunchConfigError,
    NoDeviceError,
    WrongSessionError,
)
from ..jit.compiler import check_options
from ..jit.device_code import NO_DEVICE_CODE, DeviceCode, DeviceFunction, declared
from ..jit.signature import ArrayParam, Dim, Signature, check_constant_launch_limits, parse_signature
from ..jit.specialize import Specialization, bind, bind_declared, const_key, scalar_checks
from ..jit.target import resolve_arch
from ..runtime import nvtx
from ..runtime.foreign import adopt, is_foreign
from ..runtime.memory import ARRAY_TYPES
from ..runtime.session import default_session, session_of
from ..runtime.session_launch import check_launch_dims
from ..runtime.stream import Stream, check_stream
from . import fastpath, warm
from .bound import (
    BoundLaunch,
    WideIndexNeeded,
    check_host_arguments,
    dim3,
    needs_wide_index,
    resolved_launch_dims,
    stage_host_call,
)
from .resources import KernelResources
from .routing import RemoteCall, RemoteHandle, find_remote, is_remote, route

if TYPE_CHECKING:
    from typing import Concatenate, TypeVar, overload

    from typing_extensions import ParamSpec

    from ..jit.build import Build
    from ..jit.codegen import GeneratedBody

    _P = ParamSpec("_P", default=...)  # a bare ``Kernel`` is a kernel of any declaration
    _Q = ParamSpec("_Q")
    _Call = TypeVar("_Call", bound=RemoteCall)  # what a call on a remote worker gives: a RemoteFuture
    _Grid = Dim | tuple[int, ...] | None
else:
    import typing

    _P = typing.ParamSpec("_P")

_SCALAR_TYPES = (int, float, bool, np.generic)
_ANY_ARCH = "sm_90"  # binding checks a call's arguments the same way for every arch
_scalar_types: set[type] = {int, float, bool}  # grows with the scalar types calls pass


class Kernel(fastpath.FastPathCallable, KernelResources, Generic[_P]):
    """A declared kernel: call it like a function, or ``inspect``/``compile``/``explain`` it.

    Calls enter through ``fastpath.FastPathCallable``: the C launch path takes warm calls it recognises
    and passes every other call to ``_call``, the Python path described here.

    For type checkers a kernel is generic in its body function's parameters (``_P``): a call
    takes what they declare (see ``signature``'s checker types), returns None, or a
    ``RemoteFuture`` when its first argument is a ``RemoteArray`` (``routing.RemoteHandle``).
    Launch overrides are typed through ``launch(grid=, block=, shared=, stream=)``.
    """

    if TYPE_CHECKING:  # at run time __call__ stays the (C or Python) FastPathCallable's

        @overload
        def __call__(
            self: Kernel[Concatenate[Any, _Q]], first: RemoteHandle[_Call], /, *args: _Q.args, **kwargs: _Q.kwargs
        ) -> _Call: ...
        @overload
        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> None: ...
        # With a launch keyword the arguments are not checked (a ParamSpec cannot take keywords):
        # ``launch(...)`` is the checked spelling.
        @overload
        def __call__(self, *args: Any, grid: _Grid, **kwargs: Any) -> RemoteCall | None: ...
        @overload
        def __call__(self, *args: Any, block: _Grid, **kwargs: Any) -> RemoteCall | None: ...
        @overload
        def __call__(self, *args: Any, shared: int | None, **kwargs: Any) -> RemoteCall | None: ...
        @overload
        def __call__(self, *args: Any, stream: Stream | None, **kwargs: Any) -> RemoteCall | None: ...
        def __call__(self, *args: Any, **kwargs: Any) -> Any: ...  # type: ignore[misc]

    def __init__(
        self,
        func: Callable[_P, str | GeneratedBody],
        signature: Signature,
        options: Sequence[str] = (),
        precompile: Sequence[Mapping[str, Any]] = (),
        code: DeviceCode = NO_DEVICE_CODE,
    ) -> None:
        # update_wrapper wants a Callable; __call__'s remote overload is generic in its result
        functools.update_wrapper(cast("Callable[..., object]", self), func)
        self.body: Callable[_P, str | GeneratedBody] = func
        self.signature = signature
        self.options = check_options(options)
        self.precompile = tuple(_checked_precompile(signature, p) for p in precompile)
        self.code = code  # includes=, include_dirs= and uses=, validated
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
        return (Kernel, (self.body, self.signature, self.options, self.precompile, self.code))

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
                from ..jit.build import build

                found = build(spec, self.body, self.options, output, code=self.code)
                self._builds[key] = found
            return found

    def specialize(self, *args: Any, arch: str | None = None, **consts: Any) -> Specialization:
        args, consts = self.signature.place_arguments(args, consts)
        return bind(self.signature, args, consts, resolve_arch(arch))

    def inspect(
        self,
        *args: Any,
        arch: str | None = None,
        output: str = "cubin",
        grid: Dim | tuple[int, ...] | None = None,
        block: Dim | tuple[int, ...] | None = None,
        shared: int | None = None,
        **consts: Any,
    ) -> Build:
        """Build (or fetch) what a call with these arguments would run, after the checks it makes
        (binding, host arrays, launch limits), in the index width it would take; needs no GPU
        when arch is known."""
        return self.get_build(self._call_specialization(args, consts, resolve_arch(arch), grid, block, shared), output)

    def _call_specialization(
        self, args: tuple[Any, ...], consts: dict[str, Any], arch: str, grid: Any, block: Any, shared: Any
    ) -> Specialization:
        """What a call decides before it needs a device: the bound specialization, refused host
        arrays and launch overrides, the launch limits, and the 64-bit index for a launch with
        more threads along an axis than int32 numbers (the adapter's ``WideIndexNeeded``)."""
        args, consts = self.signature.place_arguments(args, consts)
        spec = bind(self.signature, args, consts, arch)
        name = self.signature.name
        grid = None if grid is None else dim3(name, "grid", grid)
        block = None if block is None else dim3(name, "block", block)
        check_host_arguments(self.signature, args)
        grid, block, shared = resolved_launch_dims(spec, args, grid, block, shared)
        check_launch_dims(grid, block, shared, name)
        if spec.index_bits == 32 and needs_wide_index(grid, block):
            spec = dataclasses.replace(spec, index_bits=64)
        return spec

    def compile(self, arch: str | None = None, output: str = "cubin", index_width: int = 32, **bindings: Any) -> Build:
        """Ahead-of-time compile into the disk cache: ``saxpy.compile(T=np.float32, arch="sm_90")``."""
        dtype_vars = set(self.signature.dtype_vars)
        types = {k: v for k, v in bindings.items() if k in dtype_vars}
        consts = {k: v for k, v in bindings.items() if k not in dtype_vars}
        spec = bind_declared(self.signature, types, consts, resolve_arch(arch), index_width)
        return self.get_build(spec, output)

    def explain(self, *args: Any, arch: str | None = None, **consts: Any) -> str:
        """Why these arguments would hit or miss the disk cache."""
        from ..cache import get_default_cache
        from ..jit.build import key_material
        from ..jit.codegen import render_inputs
        from ..jit.compiler import build_options
        from ..jit.headers import resolve

        spec = self.specialize(*args, arch=arch, **consts)
        inputs = render_inputs(spec, self.body, self.code)
        options = build_options(spec.arch, "cubin", self.options)
        headers = resolve(self.code, inputs.includes)
        return get_default_cache().explain(key_material(spec, inputs.render(), options, "cubin", headers))

    # --- calling ---------------------------------------------------------------------------------

    def launch(
        self,
        grid: _Grid = None,
        block: _Grid = None,
        shared: int | None = None,
        stream: Stream | None = None,
    ) -> Launch[_P]:
        """The launch overrides a call also takes as keywords, in a spelling type checkers follow:
        ``saxpy.launch(grid=7, block=128)(dy, dx, a)`` is ``saxpy(dy, dx, a, grid=7, block=128)``."""
        given = {"grid": grid, "block": block, "shared": shared, "stream": stream}
        return Launch(self, {k: v for k, v in given.items() if v is not None})

    def _call(
        self,
        *args: Any,
        grid: Dim | tuple[int, ...] | None = None,
        block: Dim | tuple[int, ...] | None = None,
        shared: int | None = None,
        stream: Any = None,
        **consts: Any,
    ) -> Any:
        """Launch through the bound specialization's adapter; the C path then remembers a plain call."""
        if consts or len(args) != self._arity:
            args, consts = self.signature.place_arguments(args, consts)
        try:
            found = self.lookup(args, consts, stream)
        except (DriverNotFoundError, NoDeviceError):
            try:  # no device to run on: a wrong call still gets its own error, the one inspect gives
                self._call_specialization(args, consts, _ANY_ARCH, grid, block, shared)
            except KernelDSLError as wrong:
                raise wrong from None
            raise
        if stream is not None:  # before the adapter converts a scalar or packs a pointer
            check_stream(stream, None if found is None else found[0].session)
        if found is None and (remote := find_remote(args)) is not None:
            launch = {"grid": grid, "block": block, "shared": shared, "stream": stream}
            return route(remote, self, args, {**{k: v for k, v in launch.items() if v is not None}, **consts})
        if found is None:  # foreign arrays: adopt them as DeviceArrays, then dispatch again
            return self(*self._adopt_foreign(args), grid=grid, block=block, shared=shared, stream=stream, **consts)
        bound, staged = found
        grid = None if grid is None else dim3(self.signature.name, "grid", grid)
        block = None if block is None else dim3(self.signature.name, "block", block)
        try:  # a LaunchConfigError comes from the session's checks, which know the function, not its kernel
            if staged:
                return _staged_call(self, bound, args, grid, block, shared, stream)
            try:
                call = nvtx.ranged(bound.call, "launch", bound.build.specialization) if nvtx.ON else bound.call
                call(*args, grid, block, shared, stream)
            except WideIndexNeeded:
                bound = self._wide(bound)
                bound.call(*args, grid, block, shared, stream)
        except LaunchConfigError as exc:
            raise exc.naming(self.signature.name) from None
        if bound.session.capturing:
            bound.session.keep_alive(args)
        elif grid is None and block is None and shared is None and not consts and self._c_path and not nvtx.ON:
            entry = bound.c_entry.on_stream(stream)  # checked on entry; the C path declines it once closed
            warm.remember(self, entry, lambda: fastpath.kernel_launch(bound, args, stream=stream))

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
            if t in ARRAY_TYPES:
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
            session = default_session() if type(stream) is not Stream else session_of(stream)
            add(session.session_id)
        if consts:
            add(const_key(sorted(consts.items())))
        frozen = tuple(key)
        try:
            bound = self._bound.get(frozen)
        except TypeError:  # an unhashable constant (a list, an array): binding names what is wrong
            bind(self.signature, args, consts, session.gpu.arch)
            raise
        if bound is None:
            bound = self._bind_call(frozen, session, args, consts)
        return bound, staged

    def _bind_call(
        self, key: tuple[Any, ...], session: Any, args: tuple[Any, ...], consts: Mapping[str, Any]
    ) -> BoundLaunch:
        spec = bind(self.signature, args, consts, session.gpu.arch)
        b = self.get_build(spec, session.gpu.output)
        try:
            bound = BoundLaunch(b, session)
        except CudaError:
            bound = self._reload(spec, session)
        bound.check_scalars(scalar_checks(self.signature, spec, args))
        self._bound[key] = bound
        return bound

    def _wide(self, narrow: BoundLaunch) -> BoundLaunch:
        """The 64-bit-index build of ``narrow``'s specialization, for launches with more threads
        along an axis than a 32-bit ``index_t`` can number (the README's index idiom stays exact)."""
        if narrow.wide is None:
            spec = dataclasses.replace(narrow.build.specialization, index_bits=64)
            narrow.wide = BoundLaunch(self.get_build(spec, narrow.session.gpu.output), narrow.session)
            narrow.wide.check_scalars(narrow.scalar_checks)
        return narrow.wide

    def _reload(self, spec: Specialization, session: Any) -> BoundLaunch:
        """A cached image the driver refused: compile afresh once and replace the cache entry."""
        from ..cache import get_default_cache
        from ..jit.build import build

        output = session.gpu.output
        fresh = build(spec, self.body, self.options, output, use_disk=False, code=self.code)
        get_default_cache().put(fresh.cache_key, fresh.compiled.to_bytes(), fresh.key_material)
        self._builds[(spec, output)] = fresh
        return BoundLaunch(fresh, session)

    def _adopt_foreign(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Wrap CUDA Array Interface / DLPack arrays as zero-copy device views on one session."""
        sessions = {a.session for a in args if type(a) in ARRAY_TYPES}
        if len(sessions) > 1:
            raise WrongSessionError(f"arguments of kernel {self.signature.name} come from different sessions")
        session = next(iter(sessions), None)
        adopted = []
        for p, a in zip(self._runtime_params, args):
            if isinstance(a, _SCALAR_TYPES) or type(a) in ARRAY_TYPES or type(a) is np.ndarray or not is_foreign(a):
                adopted.append(a)
                continue
            writes = isinstance(p, ArrayParam) and p.writes
            array = adopt(a, session, f"kernel {self.signature.name}", p.name, writes=writes)
            session = array.session
            adopted.append(array)
        return tuple(adopted)


class Launch(Generic[_P]):
    """A kernel with launch overrides (``Kernel.launch``): calls it as its kernel is called."""

    __slots__ = ("kernel", "overrides")

    def __init__(self, kernel: Kernel[_P], overrides: dict[str, Any]) -> None:
        self.kernel = kernel
        self.overrides = overrides

    if TYPE_CHECKING:

        @overload
        def __call__(
            self: Launch[Concatenate[Any, _Q]], first: RemoteHandle[_Call], /, *args: _Q.args, **kwargs: _Q.kwargs
        ) -> _Call: ...
        @overload
        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> None: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        call: Callable[..., Any] = self.kernel
        return call(*args, **self.overrides, **kwargs)

    def __repr__(self) -> str:
        return f"<kd.kernel {self.kernel.signature.name} launch {self.overrides}>"


def _staged_call(
    kernel: Kernel[Any], bound: BoundLaunch, args: tuple[Any, ...], grid: Any, block: Any, shared: Any, stream: Any
) -> None:
    """A call with numpy arrays: refused as the borrowing path cannot honour it, else copied in,
    launched (the 64-bit-index build where the launch needs it) and copied back."""
    sig = kernel.signature
    check_host_arguments(sig, args)
    try:
        stage_host_call(bound, sig, args, grid, block, shared, stream)
    except WideIndexNeeded:
        stage_host_call(kernel._wide(bound), sig, args, grid, block, shared, stream)


def _checked_precompile(sig: Signature, bindings: Mapping[str, Any]) -> dict[str, Any]:
    """One ``precompile=`` entry, bound now so that a bad dtype fails at decoration, not at ``compile``."""
    types = {k: v for k, v in bindings.items() if k in sig.dtype_vars}
    consts = {k: v for k, v in bindings.items() if k not in sig.dtype_vars}
    try:
        bind_declared(sig, types, consts, "sm_90")
    except BindingError as exc:
        raise DeclarationError(sig.name, None, f"precompile entry {dict(bindings)!r}: {exc}") from None
    return dict(bindings)


def kernel(
    grid: Dim | tuple[Dim, ...] = 1,
    block: Dim | tuple[Dim, ...] = 1,
    shared: Dim = 0,
    options: Sequence[str] = (),
    specialize: Sequence[str] = (),
    allow_alias: bool = False,
    precompile: Sequence[Mapping[str, Any]] = (),
    strided: Sequence[str] = (),
    cooperative: bool = False,
    cluster: Dim | tuple[Dim, ...] | None = None,
    includes: Sequence[str] = (),
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    uses: Sequence[DeviceFunction] = (),
) -> Callable[[Callable[_Q, str | GeneratedBody]], Kernel[_Q]]:
    """Declare a kernel. The decorated function returns the CUDA body; its annotations declare the rest.

    The function's parameters are annotated ``kd.In``/``kd.Out``/``kd.InOut`` (arrays),
    ``kd.Scalar`` (by value) and ``kd.Const`` (compile-time constants); it runs once per
    specialization and returns the body as a string. Launch dimensions are expressions of the
    shape symbols and constants, evaluated at each call.

    Parameters
    ----------
    grid, block : int, shape expression, or a tuple of up to three of them
        Blocks per grid and threads per block: ``grid=kd.cdiv(n, 256)``,
        ``block=(kd.sym("TILE"), kd.sym("TILE"))``. Checked at every launch against the device's
        limits (at most 1024 threads a block; a ``LaunchConfigError`` names the dimension).
    shared : int or shape expression
        Bytes of dynamic shared memory per block, the body's ``extern __shared__`` array
        (``shared=kd.sym("TILE") * 4``); above 48 KiB it is opted into up to the device's limit.
    options : sequence of str
        NVRTC options from an allow-list: macros (``-DNAME=1``), ``--use_fast_math``, the
        ftz/prec flags, ``--maxrregcount=N``, ``-lineinfo``, ``-G``, ``-Xptxas=...``.
    specialize : sequence of str
        Shape symbols whose extent is baked into the build as a constant (one build per extent).
    allow_alias : bool
        Let one array be passed for two parameters when one of them is written (refused by default).
    precompile : sequence of dict
        Bindings (``{"T": np.float32, "TILE": 64}``) that ``kerneldsl compile MODULE`` builds ahead of
        time into the disk cache.
    strided : sequence of str
        Array parameters that may be strided views (``a.T``, ``a[::2]``); the body indexes them with
        ``{x.strides[k]}``, their element strides passed at launch. Other arrays must be
        C-contiguous (a strided view there is a ``StridedArrayError``).
    cooperative : bool
        Every block resident at once (checked against the occupancy at each launch, a
        ``LaunchConfigError`` if the grid does not fit), so a grid-wide barrier works.
    cluster : int, shape expression or tuple, optional
        Launch thread-block clusters of that shape (sm_90 and newer), from shape symbols and
        constants as ``grid`` is; the grid must be a multiple of it. Cooperative and cluster
        launches go through ``cuLaunchKernelEx``.
    includes : sequence of str
        Header sets of the ``kerneldsl[headers]`` extra to put on the include path without an
        ``#include`` in the body (``includes=("cub",)``). ``#include`` lines in the body reach CUB,
        cooperative groups and libcu++ from that extra, and ``include_dirs``.
    include_dirs : sequence of str or path
        Absolute directories of your own headers; every header a build opens is in its cache key.
    uses : sequence of DeviceFunction
        ``kd.device_function`` texts rendered above the kernel (in the cache key too).

    Returns
    -------
    Callable[[function], Kernel]
        A decorator that turns the body function into a :class:`kerneldsl.Kernel`: call it with
        arrays and scalars, or ``inspect``/``compile``/``explain`` it without a GPU.

    Raises
    ------
    kerneldsl.errors.DeclarationError
        At decoration, naming the parameter: an unknown dtype, an undefined symbol in a launch
        dimension, a constant without a type, a name clashing with C++/CUDA keywords.

    Examples
    --------
    .. code-block:: python

        from typing import NewType, TypeVar

        import numpy as np

        import kerneldsl as kd

        T = TypeVar("T")
        n = NewType("n", int)


        @kd.kernel(grid=kd.cdiv(n, 256), block=256)
        def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
            return f'''
            index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
            if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
            '''


        y, x = np.ones(1000, np.float32), np.arange(1000, dtype=np.float32)
        saxpy(y, x, np.float32(2.0))  # on a GPU, else on the CPU device
    """

    def decorate(func: Callable[_Q, str | GeneratedBody]) -> Kernel[_Q]:
        sig = parse_signature(
            func,
            grid,
            block,
            shared,
            tuple(specialize),
            allow_alias,
            tuple(strided),
            cooperative=cooperative,
            cluster=cluster,
        )
        check_constant_launch_limits(sig)
        return Kernel(func, sig, options, precompile, declared(sig.name, includes, include_dirs, uses))

    return decorate
