"""Code generation: rendered CUDA and host-adapter sources against golden files, and the adapter's behaviour.

Golden files live in ``tests/golden/``. After an intended change to the templates or to code
generation, rewrite them with ``KERNELDSL_UPDATE_GOLDEN=1 python -m pytest tests/test_codegen.py``
and review the diff. The sources' ``#line`` directives name this file by its absolute path and
its lines; the golden files hold it as ``THIS_FILE`` and each line counted from the first
kernel's decorator (``+N``), so they hold in any checkout and after an edit above the kernels.
"""

import inspect
import os
import re
import struct
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import AliasingError, BindingError, DeclarationError, ShapeMismatchError
from kerneldsl.jit.codegen import SLOT_BYTES, Generated, generate
from kerneldsl.jit.prelude import COMPLEX_FUNCTIONS, RANDOM_HELPERS
from kerneldsl.jit.specialize import bind_declared
from kerneldsl.launch.bound import ADAPTER_RUNTIME

GOLDEN = Path(__file__).parent / "golden"
THIS_FILE = __file__
UPDATE = os.environ.get("KERNELDSL_UPDATE_GOLDEN") == "1"


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def saxpy(y: kd.InOut["T", "n"], x: kd.In["T", "n"], alpha: kd.Scalar["T"]) -> str:
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {y}[i] = {alpha} * {x}[i] + {y}[i];
    """


@kd.kernel(grid=(kd.cdiv("n", 16), kd.cdiv("m", 16)), block=(16, 16))
def scale_rows(
    out: kd.Out["float32", ("m", "n")],
    a: kd.In["float32", ("m", "n")],
    w: kd.In["float32", (4,)],
    s: kd.Scalar["int32"],
    EPS: kd.Const[float, 1e-6],
    TILE: kd.Const[int] = 16,
    RELU: kd.Const[bool] = True,
) -> str:
    return f"""
    index_t col = blockIdx.x * blockDim.x + threadIdx.x;
    index_t row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {{
        float v = {a}[row * {a.strides[0]} + col] * {w}[row % 4] * {s} + (float)EPS + (float)TILE * 0.0f;
        if (RELU && v < 0.0f) v = 0.0f;
        {out}[row * {out.strides[0]} + col] = v;
    }}
    """


@kd.kernel(grid=kd.cdiv("n", 128), block=128, specialize=("n",))
def mask_half(
    out: kd.Out["float16", "n"], x: kd.In["float16", "n"], keep: kd.In["bool", "n"], fill: kd.Scalar["float16"]
) -> str:
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = {keep}[i] ? {x}[i] : {fill};
    """


def _saxpy() -> Generated:
    spec = saxpy.specialize(np.ones(10, np.float32), np.ones(10, np.float32), 2.0, arch="sm_90")
    return generate(spec, saxpy.body)


def _scale_rows() -> Generated:
    f = np.ones((3, 5), np.float32)
    spec = scale_rows.specialize(f, f, np.ones(4, np.float32), 2, arch="sm_80", EPS=0.5)
    return generate(spec, scale_rows.body)


def _mask_half() -> Generated:
    h = np.ones(1000, np.float16)
    spec = mask_half.specialize(h, h, np.ones(1000, bool), np.float16(0.5), arch="sm_90")
    return generate(spec, mask_half.body)


CASES = {"saxpy_float32": _saxpy, "scale_rows_2d_consts": _scale_rows, "mask_half_specialized": _mask_half}


@pytest.fixture(scope="module")
def generated() -> dict[str, Generated]:
    return {name: make() for name, make in CASES.items()}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    start = saxpy.body.__code__.co_firstlineno
    directive = re.compile(rf'^#line (\d+) "{re.escape(THIS_FILE)}"$', re.M)
    text = directive.sub(lambda m: f'#line +{int(m.group(1)) - start} "THIS_FILE"', text)
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing; create it with KERNELDSL_UPDATE_GOLDEN=1"
    expected = path.read_text()
    assert text == expected, f"{name} differs from its golden file; if intended, rerun with KERNELDSL_UPDATE_GOLDEN=1"


