"""PyTorch operators from kerneldsl declarations (``pip install 'kerneldsl[torch]'``).

A ``@kd.kernel``, a ``@kd.fuse`` function or a ``kd.ops`` function becomes a registered torch
operator, with its schema, fake kernel and (given ``backward=``, or ``backward="derive"`` for a
fused elementwise pipeline) autograd formula generated from the declaration, so it runs inside
``torch.compile(fullgraph=True)``, ``torch.export`` and CUDA graphs::

    @kd.torch.op("mylib::scale")
    @kd.kernel(grid=kd.cdiv(n, 256), block=256)
    def scale(y: kd.Out[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str: ...

    y = scale(torch.randn(1000), 2.0)  # torch.ops.mylib.scale: allocates y, returns it

CPU tensors run on kerneldsl's CPU device, CUDA tensors on ``torch.cuda.current_stream()`` of
their device. Importing ``kerneldsl`` never imports torch: this package does, on first use of
``kd.torch``.
"""

from ._extra import require_extra

require_extra()

from .checks import opcheck, sample_inputs
from .declaration import OpDeclaration
from .operator import TorchOp, op

__all__ = ["OpDeclaration", "TorchOp", "op", "opcheck", "sample_inputs"]
