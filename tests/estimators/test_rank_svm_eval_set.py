"""Validation monitoring: ``RankSVM.fit(..., eval_set=...)`` and ``early_stopping_patience``."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV, GroupKFold

from rankopt import RankSVM
from rankopt.estimators.progress import MonitoredIterationRecord
from rankopt.exceptions import ConvergenceWarning
from rankopt.metrics import average_precision, mean_average_precision


@pytest.fixture(scope="module")
def queries(digits):
    X, y, X_val, y_val = digits
    return X, y, np.repeat(np.arange(10), 30), X_val, y_val, np.repeat(np.arange(10), 20)


def _scored(model, value) -> bool:
    return any(record.validation_score == pytest.approx(value, abs=1e-12) for record in model.history_)


def test_eval_set_records_the_validation_ap_of_every_iterate(digits):
    X, y, X_val, y_val = digits
    plain = RankSVM().fit(X, y)
    model = RankSVM().fit(X, y, eval_set=(X_val, y_val))
    # monitoring alone changes nothing
    np.testing.assert_array_equal(model.coef_, plain.coef_)
    assert model.converged_ and model.n_iter_ == plain.n_iter_
    assert len(model.history_) == model.n_iter_
    assert all(isinstance(record, MonitoredIterationRecord) for record in model.history_)
    for record, plain_record in zip(model.history_, plain.history_, strict=True):
        assert record.primal_objective == plain_record.primal_objective
    # the returned w is one of the scored iterates (the engine returns its best primal iterate)
    assert _scored(model, model.score(X_val, y_val))
    scores = [record.validation_score for record in model.history_]
    assert model.best_iteration_ == int(np.argmax(scores)) + 1
    assert model.best_validation_score_ == max(scores)
    assert plain.best_iteration_ is None and plain.best_validation_score_ is None
    assert type(plain.history_[0]).__name__ == "IterationRecord"


def test_eval_set_over_queries_uses_mean_ap(queries):
    X, y, qid, X_val, y_val, qid_val = queries
    model = RankSVM().fit(X, y, qid=qid, eval_set=(X_val, y_val, qid_val))
    final = mean_average_precision(y_val, model.decision_function(X_val), qid_val)
    assert final == pytest.approx(model.score(X_val, y_val, qid=qid_val), abs=1e-12)
    assert _scored(model, final)


def test_early_stopping_keeps_the_best_validation_iterate(digits):
    X, y, X_val, y_val = digits
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # stopping early is not a convergence failure
        model = RankSVM(C=100.0, tol=1e-6, early_stopping_patience=2).fit(X, y, eval_set=(X_val, y_val))
    full = RankSVM(C=100.0, tol=1e-6).fit(X, y, eval_set=(X_val, y_val))
    assert model.n_iter_ < full.n_iter_
    assert not model.converged_
    # it stopped exactly `patience` iterations after the best one
    assert model.n_iter_ == model.best_iteration_ + 2
    scores = [record.validation_score for record in model.history_]
    assert all(score <= model.best_validation_score_ for score in scores[model.best_iteration_ :])
    # its gap is the kept iterate's, against the solve's best dual bound: not certified
    best = model.history_[model.best_iteration_ - 1]
    assert model.duality_gap_ == pytest.approx(best.primal_objective - model.history_[-1].dual_objective)
    assert model.duality_gap_ > 100.0 * 1e-6
    # coef_ is the best iterate, not the last
    assert average_precision(y_val, X_val @ model.coef_) == pytest.approx(model.best_validation_score_, abs=1e-12)
    # the records up to the stop are those of the full solve
    for stopped, whole in zip(model.history_, full.history_[: len(model.history_)], strict=True):
        assert stopped.primal_objective == whole.primal_objective
        assert stopped.validation_score == whole.validation_score


def test_early_stopping_is_logged(digits, caplog):
    X, y, X_val, y_val = digits
    with caplog.at_level(logging.INFO, logger="rankopt"):
        model = RankSVM(C=100.0, tol=1e-6, early_stopping_patience=1, verbose=True).fit(X, y, eval_set=(X_val, y_val))
    messages = [r.getMessage() for r in caplog.records]
    assert any("map on valid_0 " in m and m.startswith("RankSVM iteration 1:") for m in messages)
    stop = [m for m in messages if m.startswith("RankSVM stopped early after")]
    assert len(stop) == 1 and f"keeping iteration {model.best_iteration_} (map on valid_0 " in stop[0]
    assert f"whose duality gap is {model.duality_gap_:.3g}" in stop[0]


def test_patience_larger_than_the_solve_keeps_the_best_and_says_whether_it_is_the_optimum(digits):
    X, y, X_val, y_val = digits
    model = RankSVM(early_stopping_patience=10_000).fit(X, y, eval_set=(X_val, y_val))
    # converged_ only when the kept iterate is the solve's certified solution
    full = RankSVM().fit(X, y)
    assert model.converged_ == (full.converged_ and np.array_equal(model.coef_, full.coef_))
    assert average_precision(y_val, X_val @ model.coef_) == pytest.approx(model.best_validation_score_, abs=1e-12)


def test_eval_set_records_with_approx(digits):
    X, y, X_val, y_val = digits
    model = RankSVM(approx=50).fit(X, y, eval_set=(X_val, y_val))
    assert len(model.history_) == model.n_iter_
    assert _scored(model, model.score(X_val, y_val))


# ------------------------------------------------------------------ bad eval_set


@pytest.mark.parametrize(
    "eval_set, match",
    [
        ("data", r"expected eval_set=\(X_val, y_val\[, qid_val\]\) or a list of such tuples, got str instead"),
        ([("X",)], r"got a tuple of 1 items instead"),
    ],
)
def test_eval_set_structure_is_checked(digits, eval_set, match):
    X, y, _, _ = digits
    with pytest.raises(ValueError, match=match):
        RankSVM().fit(X, y, eval_set=eval_set)


def test_eval_set_is_checked_like_x_and_y(digits, queries):
    X, y, X_val, y_val = digits
    with pytest.raises(ValueError, match="^X_val has 63 features, but RankSVM is expecting 64 features"):
        RankSVM().fit(X, y, eval_set=(X_val[:, :63], y_val))
    with pytest.raises(ValueError, match="expected y_val to have 200 entries"):
        RankSVM().fit(X, y, eval_set=(X_val, y_val[:10]))
    with pytest.raises(ValueError, match=r"expected y_val to hold labels in \{0, 1\} or \{-1, 1\}"):
        RankSVM().fit(X, y, eval_set=(X_val, 2 * y_val + 3))
    with pytest.raises(ValueError, match="expected X_val to be finite"):
        RankSVM().fit(X, y, eval_set=(np.full_like(X_val, np.nan), y_val))
    X, y, qid, X_val, y_val, qid_val = queries
    with pytest.raises(
        ValueError, match=r"expected queries for valid_0 \(eval_set=.* or eval_group\) when fitting with qid"
    ):
        RankSVM().fit(X, y, qid=qid, eval_set=(X_val, y_val))
    with pytest.raises(
        ValueError, match=r"expected eval_set=\(X_val, y_val\) without queries .* when fitting without qid"
    ):
        RankSVM().fit(X, y, eval_set=(X_val, y_val, qid_val))
    with pytest.raises(ValueError, match="expected qid_val to have 200 entries"):
        RankSVM().fit(X, y, qid=qid, eval_set=(X_val, y_val, qid_val[:5]))
    with pytest.raises(ValueError, match="expected relevant_at=1 to be reached by some label of y_val"):
        RankSVM().fit(X, y, qid=qid, eval_set=(X_val, np.zeros_like(y_val), qid_val))


def test_eval_set_names_are_checked(digits):
    pd = pytest.importorskip("pandas")
    X, y, X_val, y_val = digits
    columns = [f"pixel{i}" for i in range(64)]
    frame, val = pd.DataFrame(X, columns=columns), pd.DataFrame(X_val, columns=columns)
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        RankSVM().fit(frame, y, eval_set=(val[columns[::-1]], y_val))
    assert RankSVM().fit(frame, y, eval_set=(val, y_val)).history_[-1].validation_score > 0.5


def test_early_stopping_patience_is_checked(digits):
    X, y, X_val, y_val = digits
    with pytest.raises(ValueError, match="expected early_stopping_patience to be a positive integer, got 0"):
        RankSVM(early_stopping_patience=0).fit(X, y, eval_set=(X_val, y_val))
    with pytest.raises(
        ValueError,
        match=r"expected eval_set=\(X_val, y_val\[, qid_val\]\) with "
        r"early_stopping_patience=3, got no eval_set instead",
    ):
        RankSVM(early_stopping_patience=3).fit(X, y)
    with pytest.raises(ValueError, match="expected approx=None with early_stopping_patience"):
        RankSVM(approx=50, early_stopping_patience=3).fit(X, y, eval_set=(X_val, y_val))


# ------------------------------------------------------------------ model selection


def test_grid_search_passes_eval_set_through(digits):
    X, y, X_val, y_val = digits
    search = GridSearchCV(RankSVM(early_stopping_patience=3), {"C": [0.1, 10.0]}, cv=2)
    search.fit(X, y, eval_set=(X_val, y_val))
    assert search.best_estimator_.best_iteration_ is not None
    # and without eval_set, as before
    GridSearchCV(RankSVM(), {"C": [0.1, 10.0]}, cv=2).fit(X, y)


def test_grid_search_routes_eval_set_with_metadata_routing(queries):
    X, y, qid, X_val, y_val, qid_val = queries
    with sklearn.config_context(enable_metadata_routing=True):
        model = RankSVM().set_fit_request(qid=True, eval_set=True).set_score_request(qid=True)
        search = GridSearchCV(model, {"C": [0.1, 10.0]}, cv=GroupKFold(2))
        search.fit(X, y, qid=qid, groups=qid, eval_set=(X_val, y_val, qid_val))
        best = search.best_estimator_
        assert _scored(best, best.score(X_val, y_val, qid=qid_val))
        # not requested: scikit-learn refuses to drop it silently
        plain = RankSVM().set_fit_request(qid=True).set_score_request(qid=True)
        with pytest.raises(Exception, match="eval_set"):
            GridSearchCV(plain, {"C": [1.0]}, cv=GroupKFold(2)).fit(
                X, y, qid=qid, groups=qid, eval_set=(X_val, y_val, qid_val)
            )
