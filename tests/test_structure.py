"""The shape of the package: one name per module, one door to the driver, one C contract."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import kerneldsl
from kerneldsl.errors import ExtraNotInstalledError
from kerneldsl.jit.codegen import templates_dir

PACKAGE = Path(kerneldsl.__file__).parent


def _modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(kerneldsl.__path__, "kerneldsl.")]


@pytest.mark.parametrize("name", _modules())
def test_importing_a_module_by_name_gives_that_module(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ExtraNotInstalledError as missing:  # a benchmark baseline that is not installed here
        pytest.skip(str(missing))
    parent, _, leaf = name.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is module


def _session_private_names() -> set[str]:
    """Every ``self._x`` attribute and ``_x`` method the Session class defines."""
    tree = ast.parse((PACKAGE / "runtime" / "session.py").read_text())
    (session,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session"]
    names = {n.name for n in session.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")}
    for node in ast.walk(session):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                names.add(node.attr)
    return names - {"__init__", "__enter__", "__exit__", "__repr__"}


def _library_files() -> list[Path]:
    """Library modules outside runtime/; bench/ measures raw driver calls as baselines on purpose."""
    return [
        p
        for p in PACKAGE.rglob("*.py")
        if p.parent.name not in ("runtime", "bench") and p.parent.parent.name != "runtime"
    ]


def _driver_touches(source: str, label: str, private: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{label}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module and "bindings" in node.module:
            if any(a.name == "driver" for a in node.names) or node.module.endswith(".driver"):
                found.append(f"{where} imports the CUDA driver bindings")
        elif isinstance(node, ast.Import) and any(a.name.startswith("cuda.bindings.driver") for a in node.names):
            found.append(f"{where} imports the CUDA driver bindings")
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            bindings = node.attr == "api" and _is_session(node.value)  # Session.api: the driver bindings
            if bindings or (owner == "driver" and node.attr in ("api", "ensure_init", "check")):
                found.append(f"{where} calls the driver directly ({node.attr})")
            elif node.attr in private and owner != "self":
                found.append(f"{where} reads Session.{node.attr}")
    return found


def test_only_the_runtime_touches_the_driver_or_private_session_state() -> None:
    private = _session_private_names()
    assert {"_deferred", "_state", "_poison", "_activation"} <= private  # the scan sees what it must
    touches = [
        t
        for path in _library_files()
        for t in _driver_touches(path.read_text(), str(path.relative_to(PACKAGE)), private)
    ]
    assert touches == []


def test_the_driver_door_check_catches_private_reads_and_driver_calls() -> None:
    offender = "from cuda.bindings import driver\ndef f(session):\n    return session._state, session.api.cuInit(0)\n"
    assert len(_driver_touches(offender, "offender.py", _session_private_names())) == 3


# Names a session goes by in the package: ``session._x``, ``s._x``, ``self.session._x``, ...
_SESSION_NAMES = frozenset({"session", "sess", "s", "s1", "s2", "owner"})


def _is_session(node: ast.expr) -> bool:
    """Whether ``node`` reads like a session object (a heuristic on its name)."""
    if isinstance(node, ast.Name):
        return node.id in _SESSION_NAMES
    return isinstance(node, ast.Attribute) and node.attr in ("session", "_session")


def _session_private_reads(source: str, label: str) -> list[str]:
    """``file:line`` of every ``<session>._x`` in ``source`` (dunders aside)."""
    return [
        f"{label}:{node.lineno} reads {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and _is_session(node.value)
    ]


def test_only_the_session_modules_read_private_members_of_a_session() -> None:
    outside = [p for p in PACKAGE.rglob("*.py") if not (p.parent.name == "runtime" and p.name.startswith("session"))]
    reads = [r for p in outside for r in _session_private_reads(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert reads == []


def test_the_session_privacy_check_names_each_private_read() -> None:
    offender = "def f(session, s):\n    return session._deferred, s._lock, self.session._d, session.__class__, s.api\n"
    assert _session_private_reads(offender, "offender.py") == [
        "offender.py:2 reads session._deferred",
        "offender.py:2 reads s._lock",
        "offender.py:2 reads self.session._d",
    ]


def test_the_launch_limits_and_the_table_encoding_are_written_once() -> None:
    """``runtime/limits.py`` spells the launch limits (the C path is handed them when configured)
    and ``_fastlaunch.c`` the table encoding and sizes (``fastpath`` reads them from the module);
    no other module, nor the adapter template, restates either."""
    limits = ("65535", "48 * 1024", "2147483647", "MAX_GRID =", "MAX_BLOCK =", "MAX_BLOCK_XY", "MAX_GRID_X")
    encoding = ('"MAX_ARGS": 64', '"sym32": 1', '"floordiv": 6')
    python = [p for p in PACKAGE.rglob("*.py") if "bench" not in p.relative_to(PACKAGE).parts]
    sources = [*python, PACKAGE / "_fastlaunch.c", templates_dir() / "adapter.py.j2"]
    texts = {p.name if p.suffix != ".py" else str(p.relative_to(PACKAGE)): p.read_text() for p in sources}
    assert [name for name, text in texts.items() if any(s in text for s in limits)] == ["runtime/limits.py"]
    assert [name for name, text in texts.items() if any(s in text for s in encoding)] == []


MODULE_LINES, CLASS_LINES = 600, 300  # issue 19: one concern a module, one role a class


def _too_long(source: str, label: str) -> list[str]:
    """``label`` if the module is over MODULE_LINES, and each class in it over CLASS_LINES."""
    lines = source.count("\n")
    found = [f"{label}: {lines} lines"] if lines > MODULE_LINES else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > CLASS_LINES:
                found.append(f"{label}:{node.lineno} class {node.name}: {length} lines")
    return found


def test_no_module_is_over_600_lines_and_no_class_over_300() -> None:
    """The C launch path aside; generated template modules (an installed package's) are not ours to split."""
    from kerneldsl.jit.template_options import COMPILED_DIR

    offenders = [
        found
        for path in sorted(PACKAGE.rglob("*.py"))
        if COMPILED_DIR not in path.parts
        for found in _too_long(path.read_text(), str(path.relative_to(PACKAGE)))
    ]
    assert offenders == [], "split by concern:\n" + "\n".join(offenders)


def test_the_length_check_names_a_long_module_and_a_long_class() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(CLASS_LINES))
    source = f"class Big:\n{body}\n" + "\n" * (MODULE_LINES - CLASS_LINES)
    assert _too_long(source, "big.py") == ["big.py: 601 lines", f"big.py:1 class Big: {CLASS_LINES + 1} lines"]


