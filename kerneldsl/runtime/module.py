"""Loaded cubins and the kernel handles (CUfunction) taken from them.

The session keeps every loaded module until it closes (or ``Module.close()``): function
handles are handed out as plain ints for the launch hot path, and an int cannot keep its
module loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .driver import check
from .handle import Handle

if TYPE_CHECKING:
    from .session import Session


class FunctionAttributes(NamedTuple):
    """Static resource use of a kernel, as the driver reports it."""

    registers: int
    shared_bytes: int
    max_threads: int
    local_bytes: int
    const_bytes: int


class Module(Handle):
    """A cubin loaded into the session's context (cuModuleLoadData)."""

    kind = "module"
    __slots__ = ("_functions",)

    def __init__(self, session: Session, cubin: bytes) -> None:
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
        """Registers, static shared bytes, max threads per block, local and constant bytes of ``fn``."""
        handle = self.function(fn) if isinstance(fn, str) else fn
        session = self.session
        d = session.api
        a = d.CUfunction_attribute
        with session.activated():
            values = [
                int(check("cuFuncGetAttribute", d.cuFuncGetAttribute(attr, handle)))
                for attr in (
                    a.CU_FUNC_ATTRIBUTE_NUM_REGS,
                    a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                    a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                    a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                    a.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
                )
            ]
        return FunctionAttributes(*values)

    def close(self) -> None:
        """Unload now; function handles taken from this module become invalid."""
        super().close()
        if self in self.session.modules:
            self.session.modules.remove(self)
        self._functions.clear()

    def __repr__(self) -> str:
        return f"<Module session={self.session.session_id} device={self.device} functions={sorted(self._functions)}>"
