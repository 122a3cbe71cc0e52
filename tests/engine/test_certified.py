"""Certified stopping: ``converged`` only on a duality gap, whatever the QP solver does.

Issue 12's failure modes, each made to happen: a working-set QP that stalls
(returns its previous point), features at 10^±150 and a timestamp-sized
column, and random small problems whose optimum is known by brute force,
on which the reported gap must really bound the distance to it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_cutting_plane import all_ranking_constraints, full_primal, make_data, ranking_problem
from test_qp import solve_primal_reference

import rankopt
from rankopt.engine import qp as qp_module
from rankopt.engine import solve_cutting_plane
from rankopt.metrics import average_precision


def _stalling_dual(monkeypatch, after_calls, times=None):
    """Make the K-variable dual return its previous answer from call ``after_calls`` on
    (``times`` stalls in all, or for ever), as a stalled solver does."""
    original = qp_module.WorkingSetQP._solve_dual
    state = {"calls": 0, "stalls": 0, "last": None}

    def solve_dual(self):
        state["calls"] += 1
        if state["calls"] > after_calls and state["last"] is not None and (times is None or state["stalls"] < times):
            state["stalls"] += 1
            return state["last"]
        state["last"] = original(self)
        return state["last"]

    monkeypatch.setattr(qp_module.WorkingSetQP, "_solve_dual", solve_dual)
    return state


def _digits(n=300, digit=8):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:n] / 16.0, y[:n] == digit


def test_a_dual_that_stalls_for_ever_falls_back_to_the_primal_and_still_certifies(monkeypatch, caplog):
    X, y = _digits()
    reference = rankopt.RankSVM(loss="ap", C=10.0).fit(X, y)
    state = _stalling_dual(monkeypatch, after_calls=3)
    with caplog.at_level("INFO", logger="rankopt.engine.qp"):
        model = rankopt.RankSVM(loss="ap", C=10.0).fit(X, y)
    assert state["stalls"] > 0
    assert "the dual answer fails its optimality check" in caplog.text
    assert model.converged_ and model.duality_gap_ <= model.C * model.tol
    # both certified within C·tol of the same optimum
    assert abs(model.history_[-1].primal_objective - reference.history_[-1].primal_objective) <= 2 * 10.0 * 1e-3
    assert {record.qp_solver for record in model.history_[4:]} == {"primal"}


def test_when_every_solver_stalls_the_fit_is_not_converged(monkeypatch):
    X, y = _digits()
    _stalling_dual(monkeypatch, after_calls=3)
    original_primal = qp_module.WorkingSetQP._solve_primal

    def stalled_primal(self):
        raise qp_module.QPSolveError("stalled (made to, for this test)")

    monkeypatch.setattr(qp_module.WorkingSetQP, "_solve_primal", stalled_primal)
    with pytest.warns(rankopt.ConvergenceWarning, match=r"stopped uncertified: no working-set QP solver .* gap"):
        model = rankopt.RankSVM(loss="ap", C=10.0).fit(X, y)
    assert not model.converged_
    assert model.duality_gap_ > model.C * model.tol
    # the returned w is the best one priced (an oracle call, or the line search between them), and its
    # gap is what the history says: the last record's best primal minus the best dual
    assert model.duality_gap_ == pytest.approx(model.history_[-1].duality_gap)
    assert model.duality_gap_ <= min(r.primal_objective for r in model.history_) - model.history_[-1].dual_objective
    w = model.coef_
    registry = rankopt.plugins.default_registry()
    problem = registry.get_model("ranking").build_problem(
        X, y.astype(bool), registry.get_loss("ap"), registry.get_feature_map("linear"), registry=registry
    )
    constraint = problem.most_violated(w)
    xi = constraint.loss - w @ (problem.ground_truth_feature() - constraint.feature)
    primal = 0.5 * w @ w + model.C * max(0.0, xi)
    assert primal - model.history_[-1].dual_objective == pytest.approx(model.duality_gap_, rel=1e-9)
    monkeypatch.setattr(qp_module.WorkingSetQP, "_solve_primal", original_primal)


def test_one_stall_is_caught_by_the_qp_check_and_the_fit_reaches_the_optimum(monkeypatch):
    X, y = _digits()
    reference = rankopt.RankSVM(loss="auc", C=100.0, tol=1e-4).fit(X, y)
    state = _stalling_dual(monkeypatch, after_calls=5, times=1)
    model = rankopt.RankSVM(loss="auc", C=100.0, tol=1e-4).fit(X, y)
    assert state["stalls"] == 1
    assert model.converged_ and model.duality_gap_ <= 100.0 * 1e-4
    optimum_bound = reference.history_[-1].primal_objective - reference.duality_gap_
    assert model.history_[-1].primal_objective - optimum_bound <= 2 * 100.0 * 1e-4


@pytest.mark.parametrize("scale", [1e-150, 1e-20, 1e20, 1e150])
def test_huge_and_tiny_features_fit_correctly_or_are_refused_naming_the_scale(scale):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 2))
    y = np.arange(25) % 3 == 0
    for loss in ("ap", "zero_one"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", rankopt.ConvergenceWarning)
            try:
                model = rankopt.RankSVM(loss=loss, C=1.0).fit(X * scale, y)
            except ValueError as exc:
                assert "features of magnitude" in str(exc) and "C=1 " in str(exc), str(exc)
                assert scale > 1.0  # only a hard margin beyond float64's reach is refused
                continue
        assert model.converged_ and model.duality_gap_ <= model.C * model.tol
        assert np.all(np.isfinite(model.coef_)) and np.any(model.coef_ != 0)
        if scale < 1.0:
            # regulariser-dominated: the C -> 0 limit, whose ranking does not depend on the scale
            limit = rankopt.RankSVM(loss=loss, C=1e-9).fit(X, y)
            assert average_precision(y, model.decision_function(X * scale)) == pytest.approx(
                average_precision(y, limit.decision_function(X))
            )


def test_a_timestamp_column_fits_or_warns_in_the_engine_and_is_refused_by_the_estimator():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(size=(60, 3)), 1.7e9 + rng.integers(0, 10**6, size=60)])
    y = rng.random(60) < 0.3
    for loss in ("ap", "auc"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = solve_cutting_plane(ranking_problem(X, y, loss), 1.0)
            except ValueError as exc:  # the scale named, never a RuntimeError
                assert "magnitude" in str(exc)
                continue
        if result.converged:
            assert result.duality_gap <= 1e-3
        else:
            assert any(issubclass(w.category, rankopt.ConvergenceWarning) and "gap" in str(w.message) for w in caught)
    for loss in ("zero_one", "ap", "auc"):  # whether a QP solves depends on C: RankSVM refuses every C alike
        with pytest.raises(ValueError, match="comparable magnitude"):
            rankopt.RankSVM(loss=loss, C=1.0).fit(X, y)


@pytest.mark.parametrize("seed", range(12))
def test_converged_implies_a_gap_that_really_bounds_the_distance_to_the_optimum(seed):
    rng = np.random.default_rng(seed)
    n_pos, n_neg = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    X, y = make_data(rng, n_pos, n_neg, int(rng.integers(1, 4)), ties=bool(seed % 3 == 0))
    loss = ("ap", "ndcg", "auc")[seed % 3]
    C = float(10.0 ** rng.uniform(-2, 3))
    tol = float(10.0 ** rng.uniform(-6, -2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankopt.ConvergenceWarning)
        result = solve_cutting_plane(ranking_problem(X, y, loss), C, tol=tol, max_iter=300)
    planes, losses = all_ranking_constraints(X[y], X[~y], loss)
    _, opt = solve_primal_reference(planes, losses, C)
    primal = full_primal(result.w, planes, losses, C)
    # (the brute-force planes are rounded to 12 decimals)
    assert primal == pytest.approx(result.primal_objective, rel=1e-7, abs=1e-9)
    # the certificate holds against the brute-force optimum (up to the reference's own accuracy)
    assert primal - opt <= result.duality_gap + 1e-7 * max(1.0, opt)
    assert result.converged == (result.duality_gap <= C * tol)
    if result.converged:
        assert primal - opt <= C * tol + 1e-7 * max(1.0, opt)
