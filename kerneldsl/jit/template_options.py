"""How kerneldsl's Jinja templates are read: shared by ``codegen`` and by the package build,
which compiles the templates once (``setup.py``, into ``template_cache``'s code cache) so that
rendering in an installed kerneldsl never parses a template. Imports nothing, so the build can
load it."""

from typing import Any

COMPILED_DIR = "__pycache__"  # inside the templates directory: their compiled code, as Python keeps its own


def make_environment(jinja2: Any, loader: Any, **settings: Any) -> Any:
    """A ``jinja2.Environment`` (of the ``jinja2`` module passed in) with kerneldsl's settings."""
    return jinja2.Environment(
        loader=loader, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False, **settings
    )
