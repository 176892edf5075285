"""Self-validating values: magic, format version, a canonical-JSON header carrying the key, the
key material and the payload's size, the payload, then an HMAC-SHA256 of all of it under this
user's secret. The seal is checked before anything is parsed."""

from __future__ import annotations

import hmac
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CacheError
from .keys import canonical

CACHE_FORMAT_VERSION: int = 2

_MAGIC = b"KDSLCACHE"
_PREFIX = struct.Struct(">9sHI")  # magic, format version, header length
_HEADER_TYPES: dict[str, type] = {
    "key": str,
    "material": dict,
    "payload_size": int,
}
_SEAL_BYTES = 32  # HMAC-SHA256, after the payload
PROCESS_SECRET = os.urandom(32)  # seals the in-memory fallback's values


def _seal(secret: bytes, body: bytes | memoryview) -> bytes:
    return hmac.digest(secret, body, "sha256")


def pack(key: str, payload: bytes, material: Mapping[str, object], secret: bytes) -> bytes:
    header = canonical({"key": key, "material": dict(material), "payload_size": len(payload)})
    body = _PREFIX.pack(_MAGIC, CACHE_FORMAT_VERSION, len(header)) + header + payload
    return body + _seal(secret, body)


@dataclass(frozen=True)
class Value:
    """A decoded value; ``material_json`` is canonical, encoded once while decoding."""

    key: str
    material: dict[str, object]
    material_json: bytes
    payload: bytes


def unpack(blob: bytes, secret: bytes) -> Value:
    """The decoded value; ``CacheError`` saying what is wrong otherwise. The seal is checked
    first: nothing written without this user's secret is parsed."""
    if len(blob) < _PREFIX.size + _SEAL_BYTES:
        raise CacheError(f"value truncated to {len(blob)} bytes")
    magic, version, header_size = _PREFIX.unpack_from(blob)
    if magic != _MAGIC:
        raise CacheError("not a kerneldsl cache value (bad magic)")
    if version != CACHE_FORMAT_VERSION:
        raise CacheError(f"format version {version}, expected {CACHE_FORMAT_VERSION}")
    body = memoryview(blob)[:-_SEAL_BYTES]
    if not hmac.compare_digest(_seal(secret, body), blob[-_SEAL_BYTES:]):
        raise CacheError("not sealed with this user's secret (written elsewhere, or corrupt)")
    header_end = _PREFIX.size + header_size
    if header_end > len(body):
        raise CacheError("header truncated")
    header = _parse_header(blob[_PREFIX.size : header_end])
    payload = blob[header_end:-_SEAL_BYTES]
    if header["payload_size"] != len(payload):
        raise CacheError(f"payload is {len(payload)} bytes, header says {header['payload_size']}")
    try:
        material_json = canonical(header["material"])
    except RecursionError:
        raise CacheError("material is nested too deeply") from None
    return Value(header["key"], header["material"], material_json, payload)


def _parse_header(text: bytes) -> dict[str, Any]:
    """The JSON header, refused unless it has exactly the expected fields and types: a wrong
    type (``payload_size: 5.0``, ``true``, a list...) must read as corrupt here, not fail or
    pass later."""
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        raise CacheError("header is not valid JSON") from None
    if not isinstance(header, dict) or header.keys() != _HEADER_TYPES.keys():
        raise CacheError("header has the wrong fields")
    wrong = [name for name, kind in _HEADER_TYPES.items() if type(header[name]) is not kind]
    if wrong:
        raise CacheError(f"header fields of the wrong type: {', '.join(wrong)}")
    return header


def check_identity(value: Value, key: str, material_json: bytes) -> None:
    if value.key != key:
        raise CacheError("header names another key")
    if value.material_json != material_json:
        raise CacheError("stored material differs from the requested one")
