"""``kd.matmul`` and ``@``: NumPy's ``matmul`` on cuBLAS.

NumPy's rules: a 1-D first operand is a row ``(1, k)`` and a 1-D second one a column ``(k, 1)``,
the added axis dropped from the result (1-D @ 1-D is a 0-d array); the axes before the last two
are batch axes, broadcast against each other. The result dtype is ``np.result_type`` of the
operands (bfloat16 @ bfloat16 stays bfloat16); integer and bool results are refused.

Which call: a 2-D product is ``kd.blas.gemm`` (cuBLASLt, and the C launch path once warm);
an unbatched product with a 1-D operand (``A @ v``, ``v @ A``, ``v @ w``) of a real float dtype is
a ``dot`` reduction (``reduced.py``: one launch from C once warm, where a cuBLAS gemv is Python
into the handle on every call; float16/bfloat16 accumulate in float32); everything else is one
``cublasGemmStridedBatchedEx``. Strided views are read in place where a leading dimension
and a transpose flag describe them (``a.T``, a column slice); a broadcast batch axis is a batch
stride of 0 when the whole batch collapses to one stride. Anything else is copied first.

Host operands follow ``kd.ops``: with a device array among the operands, numpy ones are
uploaded to its session; with none, the product runs on the default session and comes back as
numpy (``np.matmul``'s result, a numpy scalar for 1-D @ 1-D).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, overload

import numpy as np

from ..array import ops, placement
from ..array.ndarray import DeviceArray, as_array
from ..errors import BindingError, ShapeMismatchError
from ..launch.routing import RemoteArguments, find_remote, routed
from ..runtime import memory
from ..runtime.handle import check_same_session
from ..runtime.session import Session, default_session
from .binding import GEMM_DEFAULT, OP_N, OP_T
from .checks import GEMM_TYPES, needs_64
from .handles import handle
from .matmul import gemm, scalars
from .reduced import REDUCED, vector_product

OP = "kd.matmul"
SUPPORTED = ", ".join(str(d) for d in GEMM_TYPES)


class Matrix(NamedTuple):
    """One operand as cuBLAS reads it: ``array`` (kept alive for the call), its first element,
    the row-major transpose flag, the leading dimension and the batch stride, in elements."""

    array: DeviceArray
    ptr: int
    trans: bool
    ld: int
    stride: int


@overload
def matmul(a: DeviceArray, b: DeviceArray | np.ndarray, out: DeviceArray | None = None) -> DeviceArray: ...
@overload
def matmul(a: np.ndarray, b: DeviceArray, out: DeviceArray | None = None) -> DeviceArray: ...
@overload
def matmul(a: Any, b: Any, out: Any = None) -> Any: ...
@routed
def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``np.matmul(a, b, out=out)`` on the GPU through cuBLAS (float16, bfloat16, float32, float64,
    complex64, complex128), or a ``dot`` reduction for an unbatched real float product with a 1-D
    operand (see the module docstring).

    Enqueued on the session stream like any op; the result is a new DeviceArray (0-d for two
    1-D operands) or ``out``. Numpy operands: see the module docstring.
    """
    remote = find_remote((a, b, out))
    if remote is not None:
        raise RemoteArguments(remote)
    values = [v if placement.is_array(v) else np.asarray(v) for v in (a, b)]
    if all(isinstance(v, (memory.DeviceBuffer, np.ndarray)) for v in values):
        result_of(*values)  # refused before anything is uploaded
    placed, session = placement.place(values, OP)
    if session is None:
        return _on_host(values[0], values[1], out)
    if out is not None:
        placement.check_placement(out, session, OP)
    return device_matmul(session, placed[0], placed[1], out)


def _on_host(a: np.ndarray, b: np.ndarray, out: Any) -> Any:
    """Host operands: through the default session, the result brought back as numpy."""
    if out is not None:
        placement.check_placement(out, None, OP)
        _, shape, dt = result_of(a, b)
        placement.check_out(out, shape, dt, OP)
    session = default_session()
    result = device_matmul(session, as_array(session.to_device(a)), as_array(session.to_device(b)), None).to_host()
    if out is None:
        return result[()] if result.ndim == 0 else result
    out[...] = result
    return out


