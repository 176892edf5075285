from __future__ import annotations

import numpy as np

from .kernels import saxpy

y = np.ones(4, np.float32)
saxpy(y, y, 2.0, bogus=3)  # expect: call-overload
saxpy.launch(grid=2)(y, y, 2.0, bogus=3)  # expect: call-overload
saxpy.launch(gird=2)  # expect: call-arg
