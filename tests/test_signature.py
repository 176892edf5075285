"""Declarations: every invalid signature fails at decoration time, naming what is wrong."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import DeclarationError
from kerneldsl.jit.signature import ArrayParam, ConstParam, ScalarParam
from kerneldsl.jit.signature.parse import MAX_IDENTIFIER_LENGTH


def declare(func: Callable[..., str], **options: Any) -> kd.Kernel:
    options.setdefault("grid", 1)
    options.setdefault("block", 1)
    return kd.kernel(**options)(func)


def declare_source(source: str, **options: Any) -> kd.Kernel:
    """Declare a kernel written as text, for parameter names Python's parser must see literally."""
    namespace: dict[str, Any] = {"kd": kd}
    exec(source, namespace)
    return declare(namespace["k"], **options)


def rejects(func: Callable[..., str], param: str | None, *fragments: str, **options: Any) -> DeclarationError:
    with pytest.raises(DeclarationError) as info:
        declare(func, **options)
    err = info.value
    assert err.param == param
    assert err.kernel == func.__name__
    if param is not None:
        assert repr(param) in str(err)
    for fragment in fragments:
        assert fragment in str(err)
    return err


# --- a valid declaration ----------------------------------------------------------------------


def test_valid_declaration_parses_every_kind_of_parameter() -> None:
    def k(
        y: kd.InOut["T", "n"],
        x: kd.In[np.float32, ("n", 4)],
        alpha: kd.Scalar["T"],
        TILE: kd.Const[int, 128],
        scale: kd.Const[float] = 2,
    ) -> str:
        return ""

    sig = declare(k, grid=kd.cdiv("n", "TILE"), block="TILE").signature
    assert sig.params == (
        ArrayParam("y", "inout", "T", ("n",)),
        ArrayParam("x", "in", "float32", ("n", 4)),
        ScalarParam("alpha", "T"),
        ConstParam("TILE", int, 128),
        ConstParam("scale", float, 2),
    )
    assert sig.dtype_vars == ("T",)
    assert sig.symbols == {"n": ("y", 0)}
    assert [p.name for p in sig.runtime_params] == ["y", "x", "alpha"]


def test_declaration_error_is_a_type_error() -> None:
    def k(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    with pytest.raises(TypeError):
        declare(k)


# --- dtypes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.clongdouble, "complex256", "float128", "half", np.dtype("U4"), object])
def test_unknown_dtype_is_rejected(dtype: Any) -> None:
    def k(x: kd.In[dtype, "n"]) -> str:
        return ""

    rejects(k, "x", "unsupported element type")


def test_unknown_scalar_dtype_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], s: kd.Scalar[np.clongdouble]) -> str:
        return ""

    rejects(k, "s", "unsupported element type")


def test_direction_as_scalar_dtype_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], a: kd.Scalar[kd.In["float32", "n"]]) -> str:
        return ""

    rejects(k, "a", "direction")


def test_direction_as_array_dtype_is_rejected() -> None:
    def k(x: kd.Out[kd.In["float32", "n"], "n"]) -> str:
        return ""

    rejects(k, "x", "direction")


def test_dtype_variable_must_be_an_identifier() -> None:
    def k(x: kd.In["T-1", "n"]) -> str:
        return ""

    rejects(k, "x", "not an identifier")


# --- launch dimensions and specialize -------------------------------------------------------------


def test_grid_symbol_that_no_parameter_defines_is_rejected() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, None, "grid", "'m'", grid=kd.cdiv("m", 256))


def test_block_symbol_that_no_parameter_defines_is_rejected() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, None, "block", "'B'", block=("B", 1))


def test_shared_symbol_that_no_parameter_defines_is_rejected() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, None, "shared", "'bytes'", shared=kd.sym("bytes") * 4)


def test_constant_may_be_used_in_launch_dims() -> None:
    def k(x: kd.In["float32", "n"], B: kd.Const[int] = 128) -> str:
        return ""

    sig = declare(k, grid=kd.cdiv("n", "B"), block="B").signature
    assert sig.block[0].symbols() == {"B"}


def test_four_dimensional_grid_is_rejected() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, None, "grid", "1, 2 or 3 dimensions", grid=(1, 1, 1, 1))


def test_empty_block_is_rejected() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, None, "block", "got 0", block=())


def test_float_launch_dimension_is_rejected() -> None:
    def k(x: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, None, "grid", "1.5", grid=1.5)


def test_specialize_naming_a_non_symbol_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], alpha: kd.Scalar["float32"]) -> str:
        return ""

    rejects(k, None, "specialize", "'alpha'", specialize=("alpha",))