def result_of(a: Any, b: Any) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype]:
    """``(batch shape, result shape, result dtype)`` of ``a @ b``, with NumPy's errors as typed ones."""
    for i, x in enumerate((a, b)):
        if x.ndim == 0:
            raise ShapeMismatchError(
                OP,
                "ab"[i],
                f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc core with "
                "signature (n?,k),(k,m?)->(n?,m?) requires 1)",
            )
    sa, sb = tuple(a.shape), tuple(b.shape)
    k, kb = sa[-1], sb[-2] if len(sb) > 1 else sb[0]
    if k != kb:
        raise ShapeMismatchError(
            OP,
            "b",
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
            f"(n?,k),(k,m?)->(n?,m?) (size {kb} is different from {k})",
        )
    try:
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise ShapeMismatchError(
            OP, "b", f"matmul: the batch dimensions {sa[:-2]} and {sb[:-2]} could not be broadcast together"
        ) from None
    shape = batch + sa[-2:-1] + sb[-1:] if len(sb) > 1 else batch + sa[-2:-1]
    return batch, shape, _dtype(a.dtype, b.dtype)


def _dtype(da: Any, db: Any) -> np.dtype:
    try:
        dt = np.result_type(da, db)
    except TypeError as exc:
        raise BindingError(OP, "b", f"dtypes {da} and {db} have no common dtype ({exc})") from None
    if dt not in GEMM_TYPES:
        what = f"the {dt} result is not supported"
        raise BindingError(OP, "a", f"{what}: matmul runs on cuBLAS, which serves {SUPPORTED} (a @ b of {da} and {db})")
    return dt


def device_matmul(session: Session, a: DeviceArray, b: DeviceArray, out: DeviceArray | None) -> DeviceArray:
    """``a @ b`` of device arrays of ``session``: checked, then the one cuBLAS call that fits."""
    operands = tuple(x for x in (a, b, out) if x is not None)
    for x in operands:
        x._check()
    check_same_session(*operands)
    batch, shape, dt = result_of(a, b)
    if out is not None:
        placement.check_out(out, shape, dt, OP)
    a, b = (x if x.dtype == dt else x.astype(dt) for x in (a, b))
    if out is not None and out.dtype == dt and out.is_contiguous and not (out.overlaps(a) or out.overlaps(b)):
        target = out
    else:  # a new result, or a temporary cast or copied into out after
        target = as_array(session.empty(shape, dt))
    if target.size:
        _product(session, a, b, batch, target)
    if out is not None and target is not out:
        ops.astype(target, out.dtype, out=out)  # one kernel: the cast, into any layout
        return out
    return target


def _product(session: Session, a: DeviceArray, b: DeviceArray, batch: tuple[int, ...], target: DeviceArray) -> None:
    """Enqueue the non-empty ``target = a @ b`` (one dtype) as the one cuBLAS call that fits."""
    if a.shape[-1] == 0:  # an empty sum
        target.fill_zero()
    elif not batch and (a.ndim == 1 or b.ndim == 1) and target.dtype in REDUCED:
        vector_product(a, b, target)
    elif not (a.ndim == 2 and b.ndim == 2 and _gemm2d(a, b, target)):
        _batched(session, a, b, batch, target)


def _gemm2d(a: DeviceArray, b: DeviceArray, target: DeviceArray) -> bool:
    """A 2-D product of operands that are contiguous or transposed contiguous: kd.blas.gemm
    (the C launch path takes the plain case once warm). False when a view needs the general path."""
    if a.is_contiguous and b.is_contiguous:
        gemm(a, b, target)
        return True
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None or la[1] != _natural(a, la[0]) or lb[1] != _natural(b, lb[0]):
        return False
    gemm(a.T if la[0] else a, b.T if lb[0] else b, target, trans_a=la[0], trans_b=lb[0])
    return True


