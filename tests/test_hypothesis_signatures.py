"""Property tests: random valid signatures parse, bind, render and pack; reserved names are refused."""

import inspect
import keyword
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kerneldsl as kd
from kerneldsl.dtypes import all_element_types, to_bfloat16_bits
from kerneldsl.errors import DeclarationError
from kerneldsl.jit.build import build
from kerneldsl.jit.codegen import SLOT_BYTES, generate
from kerneldsl.jit.signature import RESERVED_NAMES, Signature, parse_signature
from kerneldsl.jit.specialize import bind
from kerneldsl.launch.bound import ADAPTER_RUNTIME

SYMBOLS = ("n", "m", "k", "rows")
TYPE_VARS = ("T", "U")
ELEMENT_TYPES = all_element_types()
DTYPES = tuple(sorted(ELEMENT_TYPES))
DIRECTIONS = {"in": kd.In, "out": kd.Out, "inout": kd.InOut}
CONST_VALUES = {
    int: st.integers(-(2**40), 2**40),
    float: st.floats(allow_nan=False, allow_infinity=False),
    bool: st.booleans(),
}

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Case:
    """A random declaration and a call that fits it."""

    parameters: list[inspect.Parameter]
    grid: Any
    specialize: tuple[str, ...]
    extents: dict[str, int]
    type_vars: dict[str, str]
    consts: dict[str, Any]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    parameters: list[inspect.Parameter] = []
    plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for i in range(draw(st.integers(1, 4))):
        direction = draw(st.sampled_from(sorted(DIRECTIONS)))
        dtype = draw(st.sampled_from(DTYPES + TYPE_VARS))
        shape = tuple(draw(st.lists(st.one_of(st.sampled_from(SYMBOLS), st.integers(0, 3)), min_size=1, max_size=3)))
        annotation = DIRECTIONS[direction][dtype, shape if len(shape) > 1 or draw(st.booleans()) else shape[0]]
        parameters.append(inspect.Parameter(f"a{i}", plain, annotation=annotation))
    for i in range(draw(st.integers(0, 2))):
        dtype = draw(st.sampled_from(DTYPES + TYPE_VARS))
        parameters.append(inspect.Parameter(f"s{i}", plain, annotation=kd.Scalar[dtype]))
    consts: dict[str, Any] = {}
    with_default: list[inspect.Parameter] = []
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from([int, float, bool]))
        how = draw(st.sampled_from(["annotation", "default", "call"]))
        value = draw(CONST_VALUES[kind])
        if how == "annotation":
            parameters.append(inspect.Parameter(f"C{i}", plain, annotation=kd.Const[kind, value]))
        elif how == "default":
            with_default.append(inspect.Parameter(f"C{i}", plain, annotation=kd.Const[kind], default=value))
        else:
            parameters.append(inspect.Parameter(f"C{i}", plain, annotation=kd.Const[kind]))
            consts[f"C{i}"] = value
    parameters += with_default
    used = [
        d for p in parameters if hasattr(p.annotation, "shape") for d in _dims(p.annotation.shape) if isinstance(d, str)
    ]
    used = list(dict.fromkeys(used))
    grid = kd.cdiv(used[0], 128) if used else 1
    specialize = tuple(draw(st.lists(st.sampled_from(used), unique=True, max_size=2))) if used else ()
    extents = {s: draw(st.integers(1, 4)) for s in used}
    type_vars = {v: draw(st.sampled_from(DTYPES)) for v in TYPE_VARS}
    return Case(parameters, grid, specialize, extents, type_vars, consts)


def _dims(shape: Any) -> tuple[Any, ...]:
    return shape if isinstance(shape, tuple) else (shape,)


def function_with(parameters: list[inspect.Parameter], name: str = "rand_kernel") -> Any:
    def body(**params: Any) -> str:
        return "\n".join(f"(void){params[p.name]};" for p in parameters if not hasattr(p.annotation, "default"))

    body.__name__ = name
    body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return body


def declare(case: Case) -> tuple[Signature, Any]:
    func = function_with(case.parameters)
    return parse_signature(func, case.grid, 128, specialize=case.specialize), func


def call_arguments(sig: Signature, case: Case) -> tuple[Any, ...]:
    args: list[Any] = []
    bound: dict[str, str] = {}
    for p in sig.runtime_params:
        if hasattr(p, "shape"):
            dtype = case.type_vars.get(p.dtype, p.dtype)
            bound.setdefault(p.dtype, dtype)
            shape = tuple(case.extents[d] if isinstance(d, str) else d for d in p.shape)
            args.append(np.zeros(shape, ELEMENT_TYPES[dtype].numpy))
    for p in sig.runtime_params:
        if not hasattr(p, "shape"):
            dtype = bound.get(p.dtype, case.type_vars.get(p.dtype, p.dtype))
            args.append(ELEMENT_TYPES[dtype].numpy.type(1))
    # bind takes runtime arguments in declaration order: arrays come first in every Case
    return tuple(args)


# --- valid signatures --------------------------------------------------------------------------------------


@FAST
@given(cases())
def test_random_valid_signature_parses(case: Case) -> None:
    sig, _ = declare(case)
    assert [p.name for p in sig.params] == [p.name for p in case.parameters]
    assert set(sig.dtype_vars) <= set(TYPE_VARS)
    assert set(sig.symbols) <= set(SYMBOLS)


@FAST
@given(cases())
def test_random_valid_signature_binds_and_renders(case: Case) -> None:
    sig, func = declare(case)
    spec = bind(sig, call_arguments(sig, case), case.consts, "sm_90")
    generated = generate(spec, func)
    assert f'extern "C" __global__ void kd_{sig.name}(' in generated.cuda_source
    for p in sig.runtime_params:
        assert f"(void){p.name};" in generated.cuda_source
    compile(generated.adapter_source, "<adapter>", "exec")


