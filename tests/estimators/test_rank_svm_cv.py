"""RankSVMCV: C by cross-validation over whole queries, along a warm-started path."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import GroupKFold, KFold

from rankopt import RankSVM, RankSVMCV
from rankopt.metrics import mean_average_precision


def _letor_like(rng, n_queries=24, size=8, d=5):
    X = rng.standard_normal((n_queries * size, d))
    qid = np.repeat(np.arange(n_queries) * 5 + 2, size)
    grades = np.clip(np.round(X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(X.shape[0]) + 1), 0, 4).astype(int)
    return X, grades, qid


def test_chooses_the_C_with_the_best_mean_validation_map_and_refits_there(rng):
    X, grades, qid = _letor_like(rng)
    Cs = [0.01, 1.0, 100.0]
    model = RankSVMCV(Cs=Cs, cv=3).fit(X, grades, qid=qid)
    results = model.cv_results_
    assert list(results["C"]) == Cs and model.n_splits_ == 3
    # The scores are each fold's MAP of a RankSVM fitted on the other folds, recomputed here.
    folds = list(GroupKFold(3).split(X, grades, qid))
    for j, C in enumerate(Cs):
        expected = []
        for train, test in folds:
            fitted = RankSVM(C=C).fit(X[train], grades[train], qid=qid[train])
            expected.append(mean_average_precision(grades[test], fitted.decision_function(X[test]), qid[test]))
        # warm-started and cold fits are both certified to C·tol, not equal: their MAPs agree closely
        assert results["mean_test_score"][j] == pytest.approx(np.mean(expected), abs=0.02)
    best = int(np.argmax(results["mean_test_score"]))
    assert model.C_ == Cs[best] and model.best_score_ == results["mean_test_score"][best]
    assert np.all(results["n_certified"] == 3) and model.converged_
    cold = RankSVM(C=model.C_).fit(X, grades, qid=qid)  # the refit is this very fit
    np.testing.assert_array_equal(model.coef_, cold.coef_)
    assert not model.estimator_.warm_start and model.n_iter_ == cold.n_iter_
    np.testing.assert_array_equal(model.predict(X), model.estimator_.decision_function(X))
    assert model.score(X, grades, qid=qid) == model.estimator_.score(X, grades, qid=qid)
    assert model.path_n_iter_ >= results["mean_n_iter"].sum()


def test_group_sizes_one_query_and_a_splitter_object(rng):
    X, grades, qid = _letor_like(rng, n_queries=12)
    sizes = np.bincount(np.unique(qid, return_inverse=True)[1])
    by_group = RankSVMCV(Cs=[0.1, 10.0]).fit(X, grades, group=sizes)
    by_qid = RankSVMCV(Cs=[0.1, 10.0]).fit(X, grades, qid=qid)
    np.testing.assert_array_equal(by_group.cv_results_["mean_test_score"], by_qid.cv_results_["mean_test_score"])
    y = (grades >= 2).astype(int)
    single = RankSVMCV(Cs=[0.1, 10.0], cv=KFold(3, shuffle=True, random_state=0), scoring="p@5").fit(X, y)
    assert single.C_ in (0.1, 10.0) and single.n_splits_ == 3
    assert RankSVMCV(Cs=[1.0], cv=2, scoring=lambda y, s, q: 0.5).fit(X, y).best_score_ == 0.5


def test_bad_input_gets_clear_errors(rng):
    X, grades, qid = _letor_like(rng, n_queries=2)
    with pytest.raises(ValueError, match="got 2 queries for cv=3 folds"):
        RankSVMCV().fit(X, grades, qid=qid)
    for Cs in ([], [1.0, -1.0], [np.nan], "abc", [[1.0]]):
        with pytest.raises(ValueError, match="expected Cs to be a non-empty list of positive finite numbers"):
            RankSVMCV(Cs=Cs).fit(X, grades, qid=qid)
    for cv in (1, True, "3", 2.5):
        with pytest.raises(ValueError, match="expected cv to be"):
            RankSVMCV(cv=cv).fit(X, grades, qid=qid)
    for scoring in ("ndcg@0", "zero_one", ["map", "ndcg@5"]):
        with pytest.raises(ValueError, match="scoring"):
            RankSVMCV(cv=2, scoring=scoring).fit(X, grades, qid=qid)
    with pytest.raises(ValueError, match=r"expected qid to have 16 entries \(one per row of X\)"):
        RankSVMCV(cv=2).fit(X, grades, qid=qid[:-1])


def test_dataframe_feature_names_reach_the_refit(rng):
    pd = pytest.importorskip("pandas")
    X, grades, qid = _letor_like(rng, n_queries=9)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = RankSVMCV(Cs=[1.0], cv=3).fit(frame, grades, qid=qid)
    assert list(model.feature_names_in_) == list(frame.columns) and model.n_features_in_ == X.shape[1]


def test_folds_in_parallel_give_the_same_search(rng):
    X, grades, qid = _letor_like(rng, n_queries=12)
    one = RankSVMCV(Cs=[0.1, 10.0], cv=3).fit(X, grades, qid=qid)
    two = RankSVMCV(Cs=[0.1, 10.0], cv=3, n_jobs=2).fit(X, grades, qid=qid)
    for key in ("mean_test_score", "mean_n_iter", "n_certified"):
        np.testing.assert_array_equal(one.cv_results_[key], two.cv_results_[key])
    np.testing.assert_array_equal(one.coef_, two.coef_)


def test_verbose_logs_every_fit_of_the_path(rng, caplog):
    import logging

    X, grades, qid = _letor_like(rng, n_queries=9)
    with caplog.at_level(logging.INFO, logger="rankopt"):
        RankSVMCV(Cs=[0.1, 10.0], cv=3, verbose=True).fit(X, grades, qid=qid)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("RankSVMCV fold")]
    assert len(lines) == 6 and "validation map" in lines[0]
