"""Loaded cubins and the kernel handles (CUfunction) taken from them.

The session keeps every loaded module until it closes (or ``Module.close()``): function
handles are handed out as plain ints for the launch hot path, and an int cannot keep its
module loaded.
"""

from __future__ import annotations

from typing import Any, Protocol

from .driver import check
from .handle import Handle, SessionCore
from .occupancy import FunctionAttributes, function_attributes


class LoadingSession(SessionCore, Protocol):
    """A session as its modules see it: a handle's, and the list of what it keeps loaded."""

    @property
    def modules(self) -> list[Module]: ...


class Module(Handle):
    """A cubin loaded into the session's context (cuModuleLoadData)."""

    kind = "module"
    __slots__ = ("_functions",)
    session: LoadingSession

    def __init__(self, session: LoadingSession, cubin: bytes) -> None:
        """Load ``cubin``; a CudaError means the image is unusable here (callers evict it)."""
        super().__init__(session)
        self._functions: dict[str, Any] = {}
        with session.activated():
            raw = check("cuModuleLoadData", session.api.cuModuleLoadData(bytes(cubin)))
            self._own(raw)
        session.modules.append(self)

    def function(self, name: str) -> Any:
        """The CUfunction handle of the ``extern "C"`` kernel ``name`` (``int()`` gives its
        address); cached, so launches never look it up again."""
        self._check()
        fn = self._functions.get(name)
        if fn is None:
            session = self.session
            with session.activated():
                fn = check("cuModuleGetFunction", session.api.cuModuleGetFunction(self._raw, name.encode()))
            self._functions[name] = fn
        return fn

    def function_attributes(self, fn: Any) -> FunctionAttributes:
        """The driver's attributes of ``fn`` (a kernel name or a handle from ``function``)."""
        return function_attributes(self.session, self.function(fn) if isinstance(fn, str) else fn)

    def close(self) -> None:
        """Unload now; function handles taken from this module become invalid."""
        super().close()
        if self in self.session.modules:
            self.session.modules.remove(self)
        self._functions.clear()

    def __repr__(self) -> str:
        return f"<Module session={self.session.session_id} device={self.device} functions={sorted(self._functions)}>"
