"""Complex dtypes in the array layer, on CPU: ``kd.ops`` rows with a complex form take complex64
/ complex128 operands with NumPy's result dtypes, the rest refuse them with
``ComplexUnsupportedError`` naming the op and the dtype; ``sum``/``prod``/``mean`` accumulate
in the complex dtype; every specialization compiles (NVRTC, sm_90); ``@`` runs cuBLAS's complex
gemms (checked against NumPy through the cuBLAS double)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from blas_double import FakeCublas
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import array_api as xp
from kerneldsl import blas, ops
from kerneldsl.blas.binding import C_32F, C_64F, COMPUTE_32F, COMPUTE_64F
from kerneldsl.errors import ComplexUnsupportedError, OperandDtypeError
from kerneldsl.runtime import Session

ARCH = "sm_90"
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
COMPLEX = [C64, C128]
IDS = ["complex64", "complex128"]

UNARY = ["negative", "positive", "conj", "square", "reciprocal", "exp", "log", "sqrt"]
UNARY += ["sin", "cos", "tan", "sinh", "cosh", "tanh"]
BINARY = ["add", "subtract", "multiply", "divide"]
REAL_RESULTS = ["abs", "real", "imag"]
PREDICATES = ["isnan", "isinf", "isfinite"]
COMPARISONS = ["equal", "not_equal"]
REFUSED = [
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "floor",
    "ceil",
    "trunc",
    "rint",
    "floor_divide",
    "remainder",
    "clip",
    "signbit",
    "arctan2",
]


def _dtypes(n: int, dt: np.dtype) -> list[np.dtype]:
    return [dt] * n


# -- result dtypes: NumPy's -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize(
    ("a", "b"),
    [(C64, C64), (C64, np.float64), (C64, np.float32), (np.float16, C64), (C128, np.int64), (np.int8, C64)],
)
def test_binary_ops_promote_complex_like_numpy(name: str, a: Any, b: Any) -> None:
    a, b = np.dtype(a), np.dtype(b)
    want = getattr(np, name)(np.empty(0, a), np.empty(0, b)).dtype
    result, loops = getattr(ops, name).resolve([a, b])
    assert result == want and loops == (want, want)


def test_complex64_with_float64_is_complex128() -> None:
    assert ops.add.resolve([C64, np.dtype(np.float64)])[0] == C128


@pytest.mark.parametrize(
    ("base", "scalar", "want"),
    [(np.float32, 1j, C64), (C64, 1j, C64), (C64, np.complex128(1j), C128), (C64, 2.5, C64), (np.int16, 1j, C128)],
)
def test_scalars_promote_with_complex_like_numpy(base: Any, scalar: Any, want: np.dtype) -> None:
    """A Python complex is weak (float32 * 1j is complex64); a numpy complex128 is strong."""
    assert ops.multiply.resolve([np.dtype(base), scalar])[0] == want == np.multiply(np.empty(0, base), scalar).dtype


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", REAL_RESULTS)
def test_abs_real_imag_of_complex_are_its_parts_dtype(name: str, dt: np.dtype) -> None:
    result, loops = getattr(ops, name).resolve([dt])
    assert result == np.dtype(np.float32 if dt == C64 else np.float64) and loops == (dt,)


@pytest.mark.parametrize("name", REAL_RESULTS)
def test_abs_real_imag_of_real_operands_stay_real(name: str) -> None:
    assert getattr(ops, name).resolve([np.dtype(np.float32)]) == (np.float32, (np.float32,))


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", PREDICATES + COMPARISONS)
def test_predicates_and_equality_of_complex_are_bool(name: str, dt: np.dtype) -> None:
    op = getattr(ops, name)
    result, loops = op.resolve(_dtypes(len(op.params), dt))
    assert result == np.bool_ and loops == (dt,) * len(op.params)


def test_equality_compares_in_the_common_complex_dtype() -> None:
    assert ops.equal.resolve([C64, np.dtype(np.float64)])[1] == (C128, C128)


def test_conj_of_bool_is_int8_as_numpy() -> None:
    assert ops.conj.resolve([np.dtype(np.bool_)])[0] == np.int8


def test_conjugate_is_conj() -> None:
    assert ops.conjugate is ops.conj


# -- refusals -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", REFUSED)
def test_ops_without_a_complex_form_refuse_complex_naming_op_and_dtype(name: str, dt: np.dtype) -> None:
    op = getattr(ops, name)
    with pytest.raises(ComplexUnsupportedError, match=f"kd.ops.{name} is not defined for {dt.name} operands"):
        op.resolve(_dtypes(len(op.params), dt))


def test_the_refusal_is_an_operand_dtype_error() -> None:
    assert issubclass(ComplexUnsupportedError, OperandDtypeError) and issubclass(ComplexUnsupportedError, TypeError)


def test_a_python_complex_scalar_is_refused_too() -> None:
    with pytest.raises(ComplexUnsupportedError, match="kd.ops.less is not defined for complex128"):
        ops.less.resolve([np.dtype(np.float32), 1j])


def test_a_complex_condition_of_where_is_refused() -> None:
    with pytest.raises(ComplexUnsupportedError, match="kd.ops.where's condition is not defined for complex64"):
        ops.where.resolve([C64, np.dtype(np.float32), np.dtype(np.float32)])


def test_a_user_elementwise_function_refuses_complex_for_a_real_parameter() -> None:
    @kd.elementwise(result="float32")
    def doubled(x: kd.In["float32"]) -> str:
        return "x * 2"

    with pytest.raises(ComplexUnsupportedError, match="doubled: a complex operand for float32 parameter 'x'"):
        doubled.inspect(np.zeros(4, C64), arch=ARCH)


def test_a_user_elementwise_function_binds_complex_to_a_dtype_variable() -> None:
    @kd.elementwise
    def scaled(x: kd.In["T"], a: kd.Scalar["T"]) -> kd.Out["T"]:
        return "x * a"

    assert scaled.resolve([np.dtype(np.float32), 1j]) == (C64, (C64, C64))
    assert scaled.inspect(np.zeros(9, C128), 2j, arch=ARCH).cubin


def test_a_refused_device_call_launches_nothing(drv: FakeDriver) -> None:
    with Session(0) as s:
        z = s.zeros(5, np.complex64)
        before = len(drv.launches)
        with pytest.raises(ComplexUnsupportedError, match="less"):
            z < z  # noqa: B015
        assert len(drv.launches) == before


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", ["min", "max", "argmin", "argmax"])
def test_ordering_reductions_refuse_complex(name: str, dt: np.dtype) -> None:
    with pytest.raises(ComplexUnsupportedError, match=f"{name} is not defined for {dt.name} operands: complex numbers"):
        getattr(ops, name).inspect(np.zeros(10, dt), arch=ARCH)


@pytest.mark.parametrize("name", ["norm", "cumsum", "cumprod"])
def test_norm_and_scans_refuse_complex(name: str) -> None:
    with pytest.raises(ComplexUnsupportedError, match=f"{name} is not defined for complex64"):
        getattr(ops, name).inspect(np.zeros(10, C64), arch=ARCH)


def test_var_and_std_refuse_complex(drv: FakeDriver) -> None:
    with Session(0) as s:
        z = s.zeros((3, 4), np.complex64)
        for method in (z.var, z.std):
            with pytest.raises(ComplexUnsupportedError, match="var/std is not defined for complex64"):
                method()


# -- compiled specializations ---------------------------------------------------------------------------


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", UNARY + REAL_RESULTS + PREDICATES)
def test_unary_complex_ops_compile(name: str, dt: np.dtype) -> None:
    assert getattr(ops, name).inspect(np.zeros(1001, dt), arch=ARCH).cubin


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", BINARY + COMPARISONS)
def test_binary_complex_ops_compile(name: str, dt: np.dtype) -> None:
    assert getattr(ops, name).inspect(np.zeros(1001, dt), np.zeros(1001, dt), arch=ARCH).cubin


@pytest.mark.parametrize("name", sorted(ops.TABLE))
def test_every_row_either_compiles_for_complex_or_refuses_it(name: str) -> None:
    """No row reaches NVRTC with a complex operand it has no expression for."""
    op = ops.TABLE[name]
    try:
        _, loops = op.resolve([np.dtype(np.bool_) if p == "c" and name == "where" else C64 for p in op.params])
    except OperandDtypeError:
        return
    assert op.inspect(*(np.zeros(8, dt) for dt in loops), arch=ARCH).cubin


@pytest.mark.parametrize(("dt", "width"), [(C64, 2), (C128, 1)], ids=IDS)
def test_complex_arrays_move_in_16_byte_vectors(dt: np.dtype, width: int) -> None:
    assert ops.add.inspect(np.zeros(1001, dt), np.zeros(1001, dt), arch=ARCH).decisions.vector_width == width


def test_a_python_complex_scalar_is_a_complex_kernel_parameter() -> None:
    build = ops.multiply.inspect(np.zeros(64, np.float32), 2 - 1j, arch=ARCH)
    parts = [s for s in build.launch_contract.slots if s.conversion == "complex"]
    assert [s.part for s in parts] == ["real", "imag"] and {s.element for s in parts} == {"complex64"}


def test_broadcast_and_strided_complex_operands_compile(drv: FakeDriver) -> None:
    broadcast = ops.multiply.inspect(np.zeros((7, 33), C128), np.zeros(33, C64), arch=ARCH)
    with Session(0) as s:
        a = s.zeros((7, 34), np.complex128)
        strided = ops.add.inspect(a[:, ::2], a[:, 1::2], arch=ARCH)
    assert (broadcast.decisions.layout, strided.decisions.layout) == ("broadcast", "strided")
    assert broadcast.cubin and strided.cubin


def test_where_selects_complex_values() -> None:
    build = ops.where.inspect(np.zeros(9, np.bool_), np.zeros(9, C64), 1j, arch=ARCH)
    assert build.cubin


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("to", [np.float32, np.float64, np.int32, np.bool_, np.float16, np.complex64, np.complex128])
def test_casts_from_complex_compile(dt: np.dtype, to: Any) -> None:
    assert ops.AsType(np.dtype(to)).inspect(np.zeros(100, dt), arch=ARCH).cubin


def test_a_cast_to_real_drops_the_imaginary_part_and_to_bool_tests_both() -> None:
    assert ops.AsType(np.dtype(np.float32)).expression(np.dtype(np.float32), (C64,)) == "(kdT)a.re"
    assert ops.AsType(np.dtype(np.bool_)).expression(np.dtype(np.bool_), (C64,)) == "(kdT)(a.re != 0 || a.im != 0)"


@pytest.mark.parametrize("dt", [np.float32, np.int16, np.bool_])
def test_casts_to_complex_compile(dt: Any) -> None:
    assert ops.AsType(C64).inspect(np.zeros(100, dt), arch=ARCH).cubin


def test_a_fused_complex_chain_compiles() -> None:
    @kd.fuse
    def magnitude(z: Any, w: Any) -> Any:
        return ops.abs(z * w + 1j)

    assert magnitude.inspect(np.zeros(100, C64), np.zeros(100, C64), arch=ARCH).cubin


# -- reductions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
@pytest.mark.parametrize("name", ["sum", "prod", "mean"])
@pytest.mark.parametrize(
    ("shape", "axis", "stage"),
    [
        ((100,), None, "direct"),
        ((100001,), None, "partial"),
        ((3, 400), 1, "rows"),
        ((400, 3), 0, "columns"),
        ((101, 7, 53), (0, 2), "segments"),
        ((6, 7, 8, 9), (0, 2), "lines"),
    ],
)
def test_complex_reductions_accumulate_in_their_dtype_at_every_stage(
    name: str, dt: np.dtype, shape: tuple[int, ...], axis: Any, stage: str
) -> None:
    build = getattr(ops, name).inspect(np.zeros(shape, dt), axis=axis, arch=ARCH)
    assert (build.decisions.stage, build.decisions.accumulation) == (stage, dt)
    assert build.cubin


@pytest.mark.parametrize("name", ["sum", "prod", "mean"])
def test_complex_reductions_keep_numpys_result_dtype(name: str) -> None:
    for dt in COMPLEX:
        assert getattr(ops, name).reducer.result(dt) == getattr(np, name)(np.ones(2, dt)).dtype


def test_a_strided_complex_view_reduces_in_place() -> None:
    view = np.zeros((64, 64), C64)[::2, 1::3]
    assert ops.sum.inspect(view, axis=0, arch=ARCH).cubin


def test_a_real_sum_into_complex_compiles(drv: FakeDriver) -> None:
    """``x.sum(dtype=complex64)`` of float32: the values convert into the complex accumulator."""
    with Session(0) as s:
        assert s.zeros((4, 5), np.float32).sum(axis=1, dtype=np.complex64).dtype == C64


def test_the_complex_dot_reduction_compiles() -> None:
    assert ops._dot.inspect(np.zeros(300, C128), np.zeros(300, C128), arch=ARCH).cubin


# -- matmul through the cuBLAS double ---------------------------------------------------------------------


def crand(shape: tuple[int, ...], dt: np.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dt)


def _calls(lib: FakeCublas, name: str) -> list[Any]:
    return [args for call, args in lib.calls if call == name]


@pytest.mark.parametrize(("dt", "compute"), [(C64, COMPUTE_32F), (C128, COMPUTE_64F)], ids=IDS)
def test_a_2d_complex_product_is_one_gemm_ex_of_the_complex_type(
    fake_session: Session, lib: FakeCublas, dt: np.dtype, compute: int
) -> None:
    """The double reads the operands as the cudaDataType passed (a real type would be garbage here)."""
    a, b = crand((5, 7), dt), crand((7, 3), dt, 1)
    got = fake_session.to_device(a) @ fake_session.to_device(b)
    assert [n for n in lib.names() if n.startswith("gemm")] == ["gemm_ex"]
    assert _calls(lib, "gemm_ex")[0][-1] == compute and got.dtype == dt
    np.testing.assert_allclose(got.to_host(), a @ b, rtol=1e-5)


def test_the_complex_gemm_types_are_cudas() -> None:
    nvmath = pytest.importorskip("nvmath")
    assert (C_32F, C_64F) == (nvmath.CudaDataType.CUDA_C_32F, nvmath.CudaDataType.CUDA_C_64F)
    assert blas.checks.GEMM_TYPES[C64] == (C_32F, COMPUTE_32F) and blas.checks.GEMM_TYPES[C128] == (C_64F, COMPUTE_64F)


@pytest.mark.parametrize("dt", COMPLEX, ids=IDS)
def test_a_batched_complex_product_is_one_strided_batched_call(
    fake_session: Session, lib: FakeCublas, dt: np.dtype
) -> None:
    a, b = crand((4, 3, 5), dt), crand((5, 2), dt, 1)
    got = kd.matmul(fake_session.to_device(a), fake_session.to_device(b))
    assert [n for n in lib.names() if n.startswith("gemm")] == ["gemm_strided_batched_ex"]
    np.testing.assert_allclose(got.to_host(), a @ b, rtol=1e-5)


@pytest.mark.parametrize(("sa", "sb"), [((6,), (6, 4)), ((4, 6), (6,)), ((6,), (6,))])
def test_complex_products_with_a_vector_are_a_batch_of_one(
    fake_session: Session, lib: FakeCublas, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    a, b = crand(sa, C64), crand(sb, C64, 1)
    got = fake_session.to_device(a) @ fake_session.to_device(b)
    assert got.shape == np.matmul(a, b).shape and "gemm_strided_batched_ex" in lib.names()
    np.testing.assert_allclose(got.to_host(), np.matmul(a, b), rtol=1e-5)


def test_a_transposed_complex_view_is_read_through_a_transpose_flag(fake_session: Session, lib: FakeCublas) -> None:
    a, b = crand((7, 5), C128), crand((7, 3), C128, 1)
    got = fake_session.to_device(a).T @ fake_session.to_device(b)
    np.testing.assert_allclose(got.to_host(), a.T @ b, rtol=1e-12)


def test_gemm_takes_complex_alpha_and_beta(fake_session: Session, lib: FakeCublas) -> None:
    a, b, c = crand((3, 4), C64), crand((4, 2), C64, 1), crand((3, 2), C64, 2)
    out = fake_session.to_device(c)
    blas.gemm(fake_session.to_device(a), fake_session.to_device(b), out, alpha=2 - 1j, beta=0.5j)
    np.testing.assert_allclose(out.to_host(), (2 - 1j) * (a @ b) + 0.5j * c, rtol=1e-5)


def test_mixed_complex_and_real_products_promote_like_numpy() -> None:
    from kerneldsl.blas.np_matmul import result_of

    a, b = np.zeros((2, 3), np.complex64), np.zeros((3, 4), np.float64)
    assert result_of(a, b)[2] == np.result_type(a, b) == C128


# -- the array API namespace -----------------------------------------------------------------------------


def test_the_namespace_advertises_complex_floating() -> None:
    info = xp.__array_namespace_info__()
    assert set(info.dtypes(kind="complex floating").values()) == {C64, C128}
    assert xp.isdtype(xp.complex64, "complex floating") and xp.real is ops.real and xp.imag is ops.imag


def test_the_namespaces_conj_of_a_complex_array_is_the_op(drv: FakeDriver) -> None:
    with Session(0) as s:
        z = s.zeros(5, np.complex128)
        before = len(drv.launches)
        assert xp.conj(z).dtype == C128 and len(drv.launches) == before + 1


# -- device arrays -----------------------------------------------------------------------------------------


def test_complex_of_a_0d_array_is_its_value(drv: FakeDriver) -> None:
    with Session(0) as s:
        assert complex(s.to_device(np.array(1.5 - 2j, np.complex64))) == 1.5 - 2j


def test_complex_assignments_are_where_kernels(drv: FakeDriver) -> None:
    """A Python complex is uploaded and written by one kernel; a complex64 array is cast first."""
    with Session(0) as s:
        z = s.zeros((3, 4), np.complex128)
        before = len(drv.launches)
        z[1] = 2 - 1j
        assert len(drv.launches) == before + 1
        z[:, 0] = s.zeros(3, np.complex64)
        assert len(drv.launches) == before + 3


def test_warm_calls_with_a_complex_scalar_take_the_python_adapter(drv: FakeDriver) -> None:
    """A complex scalar is two slots only the Python adapter packs: every call still launches once."""
    with Session(0) as s:
        z = s.zeros(4096, np.complex64)
        before, c_before = len(drv.launches), drv.c_launches
        results = [ops.multiply(z, 0.5 + 2j) for _ in range(3)]
        assert len(drv.launches) == before + 3 and drv.c_launches == c_before
        assert {r.dtype for r in results} == {C64}


def test_warm_calls_of_complex_arrays_launch_from_c(drv: FakeDriver) -> None:
    with Session(0) as s:
        a, b = s.zeros(4096, np.complex128), s.zeros(4096, np.complex128)
        ops.add(a, b)
        c_before = drv.c_launches
        ops.add(a, b)
        assert drv.c_launches == c_before + 1


@pytest.mark.parametrize(("dt", "part"), [(C64, np.float32), (C128, np.float64)], ids=IDS)
def test_real_and_imag_are_strided_views_of_the_parts(drv: FakeDriver, dt: np.dtype, part: Any) -> None:
    with kd.Session(0) as s:
        z = s.zeros((3, 4), dt)[:, 1:]
        re, im = z.real, z.imag
        assert (re.dtype, im.dtype) == (np.dtype(part), np.dtype(part))
        assert re.shape == im.shape == (3, 3) and re.strides == im.strides == z.strides
        assert (re.ptr, im.ptr) == (z.ptr, z.ptr + np.dtype(part).itemsize) and im.base is z.base
        assert not re.is_contiguous and ops.add.inspect(re, im, arch=ARCH).decisions.layout == "strided"


def test_a_real_arrays_parts_are_itself_and_new_zeros(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        x = s.zeros(5, np.float32)
        assert x.real.ptr == x.ptr and x.real.dtype == x.dtype
        assert x.imag.ptr != x.ptr and x.imag.dtype == x.dtype
        with pytest.raises(TypeError, match="float32 does not have a writable imaginary part"):
            x.imag = 1.0


def test_assigning_a_part_writes_through_the_view(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        z = s.zeros(6, np.complex64)
        before = len(drv.launches)
        z.imag = 0.0
        z.real = s.zeros(6, np.float32)
        assert len(drv.launches) == before + 2


def test_conj_method_is_the_op(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        z = s.zeros(6, np.complex128)
        assert z.conj().dtype == C128 and z.conjugate().shape == (6,)


def test_the_namespaces_vecdot_of_complex_conjugates_first(drv: FakeDriver) -> None:
    """One more launch than a real vecdot: the conjugate of ``x1`` (the standard's definition)."""
    with kd.Session(0) as s:
        counts = []
        for dt in (np.float64, np.complex128):
            x1, x2 = s.zeros((3, 5), dt), s.zeros(5, dt)
            before = len(drv.launches)
            result = xp.vecdot(x1, x2)
            counts.append(len(drv.launches) - before)
        assert result.dtype == C128 and result.shape == (3,) and counts[1] == counts[0] + 1
