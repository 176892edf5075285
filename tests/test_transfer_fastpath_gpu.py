"""The warm host copies (``runtime.host_copies``) on a real GPU: numpy -> device -> numpy is
bit-exact for every size and dtype, takes any numpy layout, and a download after kernels sees
what they wrote. Random bytes make the data (NaN payloads and signed zeros included), so equal
bytes are the only pass."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_threads

import kerneldsl as kd
from kerneldsl.dtypes import all_element_types
from kerneldsl.launch import fastpath
from kerneldsl.runtime import pinned_pipeline

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not fastpath.ENABLED, reason="kerneldsl._fastlaunch was not built"),
]

SIZES = [0, 1, 1023, 1 << 16, (1 << 20) + 3]
DTYPES = [et.numpy for et in all_element_types().values() if et.kind != "c"]


def random_array(shape: int | tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, size).astype(np.bool_).reshape(shape)
    raw = rng.integers(0, 256, size * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def test_the_c_path_copies_on_this_driver(device_session: kd.Session) -> None:
    kd.ops.negative(kd.zeros(4, session=device_session))  # imports the C path's home
    assert device_session.native_allocator().copies


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dt: dt.name)
def test_a_roundtrip_is_bit_exact(device_session: kd.Session, n: int, dtype: np.dtype) -> None:
    x = random_array(n, dtype, seed=n)
    back = kd.asarray(x, session=device_session).to_host()
    assert back.dtype == x.dtype and back.shape == x.shape and back.tobytes() == x.tobytes()


@pytest.mark.parametrize(
    "layout",
    [
        lambda x: x[::3],
        lambda x: x.reshape(64, -1).T,
        lambda x: x[::-1],
        lambda x: x.reshape(8, 8, -1)[:, 1:5, ::2],
    ],
    ids=["step", "transposed", "reversed", "sliced 3-d"],
)
def test_any_numpy_layout_arrives_as_its_c_order_copy(device_session: kd.Session, layout) -> None:
    x = layout(random_array(64 * 96, np.dtype(np.float32), seed=3))
    back = kd.asarray(x, session=device_session).to_host()
    assert back.shape == x.shape and back.tobytes() == np.ascontiguousarray(x).tobytes()


@pytest.mark.parametrize("n", [(2 << 20) + 1, (5 << 20) + 7], ids=["8 MiB + 4 B", "20 MiB + 28 B"])
def test_a_pipelined_roundtrip_is_bit_exact(
    device_session: kd.Session, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pinned_pipeline, "UPLOAD_MIN_BYTES", 8 << 20)  # the pipeline at sizes a test can move
    monkeypatch.setattr(pinned_pipeline, "DOWNLOAD_MIN_BYTES", 8 << 20)
    x = random_array(n, np.dtype(np.float32), seed=n)
    back = np.empty_like(x)
    kd.asarray(x, session=device_session).copy_to_host(back)
    assert back.tobytes() == x.tobytes()


def test_a_download_after_kernels_sees_their_result(device_session: kd.Session) -> None:
    x = np.random.default_rng(5).random(1 << 22, dtype=np.float32)
    y = kd.asarray(x, session=device_session)
    for _ in range(16):  # enough queued work that a copy not ordered after it reads stale data
        y = y + 1
    want = x
    for _ in range(16):
        want = want + np.float32(1)
    assert np.array_equal(y.to_host(), want)


def test_an_upload_is_ordered_before_the_next_kernel(device_session: kd.Session) -> None:
    for seed in range(4):
        x = np.random.default_rng(seed).random((1 << 16) + 7, dtype=np.float32)
        assert np.array_equal((kd.asarray(x, session=device_session) * 2).to_host(), x * 2)


def test_a_copy_into_a_host_array_fills_it(device_session: kd.Session) -> None:
    x = random_array((33, 65), np.dtype(np.int64), seed=7)
    out = np.full_like(x, -1)
    assert kd.asarray(x, session=device_session).copy_to_host(out) is out and np.array_equal(out, x)


@pytest.mark.parametrize("n", [1023, (3 << 20) + 5], ids=["direct", "pipelined"])
def test_an_overwrite_from_the_host_lands_bit_exact(device_session: kd.Session, n: int) -> None:
    x = random_array(n, np.dtype(np.float32), seed=n + 1)
    a = kd.asarray(np.zeros_like(x), session=device_session)
    a.copy_from_host(x)
    assert a.to_host().tobytes() == x.tobytes()


def test_an_overwrite_of_a_strided_view_writes_only_its_elements(device_session: kd.Session) -> None:
    a = kd.asarray(np.zeros((6, 10), np.int32), session=device_session)
    part = random_array((3, 10), np.dtype(np.int32), seed=13)
    a[::2].copy_from_host(part)
    want = np.zeros((6, 10), np.int32)
    want[::2] = part
    assert np.array_equal(a.to_host(), want)


def test_pinned_host_memory_round_trips(device_session: kd.Session) -> None:
    pinned = device_session.pinned_empty(1 << 20, np.float32)
    x = np.random.default_rng(9).random(1 << 20, dtype=np.float32)
    pinned.array[:] = x
    a = kd.asarray(pinned.array, session=device_session)
    back = device_session.pinned_empty(1 << 20, np.float32)
    a.copy_to_host(back.array)
    assert np.array_equal(back.array, x) and np.array_equal(a.to_host(), x)


def test_a_strided_device_view_downloads_its_elements(device_session: kd.Session) -> None:
    # finite values: a view is gathered by a copy kernel, which (as any 16-bit float op) keeps a
    # NaN's sign but not its payload; random bytes would hold such NaNs
    x = np.random.default_rng(11).standard_normal((48, 40)).astype(np.float16)
    a = kd.asarray(x, session=device_session)
    assert a[::2, 3:].to_host().tobytes() == np.ascontiguousarray(x[::2, 3:]).tobytes()


def test_threads_round_trip_on_one_session_at_once(device_session: kd.Session) -> None:
    def work(k: int) -> None:
        for i in range(50):
            x = random_array(1000 + 37 * k + i, np.dtype(np.float64), seed=100 * k + i)
            assert kd.asarray(x, session=device_session).to_host().tobytes() == x.tobytes()

    in_threads(work)
