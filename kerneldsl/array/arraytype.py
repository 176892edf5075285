"""The user-facing array class as the modules below ``ndarray`` know it.

``DeviceArray``'s operators and methods call the engine (placement, plans, elementwise,
reductions, scans, scratch) and cuBLAS, so those cannot import ``ndarray`` back without an
import loop. They check operands against ``memory.array_type``, the class the runtime makes
arrays as once ``ndarray`` registered it, and name ``DeviceArray`` for type checkers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ..runtime.memory import DeviceBuffer

if TYPE_CHECKING:
    from ..device_array.ndarray import DeviceArray


def as_array(buffer: DeviceBuffer) -> DeviceArray:
    """An array the runtime made, typed as what it is once ``ndarray`` is imported (the runtime's
    factories are annotated with the class it knows, DeviceBuffer, where a session is not a
    ``kd.Session``)."""
    return cast("DeviceArray", buffer)
