"""kd.ops on CPU: NumPy's promotion for every pair of supported dtypes, and every op compiled with
NVRTC for sm_90 for every dtype it accepts (all of them: about 240 small kernels, ~10 s)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import ops
from kerneldsl.array import promotion
from kerneldsl.dtypes import all_element_types
from kerneldsl.launch import fastpath

ARCH = "sm_90"
DTYPES = [et.numpy for et in all_element_types().values() if et.kind != "c"]  # complex: test_complex_arrays.py


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):
    yield


def _numpy(func, *operands):
    probes = [np.empty(0, o) if isinstance(o, np.dtype) else o for o in operands]
    with np.errstate(all="ignore"):
        return np.asarray(func(*probes)).dtype


@pytest.mark.parametrize("a, b", list(itertools.product(DTYPES, DTYPES)), ids=lambda d: d.name)
def test_binary_promotion_matches_numpy(a: np.dtype, b: np.dtype) -> None:
    try:
        expected = _numpy(np.add, a, b)
    except TypeError:
        with pytest.raises(TypeError):
            ops.add.resolve([a, b])
        return
    assert ops.add.resolve([a, b])[0] == expected
    if "bfloat16" not in (a.name, b.name):  # ml_dtypes' loops do not follow np.result_type
        assert expected == np.result_type(a, b)
    assert ops.maximum.resolve([a, b])[0] == expected
    assert ops.divide.resolve([a, b])[0] == _numpy(np.true_divide, a, b)


def test_a_python_float_beside_bfloat16_is_weak_under_every_ml_dtypes() -> None:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert promotion._weak_beside_bfloat16((bf16, 1e-5, 2)) == (bf16, bf16, bf16)  # probed as bfloat16
    assert ops.add.resolve([bf16, 1e-5])[0] == bf16  # ml_dtypes 0.6 alone says float32
    assert ops.multiply.resolve([np.dtype(np.float32), bf16])[0] == np.float32


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_weak_scalars_and_math_functions_follow_numpy(dt: np.dtype) -> None:
    for scalar in (2, 2.5, True):
        try:
            expected = _numpy(np.multiply, dt, scalar)
        except (TypeError, OverflowError) as exc:
            with pytest.raises(type(exc)):
                ops.multiply.resolve([dt, scalar])
            continue
        assert ops.multiply.resolve([dt, scalar])[0] == expected
    for name in ("sin", "exp", "sqrt", "tanh"):
        try:
            expected = _numpy(getattr(np, name), dt)
        except TypeError:
            continue
        assert getattr(ops, name).resolve([dt])[0] == expected, name


def test_python_int_out_of_range_raises_like_numpy() -> None:
    with pytest.raises(OverflowError):
        ops.add.resolve([np.dtype(np.uint8), -1])
    assert ops.add.resolve([np.dtype(np.int8), 3])[0] == np.int8


def test_unsupported_combinations_raise_type_error() -> None:
    with pytest.raises(TypeError):
        ops.subtract.resolve([np.dtype(bool), np.dtype(bool)])
    with pytest.raises(TypeError):
        ops.negative.resolve([np.dtype(bool)])
    with pytest.raises(TypeError, match="kd.ops.less is not defined for complex64 operands"):
        ops.less.resolve([np.dtype(np.complex64), np.dtype(np.float32)])


def _accepts(op, operands) -> bool:
    try:
        op.resolve([o.dtype for o in operands])
        return True
    except TypeError:
        return False


@pytest.mark.parametrize("name", sorted(ops.ELEMENTWISE))
def test_every_op_compiles_for_every_dtype_it_accepts(name: str) -> None:
    op = ops.ELEMENTWISE[name]
    compiled = 0
    for dt in DTYPES:
        operands = [np.ones(8, dt) for _ in op.params]
        if name == "where":
            operands[0] = np.ones(8, bool)
        if not _accepts(op, operands):
            continue
        assert op.inspect(*operands, arch=ARCH).cubin
        compiled += 1
    assert compiled >= (1 if name in ("exp", "log", "sqrt", "sin", "cos", "tanh", "divide") else 3)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_astype_compiles_to_and_from_every_dtype(dt: np.dtype) -> None:
    src = np.ones(8, dt)
    for target in (np.float32, np.int64, np.bool_, np.float16):
        build = ops.AsType(np.dtype(target)).inspect(src, arch=ARCH)
        assert build.cubin


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_reduction_result_dtypes_follow_numpy(dt: np.dtype) -> None:
    x = np.ones(3, dt)
    for name, ref in (
        ("sum", np.sum),
        ("prod", np.prod),
        ("mean", np.mean),
        ("max", np.max),
        ("argmax", np.argmax),
        ("norm", np.linalg.norm),
    ):
        plan = getattr(ops, name)._plan((x,), None, None)
        with np.errstate(all="ignore"):
            assert plan.dtype == np.asarray(ref(x)).dtype, name
    if dt.kind in "fc":
        assert ops.sum._plan((x,), None, None).acc == (np.float32 if dt.itemsize == 2 else dt)


def test_dot_is_one_dimensional_and_keeps_numpy_dtype() -> None:
    a = np.ones(4, np.int8)
    assert ops._dot._plan((a, a), None, None).dtype == np.dot(a, a).dtype
    with pytest.raises(ValueError, match="1-D"):
        ops.dot(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="not aligned"):
        ops.dot(np.ones(3), np.ones(4))


def test_astype_and_kd_exports() -> None:
    assert kd.ops is ops and kd.fuse and kd.elementwise and kd.reduction
    with pytest.raises(TypeError, match="kd.ops.floor is not defined for complex64 operands"):
        ops.floor(np.ones(2, np.complex64))


def test_op_arity_is_checked() -> None:
    with pytest.raises(TypeError, match="takes 2 operand"):
        ops.add(np.ones(2))


def test_a_0d_operand_keeps_the_flat_vectorized_layout() -> None:
    build = ops.multiply.inspect(np.ones((), np.float32), np.ones(4096, np.float32), arch=ARCH)
    assert (build.decisions.layout, build.decisions.vector_width) == ("flat", 4)
    assert ops.add.inspect(np.ones((3, 1), np.float32), np.ones((3, 5)), arch=ARCH).decisions.layout == "broadcast"


@pytest.mark.skipif(not fastpath.ENABLED, reason="the C launch path is off")
def test_a_warm_op_with_a_0d_operand_launches_from_c_for_any_length(drv) -> None:  # type: ignore[no-untyped-def]
    s = kd.Session(0)
    alpha, x = s.to_device(np.float32(2.0)), s.zeros(4096, np.float32)
    ops.multiply(alpha, x)
    ops.multiply(alpha, x)
    before = drv.c_launches
    assert ops.multiply(alpha, x).shape == (4096,) and drv.c_launches == before + 1
    assert ops.multiply(alpha, s.zeros(7, np.float32)).shape == (7,) and drv.c_launches == before + 2
    assert drv.launches[-1][1] == (1, 1, 1)  # the grid of 7 elements, computed by the C path
