"""``kd.torch.op``: kerneldsl declarations as registered torch operators, eager, on CPU tensors
(which run on the CPU device): schemas, fake kernels, opcheck, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Literal, NewType, TypeVar

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kerneldsl as kd  # noqa: E402
from kerneldsl.errors import (  # noqa: E402
    BindingError,
    ExtraNotInstalledError,
    ShapeMismatchError,
    StridedArrayError,
    TorchOpError,
)

T = TypeVar("T")
U = TypeVar("U")
n = NewType("n", int)
m = NewType("m", int)
k = NewType("k", int)


@kd.torch.op("kdtest_ops::scale")
@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def scale(y: kd.Out[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i];
    """


@kd.torch.op("kdtest_ops::axpy_")
@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def axpy_(y: kd.InOut[kd.float32, n], x: kd.In[kd.float32, n], alpha: kd.Scalar[kd.float32] = 1.0) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] += {alpha} * {x}[i];
    """


@kd.torch.op("kdtest_ops::clamp_split")
@kd.kernel(grid=(kd.cdiv(n, 16), m), block=16)
def clamp_split(lo: kd.Out[T, m, n], hi: kd.Out[T, m, n], x: kd.In[T, m, n], LIMIT: kd.Const[float] = 0.0) -> str:
    return f"""
    index_t j = blockIdx.x * (index_t)blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j < n) {{
        {x.ctype} v = {x}[i * n + j];
        {lo}[i * n + j] = v < ({x.ctype}){LIMIT} ? v : ({x.ctype}){LIMIT};
        {hi}[i * n + j] = v > ({x.ctype}){LIMIT} ? v : ({x.ctype}){LIMIT};
    }}
    """


@kd.torch.op("kdtest_ops::iota")
@kd.kernel(grid=kd.cdiv(k, 64), block=64)
def iota(out: kd.Out[U, k], start: kd.In[kd.int64, Literal[1]]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < k) {out}[i] = ({out.ctype})({start}[0] + i);
    """


@kd.torch.op("kdtest_ops::row_sums")
@kd.kernel(grid=kd.cdiv(m, 64), block=64)
def row_sums(out: kd.Out[T, m], x: kd.In[T, m, Literal[4]]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < m) {out}[i] = {x}[4 * i] + {x}[4 * i + 1] + {x}[4 * i + 2] + {x}[4 * i + 3];
    """


@kd.torch.op("kdtest_ops::quad_sums")
@kd.kernel(grid=kd.cdiv(kd.cdiv(n, 4), 64), block=64)
def quad_sums(out: kd.Out[T, kd.cdiv(n, 4)], x: kd.In[T, n]) -> str:  # type: ignore[valid-type]
    """Each run of 4 elements summed (the last run may be shorter): a computed output extent."""
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < {out.shape[0]}) {{
        {out.ctype} s = 0;
        for (index_t j = 4 * i; j < 4 * i + 4 && j < n; ++j) s += {x}[j];
        {out}[i] = s;
    }}
    """


