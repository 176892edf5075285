"""``kerneldsl cache info|list|clear``: the disk cache of compiled kernels, looked at without
creating it (a directory that does not exist yet is left alone)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..cache import DiskCache, default_cache_dir, get_default_cache
from ..errors import CacheError
from .formatting import size, stamp, table


def cache_info() -> dict[str, Any]:
    configured = default_cache_dir()
    info: dict[str, Any] = {"configured": str(configured), "exists": configured.is_dir()}
    try:
        store = existing_cache()
        if store is None:
            info.update(directory=None, in_memory=False, entries=0, bytes=0)
            return info
        info.update(
            directory=None if store.in_memory else str(store.directory),
            in_memory=store.in_memory,
            entries=len(store.entries()),
            bytes=store.volume(),
        )
    except CacheError as exc:  # info reports a broken setup instead of failing on it
        info["error"] = str(exc)
    return info


def existing_cache() -> DiskCache | None:
    """The default cache, or None while its directory does not exist yet but could be made:
    opening it would create the directory, and looking must not."""
    path = default_cache_dir()
    parent = path
    while not parent.exists():
        parent = parent.parent
    if parent != path and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return None
    return get_default_cache()  # present, or unusable: opening says how (degrades to memory)


def cache_line(c: dict[str, Any]) -> str:
    if "error" in c:
        return f"{c['configured']}: unusable: {c['error']}"
    if not c["exists"] and not c["in_memory"]:
        return f"{c['configured']}: does not exist yet (the first compile creates it)"
    where = f"in memory only ({c['configured']} is unusable)" if c["in_memory"] else c["directory"]
    return f"{where}: {c['entries']} entries, {size(c['bytes'])}"


def cmd_cache_info(args: argparse.Namespace) -> int:
    info = cache_info()
    if "error" in info:
        raise CacheError(info["error"])
    print(json.dumps(info, indent=2) if args.json else cache_line(info))
    return 0


def cmd_cache_list(args: argparse.Namespace) -> int:
    store = existing_cache()
    entries = sorted(store.entries(), key=lambda e: e.stored_at) if store else []
    rows: list[dict[str, Any]] = [
        {
            "kernel": e.material.get("kernel"),
            "arch": e.material.get("arch"),
            "output": e.material.get("output"),
            "size": e.size,
            "key": e.key,
            "stored_at": e.stored_at,
            "bindings": e.material.get("bindings"),
            "parameters": _parameters(e.material),
        }
        for e in entries
    ]
    tunings = _tuning_rows(store, entries)
    rows = [r for r in rows if r["output"] != "tuning"]
    if args.json:
        print(json.dumps(rows + tunings, indent=2))
        return 0
    if not rows and not tunings:
        print(f"the cache is empty ({_where(store)})")
    if rows:
        print(
            table(
                ("KERNEL", "ARCH", "OUTPUT", "SIZE", "KEY", "STORED", "BINDINGS", "PARAMETERS"),
                [
                    (
                        r["kernel"],
                        r["arch"],
                        r["output"],
                        size(r["size"]),
                        r["key"][:12],
                        stamp(r["stored_at"]),
                        _entry_bindings(r["bindings"]),
                        r["parameters"],
                    )
                    for r in rows
                ],
            )
        )
    if tunings:
        print(("\n" if rows else "") + "tuning records:")
        print(
            table(
                ("KERNEL", "DEVICE", "KEY", "WINNER", "MS", "CONFIGS", "STORED"),
                [
                    (
                        t["kernel"],
                        t["device"],
                        t["tuning"]["key"],
                        t["tuning"]["winner"] or "-",
                        "-" if t["tuning"]["winner_ms"] is None else f"{t['tuning']['winner_ms']:.4f}",
                        f"{t['tuning']['measured']} measured, {t['tuning']['skipped']} skipped",
                        stamp(t["stored_at"]),
                    )
                    for t in tunings
                ],
            )
        )
    return 0


def _tuning_rows(store: DiskCache | None, entries: list[Any]) -> list[dict[str, Any]]:
    """The tuning records (``kerneldsl.tune.records``) among ``entries``, one row per key."""
    from ..tune import records

    return records.listed(store, entries) if store is not None else []


def _entry_bindings(bindings: dict[str, Any] | None) -> str:
    """``T=float32 TILE=128 n=1024 32-bit``: the dtypes, constants, specialized extents and index
    width that tell one kernel's entries apart (checked by ``DiskCache.entries``)."""
    if bindings is None:
        return ""
    named = {**bindings["dtypes"], **bindings["constants"], **bindings["extents"]}
    return " ".join([*(f"{name}={value}" for name, value in named.items()), f"{bindings['index_bits']}-bit"])


def _parameters(material: dict[str, Any]) -> str:
    """The kernel's C parameter list from the ABI in the key material: it tells specializations apart."""
    slots = [s for s in material.get("abi", ()) if isinstance(s, list) and len(s) == 2]
    return ", ".join(f"{ctype} {name}" for name, ctype in slots)


def cmd_cache_clear(args: argparse.Namespace) -> int:
    store = existing_cache()
    removed = store.clear() if store else 0
    print(f"removed {removed} entries ({_where(store)})")
    return 0


def _where(store: DiskCache | None) -> str:
    if store is None:
        return f"{default_cache_dir()} does not exist yet"
    return str(store.directory) if store.directory else "in memory"