# --- constants ----------------------------------------------------------------------------------


def test_bare_const_without_type_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], c: kd.Const) -> str:
        return ""

    rejects(k, "c", "Const[...]")


@pytest.mark.parametrize("bare", [kd.In, kd.Out, kd.InOut, kd.Scalar])
def test_bare_direction_or_scalar_without_type_is_rejected(bare: Any) -> None:
    def k(x: bare) -> str:  # type: ignore[valid-type]
        return ""

    rejects(k, "x", f"{bare.__name__}[...]")


def test_const_of_unsupported_type_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], c: kd.Const[str]) -> str:
        return ""

    rejects(k, "c", "int, float or bool")


def test_const_default_of_wrong_type_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], c: kd.Const[int] = 1.5) -> str:
        return ""

    rejects(k, "c", "1.5", "int")


def test_const_default_in_annotation_of_wrong_type_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], c: kd.Const[float, "fast"]) -> str:
        return ""

    rejects(k, "c", "'fast'", "float")


def test_const_int_default_may_not_be_a_bool() -> None:
    # binding refuses True for an int constant, so the declaration must too
    def k(x: kd.In["float32", "n"], c: kd.Const[int] = True) -> str:
        return ""

    rejects(k, "c", "True")


def test_const_bool_default_may_not_be_an_int() -> None:
    def k(x: kd.In["float32", "n"], c: kd.Const[bool] = 1) -> str:
        return ""

    rejects(k, "c", "bool")


def test_const_float_default_accepts_an_int() -> None:
    def k(x: kd.In["float32", "n"], c: kd.Const[float] = 2) -> str:
        return ""

    assert declare(k).signature.consts[0].default == 2


# --- names --------------------------------------------------------------------------------------


def test_parameter_named_like_a_shape_symbol_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], n: kd.Scalar["int32"]) -> str:
        return ""

    rejects(k, "n", "shape symbol")


def test_parameter_named_like_a_dtype_variable_is_rejected() -> None:
    def k(x: kd.In["T", "n"], T: kd.Scalar["float32"]) -> str:
        return ""

    rejects(k, "T", "dtype variable")


def test_shape_symbol_named_like_a_dtype_variable_is_rejected() -> None:
    def k(x: kd.In["T", "n"], y: kd.In["float32", "T"]) -> str:
        return ""

    rejects(k, "y", "'T'", "dtype variable")


@pytest.mark.parametrize("name", ["int", "threadIdx", "float", "blockDim", "__restrict__", "index_t", "kd_x"])
def test_parameter_name_clashing_with_cuda_is_rejected(name: str) -> None:
    src = f"def k({name}: kd.In['float32', 'n']) -> str:\n    return ''\n"
    with pytest.raises(DeclarationError) as info:
        declare_source(src)
    assert info.value.param == name
    assert f"name {name!r} clashes" in str(info.value)


@pytest.mark.parametrize("name", ["int", "threadIdx", "double"])
def test_shape_symbol_clashing_with_cuda_is_rejected(name: str) -> None:
    def k(x: kd.In["float32", ("m", name)]) -> str:
        return ""

    rejects(k, "x", repr(name), "clashes")


@pytest.mark.parametrize("name", ["threadIdx", "warpSize", "signed"])
def test_dtype_variable_clashing_with_cuda_is_rejected(name: str) -> None:
    def k(x: kd.In[name, "n"]) -> str:
        return ""

    rejects(k, "x", repr(name), "clashes")


# --- parameters ---------------------------------------------------------------------------------


def test_missing_annotation_is_rejected() -> None:
    def k(x: kd.In["float32", "n"], y) -> str:  # type: ignore[no-untyped-def]
        return ""

    rejects(k, "y", "no annotation")


def test_foreign_annotation_is_rejected() -> None:
    def k(x: np.ndarray) -> str:
        return ""

    rejects(k, "x", "is not kd.In/Out/InOut/Scalar/Const")


def test_star_args_are_rejected() -> None:
    def k(*xs: kd.In["float32", "n"]) -> str:
        return ""

    rejects(k, "xs", "*args")


def test_missing_shape_is_rejected() -> None:
    def k(x: kd.In["float32"]) -> str:
        return ""

    rejects(k, "x", "needs a shape")


def test_negative_fixed_extent_is_rejected() -> None:
    def k(x: kd.In["float32", ("n", -3)]) -> str:
        return ""

    rejects(k, "x", "-3", "negative")


@pytest.mark.parametrize("extent", [1.5, True, None, ("n",)])
def test_shape_entry_of_wrong_type_is_rejected(extent: Any) -> None:
    def k(x: kd.In["float32", ("n", extent)]) -> str:
        return ""

    rejects(k, "x", "symbols or ints")


