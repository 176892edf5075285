"""The PyTorch extra, checked before anything else in ``kd.torch`` imports torch."""

from __future__ import annotations

import importlib.util

from ..errors import TorchNotAvailableError

INSTALL_HINT = "pip install 'kerneldsl[torch]'"


def require_extra() -> None:
    """Raise one error naming the extra, instead of a bare ModuleNotFoundError from deep inside."""
    if importlib.util.find_spec("torch") is None:
        raise TorchNotAvailableError(f"kd.torch needs PyTorch, which is not installed: {INSTALL_HINT}")
