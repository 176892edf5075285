"""A body's text checked against its declaration before anything compiles: the f-string traps
(``{n}``, ``{T}``, a Python object) are a DeclarationError saying what happened and what to
write; a per-block write past an extent the grid does not tie is a PerBlockExtentWarning that
offers the grid's expression as the extent."""

import typing
import warnings
from typing import Annotated, Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import DeclarationError, PerBlockExtentWarning

n = typing.NewType("n", int)
m = typing.NewType("m", int)
T = typing.TypeVar("T")

X = np.zeros(1000, np.float32)


def build(body: Any, *args: Any, grid: Any = None, **options: Any) -> Any:
    """``body`` declared with ``grid`` (default ``cdiv(n, 256)``) and inspected with ``args``."""
    kernel = kd.kernel(grid=kd.cdiv(n, 256) if grid is None else grid, block=256, **options)(body)
    return kernel.inspect(*args, arch="sm_90")


# --- f-string traps ---------------------------------------------------------------------------


def test_a_shape_symbol_interpolated_itself_is_refused_with_the_text_it_rendered() -> None:
    def k(x: kd.In[kd.float32, n]) -> str:
        return f"index_t i = threadIdx.x; if (i < {n}) {{ }}"

    with pytest.raises(DeclarationError, match=rf"'{__name__}\.n', which is how Python prints shape symbol n") as info:
        build(k, X)
    assert "write n as plain text" in str(info.value) and "{{ and }}" in str(info.value)


def test_a_dtype_variable_interpolated_itself_is_refused_with_the_text_it_rendered() -> None:
    def k(x: kd.In[T, n]) -> str:
        return f"{T} v = {x}[0];"

    with pytest.raises(DeclarationError, match=r"'~T', which is how Python prints dtype variable T") as info:
        build(k, X)
    assert "typedef" in str(info.value) and "{x.ctype}" in str(info.value)


@pytest.mark.parametrize("value", [np.float32, len, object()], ids=["class", "function", "object"])
def test_a_python_object_interpolated_is_refused(value: Any) -> None:
    def k(x: kd.In[kd.float32, n]) -> str:
        return f"float v = {value};"

    with pytest.raises(DeclarationError, match="a Python object's repr interpolated by an f-string"):
        build(k, X)


def test_a_call_refuses_the_trap_before_compiling() -> None:
    @kd.kernel(grid=kd.cdiv(n, 256), block=256)
    def k(x: kd.In[kd.float32, n]) -> str:
        return f"if (threadIdx.x < {n}) {{ }}"

    with pytest.raises(DeclarationError, match="how Python prints shape symbol n"):
        k(X)


@pytest.mark.parametrize(
    "text",
    [
        "struct P {{ index_t n; }} p = {{n}}; (void)p.n;",  # a member named like the symbol
        "unsigned mask = 3; mask = ~mask;",  # bitwise not of a variable
        "T v = -T(1); v = -T{{2}}; (void)v;",  # a typedef's functional cast, negated
        "struct S {{ }}; union U {{ S s; }} u; u.s.~S();",  # an explicit destructor call
        "typedef int A; int q = 1 < 2 && 3 > 0x10; (void)q;",  # comparisons, hex
    ],
)
def test_legitimate_c_near_the_traps_is_not_refused(text: str) -> None:
    def k(x: kd.In[T, n]) -> str:
        return text.format()

    assert build(k, X).generated.body == text.format()


# --- per-block arrays -------------------------------------------------------------------------

PER_BLOCK = "if (threadIdx.x == 0) {out}[blockIdx.x] = {x}[0];"


def test_a_per_block_write_to_a_free_extent_warns_with_the_grids_expression() -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, m]) -> str:
        return PER_BLOCK.format(out=out, x=x)

    with pytest.warns(PerBlockExtentWarning, match=r"out\[blockIdx.x\].*'out', m, can be smaller") as record:
        build(k, X, np.zeros(4, np.float32))
    assert "kd.Out[kd.float32, kd.cdiv(n, 256)]" in str(record[0].message)
    assert (record[0].filename, record[0].lineno) == (__file__, k.__code__.co_firstlineno)


def test_a_per_block_write_to_a_fixed_extent_under_a_growing_grid_warns() -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, 1]) -> str:
        return PER_BLOCK.format(out=out, x=x)

    with pytest.warns(PerBlockExtentWarning, match="'out', 1, can be smaller than the grid's cdiv"):
        build(k, X, np.zeros(1, np.float32))


def test_a_per_block_write_along_y_is_checked_against_the_grids_y() -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, m]) -> str:
        return f"if (threadIdx.x == 0) {out}[ blockIdx.y ] = {x}[0];"

    with pytest.warns(PerBlockExtentWarning, match=r"out\[blockIdx.y\].*along y"):
        build(k, X, np.zeros(4, np.float32), grid=(1, kd.cdiv(n, 256)))


@pytest.mark.parametrize(
    ("extent", "size"),
    [(kd.cdiv(n, 256), 4), (n, 1000), (kd.cdiv(n, 128), 8), (Annotated[int, kd.cdiv(n, 256)], 4)],
    ids=["the grid's", "the grid's symbol", "larger", "checked spelling"],
)
def test_a_per_block_write_to_an_extent_the_grid_ties_is_quiet(extent: Any, size: int) -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, extent]) -> str:
        return PER_BLOCK.format(out=out, x=x)

    with warnings.catch_warnings():
        warnings.simplefilter("error", PerBlockExtentWarning)
        build(k, X, np.zeros(size, np.float32))


def test_an_array_the_body_does_not_index_by_block_is_not_checked() -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, m]) -> str:
        return f"if (threadIdx.x < m) {out}[threadIdx.x] = {x}[0];"

    with warnings.catch_warnings():
        warnings.simplefilter("error", PerBlockExtentWarning)
        build(k, X, np.zeros(4, np.float32))
