"""AP-SVM-APPX's solves (Mohapatra et al. (2014) §3.3): two stages, the second with lazy hard margins.

The model (:mod:`rankopt.models.approx`) only builds problems: the binary SVM of stage 1, and, from
its solution, stage 2's AP problem over the difficult samples with the hard margins of the kept easy
ones.  This module runs them: stage 1 by the estimator's solver, then stage 2 by constraint
generation (:func:`solve_with_lazy_constraints`).  Each solve is certified by its own duality gap.
"""

from __future__ import annotations

import copy
import logging
from typing import Protocol

import numpy as np

from rankopt.engine.certificate import SolveResult
from rankopt.engine.problem import LinearConstraints, StructuredProblem
from rankopt.engine.solvers import DEFAULT_SOLVER, SolverSpec, get_solver

__all__ = ["TwoStageProblem", "solve_appx", "solve_with_lazy_constraints"]

logger = logging.getLogger(__name__)

#: A generated constraint whose A w − b exceeds this is violated and goes into the QP.
VIOLATION_TOL = 1e-7


class TwoStageProblem(Protocol):
    """What APPX's model builds: stage 1's problem, and stage 2's from stage 1's solution."""

    stage_one: StructuredProblem

    def stage_two(self, stage_one_result: SolveResult) -> tuple[StructuredProblem, LinearConstraints | None, object]:
        """(stage 2's problem without linear constraints, its hard constraints A w ≤ b or None, the split)."""


def solve_appx(
    problem: TwoStageProblem, C: float, *, tol: float, max_iter: int, callback=None, solver: SolverSpec | None = None
):
    """Both stages: (stage 2's problem with the hard constraints its last solve held, its certified
    solution, the model's split).

    Stage 1 runs without the callback (a validation monitor scores the AP model of stage 2).  The
    problems the model built are not changed.
    """
    solver = get_solver(DEFAULT_SOLVER) if solver is None else solver
    first = solver.run(problem.stage_one, C, tol=tol, max_iter=max_iter)
    second, constraints, split = problem.stage_two(first)
    solved, result = solve_with_lazy_constraints(
        second, constraints, C, tol=tol, max_iter=max_iter, callback=callback, solver=solver
    )
    return solved, result, split


def solve_with_lazy_constraints(
    problem: StructuredProblem,
    constraints: LinearConstraints | None,
    C: float,
    *,
    tol: float,
    max_iter: int,
    callback=None,
    solver: SolverSpec | None = None,
) -> tuple[StructuredProblem, SolveResult]:
    """Solve ``problem`` subject to ``constraints`` (A w ≤ b), adding them to its QP only once violated.

    The working-set dual has one variable per constraint it holds and costs O((K + m)³) per solve,
    while few of the m constraints are active at the optimum.  The problem is solved with the
    constraints found so far; those then violated by more than :data:`VIOLATION_TOL` are added, the
    most violated first and at most :func:`constraints_per_round` per round, and it is solved again
    until none is.  The relaxation's optimum then meets every constraint, so it is the optimum of the
    full problem, and the last solve's dual bound (of the relaxation) certifies it.  ``max_iter`` bounds
    each solve; the result joins the solves' histories (so its inference time is the total).

    Returns (a shallow copy of ``problem`` holding the constraints the last solve had in its QP, the
    result); ``problem`` itself is not changed.
    """
    solver = get_solver(DEFAULT_SOLVER) if solver is None else solver
    n_constraints = 0 if constraints is None else constraints.b.size
    in_qp = np.zeros(n_constraints, dtype=bool)
    batch = constraints_per_round(problem.n_features)
    runs: list[SolveResult] = []
    while True:
        # A shallow copy holds this round's constraints: the problem given is not changed.
        constrained = copy.copy(problem)
        constrained.linear_constraints = (
            LinearConstraints(constraints.A[in_qp], constraints.b[in_qp])
            if constraints is not None and in_qp.any()
            else None
        )
        runs.append(solver.run(constrained, C, tol=tol, max_iter=max_iter, callback=callback))
        w = runs[-1].w
        excess = constraints.A @ w - constraints.b if constraints is not None else np.zeros(0)
        violated = np.flatnonzero((excess > VIOLATION_TOL) & ~in_qp)
        logger.info(
            "APPX round %d: %d of %d hard constraints in the QP, %d more violated",
            len(runs),
            int(np.count_nonzero(in_qp)),
            n_constraints,
            violated.size,
        )
        if violated.size == 0:
            break
        in_qp[violated[np.argsort(-excess[violated], kind="stable")[:batch]]] = True
    history = [record for run in runs for record in run.history]
    last = runs[-1]
    return constrained, SolveResult(
        w=last.w,
        n_iter=len(history),
        converged=last.converged,
        history=history,
        stop_reason=last.stop_reason,
        primal_objective=last.primal_objective,
        duality_gap=last.duality_gap,
        working_set=last.working_set,
    )


def constraints_per_round(n_features: int) -> int:
    """Constraints added per round: about as many as can be active at once.

    Generically at most n_features constraints with positive multipliers meet at the optimum; adding
    that many per round keeps both the rounds and the QP small.
    """
    return max(10, min(256, n_features))
