from __future__ import annotations

import numpy as np

from .kernels import tuned_saxpy

y = np.ones(4, np.float32)
tuned_saxpy(y, y)  # expect: call-arg
tuned_saxpy.explain(y, y, 2.0).upper(1)  # expect: call-arg
