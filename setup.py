"""The package list and two build steps beyond the declarative metadata in pyproject.toml:

- every package under kerneldsl/ found by search, plus the top-level templates directory as
  kerneldsl.templates;
- the optional C launch path (kerneldsl/_fastlaunch.c): without a C compiler the package installs
  and runs in pure Python;
- the Jinja templates compiled into their code cache (kerneldsl/jit/template_cache.py) inside the built
  package, or inside the checkout for an editable install or an in-place build
  (``setup.py build_ext --inplace``), so that rendering parses no template.
"""

import importlib.util
import os
from types import ModuleType

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
CHECKOUT_TEMPLATES = os.path.join(ROOT, "templates")
# Found, never listed: a subpackage added under kerneldsl/ ships without anyone naming it. The
# templates are the one package outside that tree (pyproject.toml's package-dir maps it).
PACKAGES = [*find_packages(ROOT, include=["kerneldsl", "kerneldsl.*"]), "kerneldsl.templates"]


class BuildPyWithCompiledTemplates(build_py):
    def run(self) -> None:
        super().run()
        # an editable install renders the checkout's templates: their code cache is the checkout's
        installed = os.path.join(self.build_lib, "kerneldsl", "templates")
        _compile_templates(CHECKOUT_TEMPLATES if self.editable_mode else installed)


class BuildExtWithCompiledTemplates(build_ext):
    def run(self) -> None:
        super().run()
        if self.inplace:  # a checkout's build step: its templates compile in place as well
            _compile_templates(CHECKOUT_TEMPLATES)


def _compile_templates(templates: str) -> None:
    """The checkout's templates compiled into the code cache of the templates at ``templates``
    (the same files, where they are installed)."""
    import jinja2

    options = _load_by_path("template_options")
    code_cache = _load_by_path("template_cache")
    cache = code_cache.TemplateCodeCache(os.path.join(templates, options.COMPILED_DIR))
    loader = jinja2.FileSystemLoader(CHECKOUT_TEMPLATES)
    code_cache.compile_all(options.make_environment(jinja2, loader, bytecode_cache=cache))


def _load_by_path(name: str) -> ModuleType:
    """kerneldsl/jit/<name>.py by its path: an isolated build cannot import the package it is building
    (its dependencies are not installed there); these modules import only Jinja and the standard
    library."""
    spec = importlib.util.spec_from_file_location(
        f"_kerneldsl_{name}", os.path.join(ROOT, "kerneldsl", "jit", f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup(
    packages=PACKAGES,
    ext_modules=[Extension("kerneldsl._fastlaunch", ["kerneldsl/_fastlaunch.c"], optional=True)],
    cmdclass={"build_py": BuildPyWithCompiledTemplates, "build_ext": BuildExtWithCompiledTemplates},
)
