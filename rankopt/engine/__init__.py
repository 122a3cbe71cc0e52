"""The structural-SVM engine: 1-slack cutting plane, BCFW and the CCCP outer loop, one certificate.

The names below are imported on first access (PEP 562's module
``__getattr__``): the built-in model plugins import only
:mod:`rankopt.engine.problem`, and listing the plugins (``rankopt plugins``)
must not pay for the solvers, the QP libraries and scikit-learn.
"""

from rankopt._lazy import lazy_attributes

_LAZY = {
    "CCCPProblem": "rankopt.engine.cccp",
    "CCCPResult": "rankopt.engine.cccp",
    "CCCPStep": "rankopt.engine.cccp",
    "best_on_ray": "rankopt.engine.cccp",
    "solve_cccp": "rankopt.engine.cccp",
    "solve_bcfw": "rankopt.engine.bcfw",
    "Certificate": "rankopt.engine.certificate",
    "SolveResult": "rankopt.engine.certificate",
    "WorkingSet": "rankopt.engine.certificate",
    "IterationRecord": "rankopt.engine.certificate",
    "solve_cutting_plane": "rankopt.engine.cutting_plane",
    "BlockPlanes": "rankopt.engine.problem",
    "BlockProblem": "rankopt.engine.problem",
    "Constraint": "rankopt.engine.problem",
    "LinearConstraints": "rankopt.engine.problem",
    "LinearProblem": "rankopt.engine.problem",
    "RowInference": "rankopt.engine.problem",
    "Segment": "rankopt.engine.problem",
    "StructuredProblem": "rankopt.engine.problem",
    "QPSolution": "rankopt.engine.qp",
    "WorkingSetQP": "rankopt.engine.qp",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes("rankopt.engine", globals(), _LAZY)
