"""Tuning records in the disk cache, beside the builds and under the same seal.

One record per (kernel identity, key values, device name): the per-configuration timings (or
why a configuration was skipped), so a new process picks the winner without launching anything
and an added configuration is measured alone. The record's key material names the kernel by an
*identity* digest of what decides its code (the body's source without decorators, the
declaration, the options, kerneldsl's fingerprint, NVRTC): editing the body starts afresh,
adding a configuration does not. A payload of the wrong shape reads as no record (evicted).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import cache as disk_cache
from ..jit.signature import Signature
from ..jit.signature.spelling import NO_DEFAULT

if TYPE_CHECKING:
    from ..cache import CacheEntryInfo, DiskCache
    from ..launch.dispatch import Kernel

KIND = "tuning"  # the "kind" and "output" of a record's key material


@dataclass(frozen=True)
class Timing:
    """One configuration's outcome: milliseconds per launch, or why it was skipped."""

    label: str
    ms: float | None
    error: str | None
    measured_at: float

    def as_json(self) -> dict[str, Any]:
        return {"label": self.label, "ms": self.ms, "error": self.error, "measured_at": self.measured_at}


def kernel_identity(kernel: Kernel[Any]) -> str:
    """A digest of what decides the kernel's code, stable across processes."""
    from ..jit.build import fingerprint
    from ..jit.compiler import nvrtc_identity

    sig = kernel.signature
    material = {
        "name": sig.name,
        "body": _body_text(kernel.body),
        "declaration": _declaration(sig),
        "options": list(kernel.options),
        "code": repr(dataclasses.astuple(kernel.code)),
        "fingerprint": fingerprint(),
        "nvrtc": nvrtc_identity(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _declaration(sig: Signature) -> list[Any]:
    """The parameters and launch dimensions, spelled the same in every process."""

    def stable(value: Any) -> str:
        return "no default" if value is NO_DEFAULT else repr(value)

    params = [[type(p).__name__, *(stable(getattr(p, f.name)) for f in dataclasses.fields(p))] for p in sig.params]
    launch = (sig.grid, sig.block, sig.shared, sig.cluster, sig.cooperative, sig.specialize, sig.allow_alias)
    return [params, repr(launch)]


def _body_text(body: Any) -> str:
    """The body function's source without its decorators (so the autotune configs are not part
    of it), or its bytecode when the source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(body)))
    except (OSError, TypeError, SyntaxError):
        code = body.__code__
        return f"{code.co_code.hex()}{code.co_consts!r}"
    node = tree.body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node.decorator_list = []
    return ast.unparse(node)


def material(
    kernel: str, identity: str, key: list[Any], key_names: list[str], device: str, arch: str
) -> dict[str, Any]:
    return {
        "format": disk_cache.CACHE_FORMAT_VERSION,
        "kind": KIND,
        "output": KIND,
        "tuned_kernel": kernel,  # not "kernel": a build's explain() compares the builds of that name
        "identity": identity,
        "key": key,
        "key_names": key_names,
        "device": device,
        "arch": arch,
    }


def load(store: DiskCache, wanted: Mapping[str, Any]) -> dict[str, Timing]:
    """The timings recorded under ``wanted`` (config identity -> Timing); {} for none."""
    key = disk_cache.cache_key(wanted)
    payload = store.get(key, wanted)
    if payload is None:
        return {}
    timings = _decode(payload)
    if timings is None:
        store.evict(key, "tuning record of the wrong shape")
        return {}
    return timings


def save(store: DiskCache, wanted: Mapping[str, Any], timings: Mapping[str, Timing]) -> None:
    payload = {"configs": {identity: t.as_json() for identity, t in sorted(timings.items())}}
    store.put(disk_cache.cache_key(wanted), json.dumps(payload, sort_keys=True).encode(), wanted)


def _decode(payload: bytes) -> dict[str, Timing] | None:
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.keys() != {"configs"} or not isinstance(data["configs"], dict):
        return None
    found = {}
    for identity, row in data["configs"].items():
        if not isinstance(row, dict) or row.keys() != {"label", "ms", "error", "measured_at"}:
            return None
        label, ms, error, when = row["label"], row["ms"], row["error"], row["measured_at"]
        if type(label) is not str or type(when) not in (int, float):
            return None
        if not (
            (type(ms) is float and math.isfinite(ms) and ms >= 0 and error is None)
            or (ms is None and type(error) is str)
        ):
            return None
        found[identity] = Timing(label, ms, error, float(when))
    return found


def listed(store: DiskCache, entries: list[CacheEntryInfo]) -> list[dict[str, Any]]:
    """``kerneldsl cache list``'s rows for the tuning records among ``entries``: the kernel, the
    device, the entry's size, key and time, and under ``tuning`` the key values, the fastest
    configuration measured and how many were measured or skipped."""
    rows = []
    for e in entries:
        m = e.material
        if m.get("kind") != KIND:
            continue
        timings = load(store, m)
        measured = {t.label: t.ms for t in timings.values() if t.ms is not None}
        names, values = m.get("key_names"), m.get("key")
        pairs = zip(names, values) if isinstance(names, list) and isinstance(values, list) else ()
        winner = min(measured, key=lambda label: measured[label] or 0.0) if measured else None
        rows.append(
            {
                "kernel": m.get("tuned_kernel"),
                "output": KIND,
                "device": m.get("device"),
                "arch": m.get("arch"),
                "size": e.size,
                "key": e.key,
                "stored_at": e.stored_at,
                "tuning": {
                    "key": ", ".join(f"{n}={v}" for n, v in pairs),
                    "winner": winner,
                    "winner_ms": None if winner is None else measured[winner],
                    "measured": len(measured),
                    "skipped": len(timings) - len(measured),
                },
            }
        )
    return rows