def test_the_type_stub_names_exactly_the_public_api() -> None:
    """``__init__.pyi`` gives checkers every lazy name, from its home, as an explicit re-export."""
    tree = ast.parse((PACKAGE / "__init__.pyi").read_text())
    imports = [node for node in tree.body if isinstance(node, ast.ImportFrom)]
    declared = {("." + (node.module or ""), alias.name, alias.asname) for node in imports for alias in node.names}
    package = {name: path.rpartition(".")[0] or "." for name, path in kerneldsl._MODULES.items()}
    homes = {"__version__": "._version", **{name: home or package[name] for name, home in kerneldsl._HOMES.items()}}
    assert declared == {(home, name, name) for name, home in homes.items()}
    (names,) = [node.value for node in tree.body if isinstance(node, ast.Assign)]
    assert ast.literal_eval(names) == kerneldsl.__all__


def test_reduction_templates_are_one_a_stage_with_the_accumulator_chosen_in_python() -> None:
    """Issue 19 item 4: a template per stage over shared macros; whether the accumulator carries
    an index is decided by which macro file Python hands the template, never by a template test."""
    import re

    from kerneldsl.array.reduction import kernel

    templates = sorted(set(kernel._TEMPLATES.values()))
    assert templates == [
        f"reduction_{s}.cu.j2"
        for s in ("columns", "full", "gather", "host_columns", "host_rows", "lines", "rows", "segments", "slabs")
    ]  # reduction_host_*: the CPU device's stages, a thread a run
    shared = ["reduction.cuh.j2", "reduction_value.cuh.j2", "reduction_indexed.cuh.j2"]
    shared += ["reduction_host.cuh.j2", "reduction_host_value.cuh.j2", "reduction_host_indexed.cuh.j2"]
    for name in templates + shared:
        text = (templates_dir() / name).read_text()
        tests = re.findall(r"{%-?\s*(?:el)?if\s+([^%]*)%}", text)
        assert len(tests) <= 4, (name, tests)
        assert not any("indexed" in t for t in tests), (name, tests)


