"""A CUDA device's facts and limits: what code generation and grid sizing ask of the hardware.

Each fact is asked of the driver once, on first use, and kept on the ``Device``; a Session holds
its device's as ``session.gpu``, so every layer asks the session it runs on rather than keeping a
cache of its own by ordinal.
"""

from __future__ import annotations

from typing import Any

from . import driver
from .driver import check

__all__ = ["Device"]


class Device:
    """Device ``ordinal`` as driver bindings ``api`` see it (the session's, test doubles included)."""

    __slots__ = ("ordinal", "handle", "host", "output", "empty_buffers", "_api", "_facts", "_name")

    def __init__(
        self, api: Any, ordinal: int, host: bool = False, host_output: str = "host", empty_buffers: str = ""
    ) -> None:
        """NoDeviceError when there is no device ``ordinal``. ``host``: the CPU device, whose
        kernels are host images (``output``: ``host_output``, which names a session's checks), not cubins.
        ``empty_buffers``: what the session's init check does with ``empty()``'s buffers (``Checks.empty_buffers``)."""
        self.ordinal = ordinal
        self.host = host
        self.output = host_output if host else "cubin"  # the image kind its modules load
        self.empty_buffers = empty_buffers if host else ""
        self.handle: Any = check("cuDeviceGet", api.cuDeviceGet(ordinal)) if host else driver.device(ordinal)
        self._api = api
        self._facts: dict[str, int] = {}
        self._name: str | None = None

    def attribute(self, name: str) -> int:
        """``cuDeviceGetAttribute`` of ``CU_DEVICE_ATTRIBUTE_<name>``, asked once."""
        found = self._facts.get(name)
        if found is None:
            which = getattr(self._api.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
            found = self._facts[name] = int(
                check("cuDeviceGetAttribute", self._api.cuDeviceGetAttribute(which, self.handle))
            )
        return found

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``."""
        return self.attribute("COMPUTE_CAPABILITY_MAJOR"), self.attribute("COMPUTE_CAPABILITY_MINOR")

    @property
    def arch(self) -> str:
        """The device's own arch, ``sm_XY``, what kernels are specialized for (no NVRTC is loaded
        to choose it, so a cache hit needs none)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def multiprocessors(self) -> int:
        """How many SMs it has: what grid sizes that fill the GPU are made of."""
        return self.attribute("MULTIPROCESSOR_COUNT")

    @property
    def max_shared_per_block_optin(self) -> int:
        """Bytes of shared memory (static plus dynamic) a block may use once its function opts in."""
        return self.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")

    @property
    def name(self) -> str:
        """The marketing name, e.g. ``'NVIDIA H200'``."""
        if self._name is None:
            raw = check("cuDeviceGetName", self._api.cuDeviceGetName(256, self.handle))
            self._name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
        return self._name

    def __repr__(self) -> str:
        return "<Device cpu>" if self.host else f"<Device {self.ordinal}>"
