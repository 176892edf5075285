"""Rendered kernel bodies kept in the disk cache, so that a fresh process whose kernels are all
disk hits renders no template and imports no Jinja (as ``@kd.kernel`` bodies, which are text).

A body is stored under the key of what it is rendered from: the template and code generation
(``build.fingerprint``), the Jinja release, the template's name and its whole context. The disk
cache seals every entry with the user's secret, so a body read back is one this user rendered.
"""

from __future__ import annotations

import json
from typing import Any

from .. import cache as disk_cache
from ..jit.build import fingerprint
from ..jit.codegen import render, renderer_identity

OUTPUT = "body"


def rendered(template: str, context: dict[str, Any]) -> str:
    """``render(template, **context)``, from the disk cache when it was rendered before.
    ``context`` holds JSON data only (str, int, bool, None, lists and dicts of them)."""
    material = {
        "format": disk_cache.CACHE_FORMAT_VERSION,
        "fingerprint": fingerprint(),
        "renderer": renderer_identity(),
        "output": OUTPUT,
        "template": template,
        "context": json.dumps(context, sort_keys=True),
    }
    key = disk_cache.cache_key(material)
    store = disk_cache.get_default_cache()
    found = store.get(key, material)
    if found is not None:
        return found.decode()
    text = render(template, **context)
    store.put(key, text.encode(), material)
    return text
