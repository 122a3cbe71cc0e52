"""The structural-SVM engine: 1-slack cutting plane and the CCCP outer loop.

The names below are imported on first access (PEP 562's module
``__getattr__``): the built-in model plugins import only
:mod:`rankopt.engine.problem`, and listing the plugins (``rankopt plugins``)
must not pay for the solvers, the QP libraries and scikit-learn.
"""
import importlib

_LAZY = {
    "CCCPProblem": "rankopt.engine.cccp",
    "CCCPResult": "rankopt.engine.cccp",
    "CCCPStep": "rankopt.engine.cccp",
    "best_on_ray": "rankopt.engine.cccp",
    "solve_cccp": "rankopt.engine.cccp",
    "CuttingPlaneResult": "rankopt.engine.cutting_plane",
    "IterationRecord": "rankopt.engine.cutting_plane",
    "solve_cutting_plane": "rankopt.engine.cutting_plane",
    "Constraint": "rankopt.engine.problem",
    "LinearConstraints": "rankopt.engine.problem",
    "StructuredProblem": "rankopt.engine.problem",
    "QPSolution": "rankopt.engine.qp",
    "WorkingSetQP": "rankopt.engine.qp",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rankopt.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted({*globals(), *_LAZY})
