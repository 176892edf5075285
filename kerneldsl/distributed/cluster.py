"""``LocalGPUCluster``: one Dask worker process per GPU of this machine, as dask-cuda starts them
(without depending on it): each nanny pins its worker to one GPU with ``CUDA_VISIBLE_DEVICES``,
gives it one thread, and restarts it when it dies. The scheduler listens on localhost only
unless told otherwise; pass ``security=`` (a ``distributed.security.Security``) for TLS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distributed import Nanny, Scheduler, SpecCluster

from ..errors import DriverNotFoundError, NoWorkerError
from .profiles import Profile, checked_profiles


class LocalGPUCluster(SpecCluster):
    """``LocalGPUCluster(gpus="all" | [0, 1] | [0, 0])``: a worker per listed GPU (a GPU listed
    twice gets two workers that share it), named ``gpu-<i>`` in list order.

    ``profiles`` name sets of workers and default compile options (see ``kd.distributed.attach``);
    each worker of a profile carries the Dask resource ``kerneldsl-profile-<name>``.
    ``gpus=[...]`` starts the workers on a machine without a driver too (their calls that need
    the GPU then raise ``DriverNotFoundError``), which is how the CPU tests run.
    """

    def __init__(
        self,
        gpus: str | Sequence[int] = "all",
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        host: str = "127.0.0.1",
        security: Any = None,
        memory_limit: str | float | int | None = "auto",
        dashboard_address: str | None = None,
        worker_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.devices = _devices(gpus)
        self.profiles: dict[str, Profile] = checked_profiles(profiles)
        scheduler = {
            "cls": Scheduler,
            "options": {
                "host": host,
                # Dask's HTTP routes (health, metrics) always listen: on ``host`` too, any free port
                "dashboard_address": dashboard_address or f"{host}:0",
                "dashboard": dashboard_address is not None,
                "security": security,
            },
        }
        workers = {
            worker_name(i): {
                "cls": Nanny,
                "options": {
                    "name": worker_name(i),
                    "host": host,
                    "nthreads": 1,
                    "env": {"CUDA_VISIBLE_DEVICES": str(gpu)},
                    "resources": self._resources(gpu),
                    "memory_limit": memory_limit,
                    "security": security,
                    **(worker_options or {}),
                },
            }
            for i, gpu in enumerate(self.devices)
        }
        super().__init__(workers=workers, scheduler=scheduler, security=security, **kwargs)  # type: ignore[no-untyped-call]

    def _resources(self, gpu: int) -> dict[str, float]:
        return {p.resource: 1.0 for p in self.profiles.values() if p.gpus is None or gpu in p.gpus}


def worker_name(index: int) -> str:
    return f"gpu-{index}"


def _devices(gpus: str | Sequence[int]) -> list[int]:
    if gpus == "all":
        from ..runtime.driver import device_count

        try:
            count = device_count()
        except DriverNotFoundError:
            count = 0
        if count == 0:
            raise NoWorkerError('gpus="all" found no GPU; pass the ordinals, e.g. gpus=[0]')
        return list(range(count))
    if (
        isinstance(gpus, (str, bytes))
        or not gpus
        or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus)
    ):
        raise ValueError(f'gpus must be "all" or a non-empty list of device ordinals, got {gpus!r}')
    return list(gpus)
