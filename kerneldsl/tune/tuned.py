"""``@kd.autotune``: a kernel whose calls run the fastest of its declared configurations for
their key, measured once per (kernel, key, device) and remembered in the disk cache.

Each configuration is a *variant* ``Kernel`` (``config.variant``), so a call dispatches to an
ordinary kernel object and stays on its C launch path; with a key of dtype variables and shape
symbols (which the C path tells apart: its guards, and a check pinning each key extent) the tuned
kernel remembers each key's winner as a C entry of its own, and a warm call costs what an untuned
one does (for up to ``warm.STREAM_ENTRIES`` keys; further keys take one Python lookup).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from .. import logs
from ..errors import (
    AutotuneError,
    BindingError,
    DeclarationError,
    KernelCompileError,
    KernelDSLError,
    StickyCudaError,
)
from ..jit.specialize import const_key
from ..launch import fastpath, warm
from ..launch.bound import resolved_launch_dims
from ..launch.routing import is_remote
from ..progress import Progress
from ..runtime import nvtx
from ..runtime.memory import ARRAY_TYPES
from ..runtime.occupancy import function_attributes
from ..runtime.session import default_session
from ..runtime.stream import check_stream
from . import records
from .ahead import checked_tune_for, tune_arguments
from .config import Config, declared_configs, variant
from .key import KeyPart, TuningKey
from .measure import scratch, time_launches

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    from ..launch.dispatch import Kernel

    _P = ParamSpec("_P", default=...)
    _Q = ParamSpec("_Q")
else:
    import typing

    _P = typing.ParamSpec("_P")
    _Q = typing.ParamSpec("_Q")

log = logs.get("tune")

_LAUNCH_KEYWORDS = ("grid", "block", "shared")


@dataclass(frozen=True)
class Choice:
    """Which configuration a key runs and why: its time, every candidate's outcome, and whether
    the timings were ``"measured"`` in this process or ``"remembered"`` from the disk cache."""

    config: Config
    variant: Kernel[Any]
    key: str
    device: str
    ms: float
    timings: dict[str, records.Timing]  # by config label, the candidates for this key
    source: str
    measured: int  # configurations measured for this choice (0 when remembered)

    def explain(self) -> str:
        lines = [
            f"key ({self.key}) on {self.device}: {self.config.label}, {self.ms:.4f} ms, the fastest of "
            f"{len(self.timings)} configuration(s); "
            + ("measured in this process" if self.source == "measured" else "remembered from the disk cache")
            + (f" ({self.measured} measured now)" if self.source == "measured" else "")
        ]
        for label, t in sorted(self.timings.items(), key=lambda item: (item[1].ms is None, item[1].ms or 0.0)):
            lines.append(
                f"  {label}: {t.ms:.4f} ms ({t.ms / (self.ms or 1e-9):.2f}x)"
                if t.ms is not None
                else f"  {label}: skipped: {t.error}"
            )
        return "\n".join(lines)


class Autotuned(fastpath.FastPathCallable, Generic[_P]):
    """A tuned kernel: called like its kernel (``kernel``); see ``autotune``."""

    def __init__(
        self,
        kernel: Kernel[_P],
        configs: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
        key: Sequence[KeyPart] | None,
        restore: Callable[..., Any] | None,
        prune: Callable[..., bool] | None,
        warmup: int,
        rep_ms: float,
        tune_for: Sequence[Mapping[str, Any] | Callable[[], tuple[Any, ...]]],
    ) -> None:
        functools.update_wrapper(self, kernel.body)
        self.kernel = kernel
        self.signature = kernel.signature
        self.configs = declared_configs(kernel, configs)
        self.variants = {c.identity: variant(kernel, c) for c in self.configs}
        self.key = TuningKey(kernel.signature, key)
        self.restore, self.prune = restore, prune
        self.warmup, self.rep_ms = warmup, rep_ms
        self.tune_for = checked_tune_for(kernel.signature, tune_for)
        self._tuned_consts = {
            name for c in self.configs for name in c.values if name in {p.name for p in kernel.signature.consts}
        }
        self._arity = len(kernel.signature.runtime_params)
        self._raw = self.key.raw
        self._c_key = self.key.c_checkable  # the C path can decide the key: remember the winner's entry here
        self._c_entries: dict[Any, warm.CEntry] = {}  # per key: its launch pins the key's extents
        self._chosen: dict[Any, Kernel[Any]] = {}
        self._choices: dict[Any, Choice] = {}
        self._lock = threading.Lock()
        self._identity: str | None = None

    if TYPE_CHECKING:  # at run time __call__ stays the (C or Python) FastPathCallable's

        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> None: ...

    def __repr__(self) -> str:
        return f"<kd.autotune {self.signature.name}: {len(self.configs)} configs, key ({', '.join(self.key.names)})>"

    @property
    def identity(self) -> str:
        """The digest that names this kernel's tuning records (``records.kernel_identity``)."""
        if self._identity is None:
            self._identity = records.kernel_identity(self.kernel)
        return self._identity

    def variant(self, config: Config) -> Kernel[Any]:
        """The kernel object ``config`` runs as (for measuring one configuration directly)."""
        return self.variants[config.identity]

    # --- calling ---------------------------------------------------------------------------------

    def _call(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        """Look up the key's winner (tuning on the first call for the key), then call it. A warm
        call with positional arguments only computes its key and calls the winner."""
        if not kwargs and stream is None and len(args) == self._arity:
            try:
                raw = self._raw(args)
                winner = self._chosen.get(raw)
            except Exception:  # a wrong call: the path below raises the kernel's own error
                winner = None
            if winner is not None:
                winner(*args)
                if self._c_key and not nvtx.ON:
                    self._keep_c_launch(winner, args, raw)
                return
        if stream is not None:  # refused before a first call tunes
            check_stream(stream, None)
        args, consts, raw = self._place(args, kwargs)
        chosen = self._chosen.get(raw)
        if chosen is None:
            chosen = self._choose(raw, args, consts).variant
        if stream is None:
            chosen(*args, **consts)
        else:
            chosen(*args, stream=stream, **consts)
        if self._c_key and stream is None and not consts and not nvtx.ON:
            self._keep_c_launch(chosen, args, raw)

    def tune(self, *args: Any, **kwargs: Any) -> Choice:
        """Tune for these arguments (what a first call would) without the real call; the choice."""
        args, consts, raw = self._place(args, kwargs)
        found = self._choices.get(raw)
        return found if found is not None else self._choose(raw, args, consts)

    def tune_ahead(self) -> list[Choice]:
        """Tune for every ``tune_for=`` entry (``kerneldsl tune MODULE``), on the default session."""
        return [self.tune(*tune_arguments(self.signature, entry, default_session())) for entry in self.tune_for]

    def explain(self, *args: Any, **kwargs: Any) -> str:
        """Which configuration a call with these arguments uses and why, without tuning."""
        args, consts, raw = self._place(args, kwargs)
        found = self._choices.get(raw)
        if found is not None:
            return f"tuned kernel {self.signature.name}, {found.explain()}"
        session = _session_of(args)
        wanted = self._material(raw, consts, session)
        timings = records.load(_store(), wanted)
        missing = [c.label for c in self.configs if c.identity not in timings]
        key = self.key.describe(wanted["key"])
        if not timings:
            return (
                f"tuned kernel {self.signature.name}, key ({key}) on {wanted['device']}: not tuned yet; "
                f"the first call measures {len(self.configs)} configuration(s)"
            )
        measured = {c.label: timings[c.identity].ms for c in self.configs if c.identity in timings}
        best = min(
            (label for label, ms in measured.items() if ms is not None),
            key=lambda label: measured[label] or 0.0,
            default=None,
        )
        text = f"tuned kernel {self.signature.name}, key ({key}) on {wanted['device']}: remembered on disk, "
        text += f"fastest so far {best}" if best else "every measured configuration was skipped"
        return text + (f"; not measured yet: {', '.join(missing)}" if missing else "")

    def _place(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        """The arguments in parameter order, the constants given, and the key of the call."""
        consts: dict[str, Any] = {}
        if kwargs or len(args) != self._arity:
            launch = [k for k in _LAUNCH_KEYWORDS if k in kwargs]
            if launch:
                raise BindingError(
                    self.signature.name,
                    None,
                    f"a tuned kernel launches with its configuration's grid, block and shared: drop {launch[0]}=",
                )
            args, consts = self.signature.place_arguments(args, kwargs)
            tuned = sorted(self._tuned_consts & consts.keys())
            if tuned:
                raise BindingError(self.signature.name, tuned[0], "is a tuned constant: its configurations set it")
        try:
            raw = self.key.raw(args)
        except (AttributeError, IndexError, TypeError):
            self.kernel.specialize(*args, arch="sm_90", **consts)  # a wrong call gets the kernel's own error
            raise
        return args, consts, (raw, const_key(sorted(consts.items()))) if consts else raw

    def _keep_c_launch(self, chosen: Kernel[Any], args: tuple[Any, ...], raw: Any) -> None:
        """Have the C path launch ``chosen`` for calls of this key: an entry of its own per key
        (at most ``warm.STREAM_ENTRIES`` keys), whose checks pin the key's extents."""
        entry = self._c_entries.get(raw)
        if entry is None and len(self._c_entries) >= warm.STREAM_ENTRIES:
            return  # the C path tries this many entries; more keys take the Python lookup
        found = chosen.lookup(args, {})
        if found is None or found[1] or not chosen._c_path:
            return
        if entry is None:
            entry = self._c_entries[raw] = warm.CEntry()
        bound, key = found[0], self.key
        warm.remember(self, entry, lambda: fastpath.kernel_launch(bound, args, pinned=key.extents(raw)))

    # --- tuning ----------------------------------------------------------------------------------

    def _choose(self, raw: Any, args: tuple[Any, ...], consts: dict[str, Any]) -> Choice:
        with self._lock:
            found = self._choices.get(raw)
            if found is None:
                found = self._tuned(raw, args, consts)
                self._choices[raw] = found
                self._chosen[raw] = found.variant
            return found

    def _material(self, raw: Any, consts: dict[str, Any], session: Any) -> dict[str, Any]:
        values = self.key.values(raw[0] if consts else raw)
        names = list(self.key.names)
        if consts:
            values.append({name: repr(v) for name, v in sorted(consts.items())})
            names.append("constants")
        return records.material(self.signature.name, self.identity, values, names, session.gpu.name, session.gpu.arch)

    def _tuned(self, raw: Any, args: tuple[Any, ...], consts: dict[str, Any]) -> Choice:
        if any(is_remote(a) for a in args):
            raise BindingError(self.signature.name, None, "a tuned kernel runs on local arrays (tune on the worker)")
        args = self.kernel._adopt_foreign(args)
        session = _session_of(args)
        wanted = self._material(raw, consts, session)
        store = _store()
        timings = records.load(store, wanted)
        candidates = [c for c in self.configs if self.prune is None or self.prune(dict(c.values), *args)]
        if not candidates:
            raise AutotuneError(f"tuned kernel {self.signature.name}: prune= kept no configuration", {})
        missing = [c for c in candidates if c.identity not in timings]
        if missing:
            started = time.perf_counter()
            measured = self._measure(missing, args, consts, session)
            timings = {**records.load(store, wanted), **measured}  # another process may have added some
            records.save(store, wanted, timings)
            log.info("tuned %s for %s in %.2f s", self.signature.name, wanted["key"], time.perf_counter() - started)
        outcomes = {c.label: timings[c.identity] for c in candidates}
        ok = [(timings[c.identity].ms, c) for c in candidates if timings[c.identity].ms is not None]
        key = self.key.describe(wanted["key"])
        if not ok:
            failures = {label: str(t.error) for label, t in outcomes.items()}
            listing = "; ".join(f"{label}: {why}" for label, why in failures.items())
            raise AutotuneError(
                f"tuned kernel {self.signature.name}, key ({key}): every configuration failed: {listing}", failures
            )
        ms, best = min(ok, key=lambda pair: pair[0] or 0.0)
        source = "measured" if missing else "remembered"
        return Choice(
            best, self.variants[best.identity], key, wanted["device"], float(ms or 0.0), outcomes, source, len(missing)
        )

    def _measure(
        self, configs: list[Config], args: tuple[Any, ...], consts: dict[str, Any], session: Any
    ) -> dict[str, records.Timing]:
        """Compile ``configs`` (in threads: NVRTC runs without the GIL), then time each in turn;
        a configuration that fails to compile, has no occupancy or fails to launch is recorded
        with the reason and skipped."""
        errors: dict[str, str] = {}

        def compile_one(c: Config) -> None:
            v = self.variants[c.identity]
            try:
                v.get_build(v.specialize(*args, arch=session.gpu.arch, **consts))
            except KernelDSLError as exc:
                errors[c.identity] = _reason(exc)

        workers = max(1, min(len(configs), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(compile_one, configs))
        found: dict[str, records.Timing] = {}
        progress = Progress(len(configs), sys.stderr)
        own = self.restore is not None  # measure on the call's arrays, restore(*args) after each config
        with contextlib.nullcontext(args) if own else scratch(self.signature, session, args) as bench_args:
            for c in configs:
                progress.show(f"tuning {self.signature.name} {c.label}")
                ms = None
                if c.identity not in errors:
                    try:
                        ms = self._time(c, bench_args, consts, session)
                    except StickyCudaError:
                        raise  # the context is lost: nothing else can run
                    except KernelDSLError as exc:
                        errors[c.identity] = _reason(exc)
                    finally:
                        if self.restore is not None:
                            self.restore(*args)
                if ms is None:
                    log.warning("autotune %s: skipped %s: %s", self.signature.name, c.label, errors[c.identity])
                found[c.identity] = records.Timing(c.label, ms, errors.get(c.identity), time.time())
        progress.close()
        return found

    def _time(self, c: Config, args: tuple[Any, ...], consts: dict[str, Any], session: Any) -> float:
        """Milliseconds per launch of ``c`` on ``args`` (the benchmark's), after refusing a
        configuration no SM can hold a block of (occupancy 0) before it launches."""
        from ..launch.resources import DeviceLimits, compute_occupancy

        v = self.variants[c.identity]
        found = v.lookup(args, consts)
        if found is None:
            raise BindingError(self.signature.name, None, "benchmark arguments are not local arrays")
        bound = found[0]
        _, block, shared = resolved_launch_dims(bound.build.specialization, args, None, None, None)
        threads = block[0] * block[1] * block[2]
        if 0 < threads and type(shared) is int:
            attrs = function_attributes(session, bound.function)
            occupancy = compute_occupancy(attrs, DeviceLimits.of(session), threads, shared)
            if occupancy.blocks_per_sm == 0:
                raise _ZeroOccupancy(
                    f"zero occupancy: no block of {threads} threads fits an SM ({occupancy.limited_by})"
                )
        return time_launches(v, session, args, consts, self.warmup, self.rep_ms)


class _ZeroOccupancy(KernelDSLError):
    """A configuration pruned before launching: an SM holds none of its blocks."""


def _reason(exc: BaseException) -> str:
    """One line saying why a configuration was skipped: the error's first line, and for a
    compile error the compiler's first error line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()][:1]
    if isinstance(exc, KernelCompileError):
        lines += [line.strip("\x00 \t") for line in exc.log.splitlines() if "error" in line][:1]
    named = "" if isinstance(exc, _ZeroOccupancy) else f"{type(exc).__name__}: "
    return named + " ".join(lines)


def _session_of(args: tuple[Any, ...]) -> Any:
    for a in args:
        if type(a) in ARRAY_TYPES:
            return a.session
    return default_session()


def _store() -> Any:
    from ..cache import get_default_cache

    return get_default_cache()


def autotune(
    configs: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
    key: Sequence[KeyPart] | None = None,
    *,
    restore: Callable[..., Any] | None = None,
    prune: Callable[..., bool] | None = None,
    warmup: int = 1,
    rep_ms: float = 10.0,
    tune_for: Sequence[Mapping[str, Any] | Callable[[], tuple[Any, ...]]] = (),
) -> Callable[[Kernel[_Q]], Autotuned[_Q]]:
    """Tune a ``@kd.kernel`` over ``configs``: dicts of constants, ``block``/``grid``/``shared``
    overrides, ``maxrregcount`` and NVRTC ``options`` (or a dict of lists: their product).

    ``key`` names what selects a configuration: shape symbols, dtype variables, scalar
    parameters, or functions of the call's arguments (buckets); default: every dtype variable
    and shape symbol. The first call for a key compiles every configuration, times each on
    scratch copies of what it writes (``restore=f``: on the call's own arrays, then ``f(*args)``),
    skips (and records) those that fail, stores the timings in the disk cache and runs the
    winner; ``prune=f(config, *args) -> bool`` drops configurations before anything runs.
    ``tune_for=[{"n": 1 << 20, "T": np.float32}, ...]`` (every symbol and dtype variable; scalars
    optional) or functions returning a call's arguments: what ``kerneldsl tune MODULE`` tunes
    ahead of time. Each configuration is timed ``warmup`` times untimed, then for about ``rep_ms``
    milliseconds.

    Returns
    -------
    Callable[[Kernel], Autotuned]
        A decorator over a ``@kd.kernel``; the result is called like the kernel.

    Raises
    ------
    kerneldsl.errors.DeclarationError
        ``warmup`` below 1, ``rep_ms`` not positive, or configurations that do not fit the kernel.
    kerneldsl.errors.AutotuneError
        At a call, when every configuration failed.
    """
    from ..launch.dispatch import Kernel

    if type(warmup) is not int or warmup < 1 or not rep_ms > 0:
        raise DeclarationError(
            "autotune", None, f"warmup must be an int >= 1 and rep_ms > 0, got {warmup!r}, {rep_ms!r}"
        )

    def decorate(kernel: Kernel[_Q]) -> Autotuned[_Q]:
        if not isinstance(kernel, Kernel):
            raise DeclarationError(
                getattr(kernel, "__name__", "autotune"), None, "@kd.autotune goes above @kd.kernel(...)"
            )
        return Autotuned(kernel, configs, key, restore, prune, warmup, rep_ms, tune_for)

    return decorate