# -- the runtime imports nothing above it (issue 19 item 1) ----------------------------------------

_ABOVE_THE_RUNTIME = ("kerneldsl.array", "kerneldsl.blas", "kerneldsl.device_array", "kerneldsl.distributed")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(
    source: str, module: str, *, is_package: bool, skip: str | None = None, for_checkers: bool = True
) -> list[tuple[int, str]]:
    """``(line, absolute name)`` of everything ``source`` imports, wherever the statement is (in a
    function, under TYPE_CHECKING), ``importlib.import_module("...")`` included; ``from X import a``
    gives ``X`` and ``X.a`` (``a`` may be a module). The body of the function named ``skip`` is left
    out, and so are TYPE_CHECKING blocks unless ``for_checkers`` (imports that never run)."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    skipped = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == skip for n in ast.walk(f)}
    if not for_checkers:
        checker_only = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
        skipped |= {id(n) for block in checker_only for n in ast.walk(block)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            source_name = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            found += [(node.lineno, source_name), *((node.lineno, f"{source_name}.{a.name}") for a in node.names)]
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, importlib.util.resolve_name(node.args[0].value, package)))
    return found


def _upward_imports(source: str, label: str, module: str, *, is_package: bool = False) -> list[str]:
    """``file:line`` of each import in a runtime module of the array layer, ops, blas or distributed."""
    return sorted(
        {
            f"{label}:{line} imports {name}"
            for line, name in _imports(source, module, is_package=is_package)
            if any(name == above or name.startswith(f"{above}.") for above in _ABOVE_THE_RUNTIME)
        }
    )


def test_the_runtime_imports_nothing_from_the_layers_above_it() -> None:
    """No module under runtime/ imports the array layer, ops, blas or distributed: not at import
    time, not lazily in a function, not under TYPE_CHECKING (the array layer registers its
    DeviceArray with the runtime instead)."""
    runtime = sorted((PACKAGE / "runtime").rglob("*.py"))
    assert len(runtime) > 10  # the scan sees the runtime
    found = [
        hit
        for path in runtime
        for hit in _upward_imports(
            path.read_text(), str(path.relative_to(PACKAGE)), _module_name(path), is_package=path.name == "__init__.py"
        )
    ]
    assert found == []


def test_the_upward_import_check_names_each_import_of_a_layer_above() -> None:
    offender = (
        "from typing import TYPE_CHECKING\n"
        "from ..errors import ClosedError\n"
        "if TYPE_CHECKING:\n"
        "    from ..array.ndarray import DeviceArray\n"
        "def f():\n"
        "    from ..array import ops\n"
        "    import kerneldsl.blas\n"
        "    return importlib.import_module('kerneldsl.distributed')\n"
    )
    assert _upward_imports(offender, "runtime/offender.py", "kerneldsl.runtime.offender") == [
        "runtime/offender.py:4 imports kerneldsl.array.ndarray",
        "runtime/offender.py:4 imports kerneldsl.array.ndarray.DeviceArray",
        "runtime/offender.py:6 imports kerneldsl.array",
        "runtime/offender.py:6 imports kerneldsl.array.ops",
        "runtime/offender.py:7 imports kerneldsl.blas",
        "runtime/offender.py:8 imports kerneldsl.distributed",
    ]


def _import_graph(for_checkers: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, by every import statement (lazy ones, and
    TYPE_CHECKING ones ``for_checkers``) but the lazy facade (``kerneldsl.__getattr__``);
    importing a module imports its packages too."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        is_package = path.name == "__init__.py"
        skip = "__getattr__" if module == "kerneldsl" else None
        targets: set[str] = set()
        for _, name in _imports(path.read_text(), module, is_package=is_package, skip=skip, for_checkers=for_checkers):
            parts = name.split(".")
            known = [".".join(parts[:n]) for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in paths]
            targets.update(t for t in known if not module.startswith(f"{t}.") and t != module)
        graph[module] = targets
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def _cycles_leaving_the_runtime(graph: dict[str, set[str]]) -> list[str]:
    """``runtime module <-> outside module`` for each pair on one import cycle."""
    reach = {m: _reachable(graph, m) for m in graph}
    runtime = [m for m in graph if m.startswith("kerneldsl.runtime")]
    return sorted(
        f"{r} <-> {m}" for r in runtime for m in reach[r] if not m.startswith("kerneldsl.runtime") and r in reach[m]
    )


def test_no_import_cycle_runs_through_the_runtime_and_a_layer_outside_it() -> None:
    """The runtime sits at the bottom of the house: nothing it imports, however indirectly,
    imports it back (cycles among the runtime's own modules, annotations naming each other, stay
    inside it)."""
    graph = _import_graph()
    assert "kerneldsl.array.ndarray" in graph["kerneldsl.device_array.sessions"]  # the graph sees what it must
    assert "kerneldsl.runtime.memory" in graph["kerneldsl.array.ndarray"]
    assert _cycles_leaving_the_runtime(graph) == []


def _modules_on_cycles(graph: dict[str, set[str]]) -> list[str]:
    reach = {m: _reachable(graph, m) for m in graph}
    return sorted(m for m in graph if m in reach[m])


def test_no_import_that_runs_closes_a_loop_anywhere_in_the_package() -> None:
    """Every import that runs, at import time or lazily in a function, points down the house:
    ``DeviceArray`` calls the engine and cuBLAS through ``array.engine``, the door the package root
    installs, and they know it through the runtime's registration (``memory.array_type``)."""
    graph = _import_graph(for_checkers=False)
    assert "kerneldsl.array.ops" in graph["kerneldsl"]  # the root's lazy imports are in the graph
    assert _modules_on_cycles(graph) == []


