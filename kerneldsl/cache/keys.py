"""Cache keys: sha256 of canonical JSON, so equal material gives the same key in every process."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping


def canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def cache_key(material: Mapping[str, object]) -> str:
    """sha256 hex of canonical JSON of ``material``: pure, so equal inputs give equal keys
    in every process, whatever the dict order or hash seed."""
    return hashlib.sha256(canonical(dict(material))).hexdigest()
