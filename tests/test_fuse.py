"""@kd.fuse on CPU: tracing into one kernel, reductions at the end only, FusionError naming the op."""

from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import FusionError

ARCH = "sm_90"


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):
    yield


@kd.fuse
def chain(x, y):
    t = ((x * 2 + y) * x - 3) * 0.5
    return kd.ops.square(kd.ops.sin(t) + y)


def test_a_chain_is_one_kernel_without_temporaries() -> None:
    x = np.ones(1024, np.float32)
    build = chain.inspect(x, x, arch=ARCH)
    src = build.cuda_source
    assert src.count("__global__") == 1
    assert src.count("kdout[") == 1  # one store: intermediates stay in registers
    assert build.decisions.vector_width == 4
    builder, (result,), _ = chain.trace(x, x)
    program = builder.program(result)
    assert [n.op for n in program.nodes] == [
        "multiply",
        "add",
        "multiply",
        "subtract",
        "multiply",
        "sin",
        "add",
        "square",
    ]
    assert [leaf.kind for leaf in program.leaves].count("array") == 2


def test_trace_once_per_specialization() -> None:
    x = np.ones(16, np.float32)
    plan = chain.plan((x, x), None)
    again = chain.plan((np.ones(32, np.float32), np.ones(32, np.float32)), None)
    assert plan.kernel is again.kernel  # a new size re-traces but reuses the kernel
    other = chain.plan((np.ones(16, np.float64), np.ones(16, np.float64)), None)
    assert other.kernel is not plan.kernel
    assert chain.inspect(np.ones(16), np.ones(16), arch=ARCH).specialization.element_type("kdp0").name == "float64"


def test_scalar_arguments_stay_runtime_parameters() -> None:
    @kd.fuse
    def scale(x, a):
        return x * a + 1

    plan = scale.plan((np.ones(8, np.float32), 2.0), None)
    assert ("arg", 1) in plan.sources and ("const", 1) in plan.sources
    b = scale.inspect(np.ones(8, np.float32), 2.0, arch=ARCH)
    assert b.specialization.element_type("kdp1").name == "float32"


def test_chain_ending_in_a_reduction_is_one_elementwise_plus_reduction_kernel() -> None:
    @kd.fuse
    def sum_of_squares(x, y):
        return kd.ops.sum(kd.ops.square(x - y))

    small = sum_of_squares.inspect(np.ones(100, np.float32), np.ones(100, np.float32), arch=ARCH)
    large = sum_of_squares.inspect(np.ones(1 << 20, np.float32), np.ones(1 << 20, np.float32), arch=ARCH)
    assert (small.decisions.stage, large.decisions.stage) == ("direct", "partial")
    assert small.cuda_source.count("__global__") == large.cuda_source.count("__global__") == 1
    plan = sum_of_squares.plan((np.ones(100, np.float32), np.ones(100, np.float32)), None)
    assert [n.op for n in plan.program.nodes] == ["subtract", "square"]


def test_axis_reduction_over_broadcast_values() -> None:
    @kd.fuse
    def centered_norms(m, row):
        return kd.ops.sum(kd.ops.square(m - row), axis=1)

    build = centered_norms.inspect(np.ones((4, 64), np.float32), np.ones(64, np.float32), arch=ARCH)
    assert (build.decisions.stage, build.decisions.layout) == ("rows", "broadcast")


def test_user_elementwise_functions_fuse() -> None:
    @kd.elementwise
    def axpy(a: kd.Scalar["T"], x: kd.In["T"], y: kd.In["T"]) -> kd.Out["T"]:
        return "a * x + y"

    @kd.fuse
    def f(x, y):
        return kd.ops.exp(axpy(2.0, x, y))

    builder, (result,), _ = f.trace(np.ones(8, np.float32), np.ones(8, np.float32))
    assert [n.op for n in builder.program(result).nodes] == ["axpy", "exp"]
    assert f.inspect(np.ones(8, np.float32), np.ones(8, np.float32), arch=ARCH).cubin


def _trace_error(func, *args) -> str:
    with pytest.raises(FusionError) as info:
        kd.fuse(func).trace(*args)
    return str(info.value)


def _fuse_error(func, *args) -> str:
    with pytest.raises(FusionError) as info:
        kd.fuse(func).inspect(*args, arch=ARCH)
    return str(info.value)


def test_numpy_on_a_tracer_names_the_function() -> None:
    x = np.ones(8, np.float32)
    assert "numpy.sin" in _trace_error(lambda x: np.sin(x), x)
    assert "numpy.sum" in _trace_error(lambda x: np.sum(x), x)


def test_reducing_a_reduction_result_names_it() -> None:
    assert "'max'" in _trace_error(lambda x: kd.ops.sum(kd.ops.max(x, axis=0)), np.ones((2, 2), np.float32))


def test_python_control_flow_is_refused() -> None:
    def branchy(x):
        if x:
            return x
        return -x

    assert "control flow" in _trace_error(branchy, np.ones(2, np.float32))
    assert "float()" in _trace_error(lambda x: x * float(x), np.ones(2, np.float32))


def test_passing_a_tracer_to_a_kernel_is_refused() -> None:
    @kd.kernel(grid=1, block=1)
    def noop(x: kd.InOut["T", "n"]):
        return ""

    def f(x):
        noop(x)
        return x

    assert "@kd.kernel" in _trace_error(f, np.ones(2, np.float32))


def test_captured_arrays_and_bad_results_are_refused() -> None:
    captured = np.ones(2, np.float32)
    assert "pass arrays as arguments" in _trace_error(lambda x: kd.ops.add(x, captured), np.ones(2, np.float32))
    assert "cannot be fused" in _trace_error(lambda x: kd.ops.add(x, [1, 2]), np.ones(2, np.float32))
    assert "tuple without a reduction" in _fuse_error(lambda x: (x, x), np.ones(2, np.float32))
    assert "must return an array" in _trace_error(lambda x: 3, np.ones(2, np.float32))


def test_comparisons_trace_into_the_fused_kernel() -> None:
    @kd.fuse
    def relu_or(x, y):
        return kd.ops.where(x > 0, x, y)

    builder, (result,), _ = relu_or.trace(np.ones(8, np.float32), np.ones(8, np.float32))
    assert [n.op for n in builder.program(result).nodes] == ["greater", "where"]
    assert relu_or.inspect(np.ones(8, np.float32), np.ones(8, np.float32), arch=ARCH).cubin


@pytest.mark.parametrize("name", ["less", "greater_equal", "not_equal"])
def test_comparisons_compare_in_the_common_dtype_and_give_booleans(name: str) -> None:
    op = getattr(kd.ops, name)
    result, loops = op.resolve([np.dtype(np.int8), np.dtype(np.float32)])
    assert result == np.bool_ and loops == (np.dtype(np.float32),) * 2
    assert op.inspect(np.arange(3, dtype=np.int8), np.ones(3, np.float32), arch=ARCH).cubin
