"""kernel -> cuBLAS gemm -> kernel on one stream, with no host synchronization, then as a CUDA graph.

Runs on the first GPU, else on the CPU device (cuBLAS there is the host BLAS, the graph a
recorded replay); needs the blas extra (pip install 'kerneldsl[blas]') and says so plainly otherwise.
"""

from __future__ import annotations

from typing import NewType, TypeVar

import numpy as np

import kerneldsl as kd

T = TypeVar("T")
m = NewType("m", int)
n = NewType("n", int)


@kd.kernel(grid=kd.cdiv(kd.sym(m) * kd.sym(n), 256), block=256)
def scale(x: kd.InOut[T, m, n], factor: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < m * n) {x}[i] *= {factor};
    """


@kd.kernel(grid=kd.cdiv(kd.sym(m) * kd.sym(n), 256), block=256)
def relu(x: kd.InOut[T, m, n]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < m * n && {x}[i] < (T)0) {x}[i] = (T)0;
    """


def main() -> None:
    if not kd.blas.available():
        print("the blas extra is not installed: pip install 'kerneldsl[blas]'")
        return
    rng = np.random.default_rng()
    a = rng.standard_normal((512, 256), dtype=np.float32)
    b = rng.standard_normal((256, 128), dtype=np.float32)
    expected = np.maximum((2 * a) @ b, 0)
    device = kd.devices()[0]  # the first GPU, else the CPU device
    with kd.Session(device=device) as s:
        da, db = s.to_device(a), s.to_device(b)
        work, dc = s.empty_like(da), s.empty((512, 128), np.float32)

        def pipeline() -> None:  # all asynchronous on the session stream
            da.copy_to(work)
            scale(work, np.float32(2))
            kd.blas.gemm(work, db, out=dc)
            relu(dc)

        pipeline()
        np.testing.assert_allclose(dc.to_host(), expected, rtol=1e-3, atol=1e-3)
        print(f"kernel -> gemm -> kernel on one stream of {device} matches numpy")

        with s.capture() as graph:
            pipeline()
        s.zeros_like(dc).copy_to(dc)
        graph.replay()
        np.testing.assert_allclose(dc.to_host(), expected, rtol=1e-3, atol=1e-3)
        print("the same pipeline captured as a CUDA graph and replayed matches numpy")


if __name__ == "__main__":
    main()