# --- golden files -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_source_matches_golden(generated: dict[str, Generated], case: str) -> None:
    check_golden(f"{case}.cu", generated[case].cuda_source)


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_adapter_source_matches_golden(generated: dict[str, Generated], case: str) -> None:
    check_golden(f"{case}_adapter.py.txt", generated[case].adapter_source)


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_adapter_compiles_as_python(generated: dict[str, Generated], case: str) -> None:
    code = compile(generated[case].adapter_source, f"<adapter {case}>", "exec")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert callable(namespace["make_launch"](ADAPTER_RUNTIME, FakeSession(), "fn", bytearray(8), 0))


def test_rendering_is_deterministic() -> None:
    a, b = _scale_rows(), _scale_rows()
    assert (a.cuda_source, a.adapter_source) == (b.cuda_source, b.adapter_source)


# --- what the sources contain ---------------------------------------------------------------------------


def test_saxpy_signature_in_cuda_source(generated: dict[str, Generated]) -> None:
    src = generated["saxpy_float32"].cuda_source
    assert 'extern "C" __global__ void kd_saxpy(' in src
    assert "float* __restrict__ y," in src
    assert "const float* __restrict__ x," in src
    assert "typedef float T;" in src
    assert "typedef int index_t;" in src


def test_body_follows_a_line_marker_naming_this_file(generated: dict[str, Generated]) -> None:
    src = generated["saxpy_float32"].cuda_source.splitlines()
    lines, first = inspect.getsourcelines(saxpy.body)
    at = first + next(i for i, text in enumerate(lines) if "index_t i =" in text)
    marker = src.index(f'#line {at} "{THIS_FILE}"')
    assert src[marker + 2].strip() == "if (i < n) y[i] = alpha * x[i] + y[i];"


def test_constants_are_exact_constexpr_literals(generated: dict[str, Generated]) -> None:
    src = generated["scale_rows_2d_consts"].cuda_source
    assert "constexpr double EPS = 0x1.0000000000000p-1;" in src
    assert "constexpr long long TILE = 16LL;" in src
    assert "constexpr bool RELU = true;" in src


def test_specialized_symbol_is_a_constant_not_a_parameter(generated: dict[str, Generated]) -> None:
    g = generated["mask_half_specialized"]
    assert "constexpr index_t n = 1000;" in g.cuda_source
    assert "n" not in dict(g.abi)
    assert "struct __align__(2) kd_half" in g.cuda_source