@FAST
@given(cases())
def test_struct_format_has_one_8_byte_slot_per_kernel_parameter(case: Case) -> None:
    sig, func = declare(case)
    args = call_arguments(sig, case)
    generated = generate(bind(sig, args, case.consts, "sm_90"), func)
    complex_parts = sum(isinstance(a, np.complexfloating) for a in args)  # a complex scalar's second slot
    expected_slots = len(sig.runtime_params) + complex_parts + len(set(sig.symbols) - set(case.specialize))
    assert len(generated.abi) == expected_slots
    assert struct.calcsize(generated.struct_format) == SLOT_BYTES * expected_slots
    assert generated.struct_format.startswith("<")  # no native alignment padding
    slots = re.findall(r"[?bBhHiIqQefd](?:\d+x)?", generated.struct_format[1:])
    assert "".join(slots) == generated.struct_format[1:]
    assert [struct.calcsize("<" + slot) for slot in slots] == [SLOT_BYTES] * expected_slots


class _Session:
    def __init__(self) -> None:
        self.launched: tuple[Any, ...] = ()

    def launch(self, *args: Any) -> None:
        self.launched = args


class _DeviceArray:
    def __init__(self, session: _Session, ptr: int, host: np.ndarray) -> None:
        self.session, self.ptr, self.shape, self.nbytes = session, ptr, host.shape, max(host.nbytes, 1)
        self._closed = False


def _packed(arg: Any) -> list[Any]:
    """What the adapter writes for one argument: a pointer, bfloat16 bits, the scalar's value, or
    a complex scalar's two parts."""
    if isinstance(arg, _DeviceArray):
        return [arg.ptr]
    if isinstance(arg, np.generic) and arg.dtype.name == "bfloat16":
        return [to_bfloat16_bits(arg)]
    if isinstance(arg, np.complexfloating):
        return [arg.real.item(), arg.imag.item()]
    return [arg.item() if isinstance(arg, np.generic) else arg]


@FAST
@given(cases())
def test_adapter_packs_pointers_scalars_and_extents_in_abi_order(case: Case) -> None:
    sig, func = declare(case)
    args = call_arguments(sig, case)
    generated = generate(bind(sig, args, case.consts, "sm_90"), func)
    namespace: dict[str, Any] = {}
    exec(compile(generated.adapter_source, "<adapter>", "exec"), namespace)
    session = _Session()
    device_args = [
        _DeviceArray(session, 0x10000 * (i + 1), a) if isinstance(a, np.ndarray) else a for i, a in enumerate(args)
    ]
    buffer = bytearray(generated.param_bytes)
    namespace["make_launch"](ADAPTER_RUNTIME, session, "f", buffer, "p")(*device_args, None, None, None, None)
    packed = struct.unpack(generated.struct_format, buffer)
    expected = [v for a in device_args for v in _packed(a)] + [
        case.extents[s] for s in sig.symbols if s not in case.specialize
    ]
    assert list(packed) == expected
    assert session.launched[1][1:] == (1, 1) and session.launched[2] == (128, 1, 1)


@settings(max_examples=4, deadline=None, database=None)
@given(cases())
def test_random_valid_signature_compiles_with_nvrtc(case: Case) -> None:
    sig, func = declare(case)
    spec = bind(sig, call_arguments(sig, case), case.consts, "sm_80")
    b = build(spec, func, (), use_disk=False)
    assert b.cubin.startswith(b"\x7fELF")


# --- invalid names -----------------------------------------------------------------------------------------------

CUDA_ONLY_RESERVED = sorted(n for n in RESERVED_NAMES if not keyword.iskeyword(n))
invalid_names = st.one_of(
    st.sampled_from(CUDA_ONLY_RESERVED),
    st.from_regex(r"kd_[a-z0-9]{1,6}", fullmatch=True),
    st.from_regex(r"__[a-z]{1,6}", fullmatch=True),
)
plain_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True).filter(
    lambda s: s not in RESERVED_NAMES and not keyword.iskeyword(s) and s not in ("x", "n")
)


def _declared(parameters: list[inspect.Parameter]) -> Signature:
    return parse_signature(function_with(parameters), 1, 1)


def _param(name: str, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation)


@FAST
@given(invalid_names)
def test_reserved_parameter_name_is_rejected(name: str) -> None:
    with pytest.raises(DeclarationError) as info:
        _declared([_param("x", kd.In["float32", "n"]), _param(name, kd.Scalar["int32"])])
    assert info.value.param == name


@FAST
@given(invalid_names)
def test_reserved_shape_symbol_is_rejected(name: str) -> None:
    with pytest.raises(DeclarationError) as info:
        _declared([_param("x", kd.In["float32", ("n", name)])])
    assert info.value.param == "x"
    assert repr(name) in str(info.value)


@FAST
@given(st.one_of(invalid_names, st.sampled_from(sorted(keyword.kwlist))).filter(lambda s: s not in ELEMENT_TYPES))
def test_reserved_dtype_variable_is_rejected(name: str) -> None:
    with pytest.raises(DeclarationError) as info:
        _declared([_param("x", kd.In[name, "n"])])
    assert info.value.param == "x"


@FAST
@given(plain_names)
def test_plain_identifier_is_accepted_as_a_parameter_name(name: str) -> None:
    sig = _declared([_param("x", kd.In["float32", "n"]), _param(name, kd.Scalar["int32"])])
    assert sig.params[1].name == name
