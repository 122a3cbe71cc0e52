"""1-slack cutting-plane training (Joachims, Finley & Yu 2009, Algorithm 4).

Each iteration asks the problem for the most violated output at the current
w, adds it to the working set unless it is violated by at most ``tol``
beyond the working set's slack, and re-solves the working-set QP.  The
primal objective ½‖w‖² + C ξ(w) (exact ξ from the oracle) and the duality
gap against the working-set dual are recorded every iteration; the gap at
the last iterate is C times the violation the stopping test compares to
``tol``.
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from rankopt.engine.problem import StructuredProblem
from rankopt.engine.qp import WorkingSetQP
from rankopt.exceptions import ConvergenceWarning

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IterationRecord:
    """One cutting-plane iteration."""

    iteration: int
    primal_objective: float  # ½‖w‖² + C ξ(w) at this iterate, ξ exact
    dual_objective: float  # working-set dual optimum that produced w
    duality_gap: float  # best primal so far − dual
    violation: float  # ξ(w) − working-set slack at w
    n_planes: int
    inference_seconds: float


@dataclass
class CuttingPlaneResult:
    """The solution and how it was reached."""

    w: np.ndarray
    n_iter: int
    converged: bool
    history: list[IterationRecord] = field(default_factory=list)
    #: Why the solve ended: "converged", "max_iter" or "callback".
    stop_reason: str = "converged"

    @property
    def primal_objective(self) -> float:
        return self.history[-1].primal_objective if self.history else float("nan")

    @property
    def inference_seconds(self) -> float:
        return float(sum(r.inference_seconds for r in self.history))


def solve_cutting_plane(
    problem: StructuredProblem,
    C: float,
    *,
    tol: float = 1e-3,
    max_iter: int = 1000,
    w0: np.ndarray | None = None,
    warn: bool = True,
    callback=None,
) -> CuttingPlaneResult:
    """Solve ``problem`` to violation ``tol`` with at most ``max_iter`` oracle calls.

    Parameters
    ----------
    problem : StructuredProblem
    C : float
        Weight of the slack, > 0.
    tol : float
        Stop when the most violated constraint exceeds the working set's
        slack by at most ``tol`` (Joachims et al.'s ε).
    max_iter : int
        Oracle calls allowed; a :class:`ConvergenceWarning` is issued when
        they run out (unless ``warn=False``).
    w0 : ndarray, optional
        Where to start (must satisfy the linear constraints); otherwise the
        smallest w that satisfies them (w = 0 when there are none).  Its
        most violated output seeds the working set; the stopping test is
        only applied at working-set optima, which w0 is not.
    callback : callable(IterationRecord, ndarray) -> bool or None, optional
        Called after every iteration with its record and the iterate w the
        record describes (read-only; copy it to keep it), e.g. to drive a
        progress bar or to score w on validation data.  Returning True
        stops the solve there: the result then has ``converged=False`` and
        ``stop_reason="callback"``, and no warning is issued.
    """
    qp = WorkingSetQP(C, problem.n_features, problem.linear_constraints)
    psi_star = np.asarray(problem.ground_truth_feature(), dtype=np.float64)
    if psi_star.shape != (problem.n_features,):
        raise RuntimeError(
            f"{type(problem).__name__} broke its contract: Ψ(X, Y*) has shape {psi_star.shape}, "
            f"expected ({problem.n_features},)"
        )
    if w0 is None:
        w, dual = qp.solve()  # the smallest w meeting the linear constraints (0 without them)
    else:
        w, dual = np.asarray(w0, dtype=np.float64).copy(), 0.0
    best_primal = np.inf
    history: list[IterationRecord] = []
    converged = False
    stop_reason = "max_iter"
    for iteration in range(1, max_iter + 1):
        start = time.perf_counter()
        constraint = problem.most_violated(w)
        elapsed = time.perf_counter() - start
        plane = psi_star - np.asarray(constraint.feature, dtype=np.float64)
        xi = max(0.0, constraint.loss - float(w @ plane))
        violation = xi - qp.slack(w)
        primal = 0.5 * float(w @ w) + C * xi
        best_primal = min(best_primal, primal)
        record = IterationRecord(
            iteration, primal, dual, best_primal - dual, violation, qp.n_planes, elapsed
        )
        history.append(record)
        logger.debug(
            "iter %d: primal %.6g dual %.6g gap %.3g violation %.3g planes %d",
            iteration, primal, dual, record.duality_gap, violation, qp.n_planes,
        )
        if callback is not None and callback(record, w):
            stop_reason = "callback"
            break
        # The test is Joachims et al.'s only at a working-set optimum: a w0 whose
        # margins all hold has zero violation however far from optimal it is.
        if violation <= tol and (w0 is None or iteration > 1):
            converged = True
            stop_reason = "converged"
            break
        if iteration == max_iter:
            break  # return the last evaluated iterate, so history_[-1] describes w
        qp.add(plane, constraint.loss)
        w, dual = qp.solve()
    if stop_reason == "max_iter" and warn:
        warnings.warn(
            f"cutting plane stopped at max_iter={max_iter} with violation {history[-1].violation:.3g} "
            f"> tol={tol:g}; increase max_iter or tol",
            ConvergenceWarning,
            stacklevel=2,
        )
    logger.info(
        "cutting plane %s after %d iterations: primal %.6g, gap %.3g",
        "converged" if converged else "stopped", len(history), history[-1].primal_objective,
        history[-1].duality_gap,
    )
    return CuttingPlaneResult(w, len(history), converged, history, stop_reason)