_ARRAY_AND_ABOVE = ("kerneldsl.array", "kerneldsl.blas", "kerneldsl.device_array")


def _lazy_array_imports(path: Path) -> list[str]:
    """``file:line`` of each import of the array layer or cuBLAS made inside a function of ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for function in ast.walk(ast.parse(path.read_text()))
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.ImportFrom)
        and importlib.util.resolve_name("." * node.level + (node.module or ""), package).startswith(_ARRAY_AND_ABOVE)
    ]


def test_the_array_layers_reach_the_engine_and_cublas_only_through_the_door() -> None:
    """``DeviceArray``'s surface reaches the op table, the dtype variants and cuBLAS through
    ``array/engine.py``, whose openers the package root installs (opened on first use, so that
    declaring a kernel stays cheap, and never an import from below): no module of the array
    layers hand-rolls a lazy import of them."""
    paths = sorted([*(PACKAGE / "array").rglob("*.py"), *(PACKAGE / "device_array").rglob("*.py")])
    assert [hit for path in paths for hit in _lazy_array_imports(path)] == []
    assert len(_lazy_array_imports(PACKAGE / "__init__.py")) == 3  # the door's three openers


def test_the_door_opens_the_op_table_the_dtype_variants_cublas_matmul_and_the_namespace() -> None:
    from kerneldsl import array_api
    from kerneldsl.array import dtype_variants, engine, ops
    from kerneldsl.blas import np_matmul

    opened = (engine.ops(), engine.dtype_variants(), engine.products(), engine.namespace())
    assert opened == (ops, dtype_variants, np_matmul, array_api)


# The library's clients: they use the public names (``kd.``) as a program does.
_CLIENTS = ("kerneldsl.bench", "kerneldsl.cli")


def _root_imports(source: str, label: str, module: str, *, is_package: bool = False) -> list[str]:
    """``file:line`` of each import of the package root itself (``import kerneldsl``, ``from
    kerneldsl import kernel``; not ``from .. import dtypes``, a module of its own floor)."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "kerneldsl" for a in node.names):
            found.append(f"{label}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom):
            source_name = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            if source_name == "kerneldsl" and not all(_is_module(f"kerneldsl.{a.name}") for a in node.names):
                found.append(f"{label}:{node.lineno}")
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_the_library_reaches_its_modules_by_their_homes_never_through_the_public_root() -> None:
    """The package root's names reach every floor, so a module that imported it would import
    upward unseen; only the library's clients (the benchmarks, the command line) use ``kd.``."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    found = [
        hit
        for module, path in sorted(paths.items())
        if module != "kerneldsl" and not module.startswith(_CLIENTS)
        for hit in _root_imports(
            path.read_text(), str(path.relative_to(PACKAGE)), module, is_package=path.name == "__init__.py"
        )
    ]
    assert found == []


def test_the_root_import_check_names_import_kerneldsl_and_a_public_name_not_a_module() -> None:
    source = "import kerneldsl\nfrom .. import dtypes\nfrom kerneldsl import kernel\nfrom kerneldsl import logs\n"
    assert _root_imports(source, "x.py", "kerneldsl.array.x") == ["x.py:1", "x.py:3"]


def test_the_loop_check_names_the_modules_on_a_lazy_loop() -> None:
    graph = {
        "kerneldsl.array.ndarray": {"kerneldsl.array.ops"},
        "kerneldsl.array.ops": {"kerneldsl.array.elementwise"},
        "kerneldsl.array.elementwise": {"kerneldsl.array.ndarray", "kerneldsl.runtime.memory"},
        "kerneldsl.runtime.memory": set(),
    }
    on_cycles = ["kerneldsl.array.elementwise", "kerneldsl.array.ndarray", "kerneldsl.array.ops"]
    assert _modules_on_cycles(graph) == on_cycles


def test_the_cycle_check_names_a_runtime_module_on_a_loop_with_an_upper_one() -> None:
    graph = {
        "kerneldsl.runtime.memory": {"kerneldsl.array.ops"},
        "kerneldsl.array.ops": {"kerneldsl.array.ndarray"},
        "kerneldsl.array.ndarray": {"kerneldsl.runtime.memory"},
        "kerneldsl.runtime.session": {"kerneldsl.runtime.memory"},
    }
    assert _cycles_leaving_the_runtime(graph) == [
        "kerneldsl.runtime.memory <-> kerneldsl.array.ndarray",
        "kerneldsl.runtime.memory <-> kerneldsl.array.ops",
    ]


# -- the floors: no folder imports one above it (issue 41) -----------------------------------------

# Bottom to top: the foundation modules, the disk cache, the runtime (the driver door), the compile
# pipeline, the Kernel and its launch paths, the array engine, cuBLAS, kd.DeviceArray's surface,
# the front ends on top.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("_version", "errors", "dtypes", "logs", "progress", "installed"),
    ("cache",),
    ("runtime",),
    ("jit",),
    ("launch",),
    ("array",),
    ("blas",),
    ("device_array",),
    ("distributed", "tune", "torch"),
    ("array_api",),
    ("bench",),
    ("cli",),
)


def _floor(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    (floor,) = [n for n, names in enumerate(FLOORS) if top in names] or [len(FLOORS)]  # the facade: above all
    return floor


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for each import that points to a higher floor."""
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if _floor(t) > _floor(m))


