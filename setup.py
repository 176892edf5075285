"""Two build steps beyond the declarative metadata in pyproject.toml:

- the optional C launch path (kerneldsl/_fastlaunch.c): without a C compiler the package installs
  and runs in pure Python;
- the Jinja templates compiled to Python modules inside the built package, so that an installed
  kerneldsl renders without parsing templates (a checkout falls back to parsing them).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildPyWithCompiledTemplates(build_py):
    def run(self) -> None:
        super().run()
        import jinja2

        from kerneldsl.template_options import COMPILED_DIR, make_environment

        env = make_environment(jinja2, jinja2.FileSystemLoader("templates"))
        env.compile_templates(os.path.join(self.build_lib, "kerneldsl", COMPILED_DIR), zip=None)


setup(
    ext_modules=[Extension("kerneldsl._fastlaunch", ["kerneldsl/_fastlaunch.c"], optional=True)],
    cmdclass={"build_py": BuildPyWithCompiledTemplates},
)
