"""Names a package imports on first access (PEP 562's module ``__getattr__``).

``rankopt``, ``rankopt.engine`` and ``rankopt.data`` re-export names whose
modules pull in NumPy-heavy solvers, scikit-learn or the Cython kernels;
importing them lazily keeps ``rankopt --version`` and ``rankopt plugins``
fast.  One helper, so the three packages behave alike.
"""

from __future__ import annotations

import importlib


def lazy_attributes(package: str, namespace: dict, lazy: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``, loading ``lazy[name]`` when ``name`` is first used.

    ``namespace`` is the package's ``globals()``: a loaded name is stored there,
    so later lookups skip ``__getattr__``.
    """

    def __getattr__(name: str):
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted({*namespace, *lazy})

    return __getattr__, __dir__
