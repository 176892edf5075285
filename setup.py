"""Two build steps beyond the declarative metadata in pyproject.toml:

- the optional C launch path (kerneldsl/_fastlaunch.c): without a C compiler the package installs
  and runs in pure Python;
- the Jinja templates compiled to Python modules inside the built package, so that an installed
  kerneldsl renders without parsing templates (a checkout falls back to parsing them).
"""

import importlib.util
import os
from types import ModuleType

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildPyWithCompiledTemplates(build_py):
    def run(self) -> None:
        super().run()
        import jinja2

        options = _load_template_options()
        env = options.make_environment(jinja2, jinja2.FileSystemLoader("templates"))
        env.compile_templates(os.path.join(self.build_lib, "kerneldsl", options.COMPILED_DIR), zip=None)


def _load_template_options() -> ModuleType:
    """kerneldsl/template_options.py by its path: an isolated build cannot import the package
    it is building (its dependencies are not installed there), and that module imports nothing."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kerneldsl", "template_options.py")
    spec = importlib.util.spec_from_file_location("_kerneldsl_template_options", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup(
    ext_modules=[Extension("kerneldsl._fastlaunch", ["kerneldsl/_fastlaunch.c"], optional=True)],
    cmdclass={"build_py": BuildPyWithCompiledTemplates},
)
