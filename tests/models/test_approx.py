"""AP-SVM-APPX (Mohapatra et al. (2014) §3.3): RankSVM(loss="ap", approx=k)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_digits

import rankopt
from rankopt.engine import LinearConstraints, solve_cutting_plane
from rankopt.engine.appx import solve_appx
from rankopt.metrics import average_precision
from rankopt.models import approx as approx_module
from rankopt.plugins import default_registry

C, TOL = 10.0, 1e-3


@pytest.fixture(scope="module")
def digits():
    X, digit = load_digits(return_X_y=True)
    return X / 16.0, digit == 3


@pytest.fixture(scope="module")
def exact_ap(digits):
    X, y = digits
    return rankopt.RankSVM(loss="ap", C=C, tol=TOL).fit(X, y).score(X, y)


def kept_easy_samples(X, y, percent):
    """Stage 1 recomputed through the public API: the binary SVM and the top-k% easy samples."""
    w0 = rankopt.RankSVM(loss="zero_one", C=C, tol=TOL).fit(X, y).coef_
    margins = np.where(y, 1.0, -1.0) * (X @ w0)
    return approx_module.select_hard(margins, percent)


@pytest.mark.parametrize("percent", [25, 50, 100])
def test_approx_trains_keeps_hard_margins_and_ap(digits, exact_ap, percent):
    X, y = digits
    ranker = rankopt.RankSVM(loss="ap", C=C, tol=TOL, approx=percent).fit(X, y)
    easy, hard = kept_easy_samples(X, y, percent)
    assert ranker.n_easy_ == np.count_nonzero(easy) > 0
    assert ranker.n_hard_constraints_ == np.count_nonzero(hard) == int(percent * ranker.n_easy_ // 100)
    assert ranker.converged_
    margins = np.where(y, 1.0, -1.0) * ranker.decision_function(X)
    assert np.all(margins[hard] >= 1.0 - 1e-6)
    # The kept ones are the easy samples of highest binary-SVM margin.
    w0 = rankopt.RankSVM(loss="zero_one", C=C, tol=TOL).fit(X, y).coef_
    m0 = np.where(y, 1.0, -1.0) * (X @ w0)
    if percent < 100:
        assert m0[hard].min() >= m0[easy & ~hard].max()
    assert ranker.score(X, y) == pytest.approx(exact_ap, abs=0.03)
    assert ranker.score(X, y) > 0.9


def test_lazy_constraints_reach_the_full_problem_optimum(digits):
    """Constraint generation ends at the optimum of the QP holding every hard constraint."""
    X, y = digits
    X, y = X[:400], y[:400]
    registry = default_registry()
    feature_map = registry.get_feature_map("linear")
    loss = registry.get_loss("ap")
    two_stages = approx_module.ApproxProblem(X, y, loss, feature_map, 100.0, inference="auto", registry=registry)
    problem, result, split = solve_appx(two_stages, C, tol=1e-4, max_iter=1000)
    assert split.n_hard_constraints > 0
    assert problem.linear_constraints.b.size < split.n_hard_constraints  # not all were needed
    assert sum(r.iteration == 1 for r in result.history) >= 2  # several rounds, histories joined
    full = approx_module.hard_margin_constraints(X, y, split.hard)
    problem.linear_constraints = full
    reference = solve_cutting_plane(problem, C, tol=1e-4, max_iter=1000)
    assert np.all(full.A @ result.w <= full.b + 1e-6)

    def objective(w):
        constraint = problem.most_violated(w)
        xi = max(0.0, constraint.loss - w @ (problem.ground_truth_feature() - constraint.feature))
        return 0.5 * w @ w + C * xi

    # Both runs stop within C·tol of the optimum.
    assert objective(result.w) == pytest.approx(objective(reference.w), abs=2 * C * 1e-4)


def test_approx_inference_time_covers_every_round(digits):
    X, y = digits
    ranker = rankopt.RankSVM(loss="ap", C=C, tol=TOL, approx=100).fit(X, y)
    assert ranker.n_iter_ == len(ranker.history_)
    assert all(r.inference_seconds >= 0 for r in ranker.history_)


def test_sparse_and_float32_match_dense(digits):
    X, y = digits
    dense = rankopt.RankSVM(loss="ap", C=C, tol=TOL, approx=50).fit(X, y)
    sparse = rankopt.RankSVM(loss="ap", C=C, tol=TOL, approx=50).fit(sp.csr_matrix(X), y)
    single = rankopt.RankSVM(loss="ap", C=C, tol=TOL, approx=50).fit(X.astype(np.float32), y)
    for other in (sparse, single):
        assert other.n_hard_constraints_ == dense.n_hard_constraints_
        assert other.score(X, y) == pytest.approx(dense.score(X, y), abs=0.01)
    margins = np.where(y, 1.0, -1.0) * sparse.decision_function(sp.csr_matrix(X))
    _, hard = kept_easy_samples(X, y, 50)
    assert np.all(margins[hard] >= 1.0 - 1e-6)


def test_sparse_constraints_too_large_to_densify_raise(digits, monkeypatch):
    X, y = digits
    monkeypatch.setattr(approx_module, "MAX_DENSE_CONSTRAINT_ENTRIES", 100)
    with pytest.raises(ValueError, match="lower approx"):
        rankopt.RankSVM(loss="ap", C=C, approx=50).fit(sp.csr_matrix(X), y)


@pytest.mark.parametrize("bad", [0, -5, 100.5, 1e9, float("nan"), float("inf"), True, "50", [50]])
def test_bad_percentage_raises(digits, bad):
    X, y = digits
    with pytest.raises(ValueError, match="approx"):
        rankopt.RankSVM(loss="ap", approx=bad).fit(X, y)


@pytest.mark.parametrize("loss", ["ndcg", "auc", "zero_one"])
def test_approx_needs_the_ap_loss(digits, loss):
    X, y = digits
    with pytest.raises(ValueError, match="loss='ap'"):
        rankopt.RankSVM(loss=loss, approx=50).fit(X, y)


def test_approx_off_by_default(digits):
    X, y = digits
    ranker = rankopt.RankSVM(loss="ap", C=C).fit(X, y)
    assert ranker.approx is None and ranker.n_easy_ is None and ranker.n_hard_constraints_ is None
    assert clone(rankopt.RankSVM(approx=25)).get_params()["approx"] == 25


def test_difficult_set_without_positives_raises():
    """Every positive far on its side: approx=100 would leave AP no positive to rank."""
    rng = np.random.default_rng(0)
    pos = np.column_stack([rng.normal(4.0, 0.1, 20), rng.normal(0.0, 0.1, 20)])
    neg_far = np.column_stack([rng.normal(-4.0, 0.1, 30), rng.normal(0.0, 0.1, 30)])
    neg_near = np.column_stack([rng.normal(0.0, 0.05, 10), rng.normal(1.0, 0.1, 10)])
    X = np.vstack([pos, neg_far, neg_near])
    y = np.r_[np.ones(20), np.zeros(40)].astype(bool)
    w0 = rankopt.RankSVM(loss="zero_one", C=C).fit(X, y).coef_
    assert np.all(X[y] @ w0 >= 1.0)  # the premise: every positive is easy
    with pytest.raises(ValueError, match="no positive|0 positive"):
        rankopt.RankSVM(loss="ap", C=C, approx=100).fit(X, y)
    ranker = rankopt.RankSVM(loss="ap", C=C, approx=50).fit(X, y)  # half the easy ones stay difficult
    assert average_precision(y, ranker.decision_function(X)) == pytest.approx(1.0)


def test_select_hard_rounds_down_and_breaks_ties_by_index():
    margins = np.array([0.5, 2.0, 1.0, 3.0, 2.0, -1.0, 2.0])
    easy, hard = approx_module.select_hard(margins, 50.0)  # 5 easy -> keep 2
    assert easy.tolist() == [False, True, True, True, True, False, True]
    assert np.flatnonzero(hard).tolist() == [1, 3]
    _, hard = approx_module.select_hard(margins, 10.0)  # 0.5 -> 0
    assert not hard.any()
    _, hard = approx_module.select_hard(margins, 100.0)
    assert np.array_equal(hard, easy)


def test_hard_margin_constraints_rows():
    X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    y = np.array([True, False, True])
    constraints = approx_module.hard_margin_constraints(X, y, np.array([True, True, False]))
    assert isinstance(constraints, LinearConstraints)
    np.testing.assert_array_equal(constraints.A, [[-1.0, -2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(constraints.b, [-1.0, -1.0])
    assert approx_module.hard_margin_constraints(X, y, np.zeros(3, dtype=bool)) is None
