"""Conjugate gradients written once, the CuPy way, run on kerneldsl arrays and on NumPy's.

``cg`` is CuPy's spelling line for line: ``@`` is ``kd.matmul`` (a dot reduction over A's rows for
``A @ p``, one for ``p @ Ap`` whose 0-d result stays on the device), and the scalars ``alpha``/``beta`` are 0-d
device arrays broadcast into the vector ops, so an iteration never waits for the GPU. The same
function runs on numpy arrays, and on torch or CuPy tensors (``kerneldsl bench arrays --only cg``
times it against both).

Without a GPU the kerneldsl half runs on the CPU device (the same kernels, compiled for the host).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kerneldsl as kd


def cg(A: Any, b: Any, x: Any, iterations: int) -> Any:
    """``iterations`` steps of conjugate gradients on ``A x = b`` from ``x`` (any array library)."""
    r = b - A @ x
    p = r
    rr = r @ r
    for _ in range(iterations):
        Ap = A @ p
        alpha = rr / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = r @ r
        beta = rr_new / rr
        p = r + beta * p
        rr = rr_new
    return x


def spd_system(n: int, dtype: Any, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A well-conditioned symmetric positive definite ``A`` (``M Mᵀ / n + I``) and a right-hand side."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    a = (m @ m.T) / n + np.eye(n)
    return a.astype(dtype), rng.standard_normal(n).astype(dtype)


def main() -> None:
    n, iterations = 512, 60
    a, b = spd_system(n, np.float64)
    x_np = cg(a, b, np.zeros(n), iterations)
    print(f"numpy: residual {np.linalg.norm(a @ x_np - b):.2e}")
    # kd.asarray and kd.zeros allocate on the default session: the first GPU, else the CPU device
    x_kd = cg(kd.asarray(a), kd.asarray(b), kd.zeros(n, dtype=np.float64), iterations).to_host()
    print(
        f"kerneldsl on {kd.default_session().device}: residual {np.linalg.norm(a @ x_kd - b):.2e}, "
        f"max |x_kd - x_numpy| {np.abs(x_kd - x_np).max():.2e}"
    )
    assert np.allclose(x_kd, x_np, rtol=1e-8, atol=1e-10)


if __name__ == "__main__":
    main()
