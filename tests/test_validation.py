"""Everything that reaches generated Python or CUDA is validated to a plain type and a whitelisted
form first: each test reproduces an input that once injected text or silently changed meaning."""

from __future__ import annotations

import builtins
import inspect
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import installed_driver
from driver_double import FakeDriver

import kerneldsl as kd
from kerneldsl.array.elementwise import Elementwise
from kerneldsl.array.kernels import make_kernel
from kerneldsl.errors import BindingError, DeclarationError
from kerneldsl.jit.codegen import Generated, GeneratedBody, generate
from kerneldsl.jit.signature import Expr

PAYLOAD = "__import__('os').getpid()"


class EvilInt(int):
    """An int that spells itself as code."""

    def __str__(self) -> str:
        return PAYLOAD

    __repr__ = __str__


class EvilStr(str):
    """A str that renders as code through ``str()``."""

    def __str__(self) -> str:
        return PAYLOAD


class FakeDeviceArray:
    """Anything with ``ptr``, ``shape`` and ``dtype`` binds like a device array."""

    def __init__(self, shape: tuple[Any, ...]) -> None:
        self.ptr = 0
        self.shape = shape
        self.dtype = np.dtype(np.float32)


def declare(func: Callable[..., str], **options: Any) -> kd.Kernel:
    options.setdefault("grid", 1)
    options.setdefault("block", 1)
    return kd.kernel(**options)(func)


def generated(kernel: kd.Kernel, *args: Any, **consts: Any) -> Generated:
    return generate(kernel.specialize(*args, arch="sm_90", **consts), kernel.body)


def assert_no_payload(g: Generated) -> None:
    assert "getpid" not in g.adapter_source
    assert "getpid" not in g.cuda_source


# --- 1. kernel names ------------------------------------------------------------------------------------


def test_kernel_name_injecting_a_statement_is_refused_at_decoration() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    k.__name__ = "k\nbuiltins_flag = __import__('builtins').__setattr__('KD_INJECTED', True)\n"
    with pytest.raises(DeclarationError, match="not an identifier"):
        declare(k)
    assert not hasattr(builtins, "KD_INJECTED")


@pytest.mark.parametrize("name", ["k\n", "kérnel", "k-1", "1k", ""])
def test_kernel_name_must_be_an_ascii_identifier(name: str) -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    k.__name__ = name
    with pytest.raises(DeclarationError) as info:
        declare(k)
    assert info.value.kernel == name


def test_str_subclass_kernel_name_is_stored_as_a_plain_str() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    k.__name__ = EvilStr("k")
    assert type(declare(k).signature.name) is str


def test_generated_kernels_sanitize_their_names_into_identifiers() -> None:
    def body(proxies: dict[str, Any]) -> GeneratedBody:
        raise AssertionError("not generated")

    kernel = make_kernel("<lambda>.sum-rows", [("x", kd.In["float32", "n"])], body)
    assert kernel.signature.name == "lambda__sum_rows"


# --- 2. int subclasses and hand-built expressions --------------------------------------------------------


def test_int_subclass_launch_dimension_renders_as_a_plain_int() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    g = generated(declare(k, grid=EvilInt(4), shared=EvilInt(8)), np.ones(4, np.float32))
    assert_no_payload(g)
    assert "grid = (4, 1, 1, )" in g.adapter_source and "shared = 8" in g.adapter_source


def test_int_subclass_fixed_extent_renders_as_a_plain_int() -> None:
    def k(x: kd.In["float32", ("n", EvilInt(4))]) -> str:
        return ""

    kernel = declare(k)
    assert type(kernel.signature.arrays[0].shape[1]) is int
    assert_no_payload(generated(kernel, np.ones((2, 4), np.float32)))


def test_int_subclass_constant_renders_as_a_plain_int() -> None:
    def k(x: kd.In["float32", "n"], C: kd.Const[int]) -> str:
        return ""

    g = generated(declare(k, grid="C"), np.ones(4, np.float32), C=EvilInt(3))
    assert_no_payload(g)
    assert "grid = (3, 1, 1, )" in g.adapter_source


