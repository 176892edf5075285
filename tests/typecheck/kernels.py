"""Kernels the other files call (imported, as user code imports its kernels)."""

from __future__ import annotations

from typing import Annotated, NewType, TypeVar

import kerneldsl as kd

T = TypeVar("T")
n = NewType("n", int)


@kd.kernel(grid=kd.cdiv(n, 256), block=kd.sym("TILE"))
def saxpy(y: kd.InOut[T, n], x: kd.In[T, n], alpha: kd.Scalar[T], TILE: kd.Const[int] = 256) -> str:
    # The body sees proxies: their attributes type-check here.
    return f"if (threadIdx.x < TILE) {y}[0] = ({y.ctype}){alpha} * {x}[{x.strides[0]}] + {alpha.ctype}(0);"


tuned_saxpy = kd.autotune(configs={"TILE": [128, 256]}, key=(T, n))(saxpy)  # typed as saxpy is


@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def block_sums(sums: kd.Out[kd.float32, Annotated[int, kd.cdiv(n, 256)]], x: kd.In[kd.float32, n]) -> str:
    # A computed extent's checked spelling: Annotated[int, expression] (a checker takes no call in a type).
    return f"if (threadIdx.x == 0) {sums}[blockIdx.x] = {x}[blockIdx.x * 256];"
