"""kd.random: device arrays of random numbers from the prelude's Philox4x32-10 generator.

Counter-based, so nothing is kept on the device: element ``i`` of a draw with ``seed`` is made
from Philox's block ``i // per`` (``per`` values a call: 4 of 32-bit words' worth, 2 for
float64 and for integers whose range needs 64 bits) in subsequence 0. The same seed gives the
same bits on every run, device and split of the work. ``Generator(seed)`` numbers its draws:
draw ``k`` reads subsequence ``k``, so successive draws differ and the first equals the
module functions' with that seed. ``seed=None`` draws from one process-wide Generator(0).

Uniform values lie in ``(low, high]`` (Philox words as ``(w + 1) / 2^bits``, never 0), normals
come from Box-Muller on those, integers in ``[low, high)`` from multiply-shift (bias below
``range / 2^32``, or ``range / 2^64`` for a range past 2^32).
"""

from __future__ import annotations

import operator
import threading
from typing import Any

import numpy as np

from .. import dtypes
from ..array.decisions import ElementwiseDecisions
from ..array.kernels import BLOCK, KERNELS, array_param, make_kernel, scalar_param
from ..array.ndarray import DeviceArray
from ..errors import BindingError
from ..jit.codegen import GeneratedBody, render
from ..jit.signature import cdiv
from ..launch.dispatch import Kernel
from ..runtime.session import Session
from .creation import empty

__all__ = ["Generator", "integers", "normal", "uniform"]

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_UINT64 = np.dtype(np.uint64)
_INT64 = np.dtype(np.int64)
_FLOAT64 = np.dtype(np.float64)


def _fill_kernel(distribution: str, dtype: np.dtype, wide: bool) -> Kernel:
    """The fill kernel of one distribution and dtype (``wide``: 2 values per Philox call)."""
    key = ("random", distribution, dtype, wide)
    kernel: Kernel = KERNELS.get_or_make(key, lambda: _build(distribution, dtype, wide))
    return kernel


def _build(distribution: str, dtype: np.dtype, wide: bool) -> Kernel:
    per = 2 if wide else 4
    integer = distribution == "integers"
    compute = ("unsigned long long" if wide else "unsigned int") if integer else ("double" if wide else "float")

    def body(proxies: dict[str, Any]) -> GeneratedBody:
        text = render(
            "random.cu.j2",
            distribution=distribution,
            per=per,
            itemsize=dtype.itemsize,
            storage=dtypes.element_type(dtype).ctype,
            compute=compute,
        )
        return GeneratedBody(text, ElementwiseDecisions(layout="flat", vector_width=per))

    params: list[tuple[str, Any]] = [
        ("kdout", array_param("out", dtype, ("kdn",))),
        ("kdseed", scalar_param(_UINT64)),
        ("kdsubsequence", scalar_param(_UINT64)),
    ]
    if integer:
        params += [("kdlow", scalar_param(_INT64)), ("kdrange", scalar_param(_UINT64))]
    else:
        params += [("kdlow", scalar_param(_FLOAT64)), ("kdspan", scalar_param(_FLOAT64))]
    return make_kernel(f"random_{distribution}", params, body, grid=cdiv("kdn", BLOCK * per))


def _seed(seed: Any) -> int:
    try:
        value = operator.index(seed)
    except TypeError:
        raise BindingError("random", "seed", f"must be an int, got {type(seed).__name__}") from None
    if not 0 <= value < 2**64:
        raise BindingError("random", "seed", f"must be in [0, 2**64), got {value}")
    return value


def _dtype(dtype: Any, allowed: tuple[str, ...], what: str) -> np.dtype:
    try:
        et = dtypes.element_type(dtype)
    except KeyError:
        et = None
    if et is None or et.name not in allowed:
        raise BindingError("random", "dtype", f"{what} makes {', '.join(allowed)}, not {dtype!r}")
    return et.numpy


def _draw(
    distribution: str, shape: Any, dt: np.dtype, seed: int, subsequence: int, a: Any, b: Any, wide: bool, session: Any
) -> DeviceArray:
    out = empty(shape, dt, session)
    if out.size:
        _fill_kernel(distribution, dt, wide)(out.reshape(-1), seed, subsequence, a, b)
    return out