def test_int_subclass_constant_default_is_stored_as_a_plain_int() -> None:
    def k(x: kd.In["float32", "n"], C: kd.Const[int, EvilInt(3)]) -> str:
        return ""

    assert type(declare(k).signature.consts[0].default) is int


def test_int_subclass_specialized_extent_renders_as_a_plain_int() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    g = generated(declare(k, grid="n", specialize=("n",)), FakeDeviceArray((EvilInt(8),)))
    assert_no_payload(g)
    assert "grid = (8, 1, 1, )" in g.adapter_source


def test_hand_built_int_expression_holds_a_plain_int() -> None:
    assert type(Expr("int", (EvilInt(3),)).args[0]) is int


def test_hand_built_expression_with_an_unknown_op_is_refused() -> None:
    with pytest.raises(TypeError):
        Expr(PAYLOAD, (Expr("int", (1,)), Expr("int", (2,))))


def test_hand_built_symbol_with_code_is_refused() -> None:
    with pytest.raises(TypeError, match="not an identifier"):
        Expr("sym", (f"n) + {PAYLOAD} + (n",))


def test_hand_built_expression_with_raw_operands_is_refused() -> None:
    with pytest.raises(TypeError):
        Expr("add", (1, PAYLOAD))


def test_hand_built_int_expression_of_a_str_is_refused() -> None:
    with pytest.raises(TypeError, match="must be an int"):
        Expr("int", (PAYLOAD,))


def test_str_subclass_shape_symbol_is_stored_as_a_plain_str() -> None:
    def k(x: kd.In["float32", EvilStr("n")]) -> str:
        return ""

    kernel = declare(k, specialize=(EvilStr("n"),))
    assert type(kernel.signature.arrays[0].shape[0]) is str
    assert type(kernel.signature.specialize[0]) is str
    assert_no_payload(generated(kernel, np.ones(4, np.float32)))


# --- 3. identifiers match in full -------------------------------------------------------------------------


def test_shape_symbol_with_a_trailing_newline_is_refused() -> None:
    def k(x: kd.In["float32", "n\n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="not an identifier"):
        declare(k)


def test_dtype_variable_with_a_trailing_newline_is_refused() -> None:
    def k(x: kd.In["T\n", "n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="not an identifier"):
        declare(k)


def test_launch_symbol_with_a_trailing_newline_is_refused() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="not an identifier"):
        declare(k, grid="n\n")


def test_non_ascii_parameter_name_is_refused() -> None:
    def k(**kwargs: Any) -> str:
        return ""

    k.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("xé", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kd.In["float32", "n"])]
    )
    with pytest.raises(DeclarationError, match="not an identifier"):
        declare(k)


def test_non_ascii_elementwise_operand_name_is_refused() -> None:
    def f(**kwargs: Any) -> str:
        return "0"

    f.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("xé", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kd.In["float32"])],
        return_annotation=kd.Out["float32"],
    )
    with pytest.raises(DeclarationError, match="not an ASCII identifier"):
        Elementwise(f)


# --- 4. launch dimensions take int constants only ---------------------------------------------------------


def test_float_constant_in_a_launch_dimension_is_refused_at_decoration() -> None:
    def k(x: kd.In["float32", "n"], S: kd.Const[float] = math.nan) -> str:
        return ""

    with pytest.raises(DeclarationError, match="shared uses constant 'S' of type float") as info:
        declare(k, shared="S")
    assert info.value.param == "S"


def test_bool_constant_in_a_launch_dimension_is_refused_at_decoration() -> None:
    def k(x: kd.In["float32", "n"], B: kd.Const[bool] = True) -> str:
        return ""

    with pytest.raises(DeclarationError, match="grid uses constant 'B' of type bool"):
        declare(k, grid=kd.cdiv("n", "B"))


# --- 5. integers C cannot hold ----------------------------------------------------------------------------


