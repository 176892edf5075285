"""kerneldsl operators on CUDA tensors: ordered on ``torch.cuda.current_stream()``, no host
synchronization, captured by CUDA graphs (``torch.cuda.graph``, ``mode="reduce-overhead"``).

These need a GPU and a CUDA build of PyTorch; on the CPU device they are excluded
(``cpu_device_exclusions``), and without a CUDA torch they skip.
"""

from __future__ import annotations

from typing import NewType, TypeVar

import pytest

torch = pytest.importorskip("torch")

import kerneldsl as kd  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of PyTorch and a GPU"),
]

T = TypeVar("T")
n = NewType("n", int)
m = NewType("m", int)

SLEEP_CYCLES = 50_000_000  # tens of milliseconds of a GPU spin: long enough to expose a missed ordering


@kd.torch.op("kdtest_gpu::scale")
@kd.kernel(grid=kd.cdiv(n, 256), block=256)
def scale(y: kd.Out[T, n], x: kd.In[T, n], alpha: kd.Scalar[T]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i];
    """


@kd.torch.op("kdtest_gpu::softmax_rows")
@kd.fuse
def softmax_rows(x: kd.In[T, m, n]) -> kd.Out[T, m, n]:
    e = kd.ops.exp(x - kd.ops.max(x, axis=-1, keepdims=True))
    return e / kd.ops.sum(e, axis=-1, keepdims=True)


def test_an_op_on_cuda_tensors_returns_a_cuda_tensor() -> None:
    x = torch.randn(10_000, device="cuda")
    y = scale(x, 2.0)
    assert y.device == x.device
    torch.testing.assert_close(y, x * 2.0)


def test_the_kernel_runs_after_the_work_queued_on_torchs_current_stream() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.mul_(2)  # still queued behind the spin when the op is called
        y = scale(x, 3.0)
    side.synchronize()
    assert torch.equal(y, torch.full_like(x, 6.0))


def test_a_fused_op_is_ordered_with_torchs_current_stream() -> None:
    side = torch.cuda.Stream()
    x = torch.randn(64, 256, device="cuda")
    expected = torch.softmax(x * 2, dim=-1)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.mul_(2)
        y = softmax_rows(x)
    side.synchronize()
    torch.testing.assert_close(y, expected)


def test_a_warm_call_never_synchronizes_the_host() -> None:
    x = torch.randn(4096, device="cuda")
    scale(x, 2.0)  # the first call compiles and loads
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = scale(x, 2.0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(y, x * 2.0)


def test_a_cuda_graph_captures_and_replays_the_op() -> None:
    x = torch.randn(4096, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture, as torch asks
        scale(x, 2.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = scale(x, 2.0)
    fresh = torch.randn(4096, device="cuda")
    x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, fresh * 2.0)


def test_reduce_overhead_compiles_the_op_into_cuda_graphs() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: scale(x + 1, 0.5).sum(), mode="reduce-overhead", fullgraph=True)
    x = torch.randn(2048, device="cuda")
    for _ in range(3):  # recorded on the second call, replayed from the third
        result = compiled(x)
    torch.testing.assert_close(result, ((x + 1) * 0.5).sum())
