"""The user-facing device array: ``kd.DeviceArray``, a ``runtime.memory.DeviceBuffer`` that
programs like a NumPy array.

The runtime owns the memory, its layout and views; this class is the rest of the Python surface,
in one place: ``@`` (``kd.matmul``), ``astype``, ``fill``, ``copy``, ``ravel``, item assignment,
NumPy's reduction and scan methods and the complex parts, with the operators
(``operators.py``, ``kd.ops`` calls, shared with the ``@kd.fuse`` tracer) and the scalar and
Array API protocol (``protocol.py``) mixed in. All of them reach the op table and cuBLAS through
``engine.py``, the door the package root installs (opened on first use, so that declaring a
kernel stays cheap), never by import: those make and return DeviceArrays, and name this class.
Every public ``kd`` name that makes arrays imports it first. Importing it registers it with the
runtime (``memory.use_array_type``), so that every array the runtime makes from then on, the C
path's included, is a DeviceArray. It declares no slots: the C path reads arrays at the
DeviceBuffer's slot offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..runtime import memory
from ..runtime.memory import DeviceBuffer
from ..runtime.transfers import Transfers
from .engine import dtype_variants, ops, products
from .operators import InPlaceOperators, Operators
from .protocol import ArrayProtocol

if TYPE_CHECKING:
    from ..runtime.session import Session


class DeviceArray(DeviceBuffer, Operators, InPlaceOperators, ArrayProtocol):
    """Device memory that behaves like a NumPy array where that costs nothing: operators map to
    ``kd.ops``, basic indexing and reshaping give views, host conversion is explicit
    (``to_host()``; ``item()`` and ``float(a)`` of one element synchronize). NumPy's reduction
    and scan methods (``sum``, ``mean``, ``cumsum``, ...: the ``kd.ops`` ones of the same name;
    ``dtype=`` accumulates and returns in that dtype, as NumPy's) and complex parts (``real``,
    ``imag``: views, assignable) are written here; the operators (``Operators``,
    ``InPlaceOperators``, shared with the ``@kd.fuse`` tracer) and the scalar and Array API
    protocol (``ArrayProtocol``) are mixed in. See ``DeviceBuffer`` for the memory, layout, views
    and transfers."""

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
        return cast("DeviceArray", memory.copy(self.session, self))

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

    # -- NumPy's reduction and scan methods: kd.ops reductions and scans of the same name ----------

    def sum(
        self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray:
        """``kd.ops.sum`` over ``axis`` (an int, a tuple, None: all), accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().sum, self.dtype, dtype)(
            self, axis=axis, out=out, keepdims=keepdims
        )
        return result

    def prod(
        self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray:
        """``kd.ops.prod`` over ``axis``, accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().prod, self.dtype, dtype)(
            self, axis=axis, out=out, keepdims=keepdims
        )
        return result

    def min(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.min`` over ``axis`` (ValueError for an empty reduction, as NumPy)."""
        result: DeviceArray = ops().min(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def max(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.max`` over ``axis`` (ValueError for an empty reduction, as NumPy)."""
        result: DeviceArray = ops().max(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def mean(
        self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None, keepdims: bool = False
    ) -> DeviceArray:
        """``kd.ops.mean`` over ``axis``: float64 for integers and bool, float16 stays float16."""
        result: DeviceArray = dtype_variants().typed(ops().mean, self.dtype, dtype)(
            self, axis=axis, out=out, keepdims=keepdims
        )
        return result

    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: DeviceArray | None = None,
        ddof: Any = 0,
        keepdims: bool = False,
        *,
        correction: Any = None,
    ) -> DeviceArray:
        """The mean squared deviation from the mean, divided by ``n - ddof`` instead of ``n``
        (``correction`` is the Array API's name for ``ddof``): three launches, four with ``ddof``."""
        result: DeviceArray = dtype_variants().variance(self, axis, dtype, out, ddof, correction, keepdims, root=False)
        return result

    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: DeviceArray | None = None,
        ddof: Any = 0,
        keepdims: bool = False,
        *,
        correction: Any = None,
    ) -> DeviceArray:
        """The square root of ``var`` (same arguments and dtypes)."""
        result: DeviceArray = dtype_variants().variance(self, axis, dtype, out, ddof, correction, keepdims, root=True)
        return result

    def argmin(self, axis: Any = None, out: DeviceArray | None = None, *, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.argmin``: int64 indices of the first minimum (of the first NaN) along one axis."""
        result: DeviceArray = ops().argmin(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def argmax(self, axis: Any = None, out: DeviceArray | None = None, *, keepdims: bool = False) -> DeviceArray:
        """``kd.ops.argmax``: int64 indices of the first maximum (of the first NaN) along one axis."""
        result: DeviceArray = ops().argmax(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def any(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """Whether any element along ``axis`` is nonzero (bool; False for an empty reduction)."""
        result: DeviceArray = dtype_variants().any(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def all(self, axis: Any = None, out: DeviceArray | None = None, keepdims: bool = False) -> DeviceArray:
        """Whether every element along ``axis`` is nonzero (bool; True for an empty reduction)."""
        result: DeviceArray = dtype_variants().all(self, axis=axis, out=out, keepdims=keepdims)
        return result

    def cumsum(self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None) -> DeviceArray:
        """``kd.ops.cumsum`` along ``axis`` (None: the flattened array), accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().cumsum, self.dtype, dtype)(self, axis=axis, out=out)
        return result

    def cumprod(self, axis: Any = None, dtype: Any = None, out: DeviceArray | None = None) -> DeviceArray:
        """``kd.ops.cumprod`` along ``axis`` (None: the flattened array), accumulating in ``dtype``."""
        result: DeviceArray = dtype_variants().typed(ops().cumprod, self.dtype, dtype)(self, axis=axis, out=out)
        return result

    # -- NumPy's complex parts: views of the memory (a real array's imag: new zeros) ----------------

    @property
    def real(self) -> DeviceArray:
        """The real parts: a view of a complex array, ``a`` itself viewed for a real one."""
        return _part(self, 0)

    @real.setter
    def real(self, value: Any) -> None:
        _part(self, 0)[...] = value

    @property
    def imag(self) -> DeviceArray:
        """The imaginary parts: a view of a complex array, new zeros for a real one."""
        a = self
        if a.dtype.kind != "c":
            return cast("DeviceArray", a.session.zeros(a.shape, a.dtype))
        return _part(a, 1)

    @imag.setter
    def imag(self, value: Any) -> None:
        a = self
        if a.dtype.kind != "c":
            raise TypeError(f"array of dtype {a.dtype} does not have a writable imaginary part")
        _part(a, 1)[...] = value

    def conj(self) -> DeviceArray:
        """``kd.ops.conj(a)``: a new array (a real one's copy)."""
        result: DeviceArray = ops().conj(self)
        return result

    conjugate = conj


def as_array(buffer: DeviceBuffer) -> DeviceArray:
    """An array the runtime made, typed as what it is: every buffer the runtime makes once this
    module registered the class is a DeviceArray (the runtime's factories are annotated with the
    class it knows, DeviceBuffer, where a session is not a ``kd.Session``)."""
    return cast("DeviceArray", buffer)


memory.use_array_type(DeviceArray)


def _overwritten(target: DeviceArray) -> None:
    """``where(True, value, target, out=target)`` loads each element of ``target`` before it
    overwrites it: for the init check of a session that tracks what ``empty()`` buffers had written
    (``runtime.checks``), the elements count as written first (a strided view: every byte it spans)."""
    if not target.size:
        return
    low, high = target.byte_span()
    memory.note_written(target, low, high - low)


def _part(a: DeviceArray, which: int) -> DeviceArray:
    """Part ``which`` (0 real, 1 imaginary) of every element of ``a`` as a view."""
    a._check()
    if a.dtype.kind != "c":
        return a[...]
    part = np.dtype(np.float32 if a.dtype == np.complex64 else np.float64)
    return a._view(a.shape, a.strides, which * part.itemsize, part)