def int_const_kernel() -> kd.Kernel:
    def k(x: kd.In["float32", "n"], C: kd.Const[int]) -> str:
        return ""

    return declare(k)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1])
def test_int_constant_outside_int64_is_refused_at_binding(value: int) -> None:
    with pytest.raises(BindingError, match=r"range of a long long, \[-2\*\*63, 2\*\*63 - 1\]") as info:
        int_const_kernel().specialize(np.ones(4, np.float32), C=value, arch="sm_90")
    assert info.value.param == "C"


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63)])
def test_int_constant_at_the_int64_limits_binds(value: int) -> None:
    spec = int_const_kernel().specialize(np.ones(4, np.float32), C=value, arch="sm_90")
    assert spec.consts == (("C", value),)


def test_int_constant_default_outside_int64_is_refused_at_decoration() -> None:
    def k(x: kd.In["float32", "n"], C: kd.Const[int] = 2**64) -> str:
        return ""

    with pytest.raises(DeclarationError, match="range of a long long"):
        declare(k)


def test_fixed_extent_beyond_int64_is_refused_at_decoration() -> None:
    def k(x: kd.In["float32", 2**63]) -> str:
        return ""

    with pytest.raises(DeclarationError, match="int64 range"):
        declare(k)


def test_specialized_extent_beyond_int64_is_refused_at_binding() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    kernel = declare(k, specialize=("n",))
    with pytest.raises(BindingError, match=r"axis 0 \(n\) is 9223372036854775808, beyond 2\*\*63 - 1") as info:
        kernel.specialize(FakeDeviceArray((2**63,)), arch="sm_90")
    assert info.value.param == "x"


# --- 6. float constants are keyed by their bits -----------------------------------------------------------


@kd.kernel(grid=1, block=1)
def fill(out: kd.Out[kd.float64, "n"], C: kd.Const[float]) -> str:
    return f"{out}[0] = C;"


def test_negative_zero_constant_is_another_specialization_than_zero() -> None:
    zero = fill.specialize(np.zeros(1), C=0.0, arch="sm_90")
    assert fill.specialize(np.zeros(1), C=-0.0, arch="sm_90") != zero


def test_nan_constant_specialization_equals_another_nan() -> None:
    a = fill.specialize(np.zeros(1), C=float("nan"), arch="sm_90")
    b = fill.specialize(np.zeros(1), C=float("nan"), arch="sm_90")
    assert a == b and hash(a) == hash(b)


@pytest.fixture
def drv(isolated_cache: None) -> Iterator[FakeDriver]:
    fill._builds.clear()
    with installed_driver(FakeDriver(), fill) as fake:
        yield fake
    fill._builds.clear()


def test_nan_constant_calls_build_and_load_once(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        out = s.zeros(1, np.float64)
        for _ in range(5):
            fill(out, C=float("nan"))
    assert len(fill._builds) == 1
    assert drv.calls.count("cuModuleLoadData") == 1


def test_negative_zero_constant_call_does_not_reuse_the_zero_build(drv: FakeDriver) -> None:
    with kd.Session(0) as s:
        out = s.zeros(1, np.float64)
        fill(out, C=0.0)
        fill(out, C=-0.0)
    assert [math.copysign(1.0, dict(spec.consts)["C"]) for spec, _ in fill._builds] == [1.0, -1.0]


def test_a_bool_constant_call_does_not_reuse_an_int_binding(drv: FakeDriver) -> None:
    @kd.kernel(grid=1, block=1)
    def flagged(y: kd.Out[kd.float32, "n"], C: kd.Const[int] = 0):
        return f"{y}[0] = C;"

    with kd.Session(0) as s:
        y = s.zeros(4, np.float32)
        flagged(y, C=1)
        with pytest.raises(BindingError, match="C"):
            flagged(y, C=True)


def test_a_fused_function_with_a_non_ascii_name_gets_an_ascii_kernel_name() -> None:
    def café(x):
        return x * 2

    build = kd.fuse(café).inspect(np.ones(4, np.float32), arch="sm_90")
    assert build.generated.entry.isascii() and build.cubin
