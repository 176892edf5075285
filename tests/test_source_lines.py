"""Source lines everywhere: the rendered source's ``#line`` directives number each body line at its
line in this file, so compile errors, ``assert``/``__trap``/``printf`` positions on the CPU device
and a debugger name the user's line (``kerneldsl.jit.source_lines``, ``templates/kernel.cu.j2``).

Expected lines are found in this file's text (``line_of``), never written down."""

from __future__ import annotations

import linecache
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import KernelCompileError, KernelFaultError
from kerneldsl.jit import codegen
from kerneldsl.jit.build import key_material, source_material
from kerneldsl.jit.codegen import generate
from kerneldsl.jit.compiler import build_options, compile_source
from kerneldsl.jit.host_compile import DEBUG_ENV, host_options
from kerneldsl.jit.source_lines import locate_body, safe_filename

THIS_FILE = str(Path(__file__).resolve())
ROOT = Path(__file__).parent.parent


def line_of(fragment: str) -> int:
    """1-based line of the only line of this file containing ``fragment``."""
    lines = [i for i, text in enumerate(Path(__file__).read_text().splitlines(), start=1) if fragment in text]
    assert len(lines) == 1, lines
    return lines[0]


def directives(source: str) -> list[tuple[int, int, str]]:
    """(generated line, number, file) of each ``#line`` directive of ``source``."""
    found = []
    for i, text in enumerate(source.split("\n"), start=1):
        m = re.fullmatch(r'#line (\d+) "([^"]*)"', text)
        if m:
            found.append((i, int(m.group(1)), m.group(2)))
    return found


def without_directives(source: str) -> str:
    return "\n".join(text for text in source.split("\n") if not text.startswith("#line "))


@pytest.fixture(scope="module")
def cpu() -> Iterator[Any]:
    from kerneldsl.runtime.selection import is_available

    if not is_available("cpu"):
        pytest.skip("no host C++ compiler for the CPU device")
    with kd.Session(device="cpu") as session:
        yield session


# --- kernels whose bodies the tests place ---------------------------------------------------------------


