"""The C launch path is optional: without a C compiler the package installs and runs in pure Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kerneldsl._fastlaunch", ["kerneldsl/_fastlaunch.c"], optional=True)])
