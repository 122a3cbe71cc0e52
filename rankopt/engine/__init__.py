"""The structural-SVM engine: 1-slack cutting plane and the CCCP outer loop."""
from rankopt.engine.cccp import CCCPProblem, CCCPResult, solve_cccp
from rankopt.engine.cutting_plane import CuttingPlaneResult, IterationRecord, solve_cutting_plane
from rankopt.engine.problem import Constraint, LinearConstraints, StructuredProblem
from rankopt.engine.qp import WorkingSetQP

__all__ = [
    "CCCPProblem",
    "CCCPResult",
    "Constraint",
    "CuttingPlaneResult",
    "IterationRecord",
    "LinearConstraints",
    "StructuredProblem",
    "WorkingSetQP",
    "solve_cccp",
    "solve_cutting_plane",
]