def test_half_type_is_only_emitted_when_used(generated: dict[str, Generated]) -> None:
    assert "kd_half" not in generated["saxpy_float32"].cuda_source


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def noise(out: kd.Out["float32", "n"], seed: kd.Scalar["uint64"]) -> str:
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = kd_uniform_float(kd_philox({seed}, 0, i).x);
    """


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def complex_twice(out: kd.Out["T", "n"], z: kd.In["T", "n"]) -> str:
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = {z}[i] + {z}[i];
    """


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def complex_exp(out: kd.Out["T", "n"], z: kd.In["T", "n"]) -> str:
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {out}[i] = kd_exp({z}[i]);
    """


def _source(kernel: Any, *args: Any) -> str:
    return generate(kernel.specialize(*args, arch="sm_90"), kernel.body).cuda_source


def test_the_random_generator_is_only_emitted_into_a_body_that_calls_it(generated: dict[str, Generated]) -> None:
    assert "kd_philox" not in generated["saxpy_float32"].cuda_source
    source = _source(noise, np.empty(10, np.float32), np.uint64(7))
    assert "kd_philox4x32_10(kd_philox4 c" in source and "kd_uniform_float(unsigned int w)" in source


def test_the_complex_functions_are_only_emitted_into_a_body_that_calls_one() -> None:
    z = np.ones(10, np.complex64)
    plain = _source(complex_twice, np.empty_like(z), z)
    assert "struct __align__(2 * sizeof(R)) kd_complex" in plain and "kd_exp(kd_complex<R> z)" not in plain
    assert "kd_exp(kd_complex<R> z)" in _source(complex_exp, np.empty_like(z), z)


def _defined(template: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, (Path(__file__).parents[1] / "templates" / template).read_text(), re.M))


def test_the_prelude_parts_are_switched_by_the_names_their_templates_define() -> None:
    prelude = (Path(__file__).parents[1] / "templates" / "prelude.cuh.j2").read_text()
    random_part = prelude[prelude.index("{% if uses_random %}") :]
    assert set(re.findall(r"^(?:struct (kd_\w+)|__device__ __forceinline__ .*?(kd_\w+)\()", random_part, re.M)) == {
        (name, "") if name == "kd_philox4" else ("", name) for name in RANDOM_HELPERS
    }
    public = _defined("complex_math.cuh.j2", r"^template <typename R> KD_HD [^(]*?\b(kd_\w+)\(")
    assert {name for name in public if not name.startswith("kd_cx_")} == COMPLEX_FUNCTIONS


def test_64_bit_index_uses_long_long() -> None:
    spec = bind_declared(saxpy.signature, {"T": np.float64}, {}, "sm_90", index_width=64)
    g = generate(spec, saxpy.body)
    assert "typedef long long index_t;" in g.cuda_source
    assert g.struct_format == "<QQdq"


def test_allow_alias_drops_restrict_and_alias_checks() -> None:
    @kd.kernel(grid=kd.cdiv("n", 32), block=32, allow_alias=True)
    def inplace(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
        return f"{y}[0] = {x}[0];"

    g = generate(bind_declared(inplace.signature, {}, {}, "sm_90"), inplace.body)
    assert "__restrict__" not in g.cuda_source
    assert "AliasingError(" not in g.adapter_source


@pytest.mark.parametrize("case", sorted(CASES))
def test_struct_format_has_one_8_byte_slot_per_parameter(generated: dict[str, Generated], case: str) -> None:
    g = generated[case]
    assert struct.calcsize(g.struct_format) == SLOT_BYTES * len(g.abi) == g.param_bytes
    entry = g.cuda_source.split(f"void {g.entry}(", 1)[1].split(")", 1)[0]
    declared = [line.strip().rstrip(",") for line in entry.strip().splitlines()]
    assert [d.rsplit(" ", 1)[1] for d in declared] == [name for name, _ in g.abi]


def test_abi_lists_arrays_scalars_then_symbols(generated: dict[str, Generated]) -> None:
    assert generated["scale_rows_2d_consts"].abi == (
        ("out", "float*"),
        ("a", "const float*"),
        ("w", "const float*"),
        ("s", "int"),
        ("m", "index_t"),
        ("n", "index_t"),
    )


def test_body_returning_non_string_is_rejected() -> None:
    @kd.kernel()
    def broken(x: kd.In["float32", "n"]) -> str:
        return None  # type: ignore[return-value]

    with pytest.raises(DeclarationError, match="must return the CUDA body as str"):
        generate(bind_declared(broken.signature, {}, {}, "sm_90"), broken.body)


def test_body_sees_constants_as_python_values() -> None:
    seen: dict[str, Any] = {}

    @kd.kernel()
    def probe(x: kd.In["T", ("n", 3)], s: kd.Scalar["float32"], K: kd.Const[int] = 5) -> str:
        seen.update(x=x, s=s, K=K)
        return ""

    generate(bind_declared(probe.signature, {"T": np.int16}, {}, "sm_90"), probe.body)
    assert seen["K"] == 5
    assert str(seen["x"]) == "x" and seen["x"].dtype == np.int16 and seen["x"].ctype == "short"
    assert seen["x"].shape == ("n", "3") and seen["x"].strides == ("x_stride0", "x_stride1")
    assert str(seen["s"]) == "s" and seen["s"].ctype == "float"


# --- running the adapter without a GPU ---------------------------------------------------------------------


class FakeSession:
    session_id = 1
    device = 0
    _ok = True

    def __init__(self) -> None:
        self.launches: list[tuple[Any, ...]] = []

    def _raise_unusable(self) -> None:
        raise AssertionError("a usable fake session was treated as unusable")

    def launch(self, *args: Any) -> None:
        self.launches.append(args)


class FakeArray:
    def __init__(self, session: FakeSession, ptr: int, shape: tuple[int, ...], itemsize: int = 4) -> None:
        self.session = session
        self.device = 0
        self.ptr = ptr
        self.shape = shape
        self.nbytes = int(np.prod(shape)) * itemsize
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise kd.errors.ClosedError("closed")


def make_launch(g: Generated) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(g.adapter_source, "<adapter>", "exec"), namespace)
    return lambda session, fn, buffer, params, *rest: namespace["make_launch"](
        ADAPTER_RUNTIME, session, fn, buffer, params
    )(*rest)


def run_adapter(g: Generated, *args: Any, grid: Any = None) -> tuple[FakeSession, tuple[Any, ...], bytearray]:
    session = FakeSession()
    bound = [FakeArray(session, *a) if isinstance(a, tuple) else a for a in args]
    buffer = bytearray(g.param_bytes)
    make_launch(g)(session, "fn", buffer, "params", *bound, grid, None, None, "stream")
    return session, struct.unpack(g.struct_format, buffer), buffer


def test_adapter_packs_parameters_and_computes_the_grid(generated: dict[str, Generated]) -> None:
    g = generated["scale_rows_2d_consts"]
    session, packed, _ = run_adapter(g, (0x1000, (40, 33)), (0x9000, (40, 33)), (0xF000, (4,)), 3)
    assert packed == (0x1000, 0x9000, 0xF000, 3, 40, 33)
    assert session.launches == [("fn", (3, 3, 1), (16, 16, 1), 0, "stream", "params")]


def test_adapter_rejects_a_symbol_mismatch(generated: dict[str, Generated]) -> None:
    g = generated["saxpy_float32"]
    with pytest.raises(ShapeMismatchError, match="axis 0 must be n = 8, got 9"):
        run_adapter(g, (0x1000, (8,)), (0x9000, (9,)), 1.0)


def test_adapter_rejects_a_specialized_extent_mismatch(generated: dict[str, Generated]) -> None:
    g = generated["mask_half_specialized"]
    with pytest.raises(ShapeMismatchError, match="specialized n"):
        run_adapter(g, (0x1000, (999,), 2), (0x9000, (999,), 2), (0xF000, (999,), 1), 0.5)


def test_adapter_rejects_overlapping_written_arrays(generated: dict[str, Generated]) -> None:
    g = generated["saxpy_float32"]
    with pytest.raises(AliasingError):
        run_adapter(g, (0x1000, (8,)), (0x1010, (8,)), 1.0)


def test_adapter_rejects_a_scalar_that_does_not_fit(generated: dict[str, Generated]) -> None:
    g = generated["scale_rows_2d_consts"]
    with pytest.raises(BindingError, match="does not fit"):
        run_adapter(g, (0x1000, (2, 3)), (0x9000, (2, 3)), (0xF000, (4,)), 2**40)


def test_adapter_honours_an_explicit_grid(generated: dict[str, Generated]) -> None:
    g = generated["saxpy_float32"]
    session, _, _ = run_adapter(g, (0x1000, (8,)), (0x9000, (8,)), 1.0, grid=(7, 1, 1))
    assert session.launches[0][1] == (7, 1, 1)


def test_adapter_rejects_an_array_of_another_session(generated: dict[str, Generated]) -> None:
    g = generated["saxpy_float32"]
    session = FakeSession()
    y, x = FakeArray(session, 0x1000, (8,)), FakeArray(FakeSession(), 0x9000, (8,))
    with pytest.raises(kd.errors.WrongSessionError):
        make_launch(g)(session, "fn", bytearray(g.param_bytes), "p", y, x, 1.0, None, None, None, None)


def test_adapter_runtime_supplies_every_name_the_adapter_uses() -> None:
    assert isinstance(ADAPTER_RUNTIME, types.SimpleNamespace)
    for name in ("ShapeMismatchError", "BindingError", "unusable_array", "AliasingError", "to_bfloat16_bits"):
        assert hasattr(ADAPTER_RUNTIME, name)
