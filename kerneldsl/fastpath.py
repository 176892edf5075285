"""The C launch path: the base class Kernel calls go through, and Launches made from bound kernels.

``_fastlaunch.c`` runs the warm path of ``@kd.kernel`` calls without a Python frame, following
``codegen.launch_plan`` (the generated adapter restated as tables). It only recognises calls
the Python path has already accepted once, and hands everything else back to ``Kernel._call``,
so both paths raise the same errors. Without the compiled module (no C compiler when the
package was built) or with ``KERNELDSL_C_LAUNCH=0``, every call takes the Python path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from .runtime.memory import DeviceArray


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("kerneldsl._fastlaunch")
    except ImportError:  # built without a C compiler: the Python path does everything
        return None


_fastlaunch = _compiled()

ENABLED = _fastlaunch is not None and os.environ.get("KERNELDSL_C_LAUNCH", "1") != "0"


def status() -> str:
    """One line for ``kerneldsl info``: whether warm calls take the C path, and if not, why."""
    if ENABLED:
        return "on"
    if _fastlaunch is None:
        return "off: kerneldsl._fastlaunch was not built (no C compiler at install time); calls take the Python path"
    return "off: KERNELDSL_C_LAUNCH=0; calls take the Python path"


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


if _fastlaunch is not None and ENABLED and not TYPE_CHECKING:
    _fastlaunch.configure(DeviceArray)
    Front = _fastlaunch.Front
else:
    Front = PyFront


def remember(front: Any, holder: Any, make: Callable[[], Any]) -> None:
    """Have ``front`` try the C entry that ``holder.c_launch`` caches first from now on; ``make()``
    builds it on the first call (a falsy result is kept as False: the C path cannot take it)."""
    if holder.c_launch is None:
        holder.c_launch = make() or False
    if holder.c_launch:
        front._remember_launch(holder.c_launch)


def c_launch(bound: Any, args: tuple[Any, ...], out_keyword: bool = False) -> Any | None:
    """A C Launch of ``bound`` for calls dispatched like ``args``; None when the C path cannot
    take it (disabled, a specialization it does not cover, a driver without an entry point).
    With ``out_keyword`` the last argument comes as ``out=`` and the call returns it (kd.ops)."""
    plan = bound.build.generated.launch_plan
    if _fastlaunch is None or not ENABLED or plan is None:
        return None
    session = bound.session
    entry = session.entry_point("cuLaunchKernel")
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
        out_keyword=out_keyword,
    )


def gemm_launch(
    session: Any, plans: Any, plan: Any, double_scale: bool, operands: tuple[DeviceArray, ...], workspace: DeviceArray
) -> Any | None:
    """A C GemmLaunch of ``plan`` for ``gemm(a, b, out)`` on the session stream; None when the
    C path cannot take it (disabled, or a driver or cuBLASLt without the entry points)."""
    if _fastlaunch is None or not ENABLED:
        return None
    from . import blas_lt

    matmul, current_context = blas_lt.matmul_address(), session.entry_point("cuCtxGetCurrent")
    if not (matmul and current_context):
        return None
    return _fastlaunch.GemmLaunch(
        session=session,
        tags=tuple(a.dispatch_tag for a in operands),
        shapes=tuple(a.shape for a in operands),
        alignment=plan.alignments,
        matmul=matmul,
        current_context=current_context,
        context=session._ctx_address,
        handle=plans.raw,
        desc=plan.desc,
        layouts=plan.layouts,
        algo=plan.algo,
        workspace=workspace.ptr,
        workspace_bytes=workspace.nbytes,
        stream=session.stream.handle,
        double_scale=double_scale,
    )