@kd.kernel(grid=kd.cdiv("n", 64), block=64)
def plain_body(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
    return """
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;  // plain: first
    if (i < n) {
        y[i] = x[i] * 2.0f;  // plain: store
    }
    """


@kd.kernel(grid=kd.cdiv("n", 64), block=64)
def fstring_body(y: kd.Out["T", "n"], x: kd.In["T", "n"], SCALE: kd.Const[int] = 3) -> str:
    loads = "\n".join(f"T v{k} = {x}[i];" for k in range(2))  # two generated lines
    return f"""
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;  // fstring: first
    if (i < n) {{
        {loads}
        {y}[i] = (v0 + v1) * (T)SCALE;  // fstring: store
    }}
    """


@kd.kernel(grid=1, block=64)
def joined_body(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
    return "\n".join(["index_t i = threadIdx.x;", f"if (i < n) {y}[i] = {x}[i];"])


@kd.elementwise
def user_expression(a: kd.Scalar["T"], x: kd.In["T"]) -> kd.Out["T"]:
    return "a * x + a"


def spec_of(kernel: Any, n: int = 100, dtype: Any = np.float32) -> Any:
    return kernel.specialize(np.zeros(n, dtype), np.zeros(n, dtype), arch="sm_90")


# --- where each body line is placed ----------------------------------------------------------------------


def test_a_plain_string_body_is_placed_line_for_line() -> None:
    g = generate(spec_of(plain_body), plain_body.body)
    first = line_of("// plain: " + "first")
    assert g.body_places == tuple((THIS_FILE, first + k) for k in range(4))


def test_an_f_string_body_places_literal_lines_at_theirs_and_inserted_lines_at_their_field() -> None:
    g = generate(spec_of(fstring_body), fstring_body.body)
    first, store = line_of("// fstring: " + "first"), line_of("// fstring: " + "store")
    field = line_of("        {" + "loads}")
    assert [line for _, line in g.body_places] == [first, first + 1, field, field, store, store + 1]


def test_the_source_names_this_file_before_the_body() -> None:
    source = generate(spec_of(plain_body), plain_body.body).cuda_source
    assert (line_of("// plain: " + "first"), THIS_FILE) in [(n, f) for _, n, f in directives(source)]


def test_a_body_the_function_does_not_spell_keeps_its_own_numbering() -> None:
    g = generate(spec_of(joined_body), joined_body.body)
    assert g.body_places == (("joined_body.body", 1), ("joined_body.body", 2))


def test_numbering_returns_to_the_generated_file_at_each_of_its_lines() -> None:
    g = generate(spec_of(plain_body), plain_body.body)
    back = [(at, number) for at, number, file in directives(g.cuda_source) if file == f"{g.entry}.cu"]
    assert len(back) == 2  # before the file's first line, after the body
    assert all(number == at + 1 for at, number in back)
    # the template's own text follows the body: the close of the checked builds' array scope
    assert g.cuda_source.split("\n")[back[-1][0]] == "#if defined(KD_HOST_EMULATION) && KD_CHECKS"


HALF_OF = kd.device_function("half_of", "__device__ float half_of(float v) {\n    return v * 0.5f;\n}")


@kd.kernel(grid=1, block=1, uses=[HALF_OF])
def uses_a_device_function(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
    return "y[0] = half_of(x[0]);"


def test_numbering_returns_to_the_generated_file_after_device_functions() -> None:
    g = generate(spec_of(uses_a_device_function), uses_a_device_function.body, uses_a_device_function.code)
    found = directives(g.cuda_source)
    device = next(k for k, (_, _, file) in enumerate(found) if file == "half_of.device")
    at, number, file = found[device + 1]
    assert (file, number) == (f"{g.entry}.cu", at + 1)


def test_the_directives_are_all_that_changes_in_the_rendered_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendered with and without the user's places: equal once the directives are dropped."""
    placed = generate(spec_of(fstring_body), fstring_body.body).cuda_source
    monkeypatch.setattr(codegen, "locate_body", lambda func, returned: None)
    unplaced = generate(spec_of(fstring_body), fstring_body.body).cuda_source
    assert placed != unplaced
    assert without_directives(placed) == without_directives(unplaced)


def test_generated_bodies_keep_their_own_numbering(
    cpu: Any, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kerneldsl's own kernels (an op, a reduction, an elementwise function's kernel around the
    user's expression) are numbered in ``<kernel>.body``: their lines are generated text."""
    from kerneldsl.array import kernels
    from kerneldsl.jit import build

    inputs: list[Any] = []
    make = build.render_inputs
    monkeypatch.setattr(build, "render_inputs", lambda *a, **k: inputs.append(make(*a, **k)) or inputs[-1])
    monkeypatch.setattr(kernels.KERNELS, "_entries", {})  # earlier tests' kernels would skip generation
    with kd.Session() as s:
        x = s.to_device(np.arange(64, dtype=np.float32))
        (x + x).to_host()
        x.sum().to_host()
        user_expression(np.float32(2), x).to_host()
    assert len(inputs) >= 3
    assert all(file == f"{p.kernel_context['name']}.body" for p in inputs for file, _ in p.body_places)


# --- what reaches a directive -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ['a"b.py', "a\\b.py", "a\nb.py", "caf\u00e9.py", "", "x" * 5000])
def test_a_file_name_outside_the_verbatim_form_is_refused(name: str) -> None:
    assert safe_filename(name) is None


def test_a_plain_absolute_path_is_kept() -> None:
    assert safe_filename(THIS_FILE) == THIS_FILE


def test_a_kernel_from_a_file_with_a_quote_in_its_name_keeps_its_own_numbering() -> None:
    name = str(Path(THIS_FILE).parent / 'we"ird.py')
    text = 'def weird(y, x):\n    return """\n    y[0] = x[0];\n    """\n'
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    namespace: dict[str, Any] = {}
    exec(compile(text, name, "exec"), namespace)
    try:
        assert locate_body(namespace["weird"], namespace["weird"](None, None)) is None
    finally:
        linecache.cache.pop(name, None)


def test_escapes_and_continuations_are_placed_where_python_reads_them() -> None:
    def body() -> str:
        return """a;\nb;
c; \
d;
e; // \\n"""  # escape-test

    placed = locate_body(body, body())
    last = line_of("# escape-" + "test")
    # "a;" and "b;" (an escaped newline) share a line; "c; d;" continues onto the next
    assert placed is not None and placed.lines == (last - 3, last - 3, last - 2, last)


def test_a_raw_string_keeps_its_backslashes_and_is_placed() -> None:
    def body() -> str:
        return r"""a; // \n
b;"""  # raw-test

    placed = locate_body(body, body())
    last = line_of("# raw-" + "test")
    assert placed is not None and placed.lines == (last - 1, last)


def test_implicitly_concatenated_literals_are_not_placed() -> None:
    def body() -> str:
        return (
            "a;\n"  # one literal
            "b;"  # and another
        )

    assert locate_body(body, body()) is None


def test_a_literal_read_two_ways_places_only_the_lines_both_agree_on() -> None:
    def body(a: str, b: str) -> str:
        return f"""{a}
x;
{b}"""

    placed = locate_body(body, body("x;\nx;", ""))
    first = line_of('return f"""' + "{a}")
    # "x;\nx;\nx;\n": the literal "\nx;\n" fits after the first or the second "x;"
    assert placed is not None and placed.lines[:3] == (first, None, None)


# --- cache keys ----------------------------------------------------------------------------------------------


def test_the_file_and_line_are_part_of_the_source_key() -> None:
    """The same text at another place in a file (or another checkout) is other source: its key
    differs, which costs one compile and keeps every report's line true."""
    spec = spec_of(plain_body)
    inputs = codegen.render_inputs(spec, plain_body.body)
    moved = codegen.render_inputs(spec, plain_body.body)
    moved.kernel_context["body_segments"][0]["line"] += 1
    assert source_material(spec, inputs) != source_material(spec, moved)


# --- compile errors at the user's line ---------------------------------------------------------------------------


@kd.kernel(grid=1, block=1)
def syntax_error_on_third_line(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
    return """
    float a = x[0];
    float b = a * 2.0f;
    float c = b +* ;  // third-line-error
    y[0] = c;
    """


def test_nvrtc_reports_a_third_line_syntax_error_at_this_file(isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError) as info:
        syntax_error_on_third_line.inspect(np.zeros(1, np.float32), np.zeros(1, np.float32), arch="sm_90")
    where = f"{THIS_FILE}:{line_of('// third-line-' + 'error')}"
    assert info.value.mapped[0].startswith(where + ": error")
    assert "body line 3" in info.value.mapped[0]


def test_the_host_compiler_reports_a_third_line_syntax_error_at_this_file(cpu: Any, isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError) as info:
        syntax_error_on_third_line(np.zeros(1, np.float32), np.zeros(1, np.float32))
    where = f"{THIS_FILE}:{line_of('// third-line-' + 'error')}"
    assert "the host C++ compiler" in str(info.value)
    assert info.value.mapped[0].startswith(where + ": error")
    assert f"{where}:" in info.value.log  # the compiler's own log names it too


@kd.kernel(grid=1, block=1)
def error_in_inserted_lines(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
    inserted = "float a = x[0];\nfloat b = a +* ;\nfloat c = b;"
    return f"""
    {inserted}  // inserted-field
    y[0] = c;
    """


def test_an_error_in_a_line_a_field_inserted_names_the_fields_line_and_that_line(isolated_cache: Path) -> None:
    with pytest.raises(KernelCompileError) as info:
        error_in_inserted_lines.inspect(np.zeros(1, np.float32), np.zeros(1, np.float32), arch="sm_90")
    where = f"{THIS_FILE}:{line_of('// inserted-' + 'field')}"
    assert info.value.mapped[0].startswith(where + ": error")
    assert "body line 2: float b = a +* ;" in info.value.mapped[0]


# --- the CPU device's reports at the user's line -------------------------------------------------------------


@kd.kernel(grid=1, block=8)
def asserts_positive(x: kd.In["float32", "n"]) -> str:
    return """
    index_t i = threadIdx.x;
    assert(x[i] >= 0.0f);  // assert-line
    """


@kd.kernel(grid=1, block=8)
def traps_on_negative(x: kd.In["float32", "n"]) -> str:
    return """
    index_t i = threadIdx.x;
    if (x[i] < 0.0f) __trap();  // trap-line
    """


@kd.kernel(grid=1, block=1)
def prints_its_line(x: kd.In["float32", "n"]) -> str:
    return """
    printf("at %s:%d\\n", __FILE__, __LINE__);  // printf-line
    """


def test_an_assert_names_this_file_and_line(cpu: Any) -> None:
    x = np.array([1, 2, 3, -4, 5, 6, 7, 8], np.float32)
    with pytest.raises(KernelFaultError, match=re.escape(f"failed at {THIS_FILE}:{line_of('// assert-' + 'line')}")):
        asserts_positive(x)
        cpu.synchronize()


def test_a_trap_names_this_file_and_line(cpu: Any) -> None:
    x = np.array([1, 2, 3, -4, 5, 6, 7, 8], np.float32)
    with pytest.raises(KernelFaultError, match=re.escape(f"__trap() at {THIS_FILE}:{line_of('// trap-' + 'line')}")):
        traps_on_negative(x)
        cpu.synchronize()


def test_printf_of_file_and_line_prints_this_file_and_line(cpu: Any, capfd: pytest.CaptureFixture[str]) -> None:
    prints_its_line(np.zeros(1, np.float32))
    cpu.synchronize()
    assert capfd.readouterr().out == f"at {THIS_FILE}:{line_of('// printf-' + 'line')}\n"


# --- debug builds and line info ----------------------------------------------------------------------------------


def test_a_debug_build_of_the_cpu_device_is_unoptimized_with_debug_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEBUG_ENV, "1")
    flags = host_options(())
    assert "-O0" in flags and "-g" in flags and "-O2" not in flags


def test_device_debug_asks_the_cpu_device_for_a_debug_build() -> None:
    flags = host_options(("-G",))
    assert "-O0" in flags and "-g" in flags and "-O2" not in flags


def test_a_debug_build_has_its_own_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_of(plain_body)
    g = generate(spec, plain_body.body)
    optimized = key_material(spec, g, host_options(()), "host")
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert key_material(spec, g, host_options(()), "host") != optimized


def test_gpu_images_carry_line_info_by_default() -> None:
    assert "-lineinfo" in build_options("sm_90", "cubin")


def test_line_info_is_asked_once_when_the_user_asks_too() -> None:
    assert build_options("sm_90", "cubin", ["-lineinfo"]).count("-lineinfo") == 1
    assert "-lineinfo" not in build_options("sm_90", "cubin", ["-G"])


def test_the_cubin_names_this_file_in_its_line_table(isolated_cache: Path) -> None:
    build = plain_body.inspect(np.zeros(8, np.float32), np.zeros(8, np.float32), arch="sm_90")
    assert b".debug_line" in build.cubin
    # DWARF's line table holds a file as its directory and its name
    assert str(Path(THIS_FILE).parent).encode() + b"\x00" in build.cubin
    assert Path(THIS_FILE).name.encode() + b"\x00" in build.cubin


def text_section(cubin: bytes, name: str) -> bytes:
    """Section ``name`` of an ELF64 cubin (the kernel's instructions are ``.text.<entry>``)."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * size) for i in range(count)]
    strings = headers[names][4]
    for header in headers:
        start = strings + header[0]
        if cubin[start : cubin.index(b"\0", start)] == name.encode():
            return cubin[header[4] : header[4] + header[5]]
    raise KeyError(name)


def test_line_info_changes_no_instruction() -> None:
    g = generate(spec_of(fstring_body), fstring_body.body)
    plain = tuple(o for o in build_options("sm_90", "cubin") if o != "-lineinfo")
    with_lines, without = (
        compile_source(g.cuda_source, f"{g.entry}.cu", options, "cubin").image
        for options in (plain + ("-lineinfo",), plain)
    )
    assert with_lines != without
    assert text_section(with_lines, f".text.{g.entry}") == text_section(without, f".text.{g.entry}")


GDB_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import kerneldsl as kd

    @kd.kernel(grid=1, block=4)
    def doubled(y: kd.Out["float32", "n"], x: kd.In["float32", "n"]) -> str:
        return '''
        index_t i = threadIdx.x;
        float twice = x[i] * 2.0f;
        y[i] = twice;
        '''

    with kd.Session(device="cpu"):
        x = np.arange(4, dtype=np.float32) + 1
        y = np.zeros(4, np.float32)
        doubled(y, x)
        print("done", y.tolist())
    """
)


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
def test_gdb_stops_at_a_body_line_of_the_users_file_in_a_debug_build(cpu: Any, tmp_path: Path) -> None:
    script = tmp_path / "user_kernel.py"
    script.write_text(GDB_SCRIPT)
    store = next(i for i, text in enumerate(GDB_SCRIPT.split("\n"), start=1) if "y[i] = twice;" in text)
    env = {
        **os.environ,
        DEBUG_ENV: "1",
        "KERNELDSL_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    commands = ["set breakpoint pending on", f"break user_kernel.py:{store}", "run", "print twice", "kill"]
    argv = [
        "gdb",
        "-q",
        "-batch",
        "-nx",
        *(a for c in commands for a in ("-ex", c)),
        "--args",
        sys.executable,
        str(script),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert f"user_kernel.py:{store}" in done.stdout, done.stdout + done.stderr
    assert re.search(r"^\$1 = 2$", done.stdout, re.M), done.stdout  # thread 0: x[0] * 2
