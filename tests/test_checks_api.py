"""Checked execution's spelling and plumbing: ``checks=`` and ``$KERNELDSL_CHECKS``, what a report
names, checked and unchecked images kept apart, seeded schedules and ``kerneldsl check``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal, NewType

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import BoundsCheckError, CheckConfigError, InitCheckError, KernelFaultError, RaceCheckError
from kerneldsl.runtime.checks import CHECKS_ENV, EVERY, Checks, output_for, parse_checks
from kerneldsl.runtime.session import session_checks

n = NewType("n", int)
cpu = pytest.mark.skipif(not kd.is_available("cpu"), reason="the CPU device needs a host C++ compiler")


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def off_by_one(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = x[i];
    """


@kd.kernel(grid=1, block=64)
def last_writer(out: kd.Out[kd.int32, Literal[1]]) -> str:
    return """
    out[0] = threadIdx.x;
    """


@kd.kernel(grid=1, block=64)
def last_after_barrier(out: kd.Out[kd.int32, Literal[1]]) -> str:
    return """
    __syncthreads();
    out[0] = threadIdx.x;
    """


@kd.kernel(grid=1, block=64)
def neighbours(y: kd.Out[kd.float32, Literal[64]]) -> str:
    return """
    y[threadIdx.x] = 1.0f;
    y[threadIdx.x ^ 1] += 1.0f;
    """


@kd.kernel(grid=2, block=64)
def across_blocks(y: kd.Out[kd.float32, Literal[128]]) -> str:
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.0f;
    y[i ^ 64] += 1.0f;
    """


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def doubled(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return """
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
    """


def body_line(kernel: str, line: int, source: str | Path = __file__) -> str:
    """How a report names line ``line`` of ``kernel``'s body: the ``#line`` directives place it in
    the .py file that declares the kernel, ``line`` lines below the ``return`` that opens it."""
    lines = Path(source).read_text().splitlines()
    start = next(k for k, text in enumerate(lines) if text.startswith(f"def {kernel}("))
    opening = next(k for k in range(start, len(lines)) if lines[k].strip() in ('return """', "return '''"))
    return f"{source}:{opening + 1 + line}"


def vectors(session: Any, length: int) -> tuple[Any, Any]:
    return session.to_device(np.zeros(length, np.float32)), session.to_device(np.ones(length, np.float32))


def test_all_names_the_checks_that_need_no_sanitizer_runtime() -> None:
    assert parse_checks("all").names == frozenset(EVERY)


def test_checks_are_spelled_in_one_canonical_order_with_the_seed_last() -> None:
    assert parse_checks("sync, BOUNDS,seed=7").spelled() == "bounds,sync,seed=7"


def test_no_checks_is_the_plain_host_image() -> None:
    assert output_for(parse_checks("")) == output_for(parse_checks("none")) == "host"


def test_checks_name_their_own_image_kind() -> None:
    assert output_for(Checks(frozenset({"races"}), 3)) == "host+races,seed=3"


def test_an_unknown_check_is_refused_naming_the_checks() -> None:
    with pytest.raises(CheckConfigError, match="unknown check 'bound'.*bounds, races"):
        parse_checks("bound")


def test_address_and_the_race_checks_cannot_run_together() -> None:
    with pytest.raises(CheckConfigError, match="cannot be combined"):
        parse_checks("address,races")


def test_a_gpu_session_asked_for_checks_is_refused() -> None:
    with pytest.raises(CheckConfigError, match="CPU device"):
        session_checks("bounds", host=False)


def test_the_environment_variable_leaves_gpu_sessions_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECKS_ENV, "all")
    assert not session_checks(None, host=False)


@cpu
def test_checks_are_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECKS_ENV, raising=False)
    with kd.Session(device="cpu") as s:
        assert s.gpu.output == "host"  # an unchecked image kind


@cpu
def test_the_environment_variable_turns_checks_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECKS_ENV, "bounds")
    with kd.Session(device="cpu") as s:
        assert s.gpu.output == "host+bounds"


@cpu
def test_a_bounds_report_names_kernel_array_index_extent_thread_and_line() -> None:
    with kd.Session(device="cpu", checks="bounds") as s:
        y, x = vectors(s, 100)
        with pytest.raises(BoundsCheckError) as found:
            off_by_one(y, x)
    text = str(found.value)
    assert "kernel 'kd_off_by_one' block (1,0,0) thread (36,0,0): x[100] is outside its extent 100" in text
    assert found.value.sites == (body_line("off_by_one", 2),)


@cpu
def test_a_bounds_error_is_an_index_error_and_a_kernel_fault() -> None:
    assert issubclass(BoundsCheckError, IndexError) and issubclass(BoundsCheckError, KernelFaultError)


