"""Kernel modules on the CPU device leave the static TLS block to the libraries that need it.

glibc places a dlopened library's small thread-local block in the static TLS surplus when TLS
descriptors reach it, and a library loaded later with initial-exec thread-locals (PyTorch's
libgomp) can then no longer load. Each kernel module has thread-locals (its ``__shared__``
variables), so the shim aligns them where the static block cannot hold them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kerneldsl.runtime.selection import is_available

pytestmark = pytest.mark.skipif(not is_available("cpu"), reason="no host C++ compiler for the CPU device")

LOAD_MODULES_THEN_TORCH = """
import numpy as np
import kerneldsl as kd

s = kd.Session(device="cpu")
ops = (kd.ops.add, kd.ops.multiply, kd.ops.subtract, kd.ops.maximum, kd.ops.minimum, kd.ops.negative)
dtypes = (np.float32, np.float64, np.int32, np.int64, np.int16, np.uint8)
for op in ops:
    for dtype in dtypes:
        a = np.arange(16).astype(dtype)
        op(a) if op is kd.ops.negative else op(a, a)
import torch

print(torch.ones(2).sum().item())
"""


def test_pytorch_imports_after_dozens_of_kernel_modules_loaded() -> None:
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", LOAD_MODULES_THEN_TORCH], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "2.0"