def _batched(session: Session, a: DeviceArray, b: DeviceArray, batch: tuple[int, ...], target: DeviceArray) -> None:
    """One cublasGemmStridedBatchedEx over the broadcast batch (a batch of one for plain views)."""
    a2 = a if a.ndim > 1 else a.expand_dims(0)
    b2 = b if b.ndim > 1 else b.expand_dims(-1)
    ma, mb = _matrix(session, a2, batch), _matrix(session, b2, batch)
    m, k = a2.shape[-2:]
    n = b2.shape[-1]
    count = math.prod(batch)
    ctype, compute = GEMM_TYPES[target.dtype]
    h = handle(session)
    with session.activated():
        pa, pb = scalars(h, ctype, compute, 1.0, 0.0)
        wide = needs_64(m, n, k, count, ma.ld, mb.ld, ma.stride, mb.stride, m * n)
        h.call(  # C^T (n x m) = op(B)^T @ op(A)^T: see the package docstring
            "gemm_strided_batched_ex_64" if wide else "gemm_strided_batched_ex",
            OP_T if mb.trans else OP_N,
            OP_T if ma.trans else OP_N,
            n,
            m,
            k,
            pa,
            mb.ptr,
            ctype,
            mb.ld,
            mb.stride,
            ma.ptr,
            ctype,
            ma.ld,
            ma.stride,
            pb,
            target.ptr,
            ctype,
            n,
            m * n,
            count,
            compute,
            GEMM_DEFAULT,
            stream=None,
            api="cublasGemmStridedBatchedEx",
            keep=(ma.array, mb.array, target),
        )


def _matrix(session: Session, x: DeviceArray, batch: tuple[int, ...]) -> Matrix:
    """``x`` (``(..., r, c)``, batch axes broadcasting to ``batch``) as cuBLAS reads it: in place
    when a transpose flag, a leading dimension and one batch stride describe it, else a copy."""
    layout, stride = _layout(x), _batch_stride(x, batch)
    if layout is None or stride is None:
        x = _broadcast_copy(session, x, batch)
        layout, stride = (False, x.shape[-1] or 1), x.shape[-2] * x.shape[-1]
    return Matrix(x, x.ptr, layout[0], layout[1], stride)


def _layout(x: DeviceArray) -> tuple[bool, int] | None:
    """``(trans, ld)`` of the last two axes of ``x``: rows of ``ld`` elements (trans False), or
    the transpose of such a matrix (trans True); None when its strides are neither."""
    (r, c), (sr, sc), e = x.shape[-2:], x.strides[-2:], x.itemsize
    row, col = (max(c, 1) * e if r == 1 else sr), (e if c == 1 else sc)
    if col == e and row % e == 0 and row // e >= max(c, 1):
        return False, row // e
    row, col = (e if r == 1 else sr), (max(r, 1) * e if c == 1 else sc)
    if row == e and col % e == 0 and col // e >= max(r, 1):
        return True, col // e
    return None


def _natural(x: DeviceArray, trans: bool) -> int:
    """The leading dimension of ``x`` (or of ``x.T``) held contiguously."""
    return max(x.shape[-2] if trans else x.shape[-1], 1)


def _batch_stride(x: DeviceArray, batch: tuple[int, ...]) -> int | None:
    """The one element stride from each matrix of ``x`` to the next over the flattened ``batch``
    (0 when ``x`` is broadcast over all of it); None when no single stride does."""
    own = x.ndim - 2
    strides = []
    for axis, extent in enumerate(batch):
        i = axis - (len(batch) - own)
        if extent == 1:
            continue
        strides.append(0 if i < 0 or x.shape[i] == 1 else x.strides[i])
    extents = [e for e in batch if e != 1]
    for j in range(len(strides) - 1):
        if strides[j] != strides[j + 1] * extents[j + 1]:
            return None
    if not strides:
        return 0
    inner = strides[-1]
    if inner < 0 or inner % x.itemsize:
        return None
    return inner // x.itemsize


def _broadcast_copy(session: Session, x: DeviceArray, batch: tuple[int, ...]) -> DeviceArray:
    """A contiguous copy of ``x`` broadcast over ``batch``."""
    full = as_array(session.empty(batch + x.shape[-2:], x.dtype))
    full[...] = x
    return full
