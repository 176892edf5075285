"""The C launch path: the base class Kernel calls go through, and Launches made from bound kernels.

``_fastlaunch.c`` runs the warm path of ``@kd.kernel`` calls without a Python frame, following
``codegen.launch_plan`` (the generated adapter restated as tables). It only recognises calls
the Python path has already accepted once, and hands everything else back to ``Kernel._call``,
so both paths raise the same errors. Without the compiled module (no C compiler when the
package was built) or with ``KERNELDSL_C_LAUNCH=0``, every call takes the Python path.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .runtime.memory import DeviceArray

try:
    from . import _fastlaunch
except ImportError:  # built without a C compiler: the Python path does everything
    _fastlaunch = None  # type: ignore[assignment]

ENABLED = _fastlaunch is not None and os.environ.get("KERNELDSL_C_LAUNCH", "1") != "0"


class PyFront:
    """Kernel's base when the C path is off: every call goes straight to ``_call``."""

    __slots__ = ()
    _remembered_launches = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)  # type: ignore[attr-defined]

    def _remember_launch(self, launch: Any) -> None:
        pass

    def _forget_launches(self) -> None:
        pass


if ENABLED and not TYPE_CHECKING:
    _fastlaunch.configure(DeviceArray)
    Front = _fastlaunch.Front
else:
    Front = PyFront


def c_launch(bound: Any, args: tuple[Any, ...]) -> Any | None:
    """A C Launch of ``bound`` for calls dispatched like ``args``; None when the C path cannot
    take it (disabled, a specialization it does not cover, a driver without an entry point)."""
    plan = bound.build.generated.launch_plan
    if not ENABLED or plan is None:
        return None
    session = bound.session
    entry = session.launch_entry_point
    if not entry:
        return None
    guards = tuple(a.dispatch_tag if type(a) is DeviceArray else type(a) for a in args)
    return _fastlaunch.Launch(
        plan=plan,
        session=session,
        guards=guards,
        launch=entry,
        function=int(bound.function),
        stream=int(session._stream_cu),
    )
