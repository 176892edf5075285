"""Named compute profiles: a set of workers (a Dask resource each of them carries) and the compile
options ``@kd.kernel`` calls made under the profile add to the kernel's own."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..jit.compiler import check_options

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_KEYS = frozenset({"options", "gpus"})


@dataclass(frozen=True)
class Profile:
    name: str
    options: tuple[str, ...] = ()
    gpus: tuple[int, ...] | None = None  # None: every GPU of the cluster

    @property
    def spec(self) -> dict[str, Any]:
        """The profile as it was given (``{"options": [...], "gpus": [...]}``)."""
        spec: dict[str, Any] = {"options": list(self.options)}
        if self.gpus is not None:
            spec["gpus"] = list(self.gpus)
        return spec

    @property
    def resource(self) -> str:
        """The Dask resource the profile's workers carry (``dask worker --resources NAME=1``)."""
        return resource_name(self.name)


def resource_name(profile: str) -> str:
    return f"kerneldsl-profile-{profile}"


def checked_profiles(profiles: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Profile]:
    """``{"fast": {"options": ["--use_fast_math"]}, "big": {"gpus": [1]}}`` validated to Profiles."""
    checked: dict[str, Profile] = {}
    for name, spec in (profiles or {}).items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"profile name {name!r} must be an identifier of at most 64 characters")
        if not isinstance(spec, Mapping) or not set(spec) <= _KEYS:
            raise ValueError(f"profile {name!r}: expected a mapping with keys from {sorted(_KEYS)}, got {spec!r}")
        options = tuple(check_options(spec.get("options", ())))
        gpus = spec.get("gpus")
        checked[name] = Profile(name, options, None if gpus is None else _gpu_list(name, gpus))
    return checked


def _gpu_list(name: str, gpus: Sequence[Any]) -> tuple[int, ...]:
    if isinstance(gpus, (str, bytes)) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus
    ):
        raise ValueError(f"profile {name!r}: gpus must be a list of device ordinals, got {gpus!r}")
    return tuple(gpus)