def test_every_folder_and_top_level_module_has_a_floor() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert modules - {"__init__"} == {name for names in FLOORS for name in names}


def test_no_folder_imports_one_above_it() -> None:
    """Every import, at import time, lazily in a function or under TYPE_CHECKING, points to the
    importer's floor or one below (``kd.DeviceArray`` is the array layer's own, so the engine and
    cuBLAS name their results without looking up; the remote handles the entry points route are
    named by ``launch.routing.RemoteHandle``)."""
    graph = _import_graph(for_checkers=True)
    assert ("kerneldsl", "kerneldsl.blas.np_matmul") in {(m, t) for m, ts in graph.items() for t in ts}
    assert "kerneldsl.array.ndarray" in graph["kerneldsl.blas.matmul"]  # annotations are in the graph
    assert _upward(graph) == []


def _folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the package's folders and top-level modules (the root aside)."""
    top = {m: m.split(".")[1] for m in graph if m != "kerneldsl"}
    folders: dict[str, set[str]] = {name: set() for name in top.values()}
    for m, targets in graph.items():
        if m in top:
            folders[top[m]].update(top[t] for t in targets if t in top and top[t] != top[m])
    return folders


def test_no_folders_import_each_other_even_through_annotations() -> None:
    folders = _folders(_import_graph(for_checkers=True))
    assert "runtime" in folders["array"] and "array" in folders["device_array"]  # the graph sees what it must
    assert _cycles(folders) == set()


def test_the_folder_graph_names_a_loop_between_two_folders() -> None:
    graph = {
        "kerneldsl.array.ops": {"kerneldsl.device_array.ndarray"},
        "kerneldsl.device_array.ndarray": {"kerneldsl.array.engine"},
        "kerneldsl.array.engine": set(),
    }
    assert _cycles(_folders(graph)) == {frozenset({"array", "device_array"})}


def test_the_floor_check_names_an_upward_import() -> None:
    graph = {"kerneldsl.jit.build": {"kerneldsl.launch.resources", "kerneldsl.runtime.session"}}
    assert _upward(graph) == ["kerneldsl.jit.build -> kerneldsl.launch.resources"]


