"""Products with a 1-D operand as ``dot`` reductions, on CPU (the driver and cuBLAS doubles):
which reduction and stage ``A @ v``, ``v @ A``, ``v @ w`` and the allocating ``kd.blas.gemv`` /
``dot`` / ``nrm2`` take, that ``out=``/``alpha``/``beta``/``stream=`` keep cuBLAS, and the
two-operand warm path: it launches what the full path did and accepts and refuses the same calls.
The values are checked on the GPU (tests/test_vector_reductions_gpu.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from blas_double import BF16, FakeCublas
from conftest import launch_outcome as _outcome
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl import blas, ops
from kerneldsl.array.reduction import REDUCERS, Reduction
from kerneldsl.array.reduction.plan import COPY_BROADCAST
from kerneldsl.blas import np_matmul, reduced, vector
from kerneldsl.errors import BindingError, ClosedError, ShapeMismatchError, StridedArrayError
from kerneldsl.launch import fastpath
from kerneldsl.runtime import Session

SMS = 132
FLOATS = [np.float16, np.float32, np.float64] + ([BF16] if BF16 is not None else [])


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):  # type: ignore[no-untyped-def]
    yield


class Recorded:
    """The reduction calls a product made: each call's operands' shapes and strides, and its axis."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[tuple[tuple[tuple[int, ...], tuple[int, ...]], ...], Any]] = []
        self.operands: list[tuple[Any, ...]] = []

        def record(*operands: Any, axis: Any = None, out: Any = None) -> Any:
            self.calls.append((tuple((o.shape, o.strides) for o in operands), axis))
            self.operands.append(operands)
            return ops._dot(*operands, axis=axis, out=out)

        monkeypatch.setattr(reduced, "dot_reduction", record)
        monkeypatch.setattr(vector, "dot_reduction", record)

    def stage(self) -> str:
        """The stage the last recorded call runs on a 132-SM GPU."""
        step = ops._dot.strategy(*self.operands[-1], axis=self.calls[-1][1], multiprocessors=SMS)
        return step.variant.stage  # type: ignore[no-any-return]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    return Recorded(monkeypatch)


# -- which reduction, which stage --------------------------------------------------------------------


