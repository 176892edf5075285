"""The persistent GPU runtime: sessions and the driver objects they own.

Driver-facing only: nothing here imports the compiler or code generator.
"""

from .device import Device
from .driver import (
    compute_capability,
    device_count,
    device_name,
    driver_available,
    driver_version,
    pci_bus_id,
    set_driver,
    use_driver,
)
from .graph import Graph
from .handle import Handle, check_same_session
from .interop import DeviceView, as_device_view
from .memory import DeviceBuffer
from .module import Module
from .occupancy import FunctionAttributes
from .pinned import PinnedArray
from .session import Session, default_session
from .session_registry import open_sessions, reset_device
from .stream import Event, Stream

__all__ = [
    "DeviceBuffer",
    "Device",
    "DeviceView",
    "Event",
    "FunctionAttributes",
    "Graph",
    "Handle",
    "Module",
    "PinnedArray",
    "Session",
    "Stream",
    "as_device_view",
    "check_same_session",
    "compute_capability",
    "default_session",
    "device_count",
    "device_name",
    "driver_available",
    "driver_version",
    "open_sessions",
    "pci_bus_id",
    "reset_device",
    "set_driver",
    "use_driver",
]
