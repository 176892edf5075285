"""Complex element types in kernels: ``kd.complex64`` / ``kd.complex128`` arrays and scalars bind
like the real types, a complex scalar travels as its two parts (two parameter slots, rebuilt
as a ``kd_complex64`` / ``kd_complex128`` in the kernel), the prelude's complex type compiles
with its arithmetic and functions, and the array layer refuses complex operands where an op
has no complex meaning (``tests/test_complex_arrays.py`` has the ops that take them)."""

from __future__ import annotations

import struct
from typing import Any, NewType

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.dtypes import to_complex
from kerneldsl.errors import ScalarConversionError

n = NewType("n", int)

BODY = """
index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
if (i < n) {
    T z = a * x[i] + y[i] / kd_exp(x[i]);
    z -= kd_conj(x[i]) * T(kd_abs(a), kd_arg(a));
    y[i] = z == y[i] ? z : -z + T(kd_norm(z)) + T(kd_real(z), kd_imag(z));
}
"""


@kd.kernel(grid=kd.cdiv(n, 128), block=128)
def zaxpy(y: kd.InOut["T", n], x: kd.In["T", n], a: kd.Scalar["T"]) -> str:
    return BODY


@kd.kernel(grid=kd.cdiv(n, 128), block=128)
def scale64(y: kd.InOut[kd.complex64, n], a: kd.Scalar[kd.complex64]) -> str:
    return "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) y[i] *= a;"


@pytest.mark.parametrize("dt", [np.complex64, np.complex128], ids=["complex64", "complex128"])
def test_a_complex_kernel_compiles_with_the_preludes_arithmetic(dt: Any) -> None:
    build = zaxpy.inspect(np.zeros(9, dt), np.zeros(9, dt), dt(1 + 2j), arch="sm_90")
    assert build.cubin.startswith(b"\x7fELF")


def test_a_complex_scalar_is_two_slots_of_its_part_type() -> None:
    contract = zaxpy.inspect(
        np.zeros(9, np.complex128), np.zeros(9, np.complex128), 1 + 2j, arch="sm_90"
    ).launch_contract
    assert contract.abi[2:4] == (("kd_a_re", "double"), ("kd_a_im", "double"))
    assert [s.part for s in contract.slots[2:4]] == ["real", "imag"]
    single = scale64.inspect(np.zeros(9, np.complex64), np.complex64(2j), arch="sm_90").launch_contract
    assert single.abi[1:3] == (("kd_a_re", "float"), ("kd_a_im", "float"))


def test_complex_arrays_are_pointers_to_the_prelude_types() -> None:
    build = zaxpy.inspect(np.zeros(9, np.complex64), np.zeros(9, np.complex64), np.complex64(1), arch="sm_90")
    assert build.launch_contract.abi[:2] == (("y", "kd_complex64*"), ("x", "const kd_complex64*"))


def test_the_adapter_packs_a_complex_scalars_real_and_imaginary_parts(drv: Any) -> None:
    drv.snapshot_slots = 4
    with kd.Session(0) as s:
        y = s.zeros(9, np.complex128)
        zaxpy(y, s.zeros(9, np.complex128), 1.5 - 2.25j)
    [params] = drv.param_bytes
    pointer, _, real, imag = struct.unpack("<QQdd", params)
    assert (pointer, real, imag) == (y.ptr, 1.5, -2.25)


def test_a_python_complex_binds_a_dtype_variable_to_complex128() -> None:
    build = zaxpy.inspect(np.zeros(4, np.complex128), np.zeros(4, np.complex128), 1j, arch="sm_90")
    assert dict(build.specialization.type_vars)["T"] == "complex128"


def test_a_real_scalar_passes_for_a_complex_parameter() -> None:
    assert scale64.inspect(np.zeros(4, np.complex64), 2.0, arch="sm_90").cubin


def test_a_complex_scalar_for_a_real_parameter_is_refused() -> None:
    @kd.kernel(grid=1, block=1)
    def real_scale(y: kd.InOut[kd.float32, n], a: kd.Scalar[kd.float32]) -> str:
        return ""

    with pytest.raises(ScalarConversionError, match="a complex for a real is refused, pass z.real"):
        real_scale.inspect(np.zeros(4, np.float32), 1 + 1j, arch="sm_90")


def test_a_complex_parameter_does_not_parse_strings() -> None:
    with pytest.raises(TypeError, match="takes a number, not str"):
        to_complex("1+2j")
    assert to_complex(np.float32(2)) == 2 + 0j and to_complex(3) == 3 + 0j


def test_the_array_layer_refuses_complex_operands_by_name() -> None:
    with pytest.raises(TypeError, match="kd.ops.maximum is not defined for complex64 operands"):
        ops.maximum.resolve([np.dtype(np.complex64), np.dtype(np.complex64)])


def test_the_complex_types_are_numpys() -> None:
    assert kd.complex64 is np.complex64 and kd.complex128 is np.complex128


@pytest.mark.parametrize("dt", [np.complex64, np.complex128], ids=["complex64", "complex128"])
def test_a_copy_of_a_complex_view_compiles_and_conversions_resolve(dt: Any) -> None:
    view = np.ones((8, 6), dt)[:, ::2]
    assert ops.AsType(np.dtype(dt)).inspect(view, arch="sm_90").cubin
    assert ops.AsType(np.dtype(np.float32)).resolve([np.dtype(dt)]) == (np.float32, (np.dtype(dt),))
    assert ops.AsType(np.dtype(dt)).resolve([np.dtype(np.float32)]) == (np.dtype(dt), (np.float32,))


def test_a_strided_complex_view_plans_its_copy_to_the_host(drv: Any) -> None:
    host = (np.arange(60) + 1j).astype(np.complex64).reshape(6, 10)
    with kd.Session(0) as s:
        view = s.to_device(host)[1:5, ::3].T
        assert view.to_host().shape == (4, 4) and ops.astype(view, np.complex64).dtype == np.complex64
