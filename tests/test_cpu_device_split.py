"""The CPU device splits a kernel's body at its barriers and warp collectives: a block's threads run
as passes of a loop, each from where it waited to its next wait, instead of as fibers. A split
kernel gives what its fiber build gives (and a GPU), errors included; a body the splitter cannot
read with certainty keeps fibers (``kerneldsl/jit/host_split.py``)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.bench import cpu_kernels
from kerneldsl.errors import KernelFaultError
from kerneldsl.jit.host_split import split_kernel

BLOCK = 128


def kernel(body: str, name: str = "body") -> kd.Kernel:
    """``out`` from ``x`` (both n int32s), a block of ``BLOCK`` threads (``SPLIT_BLOCKS`` gives a
    body its own shape) for each ``BLOCK`` elements, ``body`` its text."""

    def make(out: kd.Out[kd.int32, "n"], x: kd.In[kd.int32, "n"]) -> str:
        return body

    make.__name__ = name
    block = next((shape for text, shape in SPLIT_BLOCKS.items() if SPLIT_BODIES[text] == body), BLOCK)
    return kd.kernel(grid=kd.cdiv("n", BLOCK), block=block)(make)


def source(k: kd.Kernel, n: int = 256) -> str:
    return k.inspect(np.zeros(n, np.int32), np.zeros(n, np.int32), arch="sm_90").cuda_source


def run(cpu: Any, k: kd.Kernel, x: np.ndarray) -> np.ndarray:
    out = cpu.empty(x.size, np.int32)
    k(out, cpu.to_device(x))
    return out.to_host()


def both_builds(cpu: Any, monkeypatch: pytest.MonkeyPatch, body: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's result split, and with ``KERNELDSL_HOST_SPLIT=0`` (on fibers)."""
    split = run(cpu, kernel(body, name="split_build"), x)
    monkeypatch.setenv("KERNELDSL_HOST_SPLIT", "0")
    fibers = run(cpu, kernel(body, name="fiber_build"), x)
    return split, fibers


INDEX = "index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;"

