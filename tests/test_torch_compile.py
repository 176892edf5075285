"""kerneldsl operators inside PyTorch's compilers: ``torch.compile(fullgraph=True)`` with static and
dynamic shapes, ``torch.export``, autograd (``backward=``, ``gradcheck`` in float64) and a small
model under Inductor against eager PyTorch's own ops.

Inductor compiles C++ on this machine's CPU, so only the model test uses it; the others trace
with ``CompileCounter`` or ``aot_eager``, which run the same fake kernels and graph capture.
"""

from __future__ import annotations

import math
from typing import NewType, TypeVar

import pytest

torch = pytest.importorskip("torch")

from torch._dynamo.testing import CompileCounter  # noqa: E402

import kerneldsl as kd  # noqa: E402

T = TypeVar("T")
n = NewType("n", int)
m = NewType("m", int)

GELU_C = math.sqrt(2 / math.pi)
EPS = 1e-5


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def scale_backward(grad_x: kd.Out[T, n], grad_y: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {grad_x}[i] = {alpha} * {grad_y}[i];
    """


@kd.torch.op("kdtest_compile::scale", backward=scale_backward)
@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def scale(y: kd.Out[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i];
    """


@kd.torch.op("kdtest_compile::axpy_")
@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def axpy_(y: kd.InOut[kd.float32, n], x: kd.In[kd.float32, n], alpha: kd.Scalar[kd.float32]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] += {alpha} * {x}[i];
    """


@kd.fuse
def layer_norm_gelu_backward(x: kd.In[T, m, n], grad_out: kd.In[T, m, n]) -> kd.Out[T, m, n]:
    mu = kd.ops.mean(x, axis=-1, keepdims=True)
    d = x - mu
    rstd = 1.0 / kd.ops.sqrt(kd.ops.mean(d * d, axis=-1, keepdims=True) + EPS)
    y = d * rstd
    t = kd.ops.tanh(GELU_C * (y + 0.044715 * y * y * y))
    gy = grad_out * (0.5 * (1.0 + t) + 0.5 * y * (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * y * y))
    return rstd * (gy - kd.ops.mean(gy, axis=-1, keepdims=True) - y * kd.ops.mean(gy * y, axis=-1, keepdims=True))


@kd.torch.op("kdtest_compile::layer_norm_gelu", backward=layer_norm_gelu_backward)
@kd.fuse
def layer_norm_gelu(x: kd.In[T, m, n]) -> kd.Out[T, m, n]:
    """GELU (tanh form) of the layer norm of each row, without affine weights."""
    mu = kd.ops.mean(x, axis=-1, keepdims=True)
    d = x - mu
    y = d / kd.ops.sqrt(kd.ops.mean(d * d, axis=-1, keepdims=True) + EPS)
    return 0.5 * y * (1.0 + kd.ops.tanh(GELU_C * (y + 0.044715 * y * y * y)))


def _reference_layer_norm_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, x.shape[-1:], eps=EPS), approximate="tanh")


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    from conftest import seed_for

    return torch.Generator().manual_seed(seed_for(request.node.nodeid))


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_the_op_without_a_graph_break(dynamic: bool, gen: torch.Generator) -> None:
    counter = CompileCounter()
    compiled = torch.compile(lambda x: scale(x + 1, 2.0) * 3, backend=counter, fullgraph=True, dynamic=dynamic)
    x = torch.randn(40, generator=gen)
    torch.testing.assert_close(compiled(x), (x + 1) * 6)
    assert counter.frame_count == 1
    assert counter.op_count == 3  # add, the kerneldsl op, mul: all in the one graph


@kd.torch.op("kdtest_compile::pair_sums")
@kd.kernel(grid=kd.cdiv(kd.cdiv(n, 2), 64), block=64)
def pair_sums(out: kd.Out[T, kd.cdiv(n, 2)], x: kd.In[T, n]) -> str:  # type: ignore[valid-type]
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (2 * i + 1 < n) {out}[i] = {x}[2 * i] + {x}[2 * i + 1];
    else if (2 * i < n) {out}[i] = {x}[2 * i];
    """


def test_a_computed_extent_compiles_once_for_every_size(gen: torch.Generator) -> None:
    counter = CompileCounter()
    compiled = torch.compile(lambda x: pair_sums(x) * 2, backend=counter, fullgraph=True, dynamic=True)
    for size in (7, 10, 13):
        x = torch.randn(size, generator=gen)
        expected = torch.nn.functional.pad(x, (0, size % 2)).view(-1, 2).sum(dim=1) * 2
        torch.testing.assert_close(compiled(x), expected)
    assert counter.frame_count == 1


def test_a_mutating_op_mutates_its_input_inside_a_compiled_graph(gen: torch.Generator) -> None:
    def step(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        axpy_(y, x, 2.0)
        return y * 3  # reads the mutated y: the graph must order the mutation before it

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=True)
    y, x = torch.randn(30, generator=gen), torch.randn(30, generator=gen)
    expected = y + 2.0 * x
    torch.testing.assert_close(compiled(y, x), expected * 3)
    torch.testing.assert_close(y, expected)


def test_dynamic_shapes_run_new_sizes_without_recompiling(gen: torch.Generator) -> None:
    counter = CompileCounter()
    compiled = torch.compile(layer_norm_gelu, backend=counter, fullgraph=True, dynamic=True)
    for rows, cols in [(3, 16), (5, 24), (7, 40)]:
        x = torch.randn(rows, cols, generator=gen)
        torch.testing.assert_close(compiled(x), _reference_layer_norm_gelu(x), atol=1e-5, rtol=1e-4)
    assert counter.frame_count == 1


def test_export_keeps_the_op_in_the_graph(gen: torch.Generator) -> None:
    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return layer_norm_gelu(x) + scale(x.flatten(), 0.5).view_as(x)

    x = torch.randn(4, 8, generator=gen)
    exported = torch.export.export(Scaled(), (x,))
    targets = {node.target for node in exported.graph.nodes if node.op == "call_function"}
    assert {layer_norm_gelu.overload, scale.overload} <= targets
    torch.testing.assert_close(exported.module()(x), Scaled()(x))


def test_gradcheck_of_a_kernel_with_a_kernel_backward(gen: torch.Generator) -> None:
    x = torch.randn(12, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: scale(x, 1.75), (x,))


def test_gradcheck_of_a_fused_layer_norm_gelu_with_a_fused_backward(gen: torch.Generator) -> None:
    x = torch.randn(3, 10, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer_norm_gelu, (x,))


def test_a_backward_through_aot_autograd_matches_eager(gen: torch.Generator) -> None:
    compiled = torch.compile(lambda x: layer_norm_gelu(x).square().sum(), backend="aot_eager", fullgraph=True)
    x = torch.randn(6, 32, generator=gen, requires_grad=True)
    compiled(x).backward()
    ours = x.grad
    x.grad = None
    _reference_layer_norm_gelu(x).square().sum().backward()
    torch.testing.assert_close(ours, x.grad, atol=1e-5, rtol=1e-4)


class _Block(torch.nn.Module):
    def __init__(self, features: int, fused: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, features)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        return layer_norm_gelu(h) if self.fused else _reference_layer_norm_gelu(h)


def test_a_small_model_under_inductor_matches_eager_pytorch_forward_and_backward(gen: torch.Generator) -> None:
    """Linear + kerneldsl's fused layer norm and GELU, compiled whole by Inductor, against the same
    model in eager PyTorch's own ops; float32 results within atol 1e-5, rtol 1e-4 (the two sum a
    row in different orders)."""
    torch.manual_seed(0)
    ours = _Block(64, fused=True)
    reference = _Block(64, fused=False)
    reference.load_state_dict(ours.state_dict())
    compiled = torch.compile(ours, fullgraph=True)
    x = torch.randn(16, 64, generator=gen)
    out = compiled(x)
    expected = reference(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    out.square().mean().backward()
    expected.square().mean().backward()
    for (name, ours_p), (_, reference_p) in zip(ours.named_parameters(), reference.named_parameters()):
        assert ours_p.grad is not None, name
        torch.testing.assert_close(ours_p.grad, reference_p.grad, atol=1e-5, rtol=1e-4, msg=name)