@cpu
def test_the_unchecked_session_runs_its_own_image_of_the_same_kernel() -> None:
    with kd.Session(device="cpu", checks="bounds") as checked, pytest.raises(BoundsCheckError):
        off_by_one(*vectors(checked, 100))
    with kd.Session(device="cpu") as plain:
        off_by_one(*vectors(plain, 100))  # the stray access lands in the pool's padding: no report
        plain.synchronize()


@cpu
def test_a_race_report_names_both_threads_both_lines_and_the_element() -> None:
    with kd.Session(device="cpu", checks="races") as s:
        with pytest.raises(RaceCheckError) as found:
            neighbours(s.to_device(np.zeros(64, np.float32)))
    second, first = body_line("neighbours", 2), body_line("neighbours", 1)
    assert f"thread 0 writes 'y'[1] at {second} and thread 1 writes it at {first}" in str(found.value)
    assert found.value.sites == (second, first)


@cpu
def test_a_race_between_blocks_names_both_blocks_both_threads_both_lines_and_the_element() -> None:
    with kd.Session(device="cpu", checks="races") as s:
        with pytest.raises(RaceCheckError) as found:
            across_blocks(s.to_device(np.zeros(128, np.float32)))
    second, first = body_line("across_blocks", 3), body_line("across_blocks", 2)
    expected = f"block (0,0,0) thread 0 writes 'y'[64] at {second} and block (1,0,0) thread 0 writes it at {first}"
    assert expected in str(found.value) and "in the same launch" in str(found.value)


def test_init_nan_is_the_init_check_filling_empty_buffers() -> None:
    checks = parse_checks("bounds,init=nan")
    assert checks.names == {"bounds", "init"} and checks.empty_buffers == "nan"
    assert checks.spelled() == "bounds,init=nan"


def test_init_nan_builds_the_images_init_builds() -> None:
    assert output_for(parse_checks("init=nan")) == output_for(parse_checks("init")) == "host+init"


@cpu
def test_an_unchecked_session_does_nothing_to_empty_buffers() -> None:
    with kd.Session(device="cpu") as s:
        assert s.gpu.empty_buffers == ""


@cpu
def test_a_read_of_an_empty_buffer_nothing_wrote_names_the_array_element_and_line() -> None:
    with kd.Session(device="cpu", checks="init") as s:
        y = s.to_device(np.zeros(100, np.float32))
        with pytest.raises(InitCheckError) as found:
            doubled(y, s.empty(100))
    assert "kernel 'kd_doubled' block (0,0,0) thread (0,0,0) reads 'x'[0]" in str(found.value)
    assert found.value.sites == (body_line("doubled", 2),)


@cpu
@pytest.mark.parametrize("write", ["copy_from_host", "fill_zero", "fill", "kernel"])
def test_copies_fills_and_kernels_write_an_empty_buffer(write: str) -> None:
    with kd.Session(device="cpu", checks="init") as s:
        x = s.empty(100)
        if write == "copy_from_host":
            x.copy_from_host(np.ones(100, np.float32))
        elif write == "fill_zero":
            x.fill_zero()
        elif write == "fill":
            x.fill(1.5)
        else:
            doubled(x, s.to_device(np.ones(100, np.float32)))
        y = s.empty(100)
        doubled(y, x)
        s.synchronize()


@cpu
def test_part_of_an_empty_buffer_written_leaves_the_rest_reported() -> None:
    with kd.Session(device="cpu", checks="init") as s:
        x = s.empty(100)
        doubled(x[:50], s.to_device(np.ones(50, np.float32)))
        with pytest.raises(InitCheckError) as found:
            doubled(s.empty(100), x)
    assert "reads 'x'[50]" in str(found.value)


