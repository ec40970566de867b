"""Builds specbench's CPU kernel (specbench/model/kernels/cpu_kernels.cc) at `pip install`; pyproject.toml
holds everything else.

The kernel is compiled against jaxlib's FFI headers (a build requirement) with the system's g++.
It is optional: where it cannot build, the install goes on without it, and specbench says so in one
line at run time and uses XLA's own products (specbench/model/kernels/cpu.py).
"""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildKernel(build_ext):
    """build_ext with jaxlib's FFI headers on the include path, found without importing jax."""

    def build_extensions(self):
        spec = importlib.util.find_spec("jaxlib")
        if spec is not None and spec.submodule_search_locations:
            include = Path(list(spec.submodule_search_locations)[0]) / "include"
            for ext in self.extensions:  # a system include: its own warnings are not ours to show
                ext.extra_compile_args += ["-isystem", str(include)]
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "specbench.model.kernels._cpu_kernels",
            ["specbench/model/kernels/cpu_kernels.cc"],
            language="c++",
            extra_compile_args=["-O3", "-std=c++17", "-Wno-psabi"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": BuildKernel},
)
