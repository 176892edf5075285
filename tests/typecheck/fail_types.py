from __future__ import annotations

import numpy as np

import kerneldsl as kd

from .kernels import saxpy

y = np.ones(4, np.float32)
saxpy(y, y, 2.0, TILE="x")  # expect: call-overload
saxpy(1, y, 2.0)  # expect: call-overload
saxpy(y, y, "2.0")  # expect: call-overload
kd.ops.add("a", y)  # expect: call-overload
kd.ops.sum(y).result()  # expect: attr-defined
