"""``backward="derive"``: gradients of ``@kd.fuse`` pipelines derived from their trace, each a fused
kernel registered as an operator; checked by ``torch.autograd.gradcheck`` in float64, eager and
through AOT autograd, and refused with ``TorchOpError`` naming what cannot be derived."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NewType, TypeVar

import pytest

torch = pytest.importorskip("torch")

import kerneldsl as kd  # noqa: E402
from kerneldsl.errors import TorchOpError  # noqa: E402
from kerneldsl.torch.derivative import DERIVED  # noqa: E402

T = TypeVar("T")
n = NewType("n", int)
m = NewType("m", int)


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    from conftest import seed_for

    return torch.Generator().manual_seed(seed_for(request.node.nodeid))


def _inputs(domain: str, count: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Float64 tensors inside the op's domain, away from its kinks."""
    low, high = {"any": (-2.0, 2.0), "unit": (-0.9, 0.9), "positive": (0.5, 2.0), "above_one": (1.2, 3.0)}[domain]
    made = [low + (high - low) * torch.rand(3, 5, generator=gen, dtype=torch.float64) for _ in range(count)]
    return [t.requires_grad_() for t in made]


def _unary(x: kd.In[T, m, n]) -> kd.Out[T, m, n]: ...
def _binary(a: kd.In[T, m, n], b: kd.In[T, m, n]) -> kd.Out[T, m, n]: ...
def _ternary(a: kd.In[T, m, n], b: kd.In[T, m, n], c: kd.In[T, m, n]) -> kd.Out[T, m, n]: ...


UNARY = {
    "negative": "any", "positive": "any", "square": "any", "reciprocal": "positive", "exp": "any",
    "expm1": "any", "log": "positive", "log1p": "positive", "sqrt": "positive", "sin": "any", "cos": "any",
    "tan": "unit", "arcsin": "unit", "arccos": "unit", "arctan": "any", "sinh": "any", "cosh": "any",
    "tanh": "any", "arcsinh": "any", "arccosh": "above_one", "arctanh": "unit", "erf": "any", "erfc": "any",
}  # fmt: skip
BINARY = {
    "add": "any", "subtract": "any", "multiply": "any", "divide": "positive", "power": "positive",
    "logaddexp": "any", "hypot": "positive", "maximum": "any", "minimum": "any",
}  # fmt: skip


def _derived(name: str, func: Callable[..., object], declare: Callable[..., object]) -> kd.torch.TorchOp:
    return kd.torch.op(f"kdtest_derive::{name}", declare=declare, backward="derive")(kd.fuse(func))


def _abs(x: object) -> object:
    return abs(x)  # type: ignore[call-overload]


OPS = {
    **{name: (_derived(name, getattr(kd.ops, name), _unary), domain, 1) for name, domain in UNARY.items()},
    **{name: (_derived(name, getattr(kd.ops, name), _binary), domain, 2) for name, domain in BINARY.items()},
    "abs": (_derived("abs", _abs, _unary), "any", 1),
    "fma": (_derived("fma", kd.ops.fma, _ternary), "any", 3),
}


def test_every_derived_op_is_checked_here() -> None:
    assert set(OPS) | {"clip", "where"} == set(DERIVED)


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_derived_gradient_of_each_op_passes_gradcheck(name: str, gen: torch.Generator) -> None:
    op, domain, count = OPS[name]
    assert torch.autograd.gradcheck(op, tuple(_inputs(domain, count, gen)))


@kd.torch.op("kdtest_derive::clip", backward="derive")
@kd.fuse
def clip(x: kd.In[T, m, n], lo: kd.In[T, m, n], hi: kd.In[T, m, n]) -> kd.Out[T, m, n]:
    return kd.ops.clip(x, lo, hi)