@cpu
@pytest.mark.parametrize(
    ("dtype", "bits"), [(np.float32, 0x7FA00001), (np.float64, 0x7FF4000000000001), (np.int32, 0xA5A5A5A5)]
)
def test_init_nan_fills_empty_buffers_with_signalling_nans_or_a_byte_pattern(dtype: Any, bits: int) -> None:
    with kd.Session(device="cpu", checks="init=nan") as s:
        held = s.empty(3, dtype).to_host()
    unsigned = {4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    assert held.view(unsigned).tolist() == [bits] * 3


@cpu
def test_a_signalling_nan_fill_shows_in_the_result_instead_of_a_report() -> None:
    with kd.Session(device="cpu", checks="init=nan") as s:
        y = s.to_device(np.zeros(100, np.float32))
        doubled(y, s.empty(100))
        assert np.isnan(y.to_host()).all()


def last_thread(kernel: Any, seed: int) -> int:
    """Which thread's write of ``out[0]`` stays when ``kernel`` runs under schedule ``seed``."""
    with kd.Session(device="cpu", checks=f"seed={seed}") as s:
        out = s.to_device(np.zeros(1, np.int32))
        kernel(out)
        return int(out.to_host()[0])


@cpu
@pytest.mark.parametrize("kernel", [last_writer, last_after_barrier], ids=["loop", "fibers"])
def test_a_seeded_schedule_is_the_same_under_the_same_seed_and_differs_between_seeds(kernel: Any) -> None:
    seen = {seed: last_thread(kernel, seed) for seed in (1, 2, 3)}
    assert last_thread(kernel, 2) == seen[2]
    assert len(set(seen.values()) | {last_thread(kernel, 0)}) > 1


SCRIPT = """
from typing import NewType
import numpy as np
import kerneldsl as kd
n = NewType("n", int)

@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def copy(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return '''
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n + EXTRA) y[i] = x[i];
    '''

x = np.ones(100, np.float32)
try:
    copy(np.empty_like(x), x)
except kd.errors.KernelFaultError:
    pass
print("the script ran to its end")
"""


def run_check(tmp_path: Path, extra: int) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("EXTRA", str(extra)))
    return subprocess.run(
        [sys.executable, "-m", "kerneldsl.cli", "check", str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@cpu
def test_kerneldsl_check_reports_each_finding_at_its_line_even_when_the_script_catches_it(tmp_path: Path) -> None:
    done = run_check(tmp_path, extra=1)
    assert done.returncode == 1, done.stderr
    assert "the script ran to its end" in done.stdout
    assert (
        "finding 1 [bounds]: kernel 'kd_copy'" in done.stdout
        and f"at {body_line('copy', 2, tmp_path / 'script.py')}" in done.stdout
    )
    assert "kerneldsl check: 1 finding (bounds,races,init,sync,undefined)" in done.stdout


@cpu
def test_kerneldsl_check_of_a_correct_script_reports_no_findings(tmp_path: Path) -> None:
    done = run_check(tmp_path, extra=0)
    assert done.returncode == 0, done.stderr
    assert "kerneldsl check: no findings" in done.stdout


ADDRESS_SCRIPT = """
from typing import NewType
import numpy as np
import kerneldsl as kd
n = NewType("n", int)

@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def window_sum(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return '''
    float window[4];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 4; ++k) window[k] = i < n ? x[i] : 0.0f;
    __syncthreads();
    const float* p = window;
    if (i < n) y[i] = p[threadIdx.x % 8];
    '''

x = np.ones(256, np.float32)
with kd.Session(device="cpu", checks="address") as s:
    window_sum(s.to_device(np.empty_like(x)), s.to_device(x))
    s.synchronize()
"""


@cpu
def test_address_sanitizer_follows_fibers_and_names_the_line(tmp_path: Path) -> None:
    from kerneldsl.runtime.host_toolchain import ADDRESS_EXIT, address_sanitizer_environment

    script = tmp_path / "address.py"
    script.write_text(textwrap.dedent(ADDRESS_SCRIPT))
    env = {**os.environ, **address_sanitizer_environment()}
    argv = [sys.executable, str(script)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == ADDRESS_EXIT, done.stderr[-2000:]
    assert (
        "AddressSanitizer: stack-buffer-overflow" in done.stderr and body_line("window_sum", 6, script) in done.stderr
    )


def test_an_address_session_without_the_sanitizer_runtime_is_refused() -> None:
    with pytest.raises(CheckConfigError, match="kerneldsl check --address"):
        session_checks("address", host=True)


@kd.kernel(grid=kd.cdiv(n, 64), block=64)
def through_a_pointer_to_the_parameter(y: kd.Out[kd.float32, n], x: kd.In[kd.float32, n]) -> str:
    return """
    const float* const* source = &x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (*source)[i];
    """


@cpu
def test_a_body_the_checked_pointer_cannot_follow_runs_with_its_other_checks(
    isolated_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:  # a fresh cache: the warning comes with the compile
    with kd.Session(device="cpu", checks="bounds,races") as s:
        y, x = vectors(s, 100)
        through_a_pointer_to_the_parameter(y, x)
        np.testing.assert_array_equal(y.to_host(), np.ones(100, np.float32))
    assert "array parameters' bounds are not checked" in caplog.text


@kd.kernel(grid=1, block=64)
def shared_objects(y: kd.Out[kd.float32, Literal[64]]) -> str:
    return """
    struct pair { float a, b; __device__ pair() {} };  // CUDA allows only an empty one on __shared__
    __shared__ pair s[64];
    s[threadIdx.x].a = (float)threadIdx.x;
    s[threadIdx.x].b = 1.0f;
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x ^ 1].a + s[threadIdx.x ^ 1].b;
    """


@cpu
def test_a_shared_array_of_a_class_type_is_checked_as_its_elements_not_its_initialization_guard() -> None:
    with kd.Session(device="cpu", checks="all") as s:
        y = s.to_device(np.zeros(64, np.float32))
        shared_objects(y)
        np.testing.assert_array_equal(y.to_host(), (np.arange(64) ^ 1) + 1.0)