class Generator:
    """Draws from Philox4x32-10 under one seed; draw ``k`` reads subsequence ``k`` (thread-safe)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = _seed(seed)
        self._draws = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Generator(seed={self.seed}, draws={self._draws})"

    def _next(self) -> int:
        with self._lock:
            draw = self._draws
            self._draws += 1
        return draw

    def uniform(
        self, shape: Any, dtype: Any = np.float32, low: float = 0.0, high: float = 1.0, session: Session | None = None
    ) -> DeviceArray:
        """Values in ``(low, high]``."""
        dt = _dtype(dtype, _FLOATS, "uniform")
        span = float(high) - float(low)
        return _draw("uniform", shape, dt, self.seed, self._next(), float(low), span, dt == _FLOAT64, session)

    def normal(
        self, shape: Any, dtype: Any = np.float32, loc: float = 0.0, scale: float = 1.0, session: Session | None = None
    ) -> DeviceArray:
        """Normal values of mean ``loc`` and standard deviation ``scale`` (Box-Muller)."""
        dt = _dtype(dtype, _FLOATS, "normal")
        return _draw("normal", shape, dt, self.seed, self._next(), float(loc), float(scale), dt == _FLOAT64, session)

    def integers(
        self, shape: Any, low: int, high: int | None = None, dtype: Any = np.int64, session: Session | None = None
    ) -> DeviceArray:
        """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None), as NumPy's."""
        dt = _dtype(dtype, _INTEGERS, "integers")
        lo, hi = (0, operator.index(low)) if high is None else (operator.index(low), operator.index(high))
        info = np.iinfo(dt)
        if not info.min <= lo < hi <= info.max + 1:
            raise BindingError("random", "high", f"integers needs {info.min} <= low < high <= {info.max + 1} for {dt}")
        span = hi - lo
        low_bits = lo if lo < 2**63 else lo - 2**64  # the int64 slot carries uint64 lows by their bits
        return _draw("integers", shape, dt, self.seed, self._next(), low_bits, span % 2**64, span >= 2**32, session)


_DEFAULT = Generator(0)


def _generator(seed: int | None) -> Generator:
    return _DEFAULT if seed is None else Generator(seed)


def uniform(
    shape: Any,
    dtype: Any = np.float32,
    low: float = 0.0,
    high: float = 1.0,
    seed: int | None = None,
    session: Session | None = None,
) -> DeviceArray:
    """Values in ``(low, high]``: element ``i`` depends only on ``seed`` and ``i``.

    Parameters
    ----------
    shape : int or tuple of int
        The result's extents.
    dtype : dtype
        float16, bfloat16, float32 (the default) or float64.
    low, high : float
        The interval.
    seed : int, optional
        The Philox key; None continues the process's default generator (seeded 0), a new draw each call.
    session : Session, optional
        Where the array lives (default: the default session).

    Returns
    -------
    DeviceArray

    Examples
    --------
    .. code-block:: python

        import kerneldsl as kd

        u = kd.random.uniform((2, 3), seed=1)
    """
    return _generator(seed).uniform(shape, dtype, low, high, session)


def normal(
    shape: Any,
    dtype: Any = np.float32,
    loc: float = 0.0,
    scale: float = 1.0,
    seed: int | None = None,
    session: Session | None = None,
) -> DeviceArray:
    """Normal values (Box-Muller): element ``i`` depends only on ``seed`` and ``i``.

    Parameters
    ----------
    shape : int or tuple of int
        The result's extents.
    dtype : dtype
        float16, bfloat16, float32 (the default) or float64.
    loc, scale : float
        The mean and the standard deviation.
    seed : int, optional
        The Philox key; None continues the process's default generator (seeded 0), a new draw each call.
    session : Session, optional
        Where the array lives (default: the default session).

    Returns
    -------
    DeviceArray

    Examples
    --------
    .. code-block:: python

        import kerneldsl as kd

        z = kd.random.normal(1000, seed=42)
    """
    return _generator(seed).normal(shape, dtype, loc, scale, session)


def integers(
    shape: Any,
    low: int,
    high: int | None = None,
    dtype: Any = np.int64,
    seed: int | None = None,
    session: Session | None = None,
) -> DeviceArray:
    """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None): element ``i`` depends only
    on ``seed`` and ``i``.

    Parameters
    ----------
    shape : int or tuple of int
        The result's extents.
    low, high : int
        The range, as NumPy's ``Generator.integers``.
    dtype : dtype
        An integer type (default int64).
    seed : int, optional
        The Philox key; None continues the process's default generator (seeded 0), a new draw each call.
    session : Session, optional
        Where the array lives (default: the default session).

    Returns
    -------
    DeviceArray

    Examples
    --------
    .. code-block:: python

        import kerneldsl as kd

        dice = kd.random.integers(10, 1, 7, seed=0)
    """
    return _generator(seed).integers(shape, low, high, dtype, session)