@kd.torch.op("kdtest_ops::spread")
@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def spread(out: kd.Out[T, n], x: kd.In[T, n], quads: kd.In[T, kd.cdiv(n, 4)]) -> str:  # type: ignore[valid-type]
    """Each element times its run's factor: a computed input extent, checked against the symbols."""
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = {x}[i] * {quads}[i / 4];
    """


@kd.torch.op("kdtest_ops::softmax_rows")
@kd.fuse
def softmax_rows(x: kd.In[T, m, n]) -> kd.Out[T, m, n]:
    e = kd.ops.exp(x - kd.ops.max(x, axis=-1, keepdims=True))
    return e / kd.ops.sum(e, axis=-1, keepdims=True)


@kd.torch.op("kdtest_ops::exp_and_sum")
@kd.fuse
def exp_and_sum(x: kd.In[T, m, n]) -> tuple[kd.Out[T, m, n], kd.Out[T, m]]:
    e = kd.ops.exp(x)
    return e, kd.ops.sum(e, axis=-1)


def _declares_exp(x: kd.In[T, n]) -> kd.Out[T, n]: ...


exp_op = kd.torch.op("kdtest_ops::exp", declare=_declares_exp)(kd.ops.exp)


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    from conftest import seed_for

    return torch.Generator().manual_seed(seed_for(request.node.nodeid))


# --- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "schema"),
    [
        (scale, "(Tensor x, Scalar alpha) -> Tensor"),
        (axpy_, "(Tensor(a!) y, Tensor x, float alpha=1.0) -> ()"),
        (clamp_split, "(Tensor x, *, float LIMIT=0.0) -> (Tensor, Tensor)"),
        (iota, "(Tensor start, *, SymInt k, ScalarType U) -> Tensor"),
        (row_sums, "(Tensor x) -> Tensor"),
        (quad_sums, "(Tensor x) -> Tensor"),
        (spread, "(Tensor x, Tensor quads) -> Tensor"),
        (softmax_rows, "(Tensor x) -> Tensor"),
        (exp_and_sum, "(Tensor x) -> (Tensor, Tensor)"),
        (exp_op, "(Tensor x) -> Tensor"),
    ],
    ids=lambda v: v.qualname if isinstance(v, kd.torch.TorchOp) else "",
)
def test_the_schema_is_read_from_the_declaration(op: kd.torch.TorchOp, schema: str) -> None:
    assert op.schema == schema
    assert op.overload._schema == torch._C.parse_schema(f"{op.qualname}{schema}")


def test_the_operator_asks_inductor_for_contiguous_inputs() -> None:
    assert torch.Tag.needs_contiguous_strides in scale.overload.tags


# --- eager calls on CPU tensors ------------------------------------------------------------------


def test_an_out_array_is_returned_allocated_by_torch(gen: torch.Generator) -> None:
    x = torch.randn(100, generator=gen)
    y = scale(x, 2.5)
    assert torch.equal(y, x * 2.5)
    assert torch.equal(torch.ops.kdtest_ops.scale(x, 2.5), y)


def test_an_inout_array_is_mutated_in_place(gen: torch.Generator) -> None:
    y, x = torch.randn(70, generator=gen), torch.randn(70, generator=gen)
    expected = y + 0.5 * x
    assert axpy_(y, x, 0.5) is None
    torch.testing.assert_close(y, expected)


def test_a_scalar_left_out_takes_its_declared_default(gen: torch.Generator) -> None:
    y, x = torch.randn(5, generator=gen), torch.randn(5, generator=gen)
    expected = y + x
    axpy_(y, x)
    torch.testing.assert_close(y, expected)


def test_several_outputs_come_back_as_a_tuple_and_constants_by_keyword(gen: torch.Generator) -> None:
    x = torch.randn(3, 20, generator=gen, dtype=torch.float64)
    lo, hi = clamp_split(x, LIMIT=0.25)
    assert torch.equal(lo, x.clamp(max=0.25)) and torch.equal(hi, x.clamp(min=0.25))


def test_an_output_no_input_sizes_takes_a_size_and_a_dtype_argument() -> None:
    out = iota(torch.tensor([3]), k=6, U=torch.int16)
    assert out.dtype == torch.int16
    assert out.tolist() == list(range(3, 9))


def test_a_fixed_extent_is_checked_and_kept(gen: torch.Generator) -> None:
    x = torch.randn(6, 4, generator=gen)
    torch.testing.assert_close(row_sums(x), x.sum(dim=1))
    with pytest.raises(ShapeMismatchError, match="argument 'x' of kernel 'row_sums': axis 1 must be .*4, got 5"):
        row_sums(torch.randn(6, 5, generator=gen))


def _quad_sums(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, -len(x) % 4)).view(-1, 4).sum(dim=1)


def test_an_output_of_a_computed_extent_is_allocated_to_it(gen: torch.Generator) -> None:
    for size in (13, 16, 13):  # the last call is a warm one
        x = torch.randn(size, generator=gen, dtype=torch.float64)
        out = quad_sums(x)
        assert out.shape == ((size + 3) // 4,)
        torch.testing.assert_close(out, _quad_sums(x))


def test_an_input_of_a_computed_extent_is_checked_against_it(gen: torch.Generator) -> None:
    x, quads = torch.randn(10, generator=gen), torch.randn(3, generator=gen)
    torch.testing.assert_close(spread(x, quads), x * quads.repeat_interleave(4)[:10])
    with pytest.raises(ShapeMismatchError, match="'quads'"):
        spread(x, torch.randn(4, generator=gen))


def test_the_fake_kernel_computes_a_computed_extent_and_checks_one() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert quad_sums(torch.empty(13)).shape == (4,)
        with pytest.raises(ShapeMismatchError, match=r"argument 'quads'.*axis 0 must be cdiv\(n, 4\) = 3, got 4"):
            spread(torch.empty(10), torch.empty(4))


def test_a_computed_extent_stays_symbolic_under_dynamic_shapes() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(quad_sums, tracing_mode="symbolic")(torch.randn(13))
    out = [node for node in graph.graph.nodes if node.op == "output"][0].args[0]
    (extent,) = out.meta["val"].shape
    assert isinstance(extent, torch.SymInt)
    assert str(extent) == f"(({next(iter(graph.graph.nodes)).meta['val'].shape[0]} + 3)//4)"


def test_a_fused_function_writes_the_output_torch_allocated(gen: torch.Generator) -> None:
    x = torch.randn(5, 33, generator=gen)
    torch.testing.assert_close(softmax_rows(x), torch.softmax(x, dim=-1))


def test_a_fused_function_with_a_defaulted_scalar_takes_its_default(gen: torch.Generator) -> None:
    @kd.fuse
    def shifted(x: kd.In[T, n], by: kd.Scalar[kd.float32] = 1.5) -> kd.Out[T, n]:
        return x + by

    op = kd.torch.op("kdtest_ops::shifted")(shifted)
    assert op.schema == "(Tensor x, float by=1.5) -> Tensor"
    x = torch.randn(7, generator=gen)
    torch.testing.assert_close(op(x), x + 1.5)
    torch.testing.assert_close(op(x, -2.0), x - 2.0)


def test_a_fused_function_returning_a_tuple_returns_tensors(gen: torch.Generator) -> None:
    x = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    e, s = exp_and_sum(x)
    torch.testing.assert_close(e, x.exp())
    torch.testing.assert_close(s, x.exp().sum(dim=-1))


def test_an_ops_function_runs_with_its_declared_signature(gen: torch.Generator) -> None:
    x = torch.randn(17, generator=gen)
    torch.testing.assert_close(exp_op(x), x.exp())


def test_a_strided_input_is_read_through_a_contiguous_copy(gen: torch.Generator) -> None:
    x = torch.randn(50, generator=gen)[::2]
    assert torch.equal(scale(x, 3.0), x * 3.0)


def test_a_strided_inout_is_refused_and_left_unchanged(gen: torch.Generator) -> None:
    base = torch.randn(20, generator=gen)
    before = base.clone()
    with pytest.raises(StridedArrayError, match="'y'"):
        axpy_(base[::2], torch.ones(10))
    assert torch.equal(base, before)


def test_a_tensor_reused_at_a_new_address_gives_its_own_result(gen: torch.Generator) -> None:
    # adopted arrays are cached by address, shape and dtype: every call still reads its own tensor
    for _ in range(3):
        x = torch.randn(8, generator=gen)
        assert torch.equal(scale(x, 2.0), x * 2.0)


# --- the warm path: a call whose key (thread, device, shapes, dtypes, alignment) was seen ---------


def test_warm_calls_write_fresh_outputs_each_time(gen: torch.Generator) -> None:
    x = torch.randn(3, 20, generator=gen, dtype=torch.float64)
    first = clamp_split(x, LIMIT=0.25)
    for limit in (0.25, -0.5, 0.0):
        lo, hi = clamp_split(x, LIMIT=limit)
        assert lo is not first[0] and hi is not first[1]
        assert torch.equal(lo, x.clamp(max=limit)) and torch.equal(hi, x.clamp(min=limit))


def test_warm_calls_mutate_the_inout_tensor_they_are_given(gen: torch.Generator) -> None:
    x = torch.randn(33, generator=gen)
    for _ in range(3):
        y = torch.randn(33, generator=gen)
        expected = y + 0.5 * x
        axpy_(y, x, 0.5)
        torch.testing.assert_close(y, expected)
        expected = y + x
        axpy_(y, x)  # the default scalar, left out by the dispatcher
        torch.testing.assert_close(y, expected)


def test_a_new_dtype_or_shape_after_warm_calls_gets_its_own_arrays(gen: torch.Generator) -> None:
    for dtype, size in [(torch.float32, 10), (torch.float64, 10), (torch.float32, 11), (torch.float32, 10)] * 2:
        x = torch.randn(size, generator=gen, dtype=dtype)
        y = scale(x, 1.5)
        assert y.dtype == dtype and torch.equal(y, x * 1.5)


def test_an_input_off_the_16_byte_alignment_is_read_where_it_is(gen: torch.Generator) -> None:
    base = torch.randn(41, generator=gen)
    for start in (0, 1, 0, 1):  # float32: one element in is 4 bytes off
        x = base[start : start + 40]
        assert x.is_contiguous()
        assert torch.equal(scale(x, 2.0), x * 2.0)


def test_warm_calls_from_several_threads_each_get_their_own_result() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(seed: int) -> bool:
        g = torch.Generator().manual_seed(seed)
        checks = []
        for _ in range(50):
            x = torch.randn(64, generator=g)
            checks.append(torch.equal(scale(x, 3.0), x * 3.0))
        return all(checks)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))


def test_a_warm_call_after_a_wrong_one_runs_as_before(gen: torch.Generator) -> None:
    x = torch.randn(6, 4, generator=gen)
    row_sums(x)
    with pytest.raises(ShapeMismatchError):
        row_sums(torch.randn(6, 5, generator=gen))
    torch.testing.assert_close(row_sums(x), x.sum(dim=1))


def test_a_warm_call_after_its_session_closed_runs_in_a_new_one(
    gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kerneldsl.torch import tensors

    opened: list[kd.Session] = []

    def fresh_session(device: str) -> kd.Session:
        opened.append(kd.Session(device))
        return opened[-1]

    monkeypatch.setattr(tensors, "_devices", {})
    monkeypatch.setattr(tensors, "default_session", fresh_session)
    x = torch.randn(37, generator=gen)
    try:
        for alpha in (2.0, 3.0):  # the first call keeps arrays of the session, the second reuses them
            assert torch.equal(scale(x, alpha), x * alpha)
        opened[0].close()
        assert torch.equal(scale(x, 4.0), x * 4.0)
        assert len(opened) == 2 and not opened[1].closed
    finally:
        for session in opened:
            session.close()


def test_the_cuda_warm_call_launches_on_the_stream_torch_reports(
    gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the warm call bound to the CUDA key, fed CPU tensors: torch's stream query stands in for a
    # handle the CPU device's session owns, which the device has wrapped as torch's stream
    from kerneldsl.torch.tensors import _borrowed_stream, device_of

    warm = scale._run.impls["CUDA"]
    device = device_of(torch.empty(1))
    owner = kd.Stream(device.session)
    borrowed = _borrowed_stream(device.session, owner.handle)
    queried: list[object] = []
    monkeypatch.setitem(warm.__globals__, "raw_stream", lambda ordinal: queried.append(ordinal) or owner.handle)
    monkeypatch.setitem(device.streams, owner.handle, borrowed)
    x = torch.randn(29, generator=gen)
    try:
        for alpha in (2.0, 3.0):  # the first call keeps the arrays, the second launches from them
            y = warm(x, alpha)
            device.session.stream.wait(device.session.create_event(timing=False).record(borrowed))
            device.session.synchronize()
            assert torch.equal(y, x * alpha)
        assert queried == [None]  # the warm call asked torch for the stream of the tensors' device
    finally:
        borrowed.close()
        owner.close()


# --- binding errors: the same in eager calls and at trace time -----------------------------------


def test_a_shape_mismatch_names_the_argument_and_the_symbol(gen: torch.Generator) -> None:
    y, x = torch.zeros(4), torch.zeros(5)
    # the kernel's own check (its C launch path words it "must be n = 4, got 5")
    with pytest.raises(
        ShapeMismatchError, match="argument 'x' of kernel 'axpy_': axis 0 (is 5 .*is 4|must be n = 4, got 5)"
    ):
        axpy_(y, x)


def test_a_shape_mismatch_raises_from_the_fake_kernel_at_trace_time() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(ShapeMismatchError, match="symbol 'n' is 4"):
        axpy_(torch.empty(4), torch.empty(5))


def test_a_fused_op_holds_its_inputs_to_the_declared_shapes(gen: torch.Generator) -> None:
    def declared(x: kd.In[T, m, n], w: kd.In[T, n]) -> kd.Out[T, m, n]: ...

    scaled = kd.torch.op("kdtest_ops::scale_rows", declare=declared)(kd.ops.multiply)
    x = torch.randn(3, 4, generator=gen)
    torch.testing.assert_close(scaled(x, torch.full((4,), 2.0)), x * 2)
    with pytest.raises(ShapeMismatchError, match="argument 'w'.*symbol 'n' is 4"):
        scaled(x, torch.ones(1))  # kd.ops.multiply would broadcast it; the declaration says n


def test_a_wrong_dtype_names_the_argument() -> None:
    with pytest.raises(BindingError, match="argument 'x' of kernel 'axpy_': expected dtype float32, got float64"):
        axpy_(torch.zeros(3), torch.zeros(3, dtype=torch.float64))


def test_a_dtype_kerneldsl_lacks_names_the_argument_and_the_kernel() -> None:
    with pytest.raises(
        BindingError, match="argument 'x' of kernel 'scale': dtype float8_e4m3fn has no kerneldsl element type"
    ):
        scale(torch.zeros(3, dtype=torch.float8_e4m3fn), 2)


def test_the_fake_kernel_unifies_dtype_variables_like_a_call() -> None:
    def declared(x: kd.In[T, n], y: kd.In[T, n]) -> kd.Out[T, n]: ...

    add = kd.torch.op("kdtest_ops::add_same", declare=declared)(kd.ops.add)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert add(torch.empty(3, dtype=torch.float64), torch.empty(3, dtype=torch.float64)).dtype == torch.float64
        with pytest.raises(BindingError, match="dtype variable T is float64 from an earlier argument, got float32"):
            add(torch.empty(3, dtype=torch.float64), torch.empty(3))


def test_the_fake_kernel_gives_symbolic_output_shapes() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor) -> torch.Tensor:
        lo, _ = clamp_split(x)
        return lo

    graph = make_fx(f, tracing_mode="symbolic")(torch.randn(3, 5))
    out = [node for node in graph.graph.nodes if node.op == "output"][0].args[0]
    shape = out.meta["val"].shape
    assert all(isinstance(d, torch.SymInt) for d in shape)
    assert [str(d) for d in shape] == [str(d) for d in next(iter(graph.graph.nodes)).meta["val"].shape]


# --- opcheck -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op", [scale, axpy_, clamp_split, iota, row_sums, quad_sums, spread, softmax_rows, exp_and_sum], ids=str
)
def test_opcheck_passes_on_sample_inputs(op: kd.torch.TorchOp) -> None:
    results = kd.torch.opcheck(op)
    assert set(results.values()) == {"SUCCESS"}


def test_sample_inputs_follow_the_declaration() -> None:
    args, kwargs = kd.torch.sample_inputs(clamp_split, dtype=torch.float64, sizes={"m": 2})
    (x,) = args
    assert x.shape == (2, 4) and x.dtype == torch.float64  # n gets its own extent, distinct from m's
    assert kwargs == {}
    args, kwargs = kd.torch.sample_inputs(iota, dtypes={"U": torch.int32})
    assert args[0].shape == (1,) and args[0].dtype == torch.int64
    assert kwargs == {"k": 3, "U": torch.int32}


def test_sample_inputs_give_a_computed_extent_its_value() -> None:
    (x, quads), _ = kd.torch.sample_inputs(spread, sizes={"n": 9})
    assert x.shape == (9,) and quads.shape == (3,)


def test_opcheck_catches_a_fake_kernel_that_lies() -> None:
    # the generated fake kernel is checked, not trusted: a wrong output shape is reported
    args, kwargs = kd.torch.sample_inputs(scale)
    original = scale.declaration.outputs
    lying = type(original[0])(original[0].name, "out", original[0].dtype, (7,))
    object.__setattr__(scale.declaration, "outputs", (lying,))
    try:
        with pytest.raises(Exception, match=r"Shapes torch.Size\(\[3\]\) and torch.Size\(\[7\]\)"):
            kd.torch.opcheck(scale, *args, test_utils="test_faketensor", **kwargs)
    finally:
        object.__setattr__(scale.declaration, "outputs", original)


# --- what cannot be an operator ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("noseparator", "'namespace::name'"),
        ("a::b::c", "'namespace::name'"),
        ("aten::myop", "belongs to PyTorch"),
        ("my-lib::op", "must be an identifier"),
    ],
)
def test_an_operator_name_is_checked(name: str, why: str) -> None:
    with pytest.raises(TorchOpError, match=why):
        kd.torch.op(name)(scale.target)


def test_an_operator_is_defined_once() -> None:
    with pytest.raises(TorchOpError, match="kdtest_ops::scale.*cannot be defined"):
        kd.torch.op("kdtest_ops::scale")(scale.target)


def test_an_ops_function_needs_a_declaration() -> None:
    with pytest.raises(TorchOpError, match="not a @kd.kernel or @kd.fuse function: pass declare="):
        kd.torch.op("kdtest_ops::bare_exp")(kd.ops.exp)


def test_a_fused_function_takes_no_inout_parameter() -> None:
    @kd.fuse
    def bump(x: kd.InOut[T, n]) -> kd.Out[T, n]:
        return x + 1

    with pytest.raises(TorchOpError, match="parameter 'x' of torch operator 'kdtest_ops::bump'"):
        kd.torch.op("kdtest_ops::bump")(bump)


def test_a_fused_function_declares_its_result() -> None:
    @kd.fuse
    def twice(x: kd.In[T, n]):  # type: ignore[no-untyped-def]
        return x * 2

    with pytest.raises(TorchOpError, match="return annotation must be kd.Out"):
        kd.torch.op("kdtest_ops::twice")(twice)


def test_an_operator_without_an_array_argument_is_refused() -> None:
    @kd.kernel(grid=kd.cdiv(k, 64), block=64)
    def arange(out: kd.Out[kd.int64, k]) -> str:
        return ""

    with pytest.raises(TorchOpError, match="needs an array argument"):
        kd.torch.op("kdtest_ops::arange")(arange)


def test_a_scalar_whose_dtype_no_array_binds_is_refused() -> None:
    def declared(out: kd.Out[kd.float32, n], x: kd.In[kd.float32, n], v: kd.Scalar[U]) -> str:
        return ""

    fill = kd.kernel(grid=1, block=1)(declared)
    with pytest.raises(TorchOpError, match="parameter 'v'.*bound by no array"):
        kd.torch.op("kdtest_ops::fill")(fill)


def test_an_inout_operator_takes_no_backward() -> None:
    with pytest.raises(TorchOpError, match="parameter 'y' of torch operator 'kdtest_ops::axpy2_'.*InOut"):
        kd.torch.op("kdtest_ops::axpy2_", backward=scale.target)(axpy_.target)
    assert not hasattr(torch.ops.kdtest_ops, "axpy2_")  # nothing was registered


def test_a_failed_registration_leaves_the_name_free() -> None:
    @kd.kernel(grid=kd.cdiv(n, 64), block=64)
    def confused(grad_x: kd.Out[T, n], nothing: kd.In[T, n]) -> str:
        return ""

    with pytest.raises(TorchOpError, match="'nothing'"):
        kd.torch.op("kdtest_ops::scale3", backward=confused)(scale.target)
    again = kd.torch.op("kdtest_ops::scale3")(scale.target)  # neither scale3 nor scale3_backward stayed
    assert torch.equal(again(torch.ones(3), 2.0), torch.full((3,), 2.0))


def test_an_operator_stays_registered_without_a_reference() -> None:
    kd.torch.op("kdtest_ops::unreferenced")(scale.target)
    import gc

    gc.collect()
    assert torch.equal(torch.ops.kdtest_ops.unreferenced(torch.ones(2), 3.0), torch.full((2,), 3.0))


def test_a_backward_parameter_names_a_forward_value() -> None:
    @kd.kernel(grid=kd.cdiv(n, 64), block=64)
    def confused(grad_x: kd.Out[T, n], nothing: kd.In[T, n]) -> str:
        return ""

    with pytest.raises(TorchOpError, match="parameter 'nothing' of torch operator 'kdtest_ops::scale2_backward'"):
        kd.torch.op("kdtest_ops::scale2", backward=confused)(scale.target)


# --- the extra -----------------------------------------------------------------------------------


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_importing_kerneldsl_imports_no_torch() -> None:
    done = _run(
        """
        import sys, kerneldsl as kd
        kd.kernel, kd.ops, kd.fuse
        print("torch" in sys.modules)
        """
    )
    assert done.stdout.strip() == "False", done.stderr


def test_without_torch_kd_torch_names_the_extra() -> None:
    done = _run(
        """
        import sys
        sys.modules["torch"] = None  # as if not installed
        import kerneldsl as kd
        try:
            kd.torch
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert done.stdout.strip() == (
        "TorchNotAvailableError kd.torch needs PyTorch, which is not installed: pip install 'kerneldsl[torch]'"
    ), done.stderr
    assert issubclass(kd.errors.TorchNotAvailableError, ExtraNotInstalledError)


