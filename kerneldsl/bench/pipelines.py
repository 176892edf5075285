"""The fused pipelines more than one benchmark times: softmax and layer norm over the last axis,
written with ``kd.ops`` under ``@kd.fuse`` as a user would."""

from __future__ import annotations

from typing import Any

import kerneldsl as kd

EPS = 1e-5


@kd.fuse
def softmax(x: Any) -> Any:
    m = kd.ops.max(x, axis=-1, keepdims=True)
    e = kd.ops.exp(x - m)
    return e / kd.ops.sum(e, axis=-1, keepdims=True)


@kd.fuse
def layer_norm(x: Any, w: Any, b: Any) -> Any:
    xc = x - kd.ops.mean(x, axis=-1, keepdims=True)
    var = kd.ops.mean(xc * xc, axis=-1, keepdims=True)
    return xc / kd.ops.sqrt(var + EPS) * w + b
