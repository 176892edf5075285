"""``LocalGPUCluster``: one Dask worker process per GPU of this machine, as dask-cuda starts them
(without depending on it): each nanny pins its worker to one GPU with ``CUDA_VISIBLE_DEVICES``,
gives it one thread, and restarts it when it dies. The scheduler listens on localhost only
unless told otherwise, and every port speaks TLS with a certificate made for this cluster:
loopback is no trust boundary on a shared host, and whoever reaches the scheduler runs code here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from distributed import Nanny, Scheduler, SpecCluster
from distributed.deploy.cluster import Cluster
from distributed.security import Security

from ..errors import DriverNotFoundError, NoWorkerError
from .profiles import Profile, checked_profiles


class LocalGPUCluster(SpecCluster):
    """``LocalGPUCluster(gpus="all" | [0, 1] | [0, 0])``: a worker per listed GPU (a GPU listed
    twice gets two workers that share it), named ``gpu-<i>`` in list order.

    ``profiles`` name sets of workers and default compile options (see ``kd.distributed.attach``);
    each worker of a profile carries the Dask resource ``kerneldsl-profile-<name>``.
    ``gpus=[...]`` starts the workers on a machine without a driver too (their calls that need
    the GPU then raise ``DriverNotFoundError``), which is how the CPU tests run.

    ``security=True`` (the default) gives every port TLS with a temporary self-signed certificate
    that only this cluster and its clients hold (``Client(cluster)`` takes it from
    ``cluster.security``); a ``distributed.security.Security`` is used as given; ``security=False``
    is plain TCP, open to every local user. ``silence_logs`` is Dask's: as ``LocalCluster`` does,
    Dask's stderr handlers show warnings and worse while the cluster runs; ``False`` leaves them
    as configured.
    """

    def __init__(
        self,
        gpus: str | Sequence[int] = "all",
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        host: str = "127.0.0.1",
        security: Security | bool = True,
        memory_limit: str | float | int | None = "auto",
        dashboard_address: str | None = None,
        worker_options: Mapping[str, Any] | None = None,
        silence_logs: int | str | bool = logging.WARN,
        **kwargs: Any,
    ) -> None:
        self.devices = _devices(gpus)
        self.profiles: dict[str, Profile] = checked_profiles(profiles)
        secured = _security(security)
        scheduler = {
            "cls": Scheduler,
            "options": {
                "host": host,
                # Dask's HTTP routes (health, metrics) always listen: on ``host`` too, any free port
                "dashboard_address": dashboard_address or f"{host}:0",
                "dashboard": dashboard_address is not None,
                "security": secured,
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
                    "security": secured,
                    "silence_logs": silence_logs,
                    **(worker_options or {}),
                },
            }
            for i, gpu in enumerate(self.devices)
        }
        super().__init__(  # type: ignore[no-untyped-call]
            workers=workers, scheduler=scheduler, security=secured, silence_logs=silence_logs, **kwargs
        )

    def _update_worker_status(self, op: str, msg: Any) -> None:
        """Track the scheduler's workers, without SpecCluster's closing of a removed worker's nanny
        once ``distributed.deploy.lost-worker-timeout`` (15 s) later no worker of its name is
        registered: meant for lost batch jobs, it closed for good a nanny here whose worker was
        restarting again at that moment. Our nannies run in this process, restart their workers,
        and close with the cluster."""
        Cluster._update_worker_status(self, op, msg)  # type: ignore[no-untyped-call]

    def _resources(self, gpu: int) -> dict[str, float]:
        return {p.resource: 1.0 for p in self.profiles.values() if p.gpus is None or gpu in p.gpus}


def _security(security: Security | bool) -> Security | None:
    if security is True:
        temporary: Security = Security.temporary()  # type: ignore[no-untyped-call]
        return temporary
    if security is False:
        return None
    if not isinstance(security, Security):
        raise TypeError(f"security must be True, False or a distributed.security.Security, got {security!r}")
    return security


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
