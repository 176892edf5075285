"""Sphinx configuration: the guides (Markdown, through MyST) and the API reference, generated from
the docstrings of every public name (``_ext/kd_api.py``). CI builds it with ``-W -n``: a warning,
a broken reference or an undocumented public name fails the build."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # this checkout's kerneldsl, not an installed one
os.environ.setdefault("KERNELDSL_ARCH", "sm_90")  # importing never needs a GPU; this keeps it so

import kerneldsl  # noqa: E402
from kerneldsl.bench.report import markdown  # noqa: E402

# kd.ops and kd.random are the public names of modules that live in the array layer's folders
# (kerneldsl/array/ops.py, kerneldsl/device_array/random.py): autodoc imports a module by its dotted
# name, so the reference registers each public name as the module it means.
for _public in ("ops", "random"):
    sys.modules[f"kerneldsl.{_public}"] = getattr(kerneldsl, _public)

# The benchmark results page, written from the recorded results files at every build (and ignored
# by git): figures are never pasted by hand. Rewritten only when it changes, so Sphinx's
# incremental builds stay incremental.
_results_page = markdown((HERE / "results").glob("*.json"))
if not (HERE / "benchmarks.md").exists() or (HERE / "benchmarks.md").read_text() != _results_page:
    (HERE / "benchmarks.md").write_text(_results_page)

project = "kerneldsl"
author = "the kerneldsl authors"
copyright = "the kerneldsl authors"
version = release = kerneldsl.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "kd_api",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "results", "Thumbs.db", ".DS_Store"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Signatures show parameter names; types and meanings are in each docstring's Parameters section.
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_class_signature = "separated"
autoclass_content = "both"  # the class docstring, then __init__'s (its parameters)
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

nitpicky = True
# Type words of the docstrings' "Parameters" and "Returns" entries that name no documented object.
nitpick_ignore_regex = [
    ("py:class", r".*\s.*"),  # prose ("shape expression", "a tuple of int")
    ("py:class", r"[a-z_]+"),  # type words and builtins: array_like, optional, int, path
    ("py:class", r"(numpy|np|dask|distributed|cuda|torch|cupy)\..*"),
    ("py:class", r"(Any|Callable|Mapping|Sequence|Expr|Reduction|Scan|Kernel|Autotuned|DeviceFunction)(\[.*)?"),
    ("py:class", r"(DeviceArray|RemoteArray|RemoteFuture|Build|Step|Session|Stream|Event|Graph|GPUs|Client)"),
]

html_theme = "furo"
html_title = f"kerneldsl {release}"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # else every browser asks for /favicon.ico and logs a 404
html_show_sourcelink = False

# Guides other work adds beside these (docs/checks.md, docs/torch.md): listed when the file is there.
OPTIONAL_GUIDES = ("checks", "torch")


def _list_optional_guides(app: object, docname: str, source: list[str]) -> None:
    if docname == "index":
        present = [name for name in OPTIONAL_GUIDES if (HERE / f"{name}.md").exists()]
        source[0] = source[0].replace("<!-- optional guides -->", "\n".join(present))


def setup(app: object) -> None:
    app.connect("source-read", _list_optional_guides)  # type: ignore[attr-defined]
