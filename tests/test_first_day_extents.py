"""Computed extents: ``kd.Out[T, kd.cdiv(n, 256)]`` declares a per-block array, the binding
computes its extent from the bound symbols and checks the passed array against it, and the
kernel's C source spells it as an ``index_t`` expression."""

from __future__ import annotations

import typing
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import DeclarationError, ShapeMismatchError
from kerneldsl.jit.launch_contract import launch_contract
from kerneldsl.jit.signature import Expr
from kerneldsl.tune.ahead import tune_arguments

n = typing.NewType("n", int)
m = typing.NewType("m", int)
T = typing.TypeVar("T")

BLOCK = 256


@kd.kernel(grid=kd.cdiv(n, BLOCK), block=BLOCK)
def block_sums(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, kd.cdiv(n, BLOCK)]) -> str:
    return f"""
    __shared__ float partial[{BLOCK}];
    index_t i = blockIdx.x * (index_t){BLOCK} + threadIdx.x;
    partial[threadIdx.x] = i < n ? {x}[i] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x < {out.shape[0]}) {{
        float total = 0.0f;
        for (int k = 0; k < {BLOCK}; ++k) total += partial[k];
        {out}[blockIdx.x] = total;
    }}
    """


def declare(func: Any, **options: Any) -> kd.Kernel:
    options.setdefault("grid", 1)
    options.setdefault("block", 1)
    return kd.kernel(**options)(func)


def test_a_computed_extent_is_kept_as_its_expression() -> None:
    (_, out) = block_sums.signature.arrays
    assert out.shape == (kd.cdiv(n, BLOCK),)
    assert repr(out.shape[0]) == "cdiv(n, 256)"


def test_sym_and_constant_only_expressions_reduce_to_a_symbol_and_a_fixed_extent() -> None:
    def k(x: kd.In[kd.float32, kd.sym(n)], y: kd.In[kd.float32, kd.cdiv(1000, 256)]) -> str:
        return ""

    x, y = declare(k).signature.arrays
    assert (x.shape, y.shape) == (("n",), (4,))


def test_an_extent_over_a_symbol_no_plain_extent_binds_is_refused() -> None:
    def k(out: kd.Out[kd.float32, kd.cdiv(n, 256)]) -> str:
        return ""

    with pytest.raises(DeclarationError, match=r"axis 0 is cdiv\(n, 256\), but no array's shape has 'n'") as info:
        declare(k)
    assert info.value.param == "out"


def test_an_extent_dividing_by_a_literal_zero_is_refused() -> None:
    def k(out: kd.Out[kd.float32, kd.cdiv(4, 0)]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="divides by zero"):
        declare(k)


def test_the_refusal_of_a_bad_shape_entry_names_the_expressions_it_takes() -> None:
    def k(out: kd.Out[kd.float32, 2.5]) -> str:
        return ""

    with pytest.raises(DeclarationError, match=r"or expressions of symbols such as kd.cdiv\(n, 256\)"):
        declare(k)


def test_the_kernel_source_spells_the_extent_as_an_index_t_expression() -> None:
    source = block_sums.inspect(np.zeros(1000, np.float32), np.zeros(4, np.float32), arch="sm_90").cuda_source
    assert "blockIdx.x < ((index_t)(n / 256 + (n % 256 != 0)))" in source


@pytest.mark.parametrize("size", [1, 255, 256, 257, 1000])
def test_a_per_block_array_of_the_computed_extent_is_accepted(size: int) -> None:
    blocks = -(-size // BLOCK)
    spec = block_sums.specialize(np.zeros(size, np.float32), np.zeros(blocks, np.float32), arch="sm_90")
    assert spec.signature is block_sums.signature


@pytest.mark.parametrize("wrong", [1, 3, 5])
def test_a_per_block_array_of_another_extent_is_a_shape_mismatch_naming_expected_and_got(wrong: int) -> None:
    with pytest.raises(ShapeMismatchError, match=rf"axis 0 must be cdiv\(n, 256\) = 4, got {wrong}") as info:
        block_sums.specialize(np.zeros(1000, np.float32), np.zeros(wrong, np.float32), arch="sm_90")
    assert info.value.param == "out"


def test_an_extent_may_use_an_int_constant() -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, kd.cdiv(n, "TILE")], TILE: kd.Const[int] = 128) -> str:
        return ""

    kernel = declare(k)
    kernel.specialize(np.zeros(300, np.float32), np.zeros(3, np.float32), arch="sm_90")
    kernel.specialize(np.zeros(300, np.float32), np.zeros(5, np.float32), arch="sm_90", TILE=64)
    with pytest.raises(ShapeMismatchError, match=r"must be cdiv\(n, TILE\) = 5, got 3"):
        kernel.specialize(np.zeros(300, np.float32), np.zeros(3, np.float32), arch="sm_90", TILE=64)


