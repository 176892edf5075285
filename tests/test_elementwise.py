"""Elementwise code generation on CPU: layouts, vector vs scalar path, index width, @kd.elementwise.

Every kernel here is compiled with NVRTC for sm_90 (module-scoped isolated cache).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.array.elementwise import Elementwise, layout_of
from kerneldsl.array.kernels import OperandLayout
from kerneldsl.array.program import ProgramBuilder, broadcast_shape, program_context
from kerneldsl.errors import DeclarationError, KernelCompileError

ARCH = "sm_90"


@pytest.fixture(autouse=True, scope="module")
def _cache(isolated_cache_module):
    yield


class FakeDeviceArray:
    """What binding sees of a device array, with a chosen pointer (alignment) and size."""

    def __init__(self, shape: tuple[int, ...], dtype: object, ptr: int = 1 << 20) -> None:
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.ptr = ptr
        self.size = int(np.prod(shape, dtype=np.int64))
        self.ndim = len(shape)


def test_vector_path_when_aligned_and_contiguous() -> None:
    x = np.ones(1000, np.float32)
    b = kd.ops.add.inspect(x, x, arch=ARCH)
    assert (b.decisions.layout, b.decisions.vector_width, b.index_bits) == ("flat", 4, 32)
    assert "--fmad=false" in b.options


def test_vector_width_follows_the_widest_array() -> None:
    b = kd.ops.add.inspect(np.ones(64, np.int8), np.ones(64, np.float64), arch=ARCH)
    assert b.decisions.vector_width == 2


def test_vector_ptx_uses_16_byte_accesses() -> None:
    x = np.ones(64, np.float32)
    b = kd.ops.multiply.inspect(
        x,
        x,
        arch=ARCH,
    )
    from kerneldsl.jit.compiler import build_options, compile_source

    ptx = compile_source(b.cuda_source, "v.cu", build_options(ARCH, "ptx", ("--fmad=false",)), "ptx").image.decode()
    assert "ld.global.v4.f32" in ptx and "st.global.v4.f32" in ptx


def test_scalar_path_when_a_pointer_is_misaligned() -> None:
    x = FakeDeviceArray((1000,), np.float32, ptr=(1 << 20) + 4)
    y = FakeDeviceArray((1000,), np.float32)
    b = kd.ops.add.inspect(x, y, arch=ARCH)
    assert (b.decisions.layout, b.decisions.vector_width) == ("flat", 1)


def test_64_bit_indexing_when_the_size_does_not_fit_int32() -> None:
    big = FakeDeviceArray((2**31 + 16,), np.int8)
    b = kd.ops.negative.inspect(big, out=FakeDeviceArray((2**31 + 16,), np.int8), arch=ARCH)
    assert b.index_bits == 64
    small = kd.ops.negative.inspect(FakeDeviceArray((16,), np.int8), arch=ARCH)
    assert small.index_bits == 32


def test_broadcast_layout_decomposes_offsets() -> None:
    a = np.ones((4, 5), np.float32)
    row = np.ones((5,), np.float32)
    b = kd.ops.add.inspect(a, row, arch=ARCH)
    assert (b.decisions.layout, b.decisions.vector_width) == ("broadcast", 1)
    assert b.cubin


def test_broadcast_shape_rules() -> None:
    assert broadcast_shape([(4, 1, 3), (5, 1), (3,)], "t") == (4, 5, 3)
    assert broadcast_shape([], "t") == ()
    with pytest.raises(ValueError, match="could not be broadcast together"):
        broadcast_shape([(3,), (4,)], "add")
    assert layout_of([(2, 3), None, (2, 3)], (2, 3)) == OperandLayout("flat", 2)
    assert layout_of([(2, 3), (), None], (2, 3)) == OperandLayout("flat", 2, zero_d=(1,))
    assert layout_of([(2, 3), (3,)], (2, 3)) == OperandLayout("broadcast", 2, ranks=(2, 1))
    with pytest.raises(ValueError, match="could not be broadcast"):
        kd.ops.add.inspect(np.ones(3, np.float32), np.ones(4, np.float32), arch=ARCH)


def test_out_shape_and_casting_follow_numpy() -> None:
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="out= has shape"):
        kd.ops.add.inspect(x, x, out=np.empty(4, np.float32), arch=ARCH)
    with pytest.raises(TypeError, match="same_kind"):
        kd.ops.add.inspect(x, x, out=np.empty(8, np.int32), arch=ARCH)
    b = kd.ops.add.inspect(x, x, out=np.empty(8, np.float64), arch=ARCH)
    assert b.specialization.element_type("kdout").name == "float64"


def test_half_values_are_rounded_after_every_node() -> None:
    h = np.ones(16, np.float16)
    builder = ProgramBuilder("t")
    root = builder.apply(kd.ops.add, builder.operands([h, h], "t"))
    (node,) = program_context(builder.program(root))["nodes"]
    assert (node["cctype"], node["round"]) == ("float", "kd_half")


def test_scalar_operands_are_kernel_parameters_of_the_promoted_type() -> None:
    x = np.ones(16, np.float16)
    b = kd.ops.multiply.inspect(x, 0.1, arch=ARCH)
    assert b.specialization.element_type("kdp1").name == "float16"  # NEP 50: a Python float is weak


def test_user_elementwise_axpy() -> None:
    @kd.elementwise
    def axpy(a: kd.Scalar["T"], x: kd.In["T"], y: kd.In["T"]) -> kd.Out["T"]:
        return "a * x + y"

    assert isinstance(axpy, Elementwise)
    out, loops = axpy.resolve([2.0, np.dtype(np.float32), np.dtype(np.float32)])
    assert out == np.float32 and loops == (np.float32,) * 3
    out, _ = axpy.resolve([2.0, np.dtype(np.float32), np.dtype(np.float64)])
    assert out == np.float64  # the variable binds to the promotion of its operands
    b = axpy.inspect(np.float32(2), np.ones(10, np.float32), np.ones(10, np.float32), arch=ARCH)
    assert [b.specialization.element_type(p).name for p in ("kdp0", "kdp1", "kdp2", "kdout")] == ["float32"] * 4
    assert b.cubin


def test_user_elementwise_concrete_types_and_mixed_output() -> None:
    @kd.elementwise
    def scaled(x: kd.In["int32"], s: kd.Scalar["float32"]) -> kd.Out["float32"]:
        return "x * s"

    b = scaled.inspect(np.arange(5, dtype=np.int32), 0.5, arch=ARCH)
    assert [b.specialization.element_type(p).name for p in ("kdp0", "kdp1", "kdout")] == ["int32", "float32", "float32"]


@pytest.mark.parametrize(
    "source, message",
    [
        ("def f(x) -> kd.Out['T']:\n    return 'x'", "annotate each operand"),
        ("def f(kdx: kd.In['T']) -> kd.Out['T']:\n    return 'kdx'", "reserved kd prefix"),
        ("def f(x: kd.In['T']):\n    return 'x'", "declare the result dtype"),
        ("def f(x: kd.In['T']) -> kd.Out['U']:\n    return 'x'", "bound by no operand"),
        ("def f(x: kd.In['T']) -> kd.Out['T']:\n    return 3", "expression as a str"),
        ("def f(x: kd.Out['T']) -> kd.Out['T']:\n    return 'x'", "annotate each operand"),
    ],
)
def test_user_elementwise_declaration_errors(source: str, message: str) -> None:
    namespace: dict[str, object] = {"kd": kd}
    exec(source, namespace)
    with pytest.raises(DeclarationError, match=message):
        kd.elementwise(namespace["f"])


def test_kernels_are_cached_per_program_and_layout() -> None:
    x = np.ones(32, np.float32)
    first = kd.ops.add._plan((x, x), None).kernel
    again = kd.ops.add._plan((np.ones(64, np.float32), np.ones(64, np.float32)), None).kernel
    assert first is again  # another size, same specialization: no new kernel
    other = kd.ops.add._plan((np.ones((2, 2), np.float32), x[:2]), None).kernel
    assert other is not first


def test_zero_dim_and_empty_shapes_compile() -> None:
    b = kd.ops.add.inspect(np.float32(1), np.ones((), np.float32), arch=ARCH)
    assert b.decisions.layout == "flat" and b.cubin
    empty = kd.ops.add.inspect(np.ones((0, 3), np.float32), np.ones(3, np.float32), arch=ARCH)
    assert empty.decisions.layout == "broadcast" and empty.cubin


def test_an_error_in_an_elementwise_expression_points_at_its_line_once() -> None:
    @kd.elementwise
    def broken(x: kd.In["T"]) -> kd.Out["T"]:
        return "x * undefined_name"

    line = inspect.getsourcelines(broken.__wrapped__)[1] + 2
    with pytest.raises(KernelCompileError) as info:
        broken.inspect(np.ones(8, np.float32), arch=ARCH)
    mapped = [m for m in info.value.mapped if "undefined_name" in m]
    assert len(mapped) == 1 and f"test_elementwise.py:{line}:" in mapped[0]
