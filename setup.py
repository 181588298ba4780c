"""Builds only the native extension bsb._C (everything else is declared in pyproject.toml).

The extension takes raw pointers and shapes and never links against libtorch, so it builds in seconds and
does not depend on the installed torch version. OpenMP is used when the compiler accepts -fopenmp.
"""

import glob
import os
import tempfile

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup


def _accepts(compiler, flag: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.cpp")
        with open(src, "w") as f:
            f.write("int main() { return 0; }\n")
        try:
            compiler.compile([src], output_dir=tmp, extra_postargs=[flag])
        except Exception:
            return False
    return True


class BuildExt(build_ext):
    def build_extensions(self):
        omp = _accepts(self.compiler, "-fopenmp")
        for ext in self.extensions:
            ext.extra_compile_args += ["-O3"] + (["-fopenmp"] if omp else [])
            ext.extra_link_args += ["-fopenmp"] if omp else []
        if not omp:
            print("bsb: the compiler does not accept -fopenmp; building bsb._C single-threaded")
        super().build_extensions()


setup(
    ext_modules=[Pybind11Extension("bsb._C", ["csrc/probe.cpp"], depends=sorted(glob.glob("csrc/*.h")), cxx_std=17)],
    cmdclass={"build_ext": BuildExt},
)