# Bodies a CUDA user writes, each with waits the splitter reads.
SPLIT_BODIES = {
    "barrier between a shared write and a neighbour's read": f"""
        __shared__ int s[{BLOCK}];
        {INDEX}
        s[threadIdx.x] = i < n ? x[i] : 0;
        __syncthreads();
        if (i < n) out[i] = s[(threadIdx.x + 1) % blockDim.x];
    """,
    "barriers in a loop with a run-time bound (a tree reduction)": f"""
        __shared__ int s[{BLOCK}];
        {INDEX}
        s[threadIdx.x] = i < n ? x[i] : 0;
        __syncthreads();
        for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {{
            if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
            __syncthreads();
        }}
        if (i < n) out[i] = s[0];
    """,
    "shuffles in a loop, then a warp-uniform branch with more": f"""
        {INDEX}
        int v = i < n ? x[i] : 0;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        int lane = threadIdx.x % 32;
        if (threadIdx.x / 32 == 1) {{
            for (int offset = 1; offset < 32; offset <<= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
        }}
        if (i < n) out[i] = v + lane;
    """,
    "votes, a ballot and a barrier's count": f"""
        {INDEX}
        const int mine = i < n ? x[i] : 0;
        unsigned int ballot = __ballot_sync(0xffffffffu, mine % 3 == 0);
        int any = __any_sync(0xffffffffu, mine > 90);
        int count = __syncthreads_count(mine % 2);
        if (i < n) out[i] = __popc(ballot) * 1000 + any * 100000 + count;
    """,
    "a partial mask: half a warp shuffles while the other half does not": f"""
        {INDEX}
        int v = i < n ? x[i] : 0;
        if ((threadIdx.x & 31) < 16) v += __shfl_down_sync(0x0000ffffu, v, 1, 16);
        else v -= 1;
        __syncwarp();
        if (i < n) out[i] = v;
    """,
    "variables of several kinds live across waits": f"""
        {INDEX}
        const int first = i < n ? x[i] : 0;
        int a[3];
        a[0] = first; a[1] = first * 2; a[2] = first * 3;
        const int* p = &x[0];
        float f = first * 0.5f;
        __syncthreads();
        int first_copy = first;
        {{ int first = 7; first_copy += first; }}
        __syncthreads();
        if (i < n) out[i] = a[0] + a[1] + a[2] + p[0] + (int)(f * 2.0f) + first_copy;
    """,
    "an early return of threads past the end, after the last barrier": f"""
        __shared__ int s[{BLOCK}];
        {INDEX}
        s[threadIdx.x] = i < n ? x[i] : 0;
        __syncthreads();
        if (i >= n) return;
        int total = 0;
        for (int k = 0; k < 4; ++k) {{
            if (k == 2) continue;
            total += s[(threadIdx.x + k) % blockDim.x];
        }}
        out[i] = total;
    """,
    "a do-while loop with a barrier and a while loop with a shuffle": f"""
        __shared__ int s[{BLOCK}];
        {INDEX}
        int v = i < n ? x[i] : 0, rounds = 0;
        do {{
            s[threadIdx.x] = v;
            __syncthreads();
            v = s[(threadIdx.x + 1) % blockDim.x] + 1;
            __syncthreads();
            ++rounds;
        }} while (rounds < 3);
        int k = 0;
        while (k < 2) {{ v += __shfl_up_sync(0xffffffffu, v, 1); ++k; }}
        if (i < n) out[i] = v;
    """,
    "a tile loop of uniform count with barriers, its tile in shared memory": f"""
        __shared__ int tile[{BLOCK}];
        int acc = 0;
        for (index_t base = (index_t)blockIdx.x * blockDim.x; base < n; base += (index_t)blockDim.x * gridDim.x) {{
            tile[threadIdx.x] = base + threadIdx.x < n ? x[base + threadIdx.x] : 0;
            __syncthreads();
            acc += tile[blockDim.x - 1 - threadIdx.x];
            __syncthreads();
        }}
        {INDEX}
        if (i < n) out[i] = acc;
    """,
    "vector values and a double across waits": f"""
        {INDEX}
        int4 q = make_int4(i, 2 * i, 3, 4);
        double h = (double)(i % 50);
        float2 f = make_float2(0.5f, 1.5f);
        __syncthreads();
        q.x += __shfl_xor_sync(0xffffffffu, q.y, 1);
        h = __shfl_down_sync(0xffffffffu, h, 2);
        __syncwarp();
        if (i < n) out[i] = q.x + q.z + q.w + (int)h + (int)(f.x + f.y);
    """,
    "the barrier reductions, warp reductions, matches and a width-8 shuffle": f"""
        {INDEX}
        const int mine = i < n ? x[i] : 0;
        int all_small = __syncthreads_and(mine < 95);
        int some_big = __syncthreads_or(mine > 98);
        unsigned int total = __reduce_add_sync(0xffffffffu, (unsigned int)mine);
        unsigned int same = __match_any_sync(0xffffffffu, mine % 4);
        int from_first = __shfl_sync(0xffffffffu, mine, 0, 8);
        if (i < n) out[i] = all_small + 2 * some_big + (int)total + __popc(same) * 10000 + from_first * 7;
    """,
    "a 2-D block: a shared tile read transposed": """
        __shared__ int tile[8][17];
        index_t i = (index_t)blockIdx.x * 128 + threadIdx.y * 16 + threadIdx.x;
        tile[threadIdx.y][threadIdx.x] = i < n ? x[i] : 0;
        __syncthreads();
        int v = tile[threadIdx.x % 8][threadIdx.y + (threadIdx.x / 8) * 8];
        if (i < n) out[i] = v;
    """,
}
SPLIT_BODIES["a wait's operands with side effects, evaluated once"] = f"""
    {INDEX}
    int k = i < n ? x[i] : 0;
    int got = __shfl_sync(0xffffffffu, k++, 3);
    __syncthreads();
    if (i < n) out[i] = got * 1000 + k;
"""
SPLIT_BODIES["an aligned shared array, and an aligned local that no wait outlives"] = f"""
    __shared__ __align__(16) int s[{BLOCK}];
    {INDEX}
    s[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    if (i < n) {{ __align__(16) int pair[2]; pair[0] = s[threadIdx.x ^ 1]; pair[1] = 1; out[i] = pair[0] + pair[1]; }}
"""
SPLIT_BLOCKS = {"a 2-D block: a shared tile read transposed": (16, 8)}


