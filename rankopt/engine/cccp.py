"""The concave-convex procedure (Yuille & Rangarajan 2003) around the cutting plane.

Latent and high-order models have objectives f(w) = convex(w) − concave part.
Each CCCP step replaces the concave part by its linearisation at the current
w — the model's :meth:`CCCPProblem.convexify` — and solves the resulting
convex structural SVM with :func:`solve_cutting_plane`.  A step is accepted
only when the convex bound at its point is no larger than the objective at
the current w, so the objective never increases, even when an inner solve
stops uncertified (at ``inner_max_iter``, or on a QP failure); convergence is
claimed only on a certified inner solve.
"""

from __future__ import annotations

import abc
import logging
import warnings
from dataclasses import dataclass, field

import numpy as np

from rankopt.engine.certificate import SolveResult, StopReason
from rankopt.engine.problem import StructuredProblem
from rankopt.engine.solvers import DEFAULT_SOLVER, SolverSpec, get_solver
from rankopt.exceptions import ConvergenceWarning

__all__ = ["CCCPProblem", "CCCPResult", "CCCPStep", "best_on_ray", "solve_cccp"]

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


@dataclass(frozen=True)
class CCCPStep:
    """One CCCP step: the convex bound B_t (tight at w_t) minimised from w_t.

    ``bound`` is B_t at the point the inner solve returned (its best iterate,
    w_t itself a candidate, so ``bound`` ≤ B_t(w_t) = J(w_t)); the step is
    accepted only when ``bound`` ≤ ``objective_before``, and then
    J(w_{t+1}) ≤ B_t(w_{t+1}) ≤ J(w_t).
    """

    objective_before: float  # J(w_t)
    bound: float  # B_t(candidate), the inner solve's primal objective
    objective_after: float  # J(candidate)
    inner_gap: float  # the inner solve's certified duality gap
    inner_converged: bool  # whether that gap met the inner tolerance
    inner_iterations: int
    accepted: bool


@dataclass
class CCCPResult:
    w: np.ndarray
    n_iter: int
    converged: bool
    #: J at the start and after each accepted step (non-increasing).
    objectives: list[float] = field(default_factory=list)
    inner: list[SolveResult] = field(default_factory=list)
    steps: list[CCCPStep] = field(default_factory=list)
    #: Why CCCP ended: "converged", "max_iter", "no_progress" (an uncertified inner solve found no
    #: point below J(w_t)) or "callback".
    stop_reason: StopReason = StopReason.CONVERGED


def best_on_ray(problem: CCCPProblem, C: float, w: np.ndarray, *, rtol: float = 1e-6) -> tuple[float, float]:
    """The t ≥ 0 minimising the convex bound B (tight at ``w``) on the ray t·w, and B there.

    φ(t) = B(t·w) = ½ t²‖w‖² + C ξ_B(t·w) is convex in t (B is convex) and
    ½ t²‖w‖² ≤ φ(t), so the minimiser lies in [0, T] with T² = 2 min(φ(0),
    φ(1)) / ‖w‖².  Brent's method on that bracket, with t = 0 and t = 1
    kept as candidates: J(t*·w) ≤ φ(t*) ≤ φ(1) = J(w), so moving to t*·w is
    a descent step for any CCCP problem.  Where B is tight on the whole ray
    (HOAP-SVM: the max-marginal labelings of t·w do not depend on t > 0,
    ``docs/maths.md``) it is the exact line minimum of J.  Returns (t*, φ(t*)).
    """
    from scipy.optimize import minimize_scalar

    w = np.asarray(w, dtype=np.float64)
    norm2 = float(w @ w)
    if norm2 == 0.0:
        return 1.0, problem.objective(w, C)
    bound = problem.convexify(w)
    psi_star = np.asarray(bound.ground_truth_feature(), dtype=np.float64)

    def phi(t: float) -> float:
        v = t * w
        constraint = bound.most_violated(v)
        plane = psi_star - np.asarray(constraint.feature, dtype=np.float64)
        return 0.5 * t * t * norm2 + C * max(0.0, float(constraint.loss) - float(v @ plane))

    candidates = {0.0: phi(0.0), 1.0: phi(1.0)}
    upper = float(np.sqrt(2.0 * min(candidates.values()) / norm2))
    if upper > 0.0:
        found = minimize_scalar(phi, bounds=(0.0, upper), method="bounded", options={"xatol": rtol * upper})
        candidates[float(found.x)] = float(found.fun)
    t = min(candidates, key=lambda step: candidates[step])
    return t, candidates[t]


