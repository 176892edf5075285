"""The remote plane's optional dependencies, checked before anything else imports them."""

import importlib

from ..errors import DistributedNotAvailableError

INSTALL_HINT = "pip install 'kerneldsl[distributed]'"
_MODULES = {
    "distributed": "Dask distributed",
    "cloudpickle": "cloudpickle",
    "cryptography": "cryptography",  # the default cluster's TLS certificate (Security.temporary)
}


def require_extra() -> None:
    """Raise one error naming the extra, instead of a bare ModuleNotFoundError from deep inside."""
    absent = [label for module, label in _MODULES.items() if not _importable(module)]
    if absent:
        raise DistributedNotAvailableError(
            f"kd.distributed needs {', '.join(absent)}, which {'is' if len(absent) == 1 else 'are'} "
            f"not installed: {INSTALL_HINT}"
        )


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:
        return False
    return True
