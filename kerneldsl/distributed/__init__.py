"""The remote plane (``pip install kerneldsl[distributed]``): one warm worker per GPU on Dask.

Dask distributed is the engine (scheduler, workers, futures, resources, security, restarts);
this package adds GPU ownership on top of it::

    from distributed import Client
    import kerneldsl as kd

    with kd.distributed.LocalGPUCluster(gpus="all") as cluster, Client(cluster) as client:
        gpus = kd.distributed.attach(client)
        x = gpus.to_device(np.arange(1 << 20, dtype=np.float32))  # a RemoteArray on gpu-0
        y = kd.ops.multiply(x, 2.0)  # runs on gpu-0's warm session; y stays there
        print(y.to_host())

Anyone who can submit to the scheduler runs native code on the GPU hosts (kernels arrive
pickled): a ``LocalGPUCluster`` speaks TLS with a certificate only it and its clients hold,
unless started with ``security=False`` (see the README).
"""

from ._extra import require_extra

require_extra()

from .cluster import LocalGPUCluster
from .gpus import GPUs, attach
from .handles import RemoteArray, RemoteFuture
from .incarnation import Incarnation
from .profiles import Profile
from .worker import GPUActor, GPUSessionPlugin

__all__ = [
    "GPUActor",
    "GPUSessionPlugin",
    "GPUs",
    "Incarnation",
    "LocalGPUCluster",
    "Profile",
    "RemoteArray",
    "RemoteFuture",
    "attach",
]
