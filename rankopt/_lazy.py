"""Names a package imports on first access (PEP 562's module ``__getattr__``).

``rankopt``, ``rankopt.engine`` and ``rankopt.data`` re-export names whose
modules pull in NumPy-heavy solvers, scikit-learn or the Cython kernels;
importing them lazily keeps ``rankopt --version`` and ``rankopt plugins``
fast.  One helper, so the three packages behave alike.
"""

from __future__ import annotations

import importlib


def lazy_attributes(package: str, namespace: dict, lazy: dict[str, str], submodules: tuple[str, ...] = ()):
    """``(__getattr__, __dir__)`` for ``package``, loading ``lazy[name]`` when ``name`` is first used.

    ``namespace`` is the package's ``globals()``: a loaded name is stored there,
    so later lookups skip ``__getattr__``.  ``submodules`` are the package's
    submodules reachable as attributes (``rankopt.metrics`` after ``import
    rankopt``), imported on first access like the names.
    """

    def __getattr__(name: str):
        if name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            module = lazy.get(name)
            if module is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted({*namespace, *lazy, *submodules})

    return __getattr__, __dir__
