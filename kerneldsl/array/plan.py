"""Plans: one compiled program for one argument specialization (dtypes and shapes), the warm path
of every array callable, and the plan cache they share.

A callable keys its plans on ``placement.arg_key`` of each argument. On a hit the operands are
placed and the plan runs: it checks ``out=``, allocates the result when none is given, and
launches its kernel(s) through ``Kernel.__call__`` (so the C launch path takes warm device calls).

*Plan* means this and nothing else in kerneldsl: an array callable's choice for one argument key,
made once and replayed by every later call with that key. What a call of one kernel
specialization takes and does is its launch contract (``jit.launch_contract``), what code
generation hands the templates its render inputs (``jit.codegen.RenderInputs``), and what a
generated kernel chose its decisions (``array.decisions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..jit.build import Build
from ..launch.routing import find_remote, route
from ..launch.warm import BoundedCache, Entry, Key, WarmPath
from ..runtime.stream import check_stream
from .placement import arg_key, check_placement, contiguous, fast_place, into_strided, is_strided, place


class Plan:
    """What every plan has: where each kernel argument comes from, and the result's shape and dtype."""

    name: str
    sources: tuple[tuple[str, Any], ...]  # per leaf: ("arg", position) or ("const", value)
    shape: tuple[int, ...]
    dtype: np.dtype
    strided_operands = False  # whether ``launch`` takes strided views as they are (elementwise plans)
    copies = False  # set per plan by PlanCache: its calls pass strided views that ``launch`` cannot take

    def values(self, args: Sequence[Any]) -> list[Any]:
        """The kernel's leaf arguments, in leaf order, from the call's arguments."""
        return [args[s] if kind == "arg" else s for kind, s in self.sources]

    def run(self, args: Sequence[Any], out: Any, session: Any) -> Any:
        """The result of a call whose operands ``args`` were placed on ``session`` (None: host)."""
        values = self.values(args)
        if out is not None:
            check_placement(out, session, self.name)
        if session is None:
            return self.run_host(values, out)
        if out is None:
            out = session.empty(self.shape, self.dtype)
        if self.copies:
            self.launch_contiguous(values, out, session)
        else:
            self.launch(values, out, session)
        return out

    def launch_contiguous(self, values: list[Any], out: Any, session: Any) -> None:
        """``launch`` for a plan that indexes its arrays as C-contiguous (reductions, scans),
        given strided views: it reads contiguous copies of them, and a strided ``out`` is written
        through a contiguous temporary. The one hook a strided-aware kernel makes unnecessary."""
        values = contiguous(values)
        if out.is_contiguous:
            self.launch(values, out, session)
        else:
            into_strided(self.launch, values, out, session)

    def run_on(self, args: Sequence[Any], out: Any, session: Any, stream: Any, placed: bool) -> Any:
        """``run`` with the kernel(s) on ``stream``; ``placed``: operands were uploaded or adopted
        on the session stream for this call. Only callables that take ``stream=`` call it."""
        raise NotImplementedError

    def run_host(self, values: list[Any], out: Any) -> Any:
        raise NotImplementedError

    def launch(self, values: list[Any], out: Any, session: Any) -> None:
        raise NotImplementedError

    def inspect(self, args: Sequence[Any], out: Any, arch: str | None) -> Build:
        """The Build a call with these arguments runs (no GPU needed when ``arch`` is known)."""
        raise NotImplementedError

    def warm_entry(
        self, warm: WarmPath, values: Sequence[Any], out: Any, session: Any, stream: Any, result: Any
    ) -> Entry | None:
        """The warm entry (``launch.warm``) for later calls like this one (``stream=stream``) of
        the callable whose warm path is ``warm``, where the plan allows one; ``result``: what this
        call returned (a new array when ``out`` is None)."""
        return None


class PlanCache(BoundedCache):
    """Plans by call key; ``call`` is the full path every array callable shares."""

    def call(
        self,
        what: str,
        args: Sequence[Any],
        out: Any,
        extra: Any,
        make: Any,
        warm: WarmPath | None = None,
        entry_key: Key | None = None,
        stream: Any = None,
        remote: Any = None,
    ) -> Any:
        """Run the plan for ``args`` (and ``extra``, e.g. the axis), made by ``make(values, out)``
        on a miss, on ``stream`` when given; the plan's warm entry then goes to the callable's
        ``warm`` path (under ``entry_key``, the call's ``warm.call_key``), for later calls like this one.
        Remote arrays (which never make a plan here) send the call to their worker as ``remote``:
        the callable and its keyword arguments."""
        if stream is not None:  # before an operand is uploaded, adopted or converted
            check_stream(stream, None)
        key = (*map(arg_key, args), extra, arg_key(out))
        plan = self.get(key)
        values: Sequence[Any]
        if plan is None:
            handle = find_remote([*args, out])
            if handle is not None and remote is not None:
                fn, kwargs = remote
                return route(handle, fn, tuple(args), {**kwargs, **({} if out is None else {"out": out})})
            values, session = place(args, what)
            plan = make(values, out)
            plan.copies = not plan.strided_operands and any(is_strided(v) for v in (*values, out))
            self.put(key, plan)
        else:
            values, session = fast_place(args, what)
        if stream is None:
            result = plan.run(values, out, session)
        else:
            placed = any(v is not a for v, a in zip(values, args))
            result = plan.run_on(values, out, session, stream, placed)
        if warm is not None:
            entry = plan.warm_entry(warm, values, out, session, stream, result)
            if entry is not None:
                entry.keep_in(warm, entry_key)
        return result


def host_target(shape: tuple[int, ...], dtype: np.dtype, out: np.ndarray | None, inputs: Sequence[Any]) -> np.ndarray:
    """Where a host call writes: ``out`` itself when a kernel can write it directly (C-contiguous,
    writeable, sharing no memory with an input), else a fresh array copied into ``out`` after."""
    if (
        out is not None
        and out.flags.c_contiguous
        and out.flags.writeable
        and not any(isinstance(v, np.ndarray) and np.shares_memory(v, out) for v in inputs)
    ):
        return out
    return np.empty(shape, dtype if out is None else out.dtype)
