"""RankSVM over many queries: fit(X, y, qid), graded labels, relevant_at, model selection over queries."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import sklearn
from scipy.optimize import minimize
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler

from rankopt import RankSVM
from rankopt.metrics import average_precision, mean_average_precision
from rankopt.plugins import default_registry


def _letor_like(rng, n_queries=12, size=10, d=4):
    X = rng.standard_normal((n_queries * size, d))
    qid = np.repeat(np.arange(n_queries) * 7 + 3, size)
    grades = np.clip(np.round(X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(X.shape[0]) + 1), 0, 4).astype(int)
    return X, grades, qid


# ------------------------------------------------------------------ the optimum, by brute force


def _ranking_constraints(loss, X, relevant):
    """(Ψ_q(R), Δ_q(R)) for every ranking R of one query, Ψ normalised by |P||N| (one per ±-pattern order)."""
    n_pos, n_neg = int(relevant.sum()), int((~relevant).sum())
    out = []
    for perm in itertools.permutations(range(relevant.size)):
        rank = np.empty(relevant.size, dtype=int)
        rank[list(perm)] = np.arange(relevant.size)
        psi = np.zeros(X.shape[1])
        for p in np.flatnonzero(relevant):
            for n in np.flatnonzero(~relevant):
                psi += (1.0 if rank[p] < rank[n] else -1.0) * (X[p] - X[n])
        out.append((psi / (n_pos * n_neg), loss.value(relevant[list(perm)])))
    return out


def _pair_labelling_constraints(X, grades):
    """(Ψ_q(y), Δ_q(y)) for every labelling y of the pairs with different grades (SVM^rank's output space)."""
    pairs = [(i, j) for i in range(grades.size) for j in range(grades.size) if grades[i] > grades[j]]
    out = []
    for signs in itertools.product((1.0, -1.0), repeat=len(pairs)):
        psi = sum(s * (X[i] - X[j]) for s, (i, j) in zip(signs, pairs, strict=True)) / len(pairs)
        out.append((psi, signs.count(-1.0) / len(pairs)))
    return out


def _brute_force_optimum(per_query_constraints, ground_truths, C):
    """min ½‖w‖² + C ξ over every tuple of per-query outputs, by a generic QP solver."""
    psi_star = np.mean(ground_truths, axis=0)
    rows = []
    for combo in itertools.product(*per_query_constraints):
        psi = np.mean([c[0] for c in combo], axis=0)
        rows.append((psi - psi_star, np.mean([c[1] for c in combo])))
    A = np.array([r[0] for r in rows])
    b = np.array([r[1] for r in rows])
    d = psi_star.size

    def primal(w):
        return 0.5 * w @ w + C * max(0.0, np.max(b + A @ w))

    res = minimize(
        lambda v: 0.5 * v[:d] @ v[:d] + C * v[d],
        np.zeros(d + 1),
        method="SLSQP",
        constraints=[
            {
                "type": "ineq",
                "fun": lambda v: v[d] - b - A @ v[:d],
                "jac": lambda v: np.hstack([-A, np.ones((b.size, 1))]),
            },
            {"type": "ineq", "fun": lambda v: v[d:]},
        ],
        options={"ftol": 1e-12, "maxiter": 500},
    )
    assert res.success, res.message
    return primal, res.x[:d]


@pytest.mark.parametrize("loss_name", ["ap", "ndcg", "auc"])
def test_binary_losses_reach_the_brute_force_optimum(loss_name, rng):
    loss = default_registry().resolve_loss(loss_name)
    sizes, positives = (4, 3, 3), (2, 1, 0)  # the third query has nothing to order
    X = rng.standard_normal((sum(sizes), 3))
    relevant = np.concatenate([np.arange(s) < p for s, p in zip(sizes, positives, strict=True)])
    qid = np.repeat([5, 1, 9], sizes)
    per_query, truths = [], []
    start = 0
    for s, p in zip(sizes, positives, strict=True):
        Xq, rq = X[start : start + s], relevant[start : start + s]
        start += s
        if 0 < p < s:
            per_query.append(_ranking_constraints(loss, Xq, rq))
            truths.append(Xq[rq].mean(axis=0) - Xq[~rq].mean(axis=0))
    C = 10.0
    primal, w_opt = _brute_force_optimum(per_query, truths, C)
    perm = rng.permutation(X.shape[0])  # rows of a query need not be contiguous
    model = RankSVM(loss=loss_name, C=C, tol=1e-7, max_iter=500).fit(X[perm], relevant[perm].astype(int), qid=qid[perm])
    assert model.converged_ and model.n_queries_ == 3 and model.n_queries_used_ == 2
    assert primal(model.coef_) == pytest.approx(primal(w_opt), abs=C * 1e-6)
    np.testing.assert_allclose(model.coef_, w_opt, atol=1e-3)


def test_pairwise_loss_reaches_the_brute_force_optimum_on_grades(rng):
    grades_per_query = [np.array([0, 1, 2]), np.array([0, 0, 2, 1]), np.array([3, 3])]
    X = rng.standard_normal((9, 3))
    grades = np.concatenate(grades_per_query)
    qid = np.repeat([0, 1, 2], [3, 4, 2])
    per_query, truths = [], []
    start = 0
    for g in grades_per_query:
        Xq = X[start : start + g.size]
        start += g.size
        if g.min() < g.max():
            constraints = _pair_labelling_constraints(Xq, g)
            per_query.append(constraints)
            truths.append(constraints[0][0])  # all +1: the ground truth
    C = 10.0
    primal, w_opt = _brute_force_optimum(per_query, truths, C)
    model = RankSVM(loss="pairwise", C=C, tol=1e-7, max_iter=500).fit(X, grades, qid=qid)
    assert model.converged_ and model.n_queries_used_ == 2
    assert primal(model.coef_) == pytest.approx(primal(w_opt), abs=C * 1e-6)
    np.testing.assert_allclose(model.coef_, w_opt, atol=1e-3)


# ------------------------------------------------------------------ consistency with one query


@pytest.mark.parametrize("loss", ["ap", "ndcg", "auc"])
def test_one_query_through_qid_equals_the_single_query_fit(loss, rng):
    X = rng.standard_normal((60, 5))
    y = (X[:, 0] + rng.standard_normal(60) > 0.5).astype(int)
    single = RankSVM(loss=loss, C=3.0).fit(X, y)
    over_queries = RankSVM(loss=loss, C=3.0).fit(X, y, qid=np.full(60, 4))
    np.testing.assert_array_equal(over_queries.coef_, single.coef_)
    assert over_queries.n_iter_ == single.n_iter_
    assert single.n_queries_ == single.n_queries_used_ == 1


def test_row_order_does_not_change_the_fit(rng):
    X, grades, qid = _letor_like(rng)
    base = RankSVM(C=2.0, tol=1e-6).fit(X, grades, qid=qid)
    perm = rng.permutation(X.shape[0])
    shuffled = RankSVM(C=2.0, tol=1e-6).fit(X[perm], grades[perm], qid=qid[perm])
    np.testing.assert_allclose(shuffled.coef_, base.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(
        shuffled.decision_function(X[perm]), base.decision_function(X)[perm], rtol=1e-6, atol=1e-9
    )


def test_queries_with_one_level_are_left_out_counted_and_logged(rng, caplog):
    X, grades, qid = _letor_like(rng, n_queries=6)
    grades[qid == qid[0]] = 0  # nothing relevant
    grades[qid == qid[-1]] = 3  # everything relevant
    with caplog.at_level(logging.INFO, logger="rankopt"):
        model = RankSVM(C=1.0, tol=1e-6).fit(X, grades, qid=qid)
    assert model.n_queries_ == 6 and model.n_queries_used_ == 4
    assert any("2 of 6 queries" in r.getMessage() for r in caplog.records)
    keep = (qid != qid[0]) & (qid != qid[-1])
    without = RankSVM(C=1.0, tol=1e-6).fit(X[keep], grades[keep], qid=qid[keep])
    np.testing.assert_allclose(model.coef_, without.coef_, rtol=1e-6, atol=1e-9)


def test_relevant_at_thresholds_the_grades(rng):
    X, grades, qid = _letor_like(rng)
    graded = RankSVM(relevant_at=2, tol=1e-6).fit(X, grades, qid=qid)
    binary = RankSVM(tol=1e-6).fit(X, (grades >= 2).astype(int), qid=qid)
    np.testing.assert_array_equal(graded.coef_, binary.coef_)
    assert graded.score(X, grades, qid=qid) == pytest.approx(
        mean_average_precision(grades, graded.decision_function(X), qid, relevant_at=2)
    )


def test_graded_labels_train_the_pairwise_loss_and_it_ranks_better_than_chance(rng):
    X, grades, qid = _letor_like(rng, n_queries=20)
    model = RankSVM(loss="pairwise", C=10.0).fit(X, grades, qid=qid)
    assert model.converged_
    assert model.coef_[0] > 0 and model.coef_[1] > 0
    assert model.score(X, grades, qid=qid) > 0.7


def test_labeling_loss_with_qid_trains_on_the_thresholded_documents(rng):
    X, grades, qid = _letor_like(rng)
    pooled = RankSVM(loss="zero_one").fit(X, grades, qid=qid)
    plain = RankSVM(loss="zero_one").fit(X, (grades >= 1).astype(int))
    np.testing.assert_array_equal(pooled.coef_, plain.coef_)
    assert pooled.n_queries_ == 12


# ------------------------------------------------------------------ model selection over queries


def test_grid_search_with_group_k_fold_routes_qid(rng):
    X, grades, qid = _letor_like(rng, n_queries=15)
    with sklearn.config_context(enable_metadata_routing=True):
        model = RankSVM(max_iter=200).set_fit_request(qid=True).set_score_request(qid=True)
        search = GridSearchCV(model, {"C": [0.1, 10.0]}, cv=GroupKFold(n_splits=3), error_score="raise")
        search.fit(X, grades, qid=qid, groups=qid)
        assert search.best_estimator_.n_queries_ == 15
        scores = search.cv_results_["mean_test_score"]
        # Each fold's score is the MAP of that fold's queries.
        folds = list(GroupKFold(n_splits=3).split(X, grades, qid))
        train, test = folds[0]
        fold_model = RankSVM(max_iter=200, C=0.1).fit(X[train], grades[train], qid=qid[train])
        assert search.cv_results_["split0_test_score"][0] == pytest.approx(
            fold_model.score(X[test], grades[test], qid=qid[test])
        )
        result = cross_validate(model, X, grades, cv=GroupKFold(n_splits=3), params={"qid": qid, "groups": qid})
    assert np.all(np.isfinite(scores)) and np.all((result["test_score"] > 0.3) & (result["test_score"] <= 1))


def test_pipeline_with_a_scaler_routes_qid(rng):
    # Pipeline.score passes sample_weight=None under metadata routing; a score
    # without that parameter made every fold's score fail.
    X, grades, qid = _letor_like(rng, n_queries=15)
    X = X * np.array([1.0, 1e3, 1e-3, 10.0])
    with sklearn.config_context(enable_metadata_routing=True):
        model = RankSVM(max_iter=200).set_fit_request(qid=True).set_score_request(qid=True)
        pipe = make_pipeline(MaxAbsScaler(), model)
        result = cross_validate(
            pipe, X, grades, cv=GroupKFold(n_splits=3), params={"qid": qid, "groups": qid}, error_score="raise"
        )
    train, test = next(GroupKFold(n_splits=3).split(X, grades, qid))
    scaler = MaxAbsScaler().fit(X[train])
    fold_model = RankSVM(max_iter=200).fit(scaler.transform(X[train]), grades[train], qid=qid[train])
    assert result["test_score"][0] == pytest.approx(
        fold_model.score(scaler.transform(X[test]), grades[test], qid=qid[test])
    )


def test_score_without_qid_says_how_to_route_it(rng):
    X, grades, qid = _letor_like(rng)
    model = RankSVM(max_iter=200).fit(X, grades, qid=qid)
    with pytest.raises(ValueError, match=r"fitted over queries.*not MAP over queries.*set_score_request\(qid=True\)"):
        model.score(X, grades)
    # binary labels too: pooled AP is never what a model fitted over queries is scored by
    with pytest.raises(ValueError, match=r"fitted over queries"):
        model.score(X, grades >= 1)
    single = RankSVM(max_iter=200).fit(X, grades >= 1)  # one query: AP as before
    assert single.score(X, grades >= 1) == pytest.approx(average_precision(grades >= 1, single.decision_function(X)))
    with pytest.raises(ValueError, match=r"are scored over queries: pass qid .*set_score_request\(qid=True\)"):
        single.score(X, grades)


def test_score_refuses_sample_weight(rng):
    X, grades, qid = _letor_like(rng)
    model = RankSVM(max_iter=200).fit(X, grades, qid=qid)
    with pytest.raises(ValueError, match=r"expected sample_weight=None \(RankSVM.score does not weight"):
        model.score(X, grades, qid=qid, sample_weight=np.ones(grades.size))
    assert model.score(X, grades, qid=qid, sample_weight=None) == model.score(X, grades, qid=qid)


# ------------------------------------------------------------------ bad input


def _small_queries():
    rng = np.random.default_rng(1)
    return rng.standard_normal((12, 3)), np.array([0, 1, 2, 0, 3, 1] * 2), np.repeat([1, 2, 3], 4)


BAD_QUERY_INPUT = {
    "qid-wrong-length": (lambda X, y, q: (X, y, q[:-1]), {}, r"expected qid to have 12 entries"),
    "qid-nan": (lambda X, y, q: (X, y, np.where(np.arange(12) == 3, np.nan, q)), {}, r"expected qid.*NaN"),
    "qid-fraction": (lambda X, y, q: (X, y, q + 0.5), {}, r"expected qid to hold integer query ids, got 1.5"),
    "qid-strings": (lambda X, y, q: (X, y, np.array(["a"] * 12)), {}, r"expected qid to hold integer"),
    "qid-2d": (lambda X, y, q: (X, y, q[:, None]), {}, r"expected qid to be 1-D"),
    "grades-negative": (
        lambda X, y, q: (X, np.where(y == 3, -2, y), q),
        {},
        r"expected y to hold integer relevance grades >= 0.*-2",
    ),
    "grades-fraction": (lambda X, y, q: (X, y + 0.25, q), {}, r"expected y to hold integer relevance grades.*0.25"),
    "grades-nan": (lambda X, y, q: (X, np.where(y == 3, np.nan, y), q), {}, r"expected y.*NaN"),
    "grades-wrong-length": (lambda X, y, q: (X, y[:5], q), {}, r"expected y to have 12 entries"),
    "threshold-unreached": (lambda X, y, q: (X, y, q), {"relevant_at": 5}, r"relevant_at=5 to be reached.*at most 3"),
    "every-query-one-class": (
        lambda X, y, q: (X, np.repeat([0, 2, 0], 4), q),
        {},
        r"some query \(qid\).*relevant_at=1.*none of the 3",
    ),
    "every-query-one-grade-pairwise": (
        lambda X, y, q: (X, np.repeat([0, 2, 0], 4), q),
        {"loss": "pairwise"},
        r"some query \(qid\).*two different grades",
    ),
    "relevant_at-zero": (lambda X, y, q: (X, y, q), {"relevant_at": 0}, r"expected relevant_at to be a positive"),
    "relevant_at-string": (lambda X, y, q: (X, y, q), {"relevant_at": "2"}, r"expected relevant_at to be a positive"),
    "grades-without-qid": (
        lambda X, y, q: (X, y, None),
        {},
        r"got \[0, 1, 2, 3\] instead; relevance grades .* train with qid",
    ),
    "grades-without-qid-pairwise": (
        lambda X, y, q: (X, y, None),
        {"loss": "pairwise"},
        r"train with qid: pass qid=np.zeros",
    ),
    "relevant_at-without-qid": (
        lambda X, y, q: (X, (y > 0).astype(int), None),
        {"relevant_at": 2},
        r"expected relevant_at=1 without qid",
    ),
    "approx-with-qid": (lambda X, y, q: (X, y, q), {"approx": 50}, r"expected approx=None with qid"),
    "pairwise-with-greedy": (
        lambda X, y, q: (X, y, q),
        {"loss": "pairwise", "inference": "greedy"},
        r"expected inference 'auto' or 'level_sweep'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_QUERY_INPUT))
def test_bad_query_input_raises_value_error_naming_it(case):
    make, params, pattern = BAD_QUERY_INPUT[case]
    X, y, qid = make(*_small_queries())
    model = RankSVM(**params)
    with pytest.raises(ValueError, match=pattern):
        model.fit(X, y, qid=qid)
    assert not hasattr(model, "coef_")


def test_float32_and_sparse_x_over_queries(rng):
    import scipy.sparse as sp

    X, grades, qid = _letor_like(rng)
    dense = RankSVM(C=2.0, tol=1e-6).fit(X, grades, qid=qid)
    sparse = RankSVM(C=2.0, tol=1e-6).fit(sp.csr_matrix(X), grades, qid=qid)
    single = RankSVM(C=2.0, tol=1e-6).fit(X.astype(np.float32), grades, qid=qid)
    # The same problem: each answer certified within C·tol of the optimum, so within 2·C·tol of each
    # other in objective, and ‖Δw‖² ≤ 2·(gap₁ + gap₂) by strong convexity.  (Rounding-level differences
    # of the products can send the two solves through other planes to other certified points.)
    for model in (sparse, single):
        assert model.converged_
        assert abs(model.history_[-1].primal_objective - dense.history_[-1].primal_objective) <= 2 * 2.0 * 1e-6
        bound = np.sqrt(2 * (model.duality_gap_ + dense.duality_gap_)) + 1e-6
        assert np.linalg.norm(model.coef_ - dense.coef_) <= bound


def test_float_qid_and_float_grades_from_a_parser_are_accepted(rng):
    X, grades, qid = _letor_like(rng)
    ints = RankSVM().fit(X, grades, qid=qid)
    floats = RankSVM().fit(X, grades.astype(float), qid=qid.astype(float))
    np.testing.assert_array_equal(floats.coef_, ints.coef_)


@pytest.mark.parametrize("loss", ["ap", "ndcg", "auc", "pairwise", "ndcg_graded", "zero_one"])
def test_row_order_within_queries_leaves_every_loss_s_fit_unchanged(loss, rng):
    """Ties of equal score and grade are averaged, never broken by row order (ndcg_graded moved by 12 % before).

    At w = 0, where every fit starts, every score ties, so the first cut is where row order would enter.
    """
    X, grades, qid = _letor_like(rng, n_queries=8)
    X = np.round(X, 1)  # equal rows, hence equal scores at every iterate, beyond w = 0
    base = RankSVM(loss=loss, C=10.0).fit(X, grades, qid=qid)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(X.shape[0])
        perm = perm[np.argsort(qid[perm], kind="stable")]  # rows shuffled within their queries
        shuffled = RankSVM(loss=loss, C=10.0).fit(X[perm], grades[perm], qid=qid[perm])
        np.testing.assert_allclose(shuffled.coef_, base.coef_, rtol=0, atol=1e-9)
        assert shuffled.n_iter_ == base.n_iter_


def test_zero_one_takes_qid_whose_queries_hold_one_level_each(rng):
    """Refused before ("no query holds both ..."), though the grouping does not change the 0-1 loss."""
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    plain = RankSVM(loss="zero_one").fit(X, y)
    by_label = RankSVM(loss="zero_one").fit(X, y, qid=y)  # every query holds one level only
    np.testing.assert_array_equal(by_label.coef_, plain.coef_)
    assert by_label.n_queries_ == by_label.n_queries_used_ == 2
    for qid in (np.arange(40) % 3, np.zeros(40)):
        np.testing.assert_array_equal(RankSVM(loss="zero_one").fit(X, y, qid=qid).coef_, plain.coef_)
    with pytest.raises(ValueError, match="expected some document below relevant_at=1 for the labeling loss"):
        RankSVM(loss="zero_one").fit(X, np.ones(40), qid=y)
