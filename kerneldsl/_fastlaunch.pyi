"""Types of the C launch path (kerneldsl/_fastlaunch.c)."""

from typing import Any

MAX_ARGS: int
MAX_ARRAYS: int
MAX_NDIM: int
MAX_SYMS: int
MAX_CHECKS: int
MAX_ALIASES: int
MAX_PROGRAM: int
MAX_STACK: int
MAX_SLOTS: int
CHECK_COMPUTED: int
OPCODES: dict[str, int]
SLOT_KINDS: dict[str, int]

def configure(device_array_type: type) -> None: ...
def set_launch_limits(limits: Any) -> None: ...

class Launch:
    def __init__(
        self,
        *,
        table: tuple[Any, ...],
        session: Any,
        guards: tuple[Any, ...],
        launch: int,
        function: int,
        stream: int,
        out_keyword: bool = ...,
        stream_object: Any = ...,
        allocate: Any = ...,
        template: Any = ...,
        allocator: Any = ...,
    ) -> None: ...

class Allocator:
    enabled: int
    copies: int
    def __init__(self, session: Any) -> None: ...
    def make(self, template: Any) -> Any: ...
    def upload(self, template: Any, host: Any, /) -> tuple[Any, bool] | int | None: ...
    def download(self, array: Any, host: Any, /) -> bool | int | None: ...
    def upload_into(self, array: Any, host: Any, /) -> bool | int | None: ...

class GemmLaunch:
    def __init__(
        self,
        *,
        session: Any,
        tags: tuple[Any, ...],
        shapes: tuple[tuple[int, ...], ...],
        alignment: tuple[int, ...],
        matmul: int,
        current_context: int,
        context: int,
        handle: int,
        desc: int,
        layouts: tuple[int, ...],
        algo: int,
        workspace: int,
        workspace_bytes: int,
        stream: int,
        double_scale: bool,
        stream_object: Any = ...,
    ) -> None: ...

class FastPathCallable:
    _remembered_launches: int
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def _remember_launch(self, launch: Launch | GemmLaunch) -> None: ...
    def _forget_launches(self) -> None: ...
