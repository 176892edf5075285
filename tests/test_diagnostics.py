"""NVRTC logs mapped back to user code (``kerneldsl.jit.diagnostics``); NVRTC runs without a GPU."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import KernelCompileError
from kerneldsl.jit.diagnostics import BodyOrigin, map_log, stray_brace, unclosed_brace

THIS_FILE = str(Path(__file__).resolve())


def user_expression(a: Any, x: Any) -> str:
    return "a * x + undefined_thing"


EXPRESSION_LINE = user_expression.__code__.co_firstlineno + 1

# What an elementwise kernel body holds: the expression in the vector loop and in the scalar tail.
ELEMENTWISE_BODY = """\
for (kdu kdi = kdtid; kdi < kdnv; kdi += kdstride) {
        kdv2 = (float)(a * x + undefined_thing);
}
for (kdu kdi = kdfirst + kdtid; kdi < (kdu)kdn; kdi += kdstride) {
    kdv2 = (float)(a * x + undefined_thing);
}"""
ELEMENTWISE_LOG = """\
ew.body(2): error: identifier "undefined_thing" is undefined
          kdv2 = (float)(a * x + undefined_thing);
                                 ^

ew.body(5): error: identifier "undefined_thing" is undefined
      kdv2 = (float)(a * x + undefined_thing);
                             ^
"""


def generated_body(**proxies: Any) -> str:
    """Stands for the generated body function of an elementwise kernel (array/kernels.py)."""
    return ""


def test_the_same_message_on_the_same_text_is_reported_once() -> None:
    mapped = map_log(ELEMENTWISE_LOG, "ew.body", ELEMENTWISE_BODY, None, "")
    assert len(mapped) == 1
    assert mapped[0].startswith('ew.body:2: error: identifier "undefined_thing" is undefined')


def test_a_body_function_wrapping_the_user_function_maps_the_expression_to_its_line() -> None:
    wrapper = functools.wraps(user_expression)(generated_body)
    origin = BodyOrigin.of(wrapper)
    assert origin is not None and origin.filename == THIS_FILE
    assert origin.locate(ELEMENTWISE_BODY.splitlines()) == {2: EXPRESSION_LINE, 5: EXPRESSION_LINE}
    (mapped,) = map_log(ELEMENTWISE_LOG, "ew.body", ELEMENTWISE_BODY, origin, "")
    assert mapped.startswith(f"{THIS_FILE}:{EXPRESSION_LINE}: error: identifier")


def test_short_literals_do_not_claim_generated_lines() -> None:
    def body(y: Any) -> str:
        return "; " + "i"

    origin = BodyOrigin.of(body)
    assert origin is not None
    assert origin.locate(["int i = 0;", "x[i] = 1;"]) == {}


@kd.elementwise
def undefined_in_expression(a: kd.Scalar["T"], x: kd.In["T"]) -> kd.Out["T"]:
    return "a * x + undefined_thing"


def test_an_elementwise_error_is_reported_once(isolated_cache: Path) -> None:
    """The vector and the scalar loop both hold the expression: one error, not two."""
    with pytest.raises(KernelCompileError) as info:
        undefined_in_expression.inspect(np.float32(2), np.ones(1024, np.float32), arch="sm_90")
    assert info.value.log.count('undefined_thing" is undefined') == 2
    (mapped,) = info.value.mapped
    assert 'error: identifier "undefined_thing" is undefined' in mapped


def test_a_diagnostic_past_the_body_end_maps_to_the_last_body_line() -> None:
    log = 'k.body(3): error: expected a ";"\n  }\n  ^\n'
    (mapped,) = map_log(log, "k.body", "int a = 1;\nint b = 2\n", None, "")
    assert mapped.startswith('k.body:2: error: expected a ";"\n    body line 2: int b = 2')


@kd.kernel(grid=kd.cdiv("n", 128), block=128)
def never_closed(y: kd.Out[kd.float32, "n"], x: kd.In[kd.float32, "n"]) -> str:
    return f"""
    index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    if (i < n) {{  // a "}}" in a comment is no brace
        {y}[i] = {x}[i];
    """


NEVER_CLOSED_LINE = never_closed.__wrapped__.__code__.co_firstlineno + 4


def test_an_unclosed_brace_is_reported_at_its_body_line_not_the_generated_function(isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError) as info:
        never_closed.inspect(np.zeros(4, np.float32), np.zeros(4, np.float32), arch="sm_90")
    error = info.value
    (mapped,) = error.mapped
    assert mapped.startswith(f"{THIS_FILE}:{NEVER_CLOSED_LINE}: error: expected a")
    assert "body line 2" in mapped and error.kernel == "never_closed"
    assert "At end of source" in error.log and "kd_never_closed.cu(" in error.log  # the raw log stays


def test_a_brace_that_closes_the_kernels_function_is_named_first() -> None:
    body = "int a = 1; }\nint b = a;"
    log = 'k.body(2): error: identifier "a" is undefined\n'
    mapped = map_log(log, "k.body", body, None, "")
    assert mapped[0].startswith('k.body:1: error: this "}" closes nothing the body opened')
    assert unclosed_brace(body.splitlines()) is None and stray_brace(body.splitlines()) == 1