def test_shape_symbol_must_be_an_identifier() -> None:
    def k(x: kd.In["float32", "n+1"]) -> str:
        return ""

    rejects(k, "x", "'n+1'", "not an identifier")


# --- name lengths ---------------------------------------------------------------------------------

LONGEST = "n" * MAX_IDENTIFIER_LENGTH

KERNEL_NAMED_AT_LENGTH = """
import sys
import numpy as np
import kerneldsl as kd
from kerneldsl.errors import DeclarationError
name = "k" * int(sys.argv[1])
namespace = {"kd": kd}
exec(f"def {name}(y: kd.Out[kd.float32, 1]):\\n    return 'y[0] = 1.0f;'\\n", namespace)
try:
    kd.kernel(grid=1, block=1)(namespace[name]).inspect(np.zeros(1, np.float32), arch="sm_90")
except DeclarationError as exc:
    print(type(exc).__name__, exc)
"""


def test_a_kernel_name_of_100000_characters_is_refused_before_nvrtc_sees_it(tmp_path: Path) -> None:
    """NVRTC corrupts its heap and aborts the process on such an entry name."""
    env = {**os.environ, "KERNELDSL_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "-c", KERNEL_NAMED_AT_LENGTH, "100000"], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("DeclarationError kernel 'kkkk")
    assert f"is 100000 characters long; names are at most {MAX_IDENTIFIER_LENGTH}\n" in run.stdout


def _named(kind: str, name: str) -> str:
    """A declaration with ``name`` in the place ``kind`` says."""
    return {
        "kernel": f"def {name}(x: kd.In['float32', 'n']) -> str:\n    return ''\n",
        "parameter": f"def k({name}: kd.In['float32', 'n']) -> str:\n    return ''\n",
        "constant": f"def k(x: kd.In['float32', 'n'], {name}: kd.Const[int] = 1) -> str:\n    return ''\n",
        "shape symbol": f"def k(x: kd.In['float32', '{name}']) -> str:\n    return ''\n",
        "dtype variable": f"def k(x: kd.In['{name}', 'n']) -> str:\n    return ''\n",
    }[kind]


def _declared(kind: str, name: str) -> kd.Kernel:
    namespace: dict[str, Any] = {"kd": kd}
    exec(_named(kind, name), namespace)
    func = namespace[name] if kind == "kernel" else namespace["k"]
    return declare(func)


NAMED_KINDS = ["kernel", "parameter", "constant", "shape symbol", "dtype variable"]


@pytest.mark.parametrize("kind", NAMED_KINDS)
def test_a_name_one_past_the_length_limit_is_refused(kind: str) -> None:
    with pytest.raises(DeclarationError, match=f"is {MAX_IDENTIFIER_LENGTH + 1} characters long") as info:
        _declared(kind, LONGEST + "m")
    assert len(str(info.value)) < 500  # the message shows the name's start, not all of it


@pytest.mark.parametrize("kind", NAMED_KINDS)
def test_a_name_at_the_length_limit_is_declared(kind: str) -> None:
    assert _declared(kind, LONGEST).signature is not None


# --- postponed annotations ----------------------------------------------------------------------------


def _load_module(path: Any, text: str) -> Any:
    import importlib.util

    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_with_postponed_annotations_declares_kernels(tmp_path: Any) -> None:
    module = _load_module(
        tmp_path / "postponed_kernels.py",
        "from __future__ import annotations\n"
        "import kerneldsl as kd\n"
        "@kd.kernel(grid=kd.cdiv('n', 128), block=128)\n"
        "def k(y: kd.Out['T', 'n'], x: kd.In['T', 'n'], c: kd.Const[int] = 3):\n"
        "    return ''\n",
    )
    sig = module.k.signature
    assert [type(p).__name__ for p in sig.params] == ["ArrayParam", "ArrayParam", "ConstParam"]
    assert sig.dtype_vars == ("T",)


def test_postponed_annotation_that_cannot_be_evaluated_is_rejected(tmp_path: Any) -> None:
    with pytest.raises(DeclarationError) as info:
        _load_module(
            tmp_path / "postponed_local.py",
            "from __future__ import annotations\n"
            "import kerneldsl as kd\n"
            "def make():\n"
            "    T = 'float32'\n"
            "    @kd.kernel()\n"
            "    def k(x: kd.In[T, 'n']):\n"
            "        return ''\n"
            "make()\n",
        )
    assert info.value.param == "x"
    assert "cannot be evaluated" in str(info.value)