def test_products_and_sums_of_symbols_are_extents_too() -> None:
    def k(a: kd.In[kd.float32, m, n], flat: kd.Out[kd.float32, kd.sym(m) * n + 1]) -> str:
        return ""

    kernel = declare(k)
    kernel.specialize(np.zeros((3, 4), np.float32), np.zeros(13, np.float32), arch="sm_90")
    with pytest.raises(ShapeMismatchError, match=r"must be \(\(m \* n\) \+ 1\) = 13, got 12"):
        kernel.specialize(np.zeros((3, 4), np.float32), np.zeros(12, np.float32), arch="sm_90")


def test_the_launch_contract_checks_a_computed_extent_by_its_expression() -> None:
    spec = block_sums.specialize(np.zeros(1000, np.float32), np.zeros(4, np.float32), arch="sm_90")
    (check,) = launch_contract(spec).checks
    assert (check.array, check.expr) == ("out", Expr("cdiv", (Expr("sym", ("n",)), Expr("int", (256,)))))


def test_a_specialized_symbol_folds_the_computed_extent_into_a_fixed_check() -> None:
    def k(x: kd.In[kd.float32, n], out: kd.Out[kd.float32, kd.cdiv(n, 256)]) -> str:
        return ""

    kernel = declare(k, specialize=("n",))
    spec = kernel.specialize(np.zeros(1000, np.float32), np.zeros(4, np.float32), arch="sm_90")
    (check,) = [c for c in launch_contract(spec).checks if c.array == "out"]
    assert (check.value, check.expr) == (4, None)


def test_tuning_allocates_a_computed_extent_from_the_entry() -> None:
    class Host:
        def to_device(self, host: np.ndarray) -> np.ndarray:
            return host

    x, out = tune_arguments(block_sums.signature, {"n": 1000}, Host())
    assert (x.shape, out.shape) == ((1000,), (4,))


@pytest.mark.gpu
def test_block_sums_of_a_computed_extent_match_numpy(rng: np.random.Generator) -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    expected = np.add.reduceat(x, np.arange(0, 1000, BLOCK))
    with kd.Session() as s:
        out = s.to_device(np.full(4, np.nan, np.float32))
        for _ in range(3):  # the warm calls check the extent as the first does
            block_sums(s.to_device(x), out)
        np.testing.assert_allclose(out.to_host(), expected, rtol=1e-5)
        with pytest.raises(ShapeMismatchError, match=r"cdiv\(n, 256\) = 4, got 5"):
            block_sums(s.to_device(x), s.to_device(np.zeros(5, np.float32)))


@kd.kernel(grid=1, block=1)
def extents_seen(
    x: kd.In[kd.float32, n],
    a: kd.Out[kd.int64, kd.cdiv(n, 7)],
    b: kd.Out[kd.int64, kd.dmin(n, 5) + 1],
    c: kd.Out[kd.int64, kd.sym(n) // 3 * 2 + 1],
    d: kd.Out[kd.int64, kd.dmax(kd.sym(n) - 4, 2)],
) -> str:
    return f"{a}[0] = {a.shape[0]}; {b}[0] = {b.shape[0]}; {c}[0] = {c.shape[0]}; {d}[0] = {d.shape[0]};"


@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 6, 7, 8, 100])
def test_the_kernel_computes_each_extent_as_the_binding_does(size: int) -> None:
    extents = (-(-size // 7), min(size, 5) + 1, size // 3 * 2 + 1, max(size - 4, 2))
    outs = [np.full(e, -1, np.int64) for e in extents]
    extents_seen(np.zeros(size, np.float32), *outs)
    assert [int(o[0]) for o in outs] == list(extents)
