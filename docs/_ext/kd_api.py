"""The API reference written from the package itself: ``.. kd-names:: MODULE`` documents the public
names of ``MODULE`` (its ``__all__``, or the names given), each with the autodoc directive that fits
it, and the build fails (a warning under ``-W``) when a public name of ``kerneldsl`` or of one of its
public submodules is documented nowhere.

So a name added to ``kd.__all__`` or to ``kd.ops`` appears in the reference without editing a page,
and one the reference lost is a broken build, not a silent gap.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import numpy as np
from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from kd_public import MEMBERS, PUBLIC_MODULES, public_module, public_names
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


def _directive(qualified: str, value: Any) -> list[str]:
    if isinstance(value, types.ModuleType):
        return [f"* :mod:`{qualified}`: see its own section", ""]
    module, _, name = qualified.rpartition(".")
    if isinstance(value, type) and value.__module__ == "numpy":  # kd's dtypes: numpy's scalar types
        return [f".. py:data:: {name}", f"   :module: {module}", "", f"   ``numpy.{value.__name__}``, as a dtype.", ""]
    if isinstance(value, np.dtype):  # the Array API's dtypes: numpy's dtype objects
        return [f".. py:data:: {name}", f"   :module: {module}", "", f"   ``numpy.dtype('{value.name}')``.", ""]
    if isinstance(value, type):
        members = MEMBERS.get(qualified)
        bases = (
            [":show-inheritance:"]
            if issubclass(value, BaseException)
            else [f":members: {members}" if members else ":members:"]
        )
        return [f".. autoclass:: {qualified}", *(f"   {b}" for b in bases), ""]
    canonical = getattr(value, "__name__", name)
    if callable(value) and canonical != name and getattr(public_module(module), canonical, None) is value:
        signature = str(inspect.signature(value))  # an alias (``kd.ops.absolute``): one entry holds the docs
        return [
            f".. py:function:: {name}{signature}",
            f"   :module: {module}",
            "",
            f"   The same as :func:`{canonical}`.",
            "",
        ]
    if callable(value):
        return [f".. autofunction:: {qualified}", ""]
    return [f".. autodata:: {qualified}", "   :no-value:", ""]


def _documented(env: Any) -> set[str]:
    """The names documented so far, kept in the environment (pickled with it between builds)."""
    if not hasattr(env, "kd_documented"):
        env.kd_documented = set()
    documented: set[str] = env.kd_documented
    return documented


class KdNames(SphinxDirective):
    """``.. kd-names:: MODULE`` with optional ``:names:`` (a subset, in that order) and ``:exclude:``."""

    required_arguments = 1
    option_spec = {"names": directives.unchanged, "exclude": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        module_name = self.arguments[0]
        module = public_module(module_name)
        names = self.options["names"].split() if "names" in self.options else public_names(module)
        excluded = set(self.options.get("exclude", "").split())
        documented = _documented(self.env)
        lines: list[str] = []
        for name in names:
            if name in excluded:
                continue
            value = getattr(module, name)
            documented.add(f"{module_name}.{name}")
            lines += _directive(f"{module_name}.{name}", value)
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=f"<kd-names {module_name}>"), self.content_offset, container)
        return container.children


def _check_coverage(app: Sphinx, env: Any) -> None:
    """Every public name has a reference entry."""
    for module_name in PUBLIC_MODULES:
        module = public_module(module_name)
        for name in public_names(module):
            if f"{module_name}.{name}" not in _documented(env):
                logger.warning("public name %s.%s has no entry in the API reference", module_name, name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("kd-names", KdNames)
    app.connect("env-updated", _check_coverage)
    return {"parallel_read_safe": False, "version": "1"}