# -- the compile pipeline speaks no array words (issue 41 item 3) ----------------------------------

# Parts of identifiers that belong to the array layer: its families, the decisions they report and
# its per-call plans; ``jit/`` carries a body's decisions as an opaque record and never names them.
ARRAY_WORDS = frozenset(
    {"elementwise", "reduction", "reducer", "scan", "fused", "plan"}
    | {"stage", "accumulation", "vector", "strategy", "passes", "shifted", "carried", "lanes", "layout"}
)


def _words(name: str) -> set[str]:
    """The lower-case parts of a snake_case, CamelCase or dotted name."""
    import re

    return set(re.sub(r"(?<=[a-z0-9])(?=[A-Z])|\.", "_", name).lower().split("_")) - {""}


def _array_words(source: str, label: str) -> list[str]:
    """``file:line name`` for each name in ``source`` (variables, attributes, parameters, keywords,
    definitions, imported modules and names) with an array word among its parts."""
    return [
        f"{label}:{node.lineno} {name}"
        for node in ast.walk(ast.parse(source))
        if hasattr(node, "lineno")
        for attribute in ("id", "attr", "arg", "name", "module")
        if isinstance(name := getattr(node, attribute, None), str) and ARRAY_WORDS & _words(name)
    ]


def test_the_compile_pipeline_names_no_array_vocabulary() -> None:
    """No module under jit/ imports the array layer (for checkers either) or names its families,
    decisions or plans: a generated body's decisions travel through it as an opaque record."""
    jit = sorted((PACKAGE / "jit").rglob("*.py"))
    assert len(jit) > 10  # the scan sees the pipeline
    graph = _import_graph()
    above = [f"{m} -> {t}" for m in graph if m.startswith("kerneldsl.jit") for t in graph[m] if _floor(t) > _floor(m)]
    words = [hit for path in jit for hit in _array_words(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert (above, words) == ([], [])


def test_the_array_word_check_names_each_identifier() -> None:
    source = (
        "from .launch_plan import LaunchPlan\n"
        "def body(vector_width: int, text: str) -> None:\n"
        "    reduction_stage = text.split()\n"
        "    return plan.run(fast=True)\n"
    )
    assert sorted(_array_words(source, "jit/x.py")) == [
        "jit/x.py:1 LaunchPlan",
        "jit/x.py:1 launch_plan",
        "jit/x.py:2 vector_width",
        "jit/x.py:3 reduction_stage",
        "jit/x.py:4 plan",
    ]


def _defined_names(path: Path) -> list[str]:
    """The classes and module-level names ``path`` defines."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.Assign):
            found += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append(node.target.id)
    return found


def test_plan_and_layout_each_name_one_thing() -> None:
    """A *Plan class is an array callable's plan (array/); ``Layout`` is a memory layout, shape
    and byte strides, defined once (runtime/views.py): docs/layout.md's glossary."""
    where: dict[str, set[str]] = {"Plan": set(), "Layout": set()}
    for path in PACKAGE.rglob("*.py"):
        for name in _defined_names(path):
            if name.endswith("Plan"):
                where["Plan"].add(path.relative_to(PACKAGE).parts[0])
            if name.strip("_") == "Layout":
                where["Layout"].add(str(path.relative_to(PACKAGE)))
    assert where == {"Plan": {"array"}, "Layout": {"runtime/views.py"}}


# -- no loop, annotations included -----------------------------------------------------------------


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The modules of each import cycle: every set of two or more that reach one another."""
    reach = {m: _reachable(graph, m) for m in graph}
    return {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in graph if m in reach[m]}


def test_no_import_closes_a_loop_even_through_annotations() -> None:
    """Every import, at import time, lazily in a function or under TYPE_CHECKING, points down the
    house or sideways without a loop: the array layer and cuBLAS may name ``kd.DeviceArray`` (their
    results) in annotations, since the class reaches them only through ``array.engine``'s door (the
    compile pipeline's own: ``jit/build`` and ``jit/attributes``, is gone: the attributes take the
    image, not the build)."""
    graph = _import_graph(for_checkers=True)
    assert "kerneldsl.jit.build" in graph["kerneldsl.launch.dispatch"]  # the graph sees what it must
    assert "kerneldsl.array.ndarray" in graph["kerneldsl.array.ops"]  # and annotations
    assert "kerneldsl.jit.build" not in _reachable(graph, "kerneldsl.jit.attributes")
    assert _cycles(graph) == set()


def test_the_cycle_listing_names_each_loop_by_its_modules() -> None:
    graph = {
        "kerneldsl.jit.build": {"kerneldsl.jit.attributes"},
        "kerneldsl.jit.attributes": {"kerneldsl.jit.build", "kerneldsl.runtime.occupancy"},
        "kerneldsl.runtime.occupancy": set(),
        "kerneldsl.launch.bound": {"kerneldsl.launch.fastpath"},
        "kerneldsl.launch.fastpath": {"kerneldsl.launch.bound"},
    }
    assert _cycles(graph) == {
        frozenset({"kerneldsl.jit.build", "kerneldsl.jit.attributes"}),
        frozenset({"kerneldsl.launch.bound", "kerneldsl.launch.fastpath"}),
    }


# -- one warm path (issue 41 item 2) ---------------------------------------------------------------

WARM_PATH = Path("launch") / "warm.py"
# What the warm path may be called outside its module: the method every plan implements (its
# Entry protocol) and the front's C methods (``_fastlaunch``'s names).
_WARM_PATH_USES = frozenset({"warm_entry", "_remember_launch", "_forget_launches", "_remembered_launches"})


def _warm_path_duplicates(source: str, label: str) -> list[str]:
    """``file:line`` of each piece of a warm path of its own in ``source``: a class or function
    named for warm entries or remembering them, a table of its own (a ``BoundedCache`` subclass
    other than the plan cache, whose plans are the full path's), or a C launch remembered on a
    front without ``warm.remember``/``CEntry``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{label}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name not in _WARM_PATH_USES:
            if "warm" in node.name.lower() or "remember" in node.name.lower():
                found.append(f"{where} defines {node.name}")
        if isinstance(node, ast.ClassDef) and node.name != "PlanCache":
            if any(ast.unparse(base).endswith("BoundedCache") for base in node.bases):
                found.append(f"{where} subclasses BoundedCache ({node.name})")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "_remember_launch":
            found.append(f"{where} remembers a C launch itself")
    return found


def test_the_warm_path_is_one_module() -> None:
    """Kernels, elementwise ops, reductions, scans, fused functions and gemm keep their warm
    entries through ``launch/warm.py`` (its key, its Entry protocol, its bounded table); no other
    module defines a warm path of its own. The benchmarks time warm calls (their names say so);
    kd.torch's warm call is generated per declaration over torch tensors
    (``templates/torch_warm.py.j2``), outside the DeviceArray entry protocol."""
    paths = [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE) != WARM_PATH and p.relative_to(PACKAGE).parts[0] not in ("bench", "torch")
    ]
    found = [hit for p in paths for hit in _warm_path_duplicates(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert found == []
    warm_path = (PACKAGE / WARM_PATH).read_text()
    assert all(f"class {name}" in warm_path for name in ("BoundedCache", "WarmPath", "Entry", "CEntry", "GridLaunch"))


def test_the_warm_path_check_names_each_duplicate() -> None:
    offender = (
        "class WarmLaunches(BoundedCache):\n"
        "    pass\n"
        "class Plans(kernels.BoundedCache):\n"
        "    def remember(self, front):\n"
        "        front._remember_launch(self.entry)\n"
        "def warm_entry(plan): ...\n"
    )
    assert _warm_path_duplicates(offender, "offender.py") == [
        "offender.py:1 defines WarmLaunches",
        "offender.py:1 subclasses BoundedCache (WarmLaunches)",
        "offender.py:3 subclasses BoundedCache (Plans)",
        "offender.py:4 defines remember",
        "offender.py:5 remembers a C launch itself",
    ]


def test_the_warm_path_sits_on_no_import_cycle() -> None:
    """``launch/warm.py`` imports nothing of the launch folder, ``bound`` takes its CEntry from it
    and ``fastpath`` (the C path's Python side) both: no loop, not even through an annotation."""
    graph = _import_graph()
    warm_path = {"kerneldsl.launch.warm", "kerneldsl.launch.fastpath", "kerneldsl.launch.bound"}
    assert "kerneldsl.launch.warm" in graph["kerneldsl.launch.bound"]  # the graph sees what it must
    assert warm_path & set(_modules_on_cycles(graph)) == set()
