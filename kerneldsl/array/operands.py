"""What ``kd.ops`` calls take and give, for type checkers (nothing here exists at run time).

The result follows the operands: numpy arrays and scalars only give a numpy array (the call
copies in and back); a DeviceArray or a CUDA Array Interface / DLPack array among them gives a
DeviceArray (numpy operands are uploaded); a RemoteArray sends the call to its worker and gives
a RemoteArray (named by the face the entry points use, ``launch.routing.RemoteHandle``: the remote
plane sits above the array layer); inside ``@kd.fuse`` a traced value gives a traced value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from ..launch.routing import RemoteHandle
    from .ndarray import DeviceArray
    from .program import Traced

    class CudaArray(Protocol):
        """A foreign device array (CuPy, PyTorch, Numba, ...), adopted zero-copy."""

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]: ...

    class DLPackArray(Protocol):
        def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    HostArray: TypeAlias = np.ndarray[Any, Any]
    Scalar: TypeAlias = bool | int | float | complex | np.generic
    HostOperand: TypeAlias = HostArray | Scalar
    DeviceOperand: TypeAlias = DeviceArray | CudaArray | DLPackArray | HostOperand
    RemoteArrayT = TypeVar("RemoteArrayT", bound=RemoteHandle[Any])  # kd.distributed.RemoteArray
    RemoteOperand: TypeAlias = RemoteArrayT | HostOperand
    TracedOperand: TypeAlias = Traced | Scalar
