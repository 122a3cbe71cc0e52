"""The concave-convex procedure (Yuille & Rangarajan 2003) around the cutting plane.

Latent and high-order models have objectives f(w) = convex(w) − concave part.
Each CCCP step replaces the concave part by its linearisation at the current
w — the model's :meth:`CCCPProblem.convexify` — and solves the resulting
convex structural SVM with :func:`solve_cutting_plane`.  The true objective
never increases when the inner problem is solved exactly; with an inexact
inner solve a step that would raise it is rejected and CCCP stops there.
"""
from __future__ import annotations

import abc
import logging
import warnings
from dataclasses import dataclass, field

import numpy as np

from rankopt.engine.cutting_plane import CuttingPlaneResult, solve_cutting_plane
from rankopt.engine.problem import StructuredProblem
from rankopt.exceptions import ConvergenceWarning

logger = logging.getLogger(__name__)


class CCCPProblem(abc.ABC):
    """A difference-of-convex structural SVM."""

    n_features: int

    @abc.abstractmethod
    def convexify(self, w: np.ndarray) -> StructuredProblem:
        """The convex upper bound of the objective that is tight at ``w``."""

    @abc.abstractmethod
    def objective(self, w: np.ndarray, C: float) -> float:
        """The true (non-convex) objective at ``w``."""


@dataclass
class CCCPResult:
    w: np.ndarray
    n_iter: int
    converged: bool
    objectives: list[float] = field(default_factory=list)
    inner: list[CuttingPlaneResult] = field(default_factory=list)


def solve_cccp(
    problem: CCCPProblem,
    C: float,
    w0: np.ndarray,
    *,
    tol: float = 1e-3,
    max_iter: int = 50,
    inner_tol: float = 1e-3,
    inner_max_iter: int = 1000,
) -> CCCPResult:
    """Run CCCP from ``w0`` until the objective drops by less than ``tol`` (relative)."""
    w = np.asarray(w0, dtype=np.float64).copy()
    objectives = [problem.objective(w, C)]
    inner_results: list[CuttingPlaneResult] = []
    converged = False
    for iteration in range(1, max_iter + 1):
        result = solve_cutting_plane(
            problem.convexify(w), C, tol=inner_tol, max_iter=inner_max_iter, w0=w, warn=False
        )
        inner_results.append(result)
        candidate = problem.objective(result.w, C)
        logger.info("CCCP iter %d: objective %.6g -> %.6g", iteration, objectives[-1], candidate)
        if candidate > objectives[-1]:
            # The inner solve was inexact: keep w, which it could not improve.
            # That counts as convergence only if the inner solve met its tolerance.
            converged = result.converged
            break
        decrease = objectives[-1] - candidate
        w = result.w
        objectives.append(candidate)
        if decrease <= tol * max(1.0, abs(objectives[-2])):
            converged = result.converged
            break
    if not converged:
        last = inner_results[-1]
        reason = (
            f"max_iter={max_iter}" if last.converged
            else f"an inner cutting plane stopped at inner_max_iter={inner_max_iter}"
        )
        warnings.warn(f"CCCP did not converge: {reason}", ConvergenceWarning, stacklevel=2)
    return CCCPResult(w, len(inner_results), converged, objectives, inner_results)