def test_clip_passes_its_gradient_to_the_bound_it_took(gen: torch.Generator) -> None:
    x = (torch.randn(4, 6, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    lo = (torch.rand(4, 6, generator=gen, dtype=torch.float64) - 1.25).requires_grad_()
    hi = (torch.rand(4, 6, generator=gen, dtype=torch.float64) + 0.25).requires_grad_()
    assert torch.autograd.gradcheck(clip, (x, lo, hi))


@kd.torch.op("kdtest_derive::mixed", backward="derive")
@kd.fuse
def mixed(x: kd.In[T, m, n], y: kd.In[T, m, n], a: kd.Scalar[T]) -> kd.Out[T, m, n]:
    """A pipeline with a scalar argument, Python constants, a where and a value used twice."""
    e = kd.ops.exp(x * a - y / 2.0)
    return e * e + kd.ops.where(x > y, kd.ops.tanh(x), -y * y) + kd.ops.sqrt(y * y + 1.0)


def test_a_pipeline_with_scalars_constants_and_where_passes_gradcheck(gen: torch.Generator) -> None:
    x, y = _inputs("any", 2, gen)
    assert torch.autograd.gradcheck(lambda x, y: mixed(x, y, 0.7), (x, y))


def test_each_input_gradient_is_an_operator_of_its_own() -> None:
    assert sorted(mixed.gradients) == ["x", "y"]
    assert str(mixed.gradients["x"]) == (
        "<kd.torch.op kdtest_derive::mixed_grad_x(Tensor x, Tensor y, Scalar a, Tensor grad_out) -> Tensor>"
    )


def test_an_input_that_needs_no_gradient_gets_none(gen: torch.Generator) -> None:
    x, y = _inputs("any", 2, gen)
    y.requires_grad_(False)
    mixed(x, y, 0.7).sum().backward()
    assert x.grad is not None and y.grad is None


@kd.torch.op("kdtest_derive::relu_product", backward="derive")
@kd.fuse
def relu_product(x: kd.In[T, n], y: kd.In[T, n]) -> kd.Out[T, n]:
    return x * (x > 0) * y + kd.ops.where(kd.ops.floor(y) > 0, x, 0.0)


def test_comparisons_and_conditions_carry_no_gradient(gen: torch.Generator) -> None:
    # floor feeds only a where's condition: no gradient passes through it, so it is allowed
    x = torch.randn(20, generator=gen, dtype=torch.float64).requires_grad_()
    y = (torch.randn(20, generator=gen, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(relu_product, (x, y))


@kd.torch.op("kdtest_derive::sine", backward="derive")
@kd.fuse
def sine(x: kd.In[T, n], a: kd.Scalar[kd.float64] = 0.5) -> kd.Out[T, n]:
    return kd.ops.sin(x * a)


@pytest.mark.parametrize("given", [(), (2.0,)], ids=["default", "given"])
def test_a_scalar_left_out_takes_its_default_in_the_gradient_too(
    given: tuple[float, ...], gen: torch.Generator
) -> None:
    x = torch.randn(9, generator=gen, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: sine(x, *given), (x,))
    sine(x, *given).sum().backward()
    a = given[0] if given else 0.5
    torch.testing.assert_close(x.grad, torch.cos(x * a) * a)


@kd.torch.op("kdtest_derive::counted", backward="derive")
@kd.fuse
def counted(x: kd.In[kd.float64, n], counts: kd.In[kd.int64, n]) -> kd.Out[kd.float64, n]:
    return kd.ops.exp(x) * counts


def test_an_integer_input_gets_no_gradient(gen: torch.Generator) -> None:
    assert sorted(counted.gradients) == ["x"]
    x = torch.randn(8, generator=gen, dtype=torch.float64).requires_grad_()
    counts = torch.arange(8)
    assert torch.autograd.gradcheck(lambda x: counted(x, counts), (x,))


@kd.torch.op("kdtest_derive::affine_tanh", backward="derive")
@kd.fuse
def affine_tanh(x: kd.In[T, m, n], w: kd.In[T, n], b: kd.In[T, n]) -> kd.Out[T, m, n]:
    return kd.ops.tanh(x * kd.ops.exp(w) + b)


def test_an_input_broadcast_along_leading_axes_gets_its_gradient_summed_over_them(gen: torch.Generator) -> None:
    x, w, b = (torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in [(4, 6), (6,), (6,)])
    assert torch.autograd.gradcheck(affine_tanh, (x.requires_grad_(), w.requires_grad_(), b.requires_grad_()))


def test_a_derived_backward_runs_inside_a_compiled_graph(gen: torch.Generator) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: mixed(x, y, 0.5).square().sum(), backend="aot_eager", fullgraph=True)
    x, y = _inputs("any", 2, gen)
    compiled(x, y).backward()
    ours = (x.grad, y.grad)
    x.grad = y.grad = None
    e = torch.exp(x * 0.5 - y / 2.0)
    (e * e + torch.where(x > y, torch.tanh(x), -y * y) + torch.sqrt(y * y + 1.0)).square().sum().backward()
    torch.testing.assert_close(ours, (x.grad, y.grad))


def test_opcheck_passes_on_a_derived_operator() -> None:
    assert set(kd.torch.opcheck(mixed).values()) == {"SUCCESS"}


# --- what is refused -----------------------------------------------------------------------------


def test_an_op_without_a_rule_on_the_gradient_path_is_named() -> None:
    with pytest.raises(TorchOpError, match="kd.ops.floor .*has no derived gradient"):

        @kd.torch.op("kdtest_derive::floored", backward="derive")
        @kd.fuse
        def floored(x: kd.In[T, n]) -> kd.Out[T, n]:
            return kd.ops.floor(x) * x


def test_a_reduction_is_refused() -> None:
    with pytest.raises(TorchOpError, match="sum: backward='derive' derives elementwise pipelines"):

        @kd.torch.op("kdtest_derive::total", backward="derive")
        @kd.fuse
        def total(x: kd.In[T, m, n]) -> kd.Out[T, m]:
            return kd.ops.sum(x * x, axis=-1)


def test_an_input_that_broadcasts_along_an_axis_of_extent_1_is_refused_by_name() -> None:
    with pytest.raises(TorchOpError, match="parameter 'w' .*broadcasts against the result.*along an axis of extent 1"):

        @kd.torch.op("kdtest_derive::scaled_columns", backward="derive")
        @kd.fuse
        def scaled_columns(x: kd.In[T, m, n], w: kd.In[T, m, Literal[1]]) -> kd.Out[T, m, n]:
            return x * w


def test_a_kernel_gets_no_derived_gradient() -> None:
    @kd.kernel(grid=kd.cdiv(n, 64), block=64)
    def double(y: kd.Out[T, n], x: kd.In[T, n]) -> str:
        return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] = 2 * {x}[i];"

    with pytest.raises(TorchOpError, match="derives the gradients of a @kd.fuse function"):
        kd.torch.op("kdtest_derive::double", backward="derive")(double)


def test_backward_names_derive_or_a_function() -> None:
    with pytest.raises(TorchOpError, match="parameter 'backward' .*not 'auto'"):
        kd.torch.op("kdtest_derive::auto", declare=_unary, backward="auto")(kd.fuse(kd.ops.exp))


def test_a_refused_derivation_leaves_every_name_free() -> None:
    @kd.fuse
    def floored(x: kd.In[T, n]) -> kd.Out[T, n]:
        return kd.ops.floor(x) * x

    with pytest.raises(TorchOpError):
        kd.torch.op("kdtest_derive::refused", backward="derive")(floored)
    assert kd.torch.op("kdtest_derive::refused")(floored).gradients == {}
