"""The spelling type checkers accept (TypeVar dtype variables, NewType shape symbols, Literal
extents, numpy scalar types, plain defaults for constants) declares exactly what the string
spelling declares."""

from __future__ import annotations

from typing import Literal, NewType, TypeVar

import numpy as np

import kerneldsl as kd

ARCH = "sm_90"
T = TypeVar("T")
n = NewType("n", int)
m = NewType("m", int)


@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def checked(y: kd.InOut[T, n], x: kd.In[T, n], alpha: kd.Scalar[T], rows: kd.In[kd.float32, Literal[3], m]) -> str:
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i];"


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def spelled(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"], rows: kd.In[kd.float32, (3, "m")]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = {alpha} * {x}[i];"


def _arguments() -> tuple[object, ...]:
    return np.ones(8, np.float64), np.ones(8, np.float64), 2.0, np.ones((3, 5), np.float32)


def test_both_spellings_declare_the_same_parameters() -> None:
    assert checked.signature.params == spelled.signature.params
    assert checked.signature.grid == spelled.signature.grid


def test_both_spellings_generate_the_same_kernel() -> None:
    """The same text but for the names, and the #line directives naming each body's own line."""
    a = checked.inspect(*_arguments(), arch=ARCH)
    b = spelled.inspect(*_arguments(), arch=ARCH)

    def code(source: str) -> str:
        return "\n".join(line for line in source.split("\n") if not line.startswith("#line "))

    assert code(a.cuda_source).replace("checked", "spelled") == code(b.cuda_source)


def test_a_constant_takes_its_default_from_the_parameter() -> None:
    @kd.kernel(grid=1, block=kd.sym("TILE"))
    def tiled(y: kd.Out[kd.float32, n], TILE: kd.Const[int] = 16) -> str:
        return f"{y}[threadIdx.x % TILE] = 0.0f;"

    assert tiled.inspect(np.zeros(4, np.float32), arch=ARCH).specialization.consts == (("TILE", 16),)


def test_an_elementwise_result_dtype_can_be_given_to_the_decorator() -> None:
    @kd.elementwise(result=T)
    def axpy(a: kd.Scalar[T], x: kd.In[T], y: kd.In[T]) -> str:
        return "a * x + y"

    result, loops = axpy.resolve([2.0, np.dtype(np.float32), np.dtype(np.float32)])
    assert result == np.float32 and loops == (np.dtype(np.float32),) * 3
    assert axpy.inspect(np.float32(2), np.ones(4, np.float32), np.ones(4, np.float32), arch=ARCH).cubin


def test_the_public_dtype_names_are_numpy_scalar_types() -> None:
    assert kd.float32 is np.float32 and np.dtype(kd.float16) == np.float16
