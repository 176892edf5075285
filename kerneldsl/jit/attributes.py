"""A build's function attributes as the driver reports them (``cuFuncGetAttribute``): what
``Build.resources()`` answers, with the image loaded in a session once and the answer kept on
the build. ``kerneldsl.launch.resources`` adds the occupancy questions a launch asks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..runtime import occupancy as driver_occupancy
from ..runtime.occupancy import FunctionAttributes


@dataclass(frozen=True)
class Resources:
    """A build's function attributes as the driver reports them (``cuFuncGetAttribute``)."""

    registers: int
    shared_bytes: int  # static shared memory per block
    const_bytes: int
    local_bytes: int  # per thread: register spills and local arrays
    max_threads_per_block: int
    ptx_version: int  # e.g. 90 for PTX ISA 9.0
    binary_version: int  # e.g. 90 for sm_90
    max_dynamic_shared_bytes: int

    @classmethod
    def of(cls, attrs: FunctionAttributes) -> Resources:
        return cls(
            registers=attrs.registers,
            shared_bytes=attrs.shared_bytes,
            const_bytes=attrs.const_bytes,
            local_bytes=attrs.local_bytes,
            max_threads_per_block=attrs.max_threads,
            ptx_version=attrs.ptx_version,
            binary_version=attrs.binary_version,
            max_dynamic_shared_bytes=attrs.max_dynamic_shared_bytes,
        )


def image_resources(image: bytes, entry: str, by_session: dict[int, Resources], session: Any = None) -> Resources:
    """The attributes of function ``entry`` of ``image`` on ``session`` (default: the default
    session), the image loaded there once and the answer kept in ``by_session`` (the build's)."""
    if session is None:
        from ..runtime.session import default_session

        session = default_session()
    found = by_session.get(session.session_id)
    if found is None:
        function = session.load_module(image).function(entry)
        found = by_session[session.session_id] = Resources.of(driver_occupancy.function_attributes(session, function))
    return found
