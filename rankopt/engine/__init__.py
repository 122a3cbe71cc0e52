"""The structural-SVM engine: 1-slack cutting plane and the CCCP outer loop."""
from rankopt.engine.cccp import CCCPProblem, CCCPResult, CCCPStep, best_on_ray, solve_cccp
from rankopt.engine.cutting_plane import CuttingPlaneResult, IterationRecord, solve_cutting_plane
from rankopt.engine.problem import Constraint, LinearConstraints, StructuredProblem
from rankopt.engine.qp import QPSolution, WorkingSetQP

__all__ = [
    "CCCPProblem",
    "CCCPResult",
    "CCCPStep",
    "Constraint",
    "CuttingPlaneResult",
    "IterationRecord",
    "LinearConstraints",
    "QPSolution",
    "StructuredProblem",
    "WorkingSetQP",
    "best_on_ray",
    "solve_cccp",
    "solve_cutting_plane",
]