def test_a_matrix_at_a_vector_reduces_the_rows_of_the_matrix(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    a, v = fake_session.zeros((4096, 4096)), fake_session.zeros(4096)
    assert (a @ v).shape == (4096,)
    assert recorded.calls == [((((4096, 4096), (16384, 4)), ((4096,), (4,))), -1)]
    assert recorded.stage() == "rows" and lib.names() == []


def test_a_vector_at_a_matrix_reduces_the_columns_with_the_vector_as_a_column(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    v, a = fake_session.zeros(4096), fake_session.zeros((4096, 4096))
    assert (v @ a).shape == (4096,)
    ((shapes, axis),) = recorded.calls
    assert [shape for shape, _ in shapes] == [(4096, 1), (4096, 4096)] and axis == 0
    assert recorded.stage() == "columns" and lib.names() == []


def test_a_vector_at_a_vector_is_the_direct_stage_into_a_0d_array(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    v, w = fake_session.zeros(4096), fake_session.zeros(4096)
    got = v @ w
    assert got.shape == () and type(got) is type(v)
    assert recorded.calls == [((((4096,), (4,)), ((4096,), (4,))), None)] and recorded.stage() == "direct"


def test_a_transposed_matrix_at_a_vector_reduces_the_columns_of_its_base_in_place(
    fake_session: Session, recorded: Recorded
) -> None:
    base, v = fake_session.zeros((300, 200)), fake_session.zeros(300)
    assert (base.T @ v).shape == (200,)
    ((shapes, axis),) = recorded.calls
    assert shapes[1] == ((300, 200), (800, 4)) and axis == 0  # base itself, row-major
    assert recorded.stage() == "columns"


def test_a_vector_at_a_transposed_matrix_reduces_the_rows_of_its_base_in_place(
    fake_session: Session, recorded: Recorded
) -> None:
    base, v = fake_session.zeros((300, 200)), fake_session.zeros(200)
    assert (v @ base.T).shape == (300,)
    assert recorded.calls == [((((300, 200), (800, 4)), ((200,), (4,))), -1)] and recorded.stage() == "rows"


def test_a_strided_matrix_is_reduced_from_a_copy_the_variant_names(fake_session: Session, recorded: Recorded) -> None:
    a, v = fake_session.zeros((64, 96))[:, ::2], fake_session.zeros(48)
    assert (a @ v).shape == (64,)
    operands = recorded.operands[-1]
    assert ops._dot.strategy(*operands, axis=-1, multiprocessors=SMS).variant.copy == COPY_BROADCAST


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_every_real_float_dtype_keeps_its_dtype_and_half_ones_accumulate_in_float32(
    fake_session: Session, lib: FakeCublas, dtype: Any
) -> None:
    a, v = fake_session.zeros((8, 5), dtype), fake_session.zeros(5, dtype)
    assert (a @ v).dtype == dtype and (v @ v).dtype == dtype and lib.names() == []
    acc = ops._dot._plan((a, v), -1, None).acc
    assert acc == (np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def test_mixed_dtypes_take_the_general_path_and_reduce_the_promoted_operands(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    got = fake_session.zeros((4, 3), np.float32) @ fake_session.zeros(3, np.float64)
    assert got.dtype == np.float64 and lib.names() == [] and len(recorded.calls) == 1


def test_the_general_path_writes_a_vector_product_into_out(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    out = fake_session.zeros(4)
    assert kd.matmul(fake_session.zeros((4, 3)), fake_session.zeros(3), out=out) is out
    assert lib.names() == [] and recorded.calls[-1][1] == -1


def test_a_warm_matrix_vector_product_runs_none_of_the_general_matmul_python(
    fake_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, v = fake_session.zeros((64, 32)), fake_session.zeros(32)
    for name in ("matmul", "result_of", "device_matmul"):
        monkeypatch.setattr(np_matmul, name, None)
    first, second = a @ v, a @ v
    assert first is not second and first.ptr != second.ptr


@pytest.mark.parametrize(("sa", "sb"), [((4, 1), (3,)), ((1,), (3,)), ((3,), (1, 4)), ((3,), (4,))])
def test_extents_a_reduction_would_broadcast_are_refused_as_numpy_does(
    fake_session: Session, sa: tuple[int, ...], sb: tuple[int, ...]
) -> None:
    with pytest.raises(ShapeMismatchError, match="mismatch in its core dimension 0"):
        fake_session.zeros(sa) @ fake_session.zeros(sb)


def test_integer_vector_products_are_still_refused(fake_session: Session) -> None:
    with pytest.raises(BindingError, match="not supported"):
        fake_session.zeros((3, 2), np.int32) @ fake_session.zeros(2, np.int32)


def test_a_closed_operand_is_refused_warm_as_cold(fake_session: Session) -> None:
    a, v = fake_session.zeros((16, 8)), fake_session.zeros(8)
    a @ v
    v.close()
    with pytest.raises(ClosedError):
        a @ v


# -- loads: the matrix and the vector in 16-byte vectors ----------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "axis", "stage"),
    [
        (((4096, 4096), (4096,)), -1, "rows"),
        (((4096, 4096), (1, 4096)), 1, "rows"),
        (((4096, 1), (4096, 4096)), 0, "columns"),
    ],
)
def test_a_matrix_vector_reduction_loads_16_byte_vectors_of_the_matrix(
    shapes: tuple[tuple[int, ...], ...], axis: int, stage: str
) -> None:
    operands = [np.zeros(shape, np.float32) for shape in shapes]
    decisions = ops._dot.inspect(*operands, axis=axis, arch="sm_90").decisions
    assert (decisions.stage, decisions.vector_width, decisions.layout) == (stage, 4, "broadcast")


@pytest.mark.parametrize(
    ("shapes", "axis", "along", "stage"),
    [(((64, 32), (32,)), -1, (False, True), "rows"), (((64, 1), (64, 32)), 0, (True, False), "columns")],
)
def test_a_vector_along_the_reduced_axis_is_read_at_the_reduced_index(
    shapes: tuple[tuple[int, ...], ...], axis: int, along: tuple[bool, ...], stage: str
) -> None:
    geometry = ops._dot._plan([np.zeros(shape, np.float32) for shape in shapes], axis, None).geometry
    assert (geometry.along, geometry.along_stage) == (along, stage)


@pytest.mark.parametrize(
    ("shapes", "axis"),
    [(((64, 1), (64, 32)), 1), (((64, 32), (32,)), 0), (((4, 64, 32), (32,)), -1), (((64, 32), (64, 1)), 1)],
)
def test_other_broadcasts_keep_the_general_indexing(shapes: tuple[tuple[int, ...], ...], axis: int) -> None:
    operands = [np.zeros(shape, np.float32) for shape in shapes]
    assert ops._dot._plan(operands, axis, None).geometry.along == ()
    assert ops._dot.inspect(*operands, axis=axis, arch="sm_90").decisions.vector_width == 1


# -- kd.blas: allocating calls are reductions, the rest cuBLAS ---------------------------------------


@pytest.mark.parametrize("trans_a", [False, True])
def test_an_allocating_gemv_is_the_dot_reduction(
    fake_session: Session, lib: FakeCublas, recorded: Recorded, trans_a: bool
) -> None:
    a, x = fake_session.zeros((300, 200)), fake_session.zeros(300 if trans_a else 200)
    assert blas.gemv(a, x, trans_a=trans_a).shape == (200 if trans_a else 300,)
    assert recorded.stage() == ("columns" if trans_a else "rows") and lib.names() == []


def test_gemv_with_out_alpha_beta_or_a_stream_is_cublas(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    a, x = fake_session.zeros((5, 3)), fake_session.zeros(3)
    blas.gemv(a, x, out=fake_session.zeros(5))
    blas.gemv(a, x, alpha=2.0)
    blas.gemv(a, x, out=fake_session.zeros(5), beta=0.5)
    blas.gemv(a, x, stream=fake_session.stream)
    assert [n for n in lib.names() if n == "gemv"] == ["gemv"] * 4 and recorded.calls == []


def test_an_allocating_dot_and_nrm2_are_reductions_with_0d_results(
    fake_session: Session, lib: FakeCublas, recorded: Recorded
) -> None:
    x = fake_session.zeros(17)
    d, n = blas.dot(x, x), blas.nrm2(fake_session.zeros((3, 4)))
    assert (d.shape, d.dtype, n.shape, n.dtype) == ((), np.float32, (), np.float32)
    assert lib.names() == [] and len(recorded.calls) == 1


def test_dot_and_nrm2_into_out_are_cublas(fake_session: Session, lib: FakeCublas) -> None:
    x = fake_session.zeros(17)
    blas.dot(x, x, out=fake_session.empty(()))
    blas.nrm2(x, out=fake_session.empty(()))
    assert [n for n in lib.names() if n in ("dot", "nrm2")] == ["dot", "nrm2"]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: blas.gemv(s.zeros((5, 3)), s.zeros(4)),
        lambda s: blas.gemv(s.zeros((5, 3)), s.zeros(3, np.float64)),
        lambda s: blas.gemv(s.zeros((5, 3), np.float16), s.zeros(3, np.float16)),
        lambda s: blas.gemv(s.zeros((5, 6))[:, ::2], s.zeros(3)),
        lambda s: blas.gemv(s.zeros(3), s.zeros(3)),
        lambda s: blas.dot(s.zeros(3), s.zeros(4)),
        lambda s: blas.dot(s.zeros(6)[::2], s.zeros(3)),
        lambda s: blas.dot(s.zeros((3, 1)), s.zeros((3, 1))),
        lambda s: blas.nrm2(s.zeros(6)[::2]),
        lambda s: blas.nrm2(s.zeros(3, np.float16)),
    ],
    ids=[
        "gemv extents",
        "gemv dtypes",
        "gemv float16",
        "gemv strided",
        "gemv 1-D a",
        "dot extents",
        "dot strided",
        "dot 2-D",
        "nrm2 strided",
        "nrm2 float16",
    ],
)
def test_allocating_blas_calls_keep_their_errors(
    fake_session: Session, lib: FakeCublas, call: Callable[[Session], Any]
) -> None:
    with pytest.raises((BindingError, ShapeMismatchError, StridedArrayError)):
        call(fake_session)
    assert lib.names() == []


def _blas_calls(s: Session) -> dict[str, Callable[[], Any]]:
    a, x, y = s.zeros((6, 4)), s.zeros(4), s.zeros(6)
    closed = s.zeros(4)
    closed.close()
    other = kd.Session(0).zeros(4)
    return {
        "gemv": lambda: blas.gemv(a, x),
        "gemv trans_a": lambda: blas.gemv(a, y, trans_a=True),
        "gemv of a closed x": lambda: blas.gemv(a, closed),
        "gemv of another session's x": lambda: blas.gemv(a, other),
        "gemv of a numpy x": lambda: blas.gemv(a, np.zeros(4, np.float32)),
        "gemv of mismatched extents": lambda: blas.gemv(a, y),
        "dot": lambda: blas.dot(x, x),
        "dot of a closed y": lambda: blas.dot(x, closed),
        "dot of another session's y": lambda: blas.dot(x, other),
        "nrm2": lambda: blas.nrm2(a),
        "nrm2 of a closed x": lambda: blas.nrm2(closed),
    }


@pytest.mark.parametrize(
    "name",
    [
        "gemv",
        "gemv trans_a",
        "gemv of a closed x",
        "gemv of another session's x",
        "gemv of a numpy x",
        "gemv of mismatched extents",
        "dot",
        "dot of a closed y",
        "dot of another session's y",
        "nrm2",
        "nrm2 of a closed x",
    ],
)
def test_the_lean_blas_checks_accept_and_refuse_what_the_full_checks_do(
    drv: FakeDriver, lib: FakeCublas, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    call = _blas_calls(Session(0))[name]
    lean = _outcome(drv, call)
    for check in ("_lean_gemv", "_lean_dot", "_lean_nrm2"):
        monkeypatch.setattr(vector, check, lambda *args: False)
    assert _outcome(drv, call) == lean and lib.names() == []


# -- the warm path of a reduction with two operands --------------------------------------------------


def _dot() -> Reduction:
    return Reduction(REDUCERS["dot"], map=ops.multiply, operands=2)


CASES: dict[str, Callable[[Any], tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "rows": lambda s: ((s.zeros((64, 1024)), s.zeros(1024)), {"axis": -1}),
    "columns": lambda s: ((s.zeros((1024, 1)), s.zeros((1024, 64))), {"axis": 0}),
    "direct": lambda s: ((s.zeros(4096), s.zeros(4096)), {}),
    "split rows": lambda s: ((s.zeros((16, 1 << 16)), s.zeros(1 << 16)), {"axis": 1}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_second_two_operand_call_takes_the_warm_entry_and_launches_what_the_first_did(
    drv: FakeDriver, case: str
) -> None:
    operands, kwargs = CASES[case](kd.Session(0))
    r = _dot()
    first = _outcome(drv, lambda: r(*operands, **kwargs))
    assert len(r._warm) == 1
    assert _outcome(drv, lambda: r(*operands, **kwargs)) == first


@pytest.mark.skipif(not fastpath.ENABLED, reason="the C launch path is off")
@pytest.mark.parametrize("case", list(CASES))
def test_a_warm_two_operand_reduction_launches_from_c(drv: FakeDriver, case: str) -> None:
    operands, kwargs = CASES[case](kd.Session(0))
    r = _dot()
    first = _outcome(drv, lambda: r(*operands, **kwargs))
    r(*operands, **kwargs)  # the warm entry's first call: through the adapter, then it has a C entry
    before = drv.c_launches
    assert _outcome(drv, lambda: r(*operands, **kwargs)) == first and drv.c_launches == before + 1


def test_one_array_as_both_operands_has_a_warm_entry(drv: FakeDriver) -> None:
    x = kd.Session(0).zeros(4096)
    r = _dot()
    first = _outcome(drv, lambda: r(x, x))
    assert len(r._warm) == 1 and _outcome(drv, lambda: r(x, x)) == first


def _calls(s: Any) -> dict[str, Callable[[Reduction], Any]]:
    a, v, w = s.zeros((64, 96)), s.zeros(96), s.zeros(64)
    out, wrong = s.zeros(64), s.zeros(63)
    closed = s.zeros(96)
    closed.close()
    foreign = kd.Session(0).zeros(96)
    return {
        "rows": lambda r: r(a, v, axis=-1),
        "columns": lambda r: r(w.reshape(64, 1), a, axis=0),
        "direct": lambda r: r(v, v),
        "out": lambda r: r(a, v, axis=1, out=out),
        "strided second operand": lambda r: r(a, a[0, ::-1], axis=-1),
        "numpy second operand": lambda r: r(a, np.zeros(96, np.float32), axis=-1),
        "one operand": lambda r: r(a, axis=0),
        "three operands": lambda r: r(a, v, v, axis=0),
        "extents that do not broadcast": lambda r: r(a, w, axis=-1),
        "axis True": lambda r: r(a, v, axis=True),
        "out of a wrong shape": lambda r: r(a, v, axis=1, out=wrong),
        "second operand closed": lambda r: r(a, closed, axis=-1),
        "second operand of another session": lambda r: r(a, foreign, axis=-1),
    }


CALL_NAMES = [
    "rows",
    "columns",
    "direct",
    "out",
    "strided second operand",
    "numpy second operand",
    "one operand",
    "three operands",
    "extents that do not broadcast",
    "axis True",
    "out of a wrong shape",
    "second operand closed",
    "second operand of another session",
]
WARM = {"rows", "columns", "direct", "out"}


@pytest.mark.parametrize("name", CALL_NAMES)
def test_the_warm_and_the_full_path_accept_and_refuse_the_same_two_operand_calls(drv: FakeDriver, name: str) -> None:
    call = _calls(kd.Session(0))[name]
    full = _dot()
    cold = _outcome(drv, lambda: call(full))
    full._warm.clear()
    assert _outcome(drv, lambda: call(full)) == cold  # the full path again
    warm = _dot()
    if cold[0] == "ok":
        call(warm)  # makes the warm entry, where the call has one
    assert _outcome(drv, lambda: call(warm)) == cold
    assert len(warm._warm) == (1 if name in WARM else 0)


def test_an_operand_closed_after_its_two_operand_entry_was_made_is_refused_as_on_the_full_path(
    drv: FakeDriver,
) -> None:
    s = kd.Session(0)
    a, v = s.zeros((64, 96)), s.zeros(96)
    r = _dot()
    r(a, v, axis=-1)
    v.close()
    warm = _outcome(drv, lambda: r(a, v, axis=-1))
    r._warm.clear()
    assert warm[0] == "error" and _outcome(drv, lambda: r(a, v, axis=-1)) == warm
