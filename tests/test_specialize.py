"""Binding: call arguments -> Specialization, and every way a call can fail to fit the signature."""

from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.dtypes import INT32_MAX
from kerneldsl.errors import BindingError, ScalarConversionError, ShapeMismatchError
from kerneldsl.jit.specialize import bind, bind_declared, describe_array

ARCH = "sm_90"


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]) -> str:
    return ""


@kd.kernel(grid=(kd.cdiv("n", 16), "m"), block=(16, 1))
def rows(
    out: kd.Out["float32", ("m", "n")],
    w: kd.In["float32", ("m", 4)],
    s: kd.Scalar["int32"],
    c: kd.Const[int],
    d: kd.Const[float, 1.0],
) -> str:
    return ""


@kd.kernel()
def fill(a: kd.Out["float64", "n"], v: kd.Scalar["S"]) -> str:
    return ""


class FakeDeviceArray:
    """The least ``describe_array`` accepts: ptr, shape, dtype (and size for index width)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, ptr: int = 0x7F0000000000) -> None:
        self.ptr = ptr
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(shape, dtype=object))


def f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def bind_rows(out: Any = None, w: Any = None, s: Any = 1, **consts: Any) -> Any:
    consts.setdefault("c", 1)
    return bind(rows.signature, (f32(2, 8) if out is None else out, f32(2, 4) if w is None else w, s), consts, ARCH)


def binding_error(exc_type: type[BindingError], call: Any, param: str | None) -> BindingError:
    with pytest.raises(exc_type) as info:
        call()
    assert info.value.param == param
    if param is not None:
        assert repr(param) in str(info.value)
    return info.value


# --- a good binding -------------------------------------------------------------------------------


def test_binding_resolves_dtype_variables_from_arrays() -> None:
    spec = bind(saxpy.signature, (f32(8), f32(8), 2.0), {}, ARCH)
    assert spec.type_vars == (("T", "float32"),)
    assert dict(spec.param_types) == {"y": "float32", "x": "float32", "alpha": "float32"}
    assert spec.index_bits == 32
    assert spec.arch == ARCH


def test_equal_arguments_give_equal_hashable_specializations() -> None:
    a = bind(saxpy.signature, (f32(8), f32(8), 2.0), {}, ARCH)
    b = bind(saxpy.signature, (f32(100), f32(100), 3.0), {}, ARCH)
    assert a == b and hash(a) == hash(b)
    assert a != bind(saxpy.signature, (f32(8), f32(8), 2.0), {}, "sm_80")


def test_kernel_specialize_uses_the_explicit_arch() -> None:
    assert saxpy.specialize(f32(4), f32(4), 1.0, arch="sm_80").arch == "sm_80"


def test_constants_bind_with_defaults_and_int_to_float_promotion() -> None:
    spec = bind_rows(c=np.int32(7), d=3)
    assert spec.consts == (("c", 7), ("d", 3.0))
    assert type(dict(spec.consts)["c"]) is int
    assert type(dict(spec.consts)["d"]) is float


# --- arrays ---------------------------------------------------------------------------------------


def test_wrong_dtype_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind_rows(out=np.zeros((2, 8))), "out")
    assert "expected dtype float32, got float64" in str(err)


def test_wrong_ndim_is_rejected() -> None:
    err = binding_error(ShapeMismatchError, lambda: bind_rows(w=f32(8)), "w")
    assert "expected 2 dimension(s)" in str(err)


def test_shape_symbol_conflict_names_both_parameters() -> None:
    err = binding_error(ShapeMismatchError, lambda: bind(saxpy.signature, (f32(8), f32(9), 1.0), {}, ARCH), "x")
    text = str(err)
    assert "'x'" in text and "'y'" in text and "'n'" in text
    assert "9" in text and "8" in text


def test_shape_mismatch_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        bind(saxpy.signature, (f32(8), f32(9), 1.0), {}, ARCH)


def test_fixed_extent_mismatch_is_rejected() -> None:
    err = binding_error(ShapeMismatchError, lambda: bind_rows(w=f32(2, 5)), "w")
    assert "axis 1 must be 4, got 5" in str(err)


def test_missing_argument_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(saxpy.signature, (f32(8), f32(8)), {}, ARCH), None)
    assert "takes 3 argument(s) (y, x, alpha), got 2" in str(err)


def test_extra_argument_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(saxpy.signature, (f32(8), f32(8), 1.0, 2), {}, ARCH), None)
    assert "got 4" in str(err)


def test_scalar_passed_for_an_array_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(fill.signature, (1.0, 1.0), {}, ARCH), "a")
    assert "expected an array" in str(err)


def test_dtype_variable_conflict_between_arrays_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(saxpy.signature, (f32(8), np.zeros(8), 1.0), {}, ARCH), "x")
    assert "dtype variable T is float32" in str(err) and "float64" in str(err)


def test_unsupported_array_dtype_is_rejected() -> None:
    arr = np.zeros(8, np.clongdouble)
    err = binding_error(BindingError, lambda: bind(saxpy.signature, (arr, arr, 1.0), {}, ARCH), "y")
    assert "unsupported element type" in str(err) and "complex256" in str(err)


# --- constants ------------------------------------------------------------------------------------


def test_unknown_constant_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind_rows(zz=2), "zz")
    assert "not a constant" in str(err)


def test_constant_without_value_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(rows.signature, (f32(2, 8), f32(2, 4), 1), {}, ARCH), "c")
    assert "has no value" in str(err)


@pytest.mark.parametrize("value", [1.5, True, "3", None])
def test_constant_of_wrong_type_is_rejected(value: Any) -> None:
    err = binding_error(BindingError, lambda: bind_rows(c=value), "c")
    assert "must be int" in str(err)


# --- scalars --------------------------------------------------------------------------------------


def test_float_for_an_int_scalar_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind_rows(s=1.5), "s")
    assert "int32" in str(err) and "1.5" in str(err)


@pytest.mark.parametrize("value", ["1", 1 + 2j, None])
def test_non_numeric_scalar_is_rejected(value: Any) -> None:
    binding_error(BindingError, lambda: bind_rows(s=value), "s")


def test_array_passed_for_a_scalar_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(fill.signature, (np.zeros(4), np.zeros(3)), {}, ARCH), "v")
    assert "expected a scalar" in str(err)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "float64"),
        (np.float32(1.0), "float32"),
        (np.float16(1.0), "float16"),
        (1, "int64"),
        (np.int8(1), "int8"),
        (np.uint32(1), "uint32"),
        (True, "bool"),
    ],
)
def test_scalar_binds_a_dtype_variable_with_numpy_defaults(value: Any, expected: str) -> None:
    spec = bind(fill.signature, (np.zeros(4), value), {}, ARCH)
    assert spec.type_vars == (("S", expected),)
    assert dict(spec.param_types)["v"] == expected


def test_scalar_follows_a_dtype_variable_bound_by_an_array() -> None:
    # the Python float does not turn T into float64: arrays bind first
    spec = bind(saxpy.signature, (f32(4), f32(4), 2.0), {}, ARCH)
    assert dict(spec.param_types)["alpha"] == "float32"


def test_float_scalar_for_a_dtype_variable_bound_to_int_is_rejected() -> None:
    ints = np.zeros(4, np.int32)
    err = binding_error(BindingError, lambda: bind(saxpy.signature, (ints, ints, 0.5), {}, ARCH), "alpha")
    assert "int32" in str(err)


def test_scalar_of_unsupported_type_for_a_dtype_variable_is_rejected() -> None:
    err = binding_error(BindingError, lambda: bind(fill.signature, (np.zeros(4), "x"), {}, ARCH), "v")
    assert "str" in str(err)


# --- index width and alignment ----------------------------------------------------------------------


def test_describe_array_accepts_objects_with_ptr_shape_dtype() -> None:
    info = describe_array(FakeDeviceArray((3, 5), np.float16, ptr=0x1000))
    assert info is not None
    assert info.shape == (3, 5) and info.dtype == np.float16 and info.aligned16


def test_small_arrays_use_32_bit_indexing() -> None:
    a = FakeDeviceArray((INT32_MAX,), np.float32)
    assert bind(saxpy.signature, (a, a, 1.0), {}, ARCH).index_bits == 32


def test_huge_extent_uses_64_bit_indexing() -> None:
    a = FakeDeviceArray((INT32_MAX + 1,), np.float32)
    assert bind(saxpy.signature, (a, a, 1.0), {}, ARCH).index_bits == 64


def test_huge_element_count_with_small_extents_uses_64_bit_indexing() -> None:
    out = FakeDeviceArray((1 << 16, 1 << 16), np.float32)
    w = FakeDeviceArray((1 << 16, 4), np.float32)
    spec = bind(rows.signature, (out, w, 1), {"c": 1}, ARCH)
    assert spec.index_bits == 64


def test_index_width_is_part_of_the_specialization() -> None:
    small = FakeDeviceArray((8,), np.float32)
    huge = FakeDeviceArray((INT32_MAX + 1,), np.float32)
    assert bind(saxpy.signature, (small, small, 1.0), {}, ARCH) != bind(saxpy.signature, (huge, huge, 1.0), {}, ARCH)


def test_misaligned_device_pointer_is_recorded() -> None:
    y = FakeDeviceArray((8,), np.float32, ptr=0x1004)
    x = FakeDeviceArray((8,), np.float32, ptr=0x1010)
    assert bind(saxpy.signature, (y, x, 1.0), {}, ARCH).aligned == (("y", False), ("x", True))


def test_specialized_symbols_take_the_bound_extent() -> None:
    @kd.kernel(grid=kd.cdiv("n", 128), block=128, specialize=("n",))
    def fixed_n(x: kd.In["float32", "n"]) -> str:
        return ""

    assert bind(fixed_n.signature, (f32(1000),), {}, ARCH).fixed_symbols == (("n", 1000),)


# --- ahead-of-time bindings -----------------------------------------------------------------------------


def test_bind_declared_needs_every_dtype_variable() -> None:
    err = binding_error(BindingError, lambda: bind_declared(saxpy.signature, {}, {}, ARCH), None)
    assert "T" in str(err)


def test_bind_declared_rejects_unsupported_dtype() -> None:
    err = binding_error(BindingError, lambda: bind_declared(saxpy.signature, {"T": np.clongdouble}, {}, ARCH), None)
    assert "unsupported element type" in str(err)


def test_bind_declared_rejects_bad_index_width() -> None:
    binding_error(BindingError, lambda: bind_declared(saxpy.signature, {"T": np.float32}, {}, ARCH, 16), None)


def test_bind_declared_matches_a_bound_call() -> None:
    declared = bind_declared(saxpy.signature, {"T": "float32"}, {}, ARCH)
    assert declared == bind(saxpy.signature, (f32(8), f32(8), 2.0), {}, ARCH)


@kd.kernel()
def scalars(a: kd.Out["float32", "n"], f: kd.Scalar["float32"], i: kd.Scalar["int8"]) -> str:
    return ""


@pytest.mark.parametrize(
    ("f", "i"),
    [(0.1, 3), (np.float32(0.1), np.int8(3)), (np.float64(0.5), np.int64(3)), (np.int16(7), True), (1 << 30, -128)],
)
def test_python_numbers_safe_numpy_types_and_exact_values_bind(f: Any, i: Any) -> None:
    spec = bind(scalars.signature, (np.zeros(2, np.float32), f, i), {}, "sm_90")
    assert dict(spec.param_types) == {"a": "float32", "f": "float32", "i": "int8"}  # the declared types


@pytest.mark.parametrize(
    ("f", "i", "param", "given"),
    [
        (np.float64(0.1), 3, "f", "float64"),
        (np.int64(2**40 + 1), 3, "f", "int64"),
        (1.0, np.int64(300), "i", "int64"),
        (1.0, 2.5, "i", "float"),
        (1.0, np.float64(2.0), "i", "float64"),
    ],
)
def test_a_scalar_that_would_change_value_is_refused_naming_both_types(f: Any, i: Any, param: str, given: str) -> None:
    with pytest.raises(ScalarConversionError) as info:
        bind(scalars.signature, (np.zeros(2, np.float32), f, i), {}, "sm_90")
    declared = "float32" if param == "f" else "int8"
    assert (info.value.param, info.value.declared, info.value.given) == (param, declared, given)


def test_a_nan_of_another_float_type_converts() -> None:
    spec = bind(scalars.signature, (np.zeros(2, np.float32), np.float64("nan"), 1), {}, "sm_90")
    assert dict(spec.param_types)["f"] == "float32"
