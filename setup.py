"""Build script: compiles rankopt's Cython kernels during ``pip install .``.

All Cython compiler directives live here, in ``CYTHON_DIRECTIVES``.  Set
``RANKOPT_CYTHON_DEBUG=1`` at build time to turn bounds checks, wraparound
and memoryview-initialisation checks on (and optimisation off) — use it when
a kernel is suspected of reading out of bounds:

    RANKOPT_CYTHON_DEBUG=1 pip install --no-build-isolation -e .

The kernels are translated and compiled in parallel, one job per core (``RANKOPT_BUILD_JOBS=N`` sets
another number).  pip builds in the source tree, so the generated C++ (``build/cython``) and the compiled
objects (``build/``) of one ``pip install .`` are reused by the next one from the same checkout: only
kernels whose sources changed are rebuilt.
"""

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("RANKOPT_CYTHON_DEBUG", "0") not in ("", "0")

CYTHON_DIRECTIVES = {
    "language_level": "3",
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": not DEBUG,
    "nonecheck": DEBUG,
    "embedsignature": True,
}

COMPILE_ARGS = ["-O0", "-g"] if DEBUG else ["-O3"]

KERNELS = [
    "rankopt.inference._greedy",
    "rankopt.inference._qs",
    "rankopt.inference._ap",
    "rankopt.inference._observation",
    "rankopt.inference._order",
    "rankopt.inference._pairwise",
    "rankopt.models._latent_ssvm",
]

#: Kernels that spread work over threads with OpenMP (Cython's prange).  They
#: build without it too (one thread): ``RANKOPT_OPENMP=0`` turns it off, and it
#: is off by default where the usual compiler lacks it (macOS's Apple clang).
OPENMP_KERNELS = {"rankopt.inference._batched", "rankopt.inference._graded_position"}
OPENMP = os.environ.get("RANKOPT_OPENMP", "0" if sys.platform == "darwin" else "1") not in ("", "0")


def _extension(module):
    openmp = ["-fopenmp"] if OPENMP and module in OPENMP_KERNELS else []
    return Extension(
        module,
        sources=[module.replace(".", "/") + ".pyx"],
        language="c++",
        extra_compile_args=COMPILE_ARGS + ["-std=c++17"] + openmp,
        extra_link_args=openmp,
    )


#: Cores to build with: every core unless RANKOPT_BUILD_JOBS says otherwise (the kernels are independent).
JOBS = int(os.environ.get("RANKOPT_BUILD_JOBS", "0")) or os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    """build_ext compiling the extensions in parallel, one job per core, unless ``-j`` asks otherwise."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = JOBS


setup(
    cmdclass={"build_ext": ParallelBuildExt},
    ext_modules=cythonize(
        [_extension(m) for m in KERNELS + sorted(OPENMP_KERNELS)],
        compiler_directives=CYTHON_DIRECTIVES,
        # Generated C++ goes into the build tree, never next to the sources; one
        # tree per mode, since cythonize regenerates by timestamp, not directives.
        build_dir="build/cython-debug" if DEBUG else "build/cython",
        nthreads=JOBS,
    ),
)