@pytest.mark.parametrize("body", list(SPLIT_BODIES.values()), ids=list(SPLIT_BODIES))
def test_a_split_kernel_gives_what_its_fiber_build_gives(cpu: Any, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    assert split_kernel(source(kernel(body))) is not None
    x = np.random.default_rng(7).integers(0, 100, 1000).astype(np.int32)
    split, fibers = both_builds(cpu, monkeypatch, body, x)
    np.testing.assert_array_equal(split, fibers)


def test_a_split_tree_reduction_sums_each_block(cpu: Any) -> None:
    x = np.arange(1000, dtype=np.int32)
    got = run(cpu, kernel(SPLIT_BODIES["barriers in a loop with a run-time bound (a tree reduction)"]), x)
    blocks = np.add.reduceat(np.pad(x, (0, 24)), np.arange(0, 1024, BLOCK))
    np.testing.assert_array_equal(got, np.repeat(blocks, BLOCK)[:1000])


@pytest.mark.parametrize(
    "name",
    ["transpose", "block_sum", "block_sum_per_element", "histogram", "threads_barriers", "threads_shuffles"],
)
def test_the_benchmarks_kernels_with_waits_are_split(name: str) -> None:
    k = getattr(cpu_kernels, name)
    if name == "transpose":
        args: tuple[Any, ...] = (np.zeros((4, 6), np.float32), np.zeros((6, 4), np.float32))
    elif name.startswith("threads"):
        args = (np.zeros(64, np.uint32), np.int32(2))
    elif name.startswith("histogram"):
        args = (np.zeros(256, np.int32), np.zeros(64, np.int32))
    else:
        args = (np.zeros(1, np.float32), np.zeros(64, np.float32))
    assert split_kernel(k.inspect(*args, arch="sm_90").cuda_source) is not None


KEEPS_FIBERS = {
    "a lambda": f"{INDEX} auto twice = [&](int v) {{ return 2 * v; }}; __syncthreads(); "
    "if (i < n) out[i] = twice(x[i]);",
    "goto": f"{INDEX} if (i >= n) goto done; __syncthreads(); out[i] = x[i]; done:;",
    "__activemask": f"{INDEX} unsigned m = __activemask(); __syncwarp(m); if (i < n) out[i] = x[i];",
    "a wait in a condition": f"{INDEX} if (__any_sync(0xffffffffu, i < n)) {{ if (i < n) out[i] = x[i]; }}",
    "a wait inside switch": f"{INDEX} switch (threadIdx.x & 1) {{ case 0: __syncwarp(0x55555555u); break; }} "
    "if (i < n) out[i] = 1;",
    "a deduced type across a wait": f"{INDEX} auto v = i < n ? x[i] : 0; __syncthreads(); if (i < n) out[i] = v;",
    "a wait in a ternary": f"{INDEX} int v = i < 10 ? __shfl_sync(0xffffffffu, 1, 0) : 2; if (i < n) out[i] = v;",
    "a reference across a wait": f"{INDEX} const int& r = x[0]; __syncthreads(); if (i < n) out[i] = r;",
    "an aligned array across a wait": f"{INDEX} __align__(16) int b[4]; b[0] = 1; __syncthreads(); "
    "if (i < n) out[i] = b[0];",
    "a declared type across a wait": f"{INDEX} decltype(i) j; j = i; __syncthreads(); if (i < n) out[i] = j;",
    "a declarator in parentheses": f"{INDEX} int b[2][4]; int (*row)[4] = b; __syncthreads(); if (i < n) out[i] = 1;",
}


@pytest.mark.parametrize("body", list(KEEPS_FIBERS.values()), ids=list(KEEPS_FIBERS))
def test_what_the_splitter_cannot_read_with_certainty_keeps_fibers(body: str) -> None:
    assert split_kernel(source(kernel(body))) is None


def test_a_body_without_waits_is_not_split() -> None:
    assert split_kernel(source(kernel(f"{INDEX} if (i < n) out[i] = x[i];"))) is None


@pytest.mark.parametrize(
    "body",
    [KEEPS_FIBERS["a lambda"], KEEPS_FIBERS["a deduced type across a wait"], KEEPS_FIBERS["a reference across a wait"]],
    ids=["lambda", "auto", "reference"],
)
def test_a_kernel_kept_on_fibers_still_runs(cpu: Any, body: str) -> None:
    x = np.arange(300, dtype=np.int32)
    expected = 2 * x if "twice" in body else (np.zeros_like(x) if "r = x[0]" in body else x)
    np.testing.assert_array_equal(run(cpu, kernel(body), x), expected)


def test_a_split_source_the_compiler_refuses_is_built_on_fibers(cpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import kerneldsl.jit.host_compile as host_compile

    monkeypatch.setattr(host_compile, "split_kernel", lambda source: source.replace("__syncthreads();", "not C++;", 1))
    body = SPLIT_BODIES["barrier between a shared write and a neighbour's read"]
    x = np.arange(200, dtype=np.int32)
    got = run(cpu, kernel(body, name="refused_split"), x)
    neighbour = np.pad(x, (0, 56)).reshape(-1, BLOCK)
    np.testing.assert_array_equal(got, np.roll(neighbour, -1, axis=1).ravel()[:200])


UNFINISHED_WAITS = {
    "a barrier threads exited before": (
        f"{INDEX} if (i >= n) return; __syncthreads(); out[i] = x[i];",
        200,
        r"block \(1,0,0\): __syncthreads at .*:\d+ is not reached by every thread of the block: threads 0-71 wait "
        r"there; threads 72-127 exited",
    ),
    "threads at a barrier and at a warp collective": (
        f"{INDEX} if (threadIdx.x / 16 == 2) __syncwarp(); else __syncthreads(); if (i < n) out[i] = 1;",
        128,
        r"no thread can proceed: threads 0-31, 48-127 wait at __syncthreads at .*; threads 32-47 wait at "
        r"__syncwarp \(mask 0xffffffff\)",
    ),
    "a collective naming a lane that exited": (
        f"{INDEX} if (threadIdx.x == 1) return; __syncwarp(); if (i < n) out[i] = 1;",
        128,
        r"thread 0: __syncwarp \(mask 0xffffffff\) at .*: lanes 0x00000002 named in the mask have exited",
    ),
}


@pytest.mark.parametrize(("body", "n", "message"), list(UNFINISHED_WAITS.values()), ids=list(UNFINISHED_WAITS))
def test_a_wait_some_threads_cannot_complete_is_an_error_naming_who_waits_where(
    cpu: Any, body: str, n: int, message: str
) -> None:
    assert split_kernel(source(kernel(body))) is not None
    with pytest.raises(KernelFaultError, match=message):
        run(cpu, kernel(body, name="unfinished"), np.arange(n, dtype=np.int32))


def test_a_trap_in_a_split_kernel_names_the_block_and_thread(cpu: Any) -> None:
    body = f"{INDEX} int q = 0; __syncthreads(); if (i < n) q = 7 / x[i]; __syncthreads(); if (i < n) out[i] = q;"
    x = np.ones(200, np.int32)
    x[70] = 0
    with pytest.raises(KernelFaultError, match=r"block \(0,0,0\) thread \(70,0,0\): integer division by zero"):
        run(cpu, kernel(body, name="divide"), x)


def test_an_assert_in_a_split_kernel_names_the_thread_and_line(cpu: Any) -> None:
    body = f"{INDEX}\n__syncthreads();\nassert(i != 77);\nif (i < n) out[i] = x[i];"
    with pytest.raises(
        KernelFaultError,
        match=r"block \(0,0,0\) thread \(77,0,0\): assertion 'i != 77' failed at "
        r"assert_line\.body:3",
    ):
        run(cpu, kernel(body, name="assert_line"), np.arange(200, dtype=np.int32))


def test_a_partial_last_warp_shuffles_over_the_lanes_the_block_has(cpu: Any) -> None:
    @kd.kernel(grid=1, block=48)
    def rotate48(out: kd.Out[kd.int32, Literal[48]]) -> str:
        return "int v = threadIdx.x; __syncthreads(); v = __shfl_down_sync(0xffffffffu, v, 1); out[threadIdx.x] = v;"

    out = cpu.empty(48, np.int32)
    rotate48(out)
    lanes = np.arange(48)
    np.testing.assert_array_equal(
        out.to_host(), np.where(lanes % 32 == 31, lanes, np.minimum(lanes + 1, np.where(lanes < 32, 31, 47)))
    )


def test_complex_values_shuffle_as_on_a_gpu(cpu: Any) -> None:
    @kd.kernel(grid=1, block=32)
    def rotate(out: kd.Out[kd.complex64, Literal[32]], x: kd.In[kd.complex64, Literal[32]]) -> str:
        return "kd_complex64 v = x[threadIdx.x]; v = __shfl_down_sync(0xffffffffu, v, 1); out[threadIdx.x] = v;"

    x = (np.arange(32) + 1j * np.arange(32, 64)).astype(np.complex64)
    out = cpu.empty(32, np.complex64)
    rotate(out, cpu.to_device(x))
    np.testing.assert_array_equal(out.to_host(), np.append(x[1:], x[31]))
