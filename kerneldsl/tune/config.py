"""One configuration of a tuned kernel: constants, launch dimensions and NVRTC options, checked
against the kernel's declaration, and the ``Kernel`` it becomes (a *variant*: the same body with
the constants bound as defaults and the launch dimensions replaced), so each configuration is
an ordinary specialization, built and cached like any other and launched on the C path."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DeclarationError, InvalidOptionError
from ..jit.signature import ConstParam, Expr, parse_signature
from ..jit.signature.parse import const_value

if TYPE_CHECKING:
    from ..launch.dispatch import Kernel

LAUNCH_KEYS = ("block", "grid", "shared")
OPTION_KEYS = ("options", "maxrregcount")


@dataclass(frozen=True)
class Config:
    """A configuration as declared (``values``), its canonical JSON (``identity``, what the
    tuning records name it by) and a short ``label`` for tables and messages."""

    values: Mapping[str, Any]
    identity: str
    label: str

    def __repr__(self) -> str:
        return f"<Config {self.label}>"


def declared_configs(
    kernel: Kernel[Any], configs: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]
) -> tuple[Config, ...]:
    """``configs`` as a list of dicts, or a dict of lists (their product), each checked."""
    name = kernel.signature.name
    if isinstance(configs, Mapping):
        names = list(configs)
        if not all(isinstance(v, (list, tuple)) and v for v in configs.values()):
            raise DeclarationError(name, None, "autotune configs={name: [values, ...]} needs a non-empty list per name")
        configs = [dict(zip(names, combo)) for combo in itertools.product(*configs.values())]
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Sequence) or not configs:
        raise DeclarationError(
            name, None, "autotune needs configs=[{...}, ...] (at least one) or configs={name: [...]}"
        )
    checked = [_config(kernel, c) for c in configs]
    seen: dict[str, Config] = {}
    for c in checked:
        if c.identity in seen:
            raise DeclarationError(name, None, f"autotune config {c.label} is declared twice")
        seen[c.identity] = c
    return tuple(checked)


def _config(kernel: Kernel[Any], values: Any) -> Config:
    sig = kernel.signature
    if not isinstance(values, Mapping) or not values:
        raise DeclarationError(sig.name, None, f"an autotune config is a non-empty dict, got {values!r}")
    consts = {c.name: c for c in sig.consts}
    canonical: dict[str, Any] = {}
    for key, value in values.items():
        if key in consts:
            try:
                canonical[key] = const_value(consts[key].type, value)
            except (TypeError, ValueError) as exc:
                raise DeclarationError(sig.name, key, f"autotune config {dict(values)!r}: constant {exc}") from None
        elif key in LAUNCH_KEYS:
            canonical[key] = _dims_identity(value)
        elif key == "maxrregcount":
            if type(value) is not int or not 16 <= value <= 255:
                raise DeclarationError(
                    sig.name, None, f"autotune maxrregcount must be an int in 16..255, got {value!r}"
                )
            canonical[key] = value
        elif key == "options":
            if isinstance(value, str) or not all(isinstance(o, str) for o in value):
                raise DeclarationError(
                    sig.name, None, f"autotune options must be a list of NVRTC options, got {value!r}"
                )
            canonical[key] = list(value)
        else:
            raise DeclarationError(
                sig.name,
                None,
                f"autotune config key {key!r} is neither a constant of the kernel ({sorted(consts)}) nor one of "
                f"{', '.join(LAUNCH_KEYS + OPTION_KEYS)}",
            )
    identity = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    label = " ".join(f"{k}={_shown(v)}" for k, v in values.items())
    return Config(dict(values), identity, label)  # its variant checks the declaration's rules


def _dims_identity(value: Any) -> Any:
    dims = value if isinstance(value, (tuple, list)) else (value,)
    return [_expr_identity(d) if isinstance(d, Expr) else d for d in dims]


def _expr_identity(expr: Expr) -> list[Any]:
    return [expr.op, *(_expr_identity(a) if isinstance(a, Expr) else a for a in expr.args)]


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)


def variant(kernel: Kernel[Any], config: Config) -> Kernel[Any]:
    """The kernel ``config`` makes: the declaration parsed again with its launch dimensions, its
    constants' defaults set to the configuration's values, its options extended."""
    from ..launch.dispatch import Kernel

    sig = kernel.signature
    values = config.values
    try:
        parsed = parse_signature(
            kernel.body,
            _dims(values.get("grid"), sig.grid),
            _dims(values.get("block"), sig.block),
            values.get("shared", sig.shared),
            sig.specialize,
            sig.allow_alias,
            tuple(a.name for a in sig.arrays if a.strided),
            cooperative=sig.cooperative,
            cluster=sig.cluster or None,
        )
    except DeclarationError as exc:
        raise DeclarationError(sig.name, None, f"autotune config {config.label}: {exc}") from None
    params = tuple(
        dataclasses.replace(p, default=const_value(p.type, values[p.name]))
        if isinstance(p, ConstParam) and p.name in values
        else p
        for p in parsed.params
    )
    options = list(kernel.options) + list(values.get("options", ()))
    if "maxrregcount" in values:
        options.append(f"--maxrregcount={values['maxrregcount']}")
    try:
        return Kernel(kernel.body, dataclasses.replace(parsed, params=params), options, (), kernel.code)
    except InvalidOptionError as exc:
        raise DeclarationError(sig.name, None, f"autotune config {config.label}: {exc}") from None


def _dims(given: Any, declared: tuple[Expr, ...]) -> Any:
    if given is None:
        return declared
    return tuple(given) if isinstance(given, list) else given
