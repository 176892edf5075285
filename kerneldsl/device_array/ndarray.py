"""The user-facing device array: ``kd.DeviceArray``, a ``runtime.memory.DeviceBuffer`` that
programs like a NumPy array.

The runtime owns the memory, its layout and views; this class adds what runs kernels: ``@``
(``kd.matmul``), ``astype``, ``fill``, ``copy``, ``ravel``, item assignment, and the kernels
that copy and fill strided views; the operators (``array/operators.py``, ``kd.ops`` calls),
NumPy's reduction methods (``array/methods.py``), the scalar and Array API protocol
(``array/protocol.py``) and the complex parts (``array/complex_parts.py``) are mixins, which
reach the engine through ``array/engine.py``. Importing it
registers it with the runtime (``memory.use_array_type``), so that every array the runtime makes
from then on, the C path's included, is a DeviceArray. It declares no slots: the C path reads
arrays at the DeviceBuffer's slot offsets.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..array.arraytype import as_array
from ..array.engine import ops
from ..array.operators import InPlaceOperators, Operators
from ..runtime import memory
from ..runtime.memory import DeviceBuffer
from ..runtime.transfers import Transfers
from .complex_parts import ComplexParts
from .methods import ReductionMethods
from .protocol import ArrayProtocol

if TYPE_CHECKING:
    from ..runtime.session import Session


class DeviceArray(DeviceBuffer, Operators, InPlaceOperators, ReductionMethods, ArrayProtocol, ComplexParts):
    """Device memory that behaves like a NumPy array where that costs nothing: operators map to
    ``kd.ops``, basic indexing and reshaping give views, host conversion is explicit
    (``to_host()``; ``item()`` and ``float(a)`` of one element synchronize). The operators
    (``Operators``, ``InPlaceOperators``), NumPy's reduction methods (``ReductionMethods``) and
    the Array API protocol (``ArrayProtocol``) are mixed in. See ``DeviceBuffer`` for the
    memory, layout, views and transfers."""

    __slots__ = ()
    session: Session  # the runtime's buffers know it as what they read of it (a BufferSession)

    # NumPy's operators with a DeviceArray on the right defer to it (``host + d`` is ``d.__radd__``,
    # run on the device with the host operand uploaded, as kd.ops does); a NumPy ufunc called on a
    # DeviceArray raises TypeError, since host conversion is explicit.
    __array_ufunc__ = None

    def __setitem__(self, key: Any, value: Any) -> None:
        """``a[key] = value``: ``value`` (a scalar, a host or device array) broadcast into the view
        ``a[key]`` and cast to its dtype as NumPy does; enqueued on the session stream."""
        target = self[key]
        if isinstance(value, (bool, int, float, np.generic)):
            target.fill(value)
            return
        if type(value) is DeviceArray:
            if value.same_elements(target):  # ``a[k] += 1`` stores the view into itself
                return
            if value.dtype != target.dtype:
                value = value.astype(target.dtype)
        elif isinstance(value, np.ndarray) or not hasattr(value, "shape"):
            value = np.asarray(value, dtype=target.dtype)  # host data: cast here, uploaded by the op
        if target.session.gpu.empty_buffers == "track":
            _overwritten(target)
        ops().where(True, value, target, out=target)

    def ravel(self) -> DeviceArray:
        """The elements as a 1-D array: a view when the layout allows one, else a copy (as NumPy)."""
        if self.is_contiguous:
            return self.reshape(-1)
        return self.copy().reshape(-1)

    # -- copies and fills through kernels (kd.ops: imported on first use) -------------------------

    def copy(self) -> DeviceArray:
        """A new C-contiguous array with the same contents (enqueued on the session stream)."""
        self._check()
        return as_array(memory.copy(self.session, self))

    def astype(self, dtype: Any) -> DeviceArray:
        """A new array converted to ``dtype`` with NumPy's ``astype`` semantics."""
        result: DeviceArray = ops().astype(self, dtype)
        return result

    def fill(self, value: Any) -> None:
        """Enqueue setting every element to ``value``, converted to this dtype as NumPy's ``fill`` does."""
        self._check()
        scalar = np.asarray(value, dtype=self.dtype)[()]
        if self.session.gpu.empty_buffers == "track":
            _overwritten(self)
        ops().where(True, scalar, self, out=self)

    def _copy_by_kernel(self, other: Transfers) -> None:
        ops().astype(self, self.dtype, out=other)

    def _fill_by_kernel(self, value: Any) -> None:
        self.fill(value)

    def __matmul__(self, other: DeviceArray | np.ndarray) -> DeviceArray:
        """``kd.matmul(self, other)``; device operands of one dtype and session skip its general
        checks: two contiguous 2-D ones go straight to ``kd.blas.gemm`` with a new ``out`` (the C
        launch path once warm); a real float product with a 1-D operand (``A @ v``, ``v @ A``,
        ``v @ w``) is the ``dot`` reduction over A's rows or columns, launched from C once warm
        (``kerneldsl.blas.reduced``; ``v @ w`` a 0-d array that stays on the device)."""
        blas = products()
        if (
            type(other) is DeviceArray
            and self.dtype is other.dtype
            and self.session is other.session
            and 0 < self.ndim <= 2
            and 0 < other.ndim <= 2
            and self.shape[-1] == other.shape[0]
        ):
            if self.ndim == 1 or other.ndim == 1:
                if self.dtype in blas.REDUCED:
                    return blas.vector_product(self, other)  # type: ignore[no-any-return]
            elif self.is_contiguous and other.is_contiguous and self.dtype in blas.GEMM_TYPES:
                out = self.session.empty((self.shape[0], other.shape[1]), self.dtype)
                return blas.gemm(self, other, out)  # type: ignore[no-any-return]
        return blas.matmul(self, other)  # type: ignore[no-any-return]

    def __rmatmul__(self, other: np.ndarray) -> DeviceArray:
        return products().matmul(other, self)  # type: ignore[no-any-return]

    def __imatmul__(self, other: DeviceArray | np.ndarray) -> DeviceArray:
        """``a @= b``: NumPy's in-place matmul (the product, through a temporary, written into ``a``)."""
        return products().matmul(self, other, out=self)  # type: ignore[no-any-return]


_products: ModuleType | None = None


def products() -> ModuleType:
    """``kerneldsl.blas.np_matmul``, what ``@`` runs: imported on the first ``@`` (it needs the
    kerneldsl[blas] extra), then kept, as an operator's import would cost a lookup."""
    global _products
    if _products is None:
        from ..blas import np_matmul

        _products = np_matmul
    return _products


memory.use_array_type(DeviceArray)


def _overwritten(target: DeviceArray) -> None:
    """``where(True, value, target, out=target)`` loads each element of ``target`` before it
    overwrites it: for the init check of a session that tracks what ``empty()`` buffers had written
    (``runtime.checks``), the elements count as written first (a strided view: every byte it spans)."""
    if not target.size:
        return
    low, high = target.byte_span()
    memory.note_written(target, low, high - low)
