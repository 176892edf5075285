"""Data-parallel helpers: ``gpus.scatter``, ``gpus.map``, ``gpus.gather`` and ``gpus.reduce``.

Each is a few ordinary calls on the workers (``to_device``, one call per shard, ``to_worker``),
so it returns at once with handles whose work runs in each worker's call order: no scheduling
of its own. Gathering or reducing on a worker moves the shards device to device
(``RemoteArray.to_worker``: CUDA IPC between workers of one host).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..array.ndarray import DeviceArray
from ..device_array.manipulation import concatenate
from ..errors import NoWorkerError

if TYPE_CHECKING:
    from .dispatcher import Dispatcher
    from .handles import RemoteArray


def scatter(gpus: Dispatcher, host: Any, axis: int = 0, workers: Sequence[str] | None = None) -> list[RemoteArray]:
    """``host`` split along ``axis`` into one near-equal shard per worker (``np.array_split``),
    each uploaded to its worker (default: every live worker, by name)."""
    names = list(workers) if workers is not None else gpus.workers()
    if not names:
        raise NoWorkerError("no live GPU worker to scatter over")
    parts = np.array_split(np.asarray(host), len(names), axis=axis)
    return [gpus.to_device(np.ascontiguousarray(p), worker=n) for p, n in zip(parts, names, strict=True)]


def map_shards(
    gpus: Dispatcher, fn: Callable[..., Any], shards: Sequence[RemoteArray], *args: Any, **kwargs: Any
) -> list[RemoteArray]:
    """``fn(shard, *args, **kwargs)`` on each shard's worker; a returned DeviceArray stays there
    (``result()`` gives any other value)."""
    found = []
    for shard in shards:
        inc = gpus._owner(getattr(fn, "__name__", repr(fn)), [shard])
        found.append(gpus._send(inc, fn, (shard, *args), kwargs, shard.profile, True, array=True))
    return found  # type: ignore[return-value]


def _gathered(parts: list[DeviceArray], axis: int) -> DeviceArray:
    joined: DeviceArray = concatenate(parts, axis=axis)
    return joined


def _folded(op: Callable[[Any, Any], Any], parts: list[DeviceArray]) -> DeviceArray:
    total = parts[0]
    for part in parts[1:]:
        total = op(total, part)
    return total if len(parts) > 1 else total.copy()


def _onto(gpus: Dispatcher, parts: Sequence[RemoteArray], worker: str) -> list[RemoteArray]:
    name = gpus._pick(worker, None)
    return [p if p.worker == name else p.to_worker(name) for p in parts]


def gather(gpus: Dispatcher, parts: Sequence[RemoteArray], axis: int = 0, worker: str | None = None) -> Any:
    """The parts joined along ``axis``: a numpy array here (``worker=None``), or a RemoteArray on
    ``worker``, the parts moved there device to device."""
    if not parts:
        raise ValueError("gather needs at least one part")
    if worker is None:
        return np.concatenate([p.to_host() for p in parts], axis=axis)
    here = _onto(gpus, parts, worker)
    return gpus._send(here[0]._inc, _gathered, (here, axis), {}, here[0].profile, True, array=True)


def reduce(
    gpus: Dispatcher,
    parts: Sequence[RemoteArray],
    worker: str | None = None,
    op: Callable[[Any, Any], Any] | None = None,
) -> RemoteArray:
    """The parts combined elementwise by ``op`` (default ``kd.ops.add``: the sum of per-worker
    partials) on ``worker`` (default: the first part's), the parts moved there device to device."""
    if not parts:
        raise ValueError("reduce needs at least one part")
    from ..array import ops

    here = _onto(gpus, parts, worker or parts[0].worker)
    combine = ops.add if op is None else op
    found = gpus._send(here[0]._inc, _folded, (combine, here), {}, here[0].profile, True, array=True)
    return found  # type: ignore[return-value]
