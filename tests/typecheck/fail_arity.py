from __future__ import annotations

import numpy as np

from .kernels import saxpy

y = np.ones(4, np.float32)
saxpy(y, y)  # expect: call-overload
saxpy(y, y, 2.0, 3.0, 4.0)  # expect: call-overload