def solve_cccp(
    problem: CCCPProblem,
    C: float,
    w0: np.ndarray,
    *,
    tol: float = 1e-3,
    max_iter: int = 50,
    inner_tol: float = 1e-3,
    inner_max_iter: int = 1000,
    callback=None,
    inner_solver: SolverSpec | None = None,
) -> CCCPResult:
    """Run CCCP from ``w0`` until the objective drops by less than ``tol`` (relative).

    Each step minimises the convex bound B_t tight at w_t by the cutting
    plane started at w_t, which returns its best iterate by B_t (w_t
    included).  The step is accepted only when B_t there is at most
    J(w_t): J then cannot rise, however inexact the inner solve.  CCCP has
    converged when an accepted step lowers J by at most ``tol``·|J| and its
    inner solve is certified (duality gap ≤ C·inner_tol); an inner solve that
    finds no point below J(w_t) ends CCCP at w_t, converged if it was
    certified (w_t then minimises its own bound to within C·inner_tol).

    ``callback(record, w)``, if given, is passed to every inner solve (see
    :func:`solve_cutting_plane`).  ``inner_solver`` is the solver of the table
    (:mod:`rankopt.engine.solvers`) that runs the inner solves, the cutting plane by default; each
    inner solve starts at w_t, so it must take a starting point.
    """
    inner_solver = get_solver(DEFAULT_SOLVER) if inner_solver is None else inner_solver
    if not inner_solver.warm_start:
        raise ValueError(
            f"expected an inner solver that starts from w_t, got solver={inner_solver.name!r} instead, "
            f"which does not; use solver={DEFAULT_SOLVER!r}"
        )
    w = np.asarray(w0, dtype=np.float64).copy()
    objectives = [problem.objective(w, C)]
    inner_results: list[SolveResult] = []
    steps: list[CCCPStep] = []
    converged = False
    stop_reason = StopReason.MAX_ITER
    for iteration in range(1, max_iter + 1):
        result = inner_solver.run(
            problem.convexify(w), C, tol=inner_tol, max_iter=inner_max_iter, w0=w, warn=False, callback=callback
        )
        inner_results.append(result)
        before = objectives[-1]
        step = _judge_step(problem, C, w, before, result)
        steps.append(step)
        _log_step(iteration, step, result)
        accepted, after = step.accepted, step.objective_after
        if accepted:
            w = result.w
            objectives.append(after)
        if result.stop_reason is StopReason.CALLBACK:
            stop_reason = StopReason.CALLBACK
            break
        if not accepted:
            # w_t is (certifiably, or not) the minimum of its own bound: a CCCP fixed point.
            converged = result.converged
            stop_reason = StopReason.CONVERGED if converged else StopReason.NO_PROGRESS
            break
        if before - after <= tol * max(1.0, abs(before)) and result.converged:
            converged = True
            stop_reason = StopReason.CONVERGED
            break
    if not converged and stop_reason is not StopReason.CALLBACK:
        _warn_not_converged(stop_reason, inner_results[-1], max_iter, C * inner_tol)
    return CCCPResult(
        w=w,
        n_iter=len(inner_results),
        converged=converged,
        objectives=objectives,
        inner=inner_results,
        steps=steps,
        stop_reason=stop_reason,
    )


def _warn_not_converged(stop_reason: StopReason, last: SolveResult, max_iter: int, inner_target: float) -> None:
    reason = (
        f"max_iter={max_iter} CCCP steps were run"
        if stop_reason is StopReason.MAX_ITER
        else f"the last inner cutting plane stopped uncertified ({last.stop_reason}, duality gap "
        f"{last.duality_gap:.3g} > C·inner_tol = {inner_target:.3g})"
    )
    warnings.warn(f"CCCP did not converge: {reason}", ConvergenceWarning, stacklevel=3)


def _judge_step(problem: CCCPProblem, C: float, w: np.ndarray, before: float, result: SolveResult) -> CCCPStep:
    """The step to the inner solve's best iterate, accepted when J cannot rise there."""
    # The inner solve's best iterate is w_t itself unless a point with a lower
    # bound was found: then B_t there < B_t(w_t) = J(w_t), and J cannot be higher.
    moved = result.primal_objective < before and not np.array_equal(result.w, w)
    after = problem.objective(result.w, C) if moved else before
    if moved and after > result.primal_objective + 1e-9 * max(1.0, abs(after)):
        raise RuntimeError(
            f"{type(problem).__name__} broke the CCCP contract: J(w) = {after:.10g} exceeds the convex "
            f"bound {result.primal_objective:.10g} that convexify() gave for the same w"
        )
    accepted = moved and after <= before
    return CCCPStep(
        before, result.primal_objective, after, result.duality_gap, result.converged, result.n_iter, accepted
    )


def _log_step(iteration: int, step: CCCPStep, result: SolveResult) -> None:
    logger.info(
        "CCCP step %d: J %.8g -> %.8g (%s; inner bound %.8g, gap %.3g, %s after %d iterations)",
        iteration,
        step.objective_before,
        step.objective_after,
        "accepted" if step.accepted else "no lower bound found, w kept",
        result.primal_objective,
        result.duality_gap,
        "certified" if result.converged else f"uncertified: {result.stop_reason}",
        result.n_iter,
    )