def test_results_match_numpy_on_integer_dtypes(gen: torch.Generator) -> None:
    x = torch.randint(-100, 100, (30,), generator=gen, dtype=torch.int32)
    np.testing.assert_array_equal(scale(x, 3).numpy(), x.numpy() * 3)


def test_the_readme_pytorch_block_runs() -> None:
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## PyTorch operators", 1)[1]
    block = section.split("```py\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {"__name__": "readme_torch"}
    exec(compile(block.replace("demo::", "kdtest_readme::"), "README.md", "exec"), namespace)
    assert isinstance(namespace["layer_norm"], kd.torch.TorchOp)


def test_a_borrowed_stream_launches_and_orders_without_owning_the_stream(gen: torch.Generator) -> None:
    # CUDA tensors launch on torch's current stream through this wrapper; the CPU device runs it
    # over a stream of its own session, which closing the wrapper must leave open
    from kerneldsl.torch.tensors import _borrowed_stream, device_of

    device = device_of(torch.empty(1))
    owner = kd.Stream(device.session)
    borrowed = _borrowed_stream(device.session, owner.handle)
    x = torch.randn(10, generator=gen)
    for alpha in (2.0, 3.0):  # the second call takes the C launch path's entry for that stream
        y = torch.empty(10)
        scale.target(device.adopt(y, "scale", "y"), device.adopt(x, "scale", "x"), alpha, stream=borrowed)
        assert torch.equal(y, x * alpha)
    device.session.stream.wait(device.session.create_event(timing=False).record(borrowed))
    borrowed.close()
    assert borrowed.closed and not owner.closed
    owner.close()
