"""``LocalGPUCluster``: one Dask worker process per GPU of this machine, as dask-cuda starts them
(without depending on it): each nanny pins its worker to one GPU with ``CUDA_VISIBLE_DEVICES``,
gives it one thread, and restarts it when it dies. The scheduler listens on localhost only
unless told otherwise, and every port speaks TLS with a certificate made for this cluster:
loopback is no trust boundary on a shared host, and whoever reaches the scheduler runs code here.
Dask's HTTP server (its dashboard and routes such as ``/info/logs``, ``/info/call-stacks`` and
``/json``: plain HTTP that asks no one who they are) is not started, on the scheduler or on any
worker, unless the cluster is made with ``dashboard=True``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import distributed
from distributed import Nanny, SpecCluster
from distributed.deploy.cluster import Cluster
from distributed.security import Security

from ..errors import DriverNotFoundError, InsecureClusterWarning, NoWorkerError
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
    is plain TCP, open to every local user, and warns so (``InsecureClusterWarning``).

    ``dashboard=True`` starts Dask's HTTP server on the scheduler (at ``dashboard_address``, by
    default ``host`` and a free port; the Bokeh dashboard too when Bokeh is installed) and on each
    worker (at ``host``, a free port): plain HTTP without authentication, whatever ``security``
    says, whose routes show every local user the workers' logs, call stacks and tasks. Its ports
    are the scheduler's ``identity()["services"]["dashboard"]`` and each worker's.
    Without it no HTTP port is opened. ``silence_logs`` is Dask's: as ``LocalCluster`` does,
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
        dashboard: bool = False,
        dashboard_address: str | None = None,
        worker_options: Mapping[str, Any] | None = None,
        silence_logs: int | str | bool = logging.WARN,
        **kwargs: Any,
    ) -> None:
        if dashboard_address is not None and dashboard is not True:
            raise ValueError(
                f"dashboard_address={dashboard_address!r} needs dashboard=True: the dashboard is plain HTTP "
                "without authentication, served only when asked for"
            )
        self.devices = _devices(gpus)
        self.profiles: dict[str, Profile] = checked_profiles(profiles)
        secured = _security(security)
        if secured is None:
            warnings.warn(
                "LocalGPUCluster(security=False): every port of the cluster is plain TCP, so any user of this "
                "machine can connect and run code as you; the default security=True gives every port TLS with "
                "a certificate only this cluster and its clients hold",
                InsecureClusterWarning,
                stacklevel=2,
            )
        scheduler = {
            "cls": Scheduler,
            "options": {
                "host": host,
                "dashboard_address": dashboard_address or f"{host}:0",
                "dashboard": dashboard,
                "security": secured,
            },
        }
        workers = {
            worker_name(i): {
                "cls": Nanny,
                "options": {
                    "name": worker_name(i),
                    "worker_class": Worker,
                    "dashboard": dashboard,
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


class Scheduler(distributed.Scheduler):
    """Dask's scheduler, whose HTTP server (started by every Dask scheduler, plain HTTP and open
    to anyone who reaches it) listens only with ``dashboard=True``. It keeps Dask's class name,
    from which Dask takes its configuration section (``distributed.scheduler.*``) and its
    ``identity`` type."""

    def __init__(self, *args: Any, dashboard: bool = False, **kwargs: Any) -> None:
        self.serves_http = dashboard
        super().__init__(*args, dashboard=dashboard, **kwargs)

    def start_http_server(self, *args: Any, **kwargs: Any) -> None:
        if self.serves_http:
            super().start_http_server(*args, **kwargs)  # type: ignore[no-untyped-call]


class Worker(distributed.Worker):
    """Dask's worker (made in the nanny's child process, which imports it by this name), whose
    HTTP server listens only with ``dashboard=True``, as the scheduler's does; Dask's class name
    too (``distributed.worker.*``)."""

    def __init__(self, *args: Any, dashboard: bool = False, **kwargs: Any) -> None:
        self.serves_http = dashboard
        super().__init__(*args, dashboard=dashboard, **kwargs)

    def start_http_server(self, *args: Any, **kwargs: Any) -> None:
        if self.serves_http:
            super().start_http_server(*args, **kwargs)  # type: ignore[no-untyped-call]


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
