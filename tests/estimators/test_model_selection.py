"""RankSVM inside scikit-learn's model selection: GridSearchCV, cross_validate, joblib in parallel."""

import warnings

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import make_scorer
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_validate

from rankopt import RankSVM
from rankopt.exceptions import ConvergenceWarning
from rankopt.metrics import average_precision, roc_auc

# Folds must hold both classes: a rank loss needs a positive and a negative sample.
CV = StratifiedKFold(n_splits=3, shuffle=True, random_state=0)
GRID = {"C": [0.1, 10.0], "loss": ["ap", "auc"]}


@pytest.fixture
def data(rng):
    X = rng.standard_normal((240, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(240) > 1.0).astype(int)
    return X, y


def _search(n_jobs=None):
    return GridSearchCV(RankSVM(max_iter=200), GRID, cv=CV, n_jobs=n_jobs, error_score="raise")


def test_grid_search_refits_the_best_model(data):
    X, y = data
    search = _search().fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert scores.shape == (4,) and np.all(np.isfinite(scores)) and np.all((scores > 0.3) & (scores <= 1))
    best = clone(RankSVM(max_iter=200)).set_params(**search.best_params_).fit(X, y)
    np.testing.assert_array_equal(search.best_estimator_.coef_, best.coef_)
    assert search.score(X, y) == pytest.approx(average_precision(y, best.decision_function(X)))


def test_cross_validate_with_rank_scorers(data):
    X, y = data
    scoring = {
        "ap": make_scorer(average_precision, response_method="decision_function"),
        "auc": make_scorer(roc_auc, response_method="decision_function"),
    }
    result = cross_validate(RankSVM(C=1.0), X, y, cv=CV, scoring=scoring, return_estimator=True)
    assert len(result["estimator"]) == 3
    for key in ("test_ap", "test_auc"):
        assert np.all((result[key] > 0.3) & (result[key] <= 1))
    # The default score is AP too.
    default = cross_validate(RankSVM(C=1.0), X, y, cv=CV)["test_score"]
    np.testing.assert_allclose(default, result["test_ap"])


def test_parallel_grid_search_in_processes_matches_serial(data):
    X, y = data
    serial = _search().fit(X, y)
    parallel = _search(n_jobs=2).fit(X, y)  # loky worker processes: the estimator travels pickled
    np.testing.assert_allclose(parallel.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"])
    assert parallel.best_params_ == serial.best_params_


def test_grid_search_on_joblibs_dask_backend(data):
    from rankopt.data import dask_client

    X, y = data
    serial = _search().fit(X, y)
    cluster = {"n_workers": 1, "threads_per_worker": 2, "processes": False, "dashboard_address": ":0"}
    with dask_client(**cluster), joblib.parallel_backend("dask"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            on_dask = _search(n_jobs=-1).fit(X, y)
    np.testing.assert_allclose(on_dask.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"])
