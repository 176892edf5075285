"""Hypothesis strategies for basic NumPy indexing, shared by the CPU and GPU view tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st


def np_view(a: np.ndarray, key: Any) -> np.ndarray:
    """``a[key]`` as an array: NumPy gives a scalar where every axis takes an int, a DeviceArray
    (like CuPy's) a 0-d view; NumPy's own 0-d view is what an Ellipsis added to the key gives."""
    found = a[key]
    return found if isinstance(found, np.ndarray) else a[(*(key if isinstance(key, tuple) else (key,)), Ellipsis)]


shapes = st.lists(st.integers(1, 6), min_size=0, max_size=4).map(tuple)
dtypes = st.sampled_from([np.int8, np.float16, np.float32, np.float64])


@st.composite
def basic_index(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """A basic index for ``shape``: ints and slices for some leading axes, optionally an Ellipsis
    and some trailing axes, with None mixed in anywhere."""

    def item(n: int) -> Any:
        if n and draw(st.booleans()):
            return draw(st.integers(-n, n - 1))
        start = draw(st.none() | st.integers(-n - 2, n + 2))
        stop = draw(st.none() | st.integers(-n - 2, n + 2))
        return slice(start, stop, draw(st.none() | st.integers(-3, 3).filter(bool)))

    lead = draw(st.integers(0, len(shape)))
    items: list[Any] = [item(n) for n in shape[:lead]]
    if draw(st.booleans()):
        trail = draw(st.integers(0, len(shape) - lead))
        items += [Ellipsis, *(item(n) for n in shape[len(shape) - trail :])]
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return items[0] if len(items) == 1 and draw(st.booleans()) else tuple(items)
