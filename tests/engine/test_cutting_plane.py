"""The 1-slack cutting plane against the FULL QP over every output.

On problems small enough to enumerate every ranking (all (|P|+|N|)!
permutations) or every labeling (all 2ⁿ), the constraint set of the
structural SVM is built by brute force — Ψ(X, R) from its pairwise
definition, Δ from the oracle's loss definitions — and the full QP is solved
with the independent SLSQP reference of ``test_qp``.  The cutting plane must
reach that optimum: its w is ε-optimal with ε = C·tol, so

    OPT ≤ P(w) ≤ OPT + C·tol   and   ‖w − w*‖ ≤ sqrt(2 C tol)

(strong convexity of the primal P), plus the QP solver's own accuracy.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import sklearn.exceptions
from oracles.brute_force import LOSSES
from test_qp import objective_tol, solve_primal_reference

import rankopt
from rankopt.engine import Constraint, LinearConstraints, StructuredProblem, solve_cutting_plane
from rankopt.plugins import default_registry

# ----------------------------------------------------------- brute-force problem


def all_ranking_constraints(X_pos, X_neg, loss_name):
    """(Ψ(X,R*) − Ψ(X,R), Δ(R*,R)) for every ranking R of the samples, deduplicated.

    Ψ(X, R) = (1/(|P||N|)) Σ_{x∈P, y∈N} R_xy (x − y) with R_xy = +1 when x is
    ranked above y, −1 otherwise; R* ranks every positive first.
    """
    n_pos, n_neg = len(X_pos), len(X_neg)
    loss_fn = LOSSES[loss_name]
    diffs = X_pos[:, None, :] - X_neg[None, :, :]  # (x, y, d)
    psi_star = diffs.sum(axis=(0, 1)) / (n_pos * n_neg)
    rows = []
    for order in itertools.permutations(range(n_pos + n_neg)):
        position = np.argsort(order)
        r = np.where(position[:n_pos, None] < position[None, n_pos:], 1.0, -1.0)
        psi = np.einsum("xy,xyd->d", r, diffs) / (n_pos * n_neg)
        pattern = [sample < n_pos for sample in order]
        rows.append(np.concatenate([psi_star - psi, [loss_fn(pattern)]]))
    unique = np.unique(np.round(np.array(rows), 12), axis=0)
    return unique[:, :-1], unique[:, -1]


def all_labeling_constraints(X, y, pos_cost, neg_cost):
    """(Ψ(X,Y*) − Ψ(X,Y), Δ(Y*,Y)) for every labeling Y ∈ {0,1}ⁿ.

    The binary model's joint feature weighs each sample by its mislabelling
    cost a_i: Ψ(X, Y) = Σ_i a_i Y_i x_i; Δ(Y*, Y) = Σ_i a_i [Y_i ≠ Y*_i].
    """
    a = np.where(y, pos_cost, neg_cost)
    psi_star = (a * y) @ X
    planes, losses = [], []
    for labels in itertools.product([0, 1], repeat=len(y)):
        labels = np.array(labels, dtype=bool)
        planes.append(psi_star - (a * labels) @ X)
        losses.append(float(np.sum(a[labels != y])))
    return np.array(planes), np.array(losses)


def full_primal(w, planes, losses, C):
    """½‖w‖² + C ξ(w) with ξ the max violation over ALL outputs (R* gives ξ ≥ 0)."""
    return 0.5 * float(w @ w) + C * max(0.0, float(np.max(losses - planes @ w)))


class RecordingProblem(StructuredProblem):
    """Wraps a problem, optionally adds linear constraints, and records every w queried."""

    def __init__(self, inner, linear_constraints=None):
        self.inner = inner
        self.n_features = inner.n_features
        self.linear_constraints = linear_constraints
        self.queried: list[np.ndarray] = []

    def ground_truth_feature(self):
        return self.inner.ground_truth_feature()

    def most_violated(self, w):
        self.queried.append(np.array(w, dtype=np.float64))
        return self.inner.most_violated(w)


def ranking_problem(X, y, loss="ap"):
    registry = default_registry()
    model = registry.get_model("ranking")
    return model.build_problem(
        X, y, registry.get_loss(loss), registry.get_feature_map("linear"), inference="auto", registry=registry
    )


def make_data(rng, n_pos, n_neg, d, ties=False):
    X = rng.normal(size=(n_pos + n_neg, d))
    if ties:  # a positive and a negative share a row: their scores tie at every w
        X[n_pos] = X[0]
        if n_pos > 1:
            X[1] = X[0]
    y = np.zeros(n_pos + n_neg, dtype=bool)
    y[:n_pos] = True
    return X, y


def assert_eps_optimal(w, planes, losses, C, tol, constraints=None):
    """w is C·tol-optimal for the full QP and within sqrt(2 C tol) of its solution."""
    A = None if constraints is None else constraints.A
    b = None if constraints is None else constraints.b
    w_star, opt = solve_primal_reference(planes, losses, C, A, b)
    primal = full_primal(w, planes, losses, C)
    slack = objective_tol(opt)
    assert opt - slack <= primal <= opt + C * tol + slack, (primal, opt)
    np.testing.assert_allclose(w, w_star, atol=np.sqrt(2.0 * (C * tol + slack)), rtol=0)
    return opt


# ----------------------------------------------------------- optimum of full QP

RANKING_CASES = [
    # loss, |P|, |N|, d, C, ties
    ("ap", 2, 3, 2, 1.0, False),
    ("ap", 2, 3, 3, 10.0, False),
    ("ap", 1, 3, 3, 1.0, False),
    ("ap", 3, 2, 3, 5.0, False),
    ("ap", 2, 3, 3, 3.0, True),
    ("ndcg", 2, 3, 3, 10.0, False),
    ("ndcg", 3, 2, 2, 1.0, True),
    ("ndcg", 3, 3, 3, 2.0, False),
    ("auc", 2, 3, 3, 10.0, False),
    ("auc", 1, 4, 2, 1.0, False),
    ("auc", 3, 2, 3, 3.0, True),
]


@pytest.mark.parametrize("loss,n_pos,n_neg,d,C,ties", RANKING_CASES)
def test_ranking_reaches_full_qp_optimum(rng, loss, n_pos, n_neg, d, C, ties):
    X, y = make_data(rng, n_pos, n_neg, d, ties)
    tol = 1e-6
    problem = RecordingProblem(ranking_problem(X, y, loss))
    result = solve_cutting_plane(problem, C, tol=tol, max_iter=500)
    assert result.converged
    planes, losses = all_ranking_constraints(X[y], X[~y], loss)
    opt = assert_eps_optimal(result.w, planes, losses, C, tol)
    # the oracle's ξ is exact: the last record's primal is the brute-force primal at w
    assert result.history[-1].primal_objective == pytest.approx(full_primal(result.w, planes, losses, C), abs=1e-9)
    # the working-set dual never exceeds the full optimum (weak duality)
    assert result.history[-1].dual_objective <= opt + objective_tol(opt)


@pytest.mark.parametrize("C", [0.5, 5.0])
def test_ranksvm_reaches_full_qp_optimum(rng, C):
    X, y = make_data(rng, 2, 3, 3)
    tol = 1e-6
    model = rankopt.RankSVM(loss="ap", C=C, tol=tol).fit(X, y.astype(int))
    planes, losses = all_ranking_constraints(X[y], X[~y], "ap")
    assert_eps_optimal(model.coef_, planes, losses, C, tol)


@pytest.mark.parametrize("n_pos,n_neg,C", [(2, 3, 1.0), (1, 4, 10.0), (4, 2, 3.0)])
def test_zero_one_reaches_full_qp_optimum_over_all_labelings(rng, n_pos, n_neg, C):
    X, y = make_data(rng, n_pos, n_neg, 3)
    tol = 1e-6
    model = rankopt.RankSVM(loss="zero_one", C=C, tol=tol).fit(X, y.astype(int))
    # default J = |N|/|P|: each class carries half the loss
    planes, losses = all_labeling_constraints(X, y, 1.0 / (2 * n_pos), 1.0 / (2 * n_neg))
    assert_eps_optimal(model.coef_, planes, losses, C, tol)


# ----------------------------------------------------------------------- history


@pytest.mark.parametrize("loss,C,tol", [("ap", 1.0, 1e-3), ("ndcg", 10.0, 1e-5), ("auc", 3.0, 1e-4)])
def test_history_is_consistent_with_brute_force(rng, loss, C, tol):
    X, y = make_data(rng, 2, 3, 3)
    problem = RecordingProblem(ranking_problem(X, y, loss))
    seen = []
    result = solve_cutting_plane(problem, C, tol=tol, max_iter=500, callback=lambda record, w: seen.append(record))
    planes, losses = all_ranking_constraints(X[y], X[~y], loss)
    history = result.history
    assert result.converged and result.n_iter == len(history) == len(problem.queried)
    assert seen == history
    best = np.inf
    previous_dual = -np.inf
    for k, (record, w) in enumerate(zip(history, problem.queried, strict=True), start=1):
        assert record.iteration == k
        assert record.n_planes <= k - 1  # at most one plane added per non-final iteration (a repeat adds none)
        assert record.inference_seconds >= 0.0
        # primal objective at the k-th iterate, with the exact (brute-force) ξ
        assert record.primal_objective == pytest.approx(full_primal(w, planes, losses, C), abs=1e-9)
        best = min(best, record.primal_objective)
        assert record.duality_gap == pytest.approx(best - record.dual_objective, abs=1e-12)
        assert record.duality_gap >= -1e-9
        # the working set only grows, so its optimum never decreases
        assert record.dual_objective >= previous_dual - 1e-9
        previous_dual = record.dual_objective
    last = history[-1]
    assert last.violation <= tol
    assert last.duality_gap <= C * tol + 1e-8
    np.testing.assert_array_equal(problem.queried[-1], result.w)
    assert result.primal_objective == last.primal_objective
    assert result.inference_seconds == pytest.approx(sum(r.inference_seconds for r in history))


@pytest.mark.parametrize("start", ["arbitrary", "margins-already-hold"])
def test_starting_point_w0_reaches_the_same_optimum(rng, start):
    X, y = make_data(rng, 2, 3, 3)
    C, tol = 2.0, 1e-6
    if start == "arbitrary":
        w0 = np.array([3.0, -2.0, 1.0])
    else:
        # separable data: a long w0 along the separating feature meets every margin
        # (ξ(w0) = 0) yet is far from optimal -- a regression test for stopping at w0
        X[y, 0] += 8.0
        w0 = np.array([50.0, 0.0, 0.0])
    planes, losses = all_ranking_constraints(X[y], X[~y], "ap")
    if start != "arbitrary":
        assert np.max(losses - planes @ w0) <= 0.0
    problem = RecordingProblem(ranking_problem(X, y, "ap"))
    result = solve_cutting_plane(problem, C, tol=tol, w0=w0)
    np.testing.assert_array_equal(problem.queried[0], w0)
    assert result.converged
    assert_eps_optimal(result.w, planes, losses, C, tol)


# ------------------------------------------------------------ linear constraints


def _constraints(d, case):
    if case == "w0-nonpositive":
        return LinearConstraints.nonpositive(d, [0])
    if case == "w0-nonpositive-w2-at-least":  # w = 0 is infeasible: w[2] >= 0.3
        return LinearConstraints(np.vstack([np.eye(d)[0], -np.eye(d)[2]]), np.array([0.0, -0.3]))
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["w0-nonpositive", "w0-nonpositive-w2-at-least"])
@pytest.mark.parametrize("loss", ["ap", "ndcg"])
def test_linear_constraints_keep_every_iterate_feasible(rng, case, loss):
    X, y = make_data(rng, 2, 3, 3)
    # make w[0] want to be positive, so that w[0] <= 0 binds
    X[y, 0] += 2.0
    C, tol = 5.0, 1e-6
    constraints = _constraints(3, case)
    problem = RecordingProblem(ranking_problem(X, y, loss), constraints)
    result = solve_cutting_plane(problem, C, tol=tol, max_iter=500)
    assert result.converged
    for w in problem.queried + [result.w]:
        assert np.all(constraints.A @ w <= constraints.b + 1e-7), w
    planes, losses = all_ranking_constraints(X[y], X[~y], loss)
    assert_eps_optimal(result.w, planes, losses, C, tol, constraints)
    unconstrained = solve_primal_reference(planes, losses, C)[0]
    assert np.any(constraints.A @ unconstrained > constraints.b + 1e-3), "the constraints should bind"


def test_infeasible_start_is_the_smallest_feasible_w(rng):
    X, y = make_data(rng, 2, 3, 3)
    constraints = _constraints(3, "w0-nonpositive-w2-at-least")
    problem = RecordingProblem(ranking_problem(X, y, "ap"), constraints)
    solve_cutting_plane(problem, 1.0, tol=1e-3)
    # the first oracle call is at argmin ‖w‖ s.t. A w ≤ b, i.e. (0, 0, 0.3)
    np.testing.assert_allclose(problem.queried[0], [0.0, 0.0, 0.3], atol=1e-4)


# ------------------------------------------------------------------ max_iter


def test_convergence_warning_at_max_iter(rng):
    X, y = make_data(rng, 2, 3, 3)
    assert rankopt.ConvergenceWarning is sklearn.exceptions.ConvergenceWarning
    with pytest.warns(rankopt.ConvergenceWarning, match="max_iter=2"):
        result = solve_cutting_plane(ranking_problem(X, y), 10.0, tol=1e-9, max_iter=2)
    assert not result.converged
    assert result.n_iter == 2 and len(result.history) == 2
    assert result.history[-1].violation > 1e-9


def test_no_warning_when_disabled_or_converged(rng):
    X, y = make_data(rng, 2, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stopped = solve_cutting_plane(ranking_problem(X, y), 10.0, tol=1e-9, max_iter=2, warn=False)
        converged = solve_cutting_plane(ranking_problem(X, y), 1.0, tol=1e-3)
    assert not stopped.converged
    assert converged.converged


def test_ranksvm_warns_at_max_iter(rng):
    X, y = make_data(rng, 3, 3, 3)
    with pytest.warns(rankopt.ConvergenceWarning):
        model = rankopt.RankSVM(C=10.0, tol=1e-9, max_iter=1).fit(X, y)
    assert model.converged_ is False
    assert model.n_iter_ == 1


# ------------------------------------------------------------------ contracts


class _WrongShapeProblem(StructuredProblem):
    n_features = 3

    def ground_truth_feature(self):
        return np.zeros(4)

    def most_violated(self, w):  # pragma: no cover - never reached
        return Constraint(np.zeros(3), 0.0)


def test_ground_truth_feature_of_wrong_shape_is_a_contract_error():
    with pytest.raises(RuntimeError, match=r"_WrongShapeProblem broke its contract.*\(4,\).*\(3,\)"):
        solve_cutting_plane(_WrongShapeProblem(), 1.0)


def test_a_tolerance_below_float64_rounding_stalls_instead_of_running_on():
    """tol = 1e-18 cannot be certified at C = 10 (below float64's rounding of an objective near 6): the solve
    stops, says so, quickly."""
    from rankopt import RankSVM

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 20))
    y = X[:, 0] + 0.5 * rng.standard_normal(2000) > 1.0
    with pytest.warns(
        sklearn.exceptions.ConvergenceWarning,
        match=r"stalled: the duality gap reached .* attainable here is about tol = ",
    ):
        model = RankSVM(C=10, tol=1e-18, max_iter=1500).fit(X, y)
    assert model.stop_reason_ == "stalled" and not model.converged_
    assert model.n_iter_ < 500  # it ran 1,500 iterations and 720 s before the guard
    assert model.duality_gap_ < 1e-6
    # a reachable tolerance on the same data converges as before
    assert RankSVM(C=10, tol=1e-8, max_iter=1500).fit(X, y).stop_reason_ == "converged"


def test_the_stall_guard_stops_a_gap_stuck_at_rounding():
    """The plain cutting plane on the same data: the gap stops near 1e-12 and the guard stops it."""
    from rankopt.engine.certificate import STALL_ITERATIONS, STALL_ROUNDING

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 20))
    y = X[:, 0] + 0.5 * rng.standard_normal(2000) > 1.0
    registry = rankopt.plugins.default_registry()
    problem = registry.get_model("ranking").build_problem(
        X, y, registry.get_loss("ap"), registry.get_feature_map("linear"), registry=registry
    )
    with pytest.warns(sklearn.exceptions.ConvergenceWarning, match="stalled"):
        result = solve_cutting_plane(problem, 10.0, tol=1e-15, max_iter=1500, line_search=False)
    assert result.stop_reason == "stalled" and result.n_iter < 500
    gaps = [record.duality_gap for record in result.history]
    rounding = STALL_ROUNDING * np.finfo(np.float64).eps * result.history[-1].primal_objective
    assert gaps[-1] < 1e-10 and gaps[-1] >= gaps[-1 - STALL_ITERATIONS] - rounding


def test_an_oracle_priced_problem_is_cut_near_its_best_point_and_reaches_the_plain_optimum(rng):
    """In-out: where a point costs an oracle call, the cut after a working-set solve is at
    best + μ·(w_c − best), priced by that call; the optimum is the plain method's."""
    import rankopt.engine.cutting_plane as cutting_plane

    X, y = make_data(rng, 3, 5, 4)
    C, tol = 30.0, 1e-6
    problem = RecordingProblem(ranking_problem(X, y, "ap"))  # not a LinearProblem: no line search
    result = solve_cutting_plane(problem, C, tol=tol, max_iter=500)
    plain = solve_cutting_plane(RecordingProblem(ranking_problem(X, y, "ap")), C, tol=tol, line_search=False)
    assert result.converged and plain.converged
    assert abs(result.primal_objective - plain.primal_objective) <= C * tol
    # Iteration 1 prices w = 0 (the best point); the plain method then cuts at the first optimum w_c,
    # this one a tenth of the way there.
    plain_points = RecordingProblem(ranking_problem(X, y, "ap"))
    solve_cutting_plane(plain_points, C, tol=tol, max_iter=2, warn=False, line_search=False)
    w_c = plain_points.queried[1]
    assert np.allclose(problem.queried[0], 0.0) and np.any(w_c != 0.0)
    np.testing.assert_allclose(problem.queried[1], cutting_plane.IN_OUT_CUT * w_c, rtol=1e-12, atol=1e-15)
    # Every primal in the history is an exact oracle price at its point.
    planes, losses = all_ranking_constraints(X[y], X[~y], "ap")
    for record, w in zip(result.history, problem.queried, strict=True):
        assert record.primal_objective == pytest.approx(full_primal(w, planes, losses, C), abs=1e-9)
