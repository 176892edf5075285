from __future__ import annotations

import kerneldsl as kd


@kd.kernel(grid=1, block=1)
def typo(x: kd.In[kd.float32]) -> str:
    return f"{x.ctyp}"  # expect: attr-defined
