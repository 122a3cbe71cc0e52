"""Build script: compiles rankopt's Cython kernels during ``pip install .``.

All Cython compiler directives live here, in ``CYTHON_DIRECTIVES``.  Set
``RANKOPT_CYTHON_DEBUG=1`` at build time to turn bounds checks, wraparound
and memoryview-initialisation checks on (and optimisation off) — use it when
a kernel is suspected of reading out of bounds:

    RANKOPT_CYTHON_DEBUG=1 pip install --no-build-isolation -e .

The kernels are translated and compiled in parallel, one job per core (``RANKOPT_BUILD_JOBS=N`` sets
another number).  pip builds in the source tree, so the generated C++ (``build/cython``) and the compiled
objects (``build/``) of one ``pip install .`` are reused by the next one from the same checkout, decided
by the sources' content (``build/cython/sources.sha256``): any change to a ``.pyx``/``.pxd``, to this
file or to Cython's version rebuilds every kernel.
"""

import glob
import hashlib
import os
import sys

import Cython
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
    "rankopt.data._letor",
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


#: Generated C++ goes into the build tree, never next to the sources; one tree per mode.
CYTHON_BUILD_DIR = "build/cython-debug" if DEBUG else "build/cython"
#: The digest of everything the generated C++ depends on, written beside it.
SIGNATURE_FILE = os.path.join(CYTHON_BUILD_DIR, "sources.sha256")


def _sources_signature() -> str:
    """A digest of the kernels' sources, this file, Cython's version and the build mode.

    cythonize decides by timestamps, and Cython's own include files are new in every isolated build
    environment pip creates, so it regenerated (and the compiler rebuilt) every kernel at every install.
    The content decides here instead.
    """
    digest = hashlib.sha256()
    sources = glob.glob("rankopt/**/*.pyx", recursive=True) + glob.glob("rankopt/**/*.pxd", recursive=True)
    for path in sorted(sources) + ["setup.py"]:
        digest.update(path.encode())
        with open(path, "rb") as handle:
            digest.update(handle.read())
    digest.update(f"{Cython.__version__} {DEBUG} {OPENMP} {sys.platform}".encode())
    return digest.hexdigest()


def _extensions() -> list:
    """The extensions: from the C++ an earlier build generated when the sources are unchanged (setuptools then
    skips compiling those whose objects are newer), else freshly cythonized."""
    extensions = [_extension(m) for m in KERNELS + sorted(OPENMP_KERNELS)]
    generated = {e.name: os.path.join(CYTHON_BUILD_DIR, *e.name.split(".")) + ".cpp" for e in extensions}
    signature = _sources_signature()
    previous = open(SIGNATURE_FILE).read() if os.path.isfile(SIGNATURE_FILE) else None
    if previous == signature and all(os.path.isfile(path) for path in generated.values()):
        for extension in extensions:
            extension.sources = [generated[extension.name]]
        return extensions
    cythonized = cythonize(
        extensions, compiler_directives=CYTHON_DIRECTIVES, build_dir=CYTHON_BUILD_DIR, nthreads=JOBS, force=True
    )
    with open(SIGNATURE_FILE, "w") as handle:
        handle.write(signature)
    return cythonized


setup(cmdclass={"build_ext": ParallelBuildExt}, ext_modules=_extensions())
