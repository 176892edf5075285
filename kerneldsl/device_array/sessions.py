"""The Session as the public API hands it out. At run time it is the runtime's own class; for
type checkers it is ``Session[DeviceArray]``, since the runtime's Session is generic in the array
type its factories make and cannot name this layer's ``DeviceArray`` (nothing below imports up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..array.ndarray import DeviceArray
from ..runtime import session as runtime_session

if TYPE_CHECKING:

    class Session(runtime_session.Session[DeviceArray]):
        """A session whose ``to_device``, ``empty``, ``zeros``, ... return ``kd.DeviceArray``."""

    def default_session(device: int = 0) -> Session:
        """This process's shared session for ``device``, created on first use (again after close)."""
        ...

else:
    Session = runtime_session.Session
    default_session = runtime_session.default_session

__all__ = ["DeviceArray", "Session", "default_session"]
