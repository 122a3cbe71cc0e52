"""A cutting plane that stalls far from the optimum (issue 38, point 1), and the property test behind it.

The stall: a cut assembled from the plane cache was added, its re-solve rejected, and the old solution
kept while the cut stayed in the working set, cutting that point off.  The oracle then kept returning a
plane the set held, the point was never re-solved, and the stall guard blamed float64's rounding for a
gap of 538.  Now a rejected re-solve takes its cut out again, a held plane re-solves a set that changed
since its last solve, and a gap that stops falling far above rounding is called what it is.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from stall_corpus import exact_primal, reference_optimum, run_fit

import rankopt
from rankopt.engine import cutting_plane
from rankopt.engine.certificate import STALL_ITERATIONS, Certificate
from rankopt.engine.problem import BlockPlaneCache
from rankopt.engine.qp import QPSolution, WorkingSetQP
from rankopt.losses import GradedNDCGLoss

ISSUE_X = np.array(
    [
        [-0.87402, 2.00718, 0.29561],
        [-0.416129, -0.994778, 0.206381],
        [-0.76551, 0.888994, -0.308455],
        [1.772171, -1.394244, -0.350296],
        [-0.157274, 0.844297, -0.136557],
        [-1.725172, 1.125609, -1.455566],
        [0.508452, 0.880767, -0.70887],
        [-0.477741, 0.575761, -0.077993],
        [1.007906, -0.47077, 0.699515],
        [-0.293574, 0.376713, -1.073162],
        [-0.024565, 0.961289, 0.390923],
        [-0.207954, 0.293202, -1.932108],
        [1.270722, 0.797631, 0.009066],
        [1.205335, 2.000214, -2.454685],
        [-0.578716, 0.71031, 0.88556],
        [1.377275, 0.77298, 1.060584],
        [-2.469508, -0.678349, 0.023624],
    ]
)
ISSUE_GRADES = [1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0]
ISSUE_QID = [0, 0, 3, -2, 0, 10**9, -2, 10**9, 3, -2, 3, 0, 10**9, -2, 0, 10**9, 10**9]


@pytest.mark.parametrize("C", [10.0, 100.0, 1000.0, 3000.0])
@pytest.mark.parametrize("inference", ["auto", "sort"])
def test_the_issues_fit_converges_to_the_independent_optimum(C, inference):
    estimator = rankopt.RankSVM(loss=GradedNDCGLoss(k=1, gains="linear"), C=C, inference=inference)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rankopt.ConvergenceWarning)
        estimator.fit(ISSUE_X, ISSUE_GRADES, qid=ISSUE_QID)
    assert estimator.converged_ and estimator.stop_reason_ == "converged"
    fit = estimator._check_fit(ISSUE_X, ISSUE_GRADES, ISSUE_QID, None)
    problem, _, _ = estimator._solve(fit, None)
    lower, upper = reference_optimum(problem, C, 3)
    primal = exact_primal(problem, estimator.coef_, C)
    assert lower - 1e-7 * upper <= primal <= lower + C * estimator.tol + 1e-7 * upper


def test_a_rejected_assembled_cut_leaves_the_working_set(monkeypatch):
    """The re-solve after an assembled cut fails: the cut goes, and the solution kept is the set's optimum."""
    qp = cutting_plane._ScaledQP(10.0, 2, None, np.array([1.0, 1.0]), 1e-6)
    qp.add(np.array([1.0, 0.0]), 1.0)
    solution = qp.solve(1e-6)
    cache = BlockPlaneCache(n_blocks=1, n_features=2, parts=2)
    cache.add_parts(np.array([[0.0, 1.0]]), np.array([1.0]))
    revision = qp.revision

    def rejected(gap_tol):
        return QPSolution(w=np.zeros(2), dual=-1.0, primal=5.0, solver="dual")  # fails its own optimality check

    monkeypatch.setattr(qp, "solve", rejected)
    kept = cutting_plane._assemble_cuts(cache, qp, solution, 1e-6, 0.0)
    assert kept is solution
    assert qp.n_planes == 1 and qp.revision == revision + 2  # added, then discarded
    np.testing.assert_array_equal(qp.working_set().planes, [[1.0, 0.0]])
    assert qp.slack(solution.w) == pytest.approx(max(0.0, 1.0 - solution.w[0]))


def test_discard_keeps_the_gram_matrix_and_the_other_planes():
    qp = WorkingSetQP(1.0, 2)
    planes = [np.array([1.0, 0.0]), np.array([0.0, 2.0]), np.array([1.0, 1.0])]
    for plane in planes:
        qp.add(plane, 1.0)
    assert not qp.discard(np.array([3.0, 3.0]), 1.0)
    assert not qp.discard(planes[1], 0.5)  # same plane, another loss
    assert qp.discard(planes[1], 1.0)
    np.testing.assert_array_equal(qp.planes, [planes[0], planes[2]])
    np.testing.assert_array_equal(qp._gram, qp.planes @ qp.planes.T)
    reference = WorkingSetQP(1.0, 2)
    for plane in (planes[0], planes[2]):
        reference.add(plane, 1.0)
    np.testing.assert_allclose(qp.solve(1e-9).w, reference.solve(1e-9).w)


def test_a_gap_that_stops_falling_far_above_rounding_is_not_blamed_on_rounding():
    certificate = Certificate(C=1000.0, tol=1e-3, best_w=np.zeros(3), best_dual=4.04)
    certificate.best_primal = 542.4
    reasons = [certificate.stalled(iteration) for iteration in range(1, STALL_ITERATIONS + 2)]
    assert reasons[-1] == "no_progress" and set(reasons[:-1]) == {None}
    with pytest.warns(rankopt.ConvergenceWarning, match="made no progress") as caught:
        certificate.finish("cutting plane", "iterations", "no_progress", 51, warn=True, cause="", remedy="")
    message = str(caught[0].message)
    assert "far above float64's rounding" in message and "stops at float64's rounding" not in message


def test_a_gap_that_stops_falling_at_rounding_still_says_rounding():
    certificate = Certificate(C=1.0, tol=1e-16, best_w=np.zeros(3), best_dual=1.0)
    certificate.best_primal = 1.0 + 1e-14
    reasons = [certificate.stalled(iteration) for iteration in range(1, STALL_ITERATIONS + 2)]
    assert reasons[-1] == "stalled"


#: Random tiny fits checked against the independent n-slack QP: every loss (built-in and the example
#: plugins'), 1-5 queries of 1-10 documents with interleaved query ids, d ≤ 4, C from 0.01 to ~3000.
#: On 9fd5b0d the same corpus also converged everywhere (the stale point needs a rejected assembled
#: cut, in 2 of 3,000 fits here, *and* the oracle returning that very cut: the issue's reproducer).
PROPERTY_FITS = 2000


def test_random_fits_converge_to_the_independent_optimum_or_say_why_not():
    rng = np.random.default_rng(20261127)
    outcomes = [run_fit(rng) for _ in range(PROPERTY_FITS)]
    untruthful = [outcome for outcome in outcomes if not outcome.truthful()]
    assert not untruthful, untruthful[:5]
    uncertified = [outcome for outcome in outcomes if not outcome.converged]
    assert not uncertified, uncertified[:5]
    assert {outcome.loss for outcome in outcomes} >= {"ap", "ndcg_graded", "pairwise", "rbp_graded", "zero_one"}
