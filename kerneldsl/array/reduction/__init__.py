"""Reductions: a program's values folded over all axes, one axis or a tuple of axes.

``kd.reduction(map=, reduce=, identity=, post=)`` declares one; ``kd.ops.sum`` and friends are
reductions too. Every call is one launch of one kernel; which kernel is decided per call from
the extents (``Reduction.strategy`` shows it, ``inspect`` the Build, whose ``decisions`` name
the stage). One concern per module, as the elementwise layer is split:

- ``reducers``: how values fold (the reducer table) and the accumulation and result dtypes;
- ``axes``: NumPy's ``axis=`` / ``keepdims`` rules and result shapes;
- ``strategy``: the stage, variant and launch (grid, splits, partials) of a shape on a device,
  from its SM count (on the CPU device, its own "host-rows" / "host-columns" stages): pure
  decisions, no templates or sessions;
- ``canonical``: any axis set over any strides as alternating kept / reduced groups (merged runs,
  extent-1 axes dropped), and ``strided``: the ``segments`` / ``lines`` launches of the groups
  the plain stages do not take (interleaved axes, strided views read in place);
- ``kernel``: a variant's parameters and its body, from the stage's template
  (``templates/reduction_{full,rows,columns,segments,lines,gather,host}.cu.j2`` over ``reduction.cuh.j2``);
- ``plan``: a reduction compiled for one set of argument dtypes and shapes, and its launch;
- ``warm``: the warm path, one dict lookup to a launch prebuilt by the first such call;
- ``api``: ``Reduction`` (callable, traceable inside ``@kd.fuse``) and ``kd.reduction``.

Results are deterministic for every dtype, floats included: each value has a fixed place in a
fixed tree, and work split over blocks is folded by the last block to finish (elected by an
integer ticket, the only atomic) in index order. No value is ever added atomically; the tree
depends only on the extents and the device's SM count. Float results therefore differ from
NumPy's by summation order only: tests allow ``rtol = eps(acc) * sqrt(n)``-ish bounds. NaN
propagates through min/max/sum like NumPy; argmax/argmin return the first NaN's index.
"""

from __future__ import annotations

from .api import Reduction, reduction
from .axes import check_keepdims, normalize_axes, result_shape
from .kernel import Geometry, reduction_kernel
from .plan import ReductionPlan, plan_reduction
from .reducers import REDUCERS, Reducer, accumulation_dtype, identity_literal, user_reducer
from .strategy import (
    DIRECT_MAX,
    INSPECT_MULTIPROCESSORS,
    ROWS_BLOCK_MIN,
    Extents,
    Step,
    Variant,
    device_multiprocessors,
    extents,
    planning_multiprocessors,
)

__all__ = [
    "DIRECT_MAX",
    "INSPECT_MULTIPROCESSORS",
    "REDUCERS",
    "ROWS_BLOCK_MIN",
    "Extents",
    "Geometry",
    "Reducer",
    "Reduction",
    "ReductionPlan",
    "Step",
    "Variant",
    "accumulation_dtype",
    "check_keepdims",
    "device_multiprocessors",
    "extents",
    "identity_literal",
    "normalize_axes",
    "plan_reduction",
    "planning_multiprocessors",
    "reduction",
    "reduction_kernel",
    "result_shape",
    "user_reducer",
]
