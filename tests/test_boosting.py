"""Any registered rank loss as a boosted-trees objective (issue 41, point 1-2): LightGBM and XGBoost."""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt.lightgbm import hinge_objective as lightgbm_objective
from rankopt.xgboost import hinge_objective as xgboost_objective

LOSSES = ["ap", "ndcg", "auc", "precision_at_k", "ndcg_graded", "pairwise", "rbp", "dcg_zipf"]


def _ranking_data(seed=0, n_queries=20, size=15, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * size, d))
    grades = np.clip(np.round(X[:, 0] + 0.5 * rng.normal(size=X.shape[0]) + 1), 0, 4).astype(int)
    return X, grades, np.full(n_queries, size)


@pytest.mark.parametrize("loss", LOSSES)
def test_the_gradient_is_the_structured_hinges_subgradient(loss):
    _, grades, group = _ranking_data()
    predictions = np.random.default_rng(1).normal(size=grades.size)
    grad, hess = lightgbm_objective(loss, relevant_at=2)(grades, predictions, None, group)
    _, expected = rankopt.structured_hinge(predictions, grades, group=group, loss=loss, relevant_at=2, reduction="sum")
    np.testing.assert_array_equal(grad, expected)
    np.testing.assert_array_equal(hess, np.ones(grades.size))
    scaled, _ = lightgbm_objective(loss, relevant_at=2, scale=3.0)(grades, predictions, None, group)
    _, at_scaled = rankopt.structured_hinge(
        3.0 * predictions, grades, group=group, loss=loss, relevant_at=2, reduction="sum"
    )
    np.testing.assert_allclose(scaled, 3.0 * at_scaled, rtol=0, atol=0)


def _ndcg10(grades, scores, group):
    qid = np.repeat(np.arange(group.size), group)
    return rankopt.metrics.ndcg_at_k(grades, scores, qid, k=10)


def test_lgbm_ranker_trains_with_it_end_to_end():
    lightgbm = pytest.importorskip("lightgbm")
    X, grades, group = _ranking_data()
    ranker = lightgbm.LGBMRanker(objective=lightgbm_objective("ndcg_graded"), n_estimators=30, verbose=-1)
    ranker.fit(X, grades, group=group)
    assert _ndcg10(grades, ranker.predict(X), group) > _ndcg10(grades, np.zeros(grades.size), group) + 0.1


def test_lightgbm_train_takes_its_train_form():
    lightgbm = pytest.importorskip("lightgbm")
    X, grades, group = _ranking_data()
    dataset = lightgbm.Dataset(X, label=grades, group=group)
    objective = lightgbm_objective("pairwise")
    booster = lightgbm.train({"objective": objective.train_objective, "verbose": -1}, dataset, num_boost_round=30)
    assert _ndcg10(grades, booster.predict(X), group) > _ndcg10(grades, np.zeros(grades.size), group) + 0.1


def test_xgboost_train_takes_it_with_the_queries_of_the_dmatrix():
    xgboost = pytest.importorskip("xgboost")
    X, grades, group = _ranking_data()
    qid = np.repeat(np.arange(group.size), group)
    train = xgboost.DMatrix(X, label=grades, qid=qid)
    objective = xgboost_objective("ap", relevant_at=2)
    booster = xgboost.train({"tree_method": "hist"}, train, num_boost_round=30, obj=objective)
    scores = booster.predict(xgboost.DMatrix(X))
    assert _ndcg10(grades, scores, group) > _ndcg10(grades, np.zeros(grades.size), group) + 0.1
    grad, _ = objective(scores, train)
    _, expected = rankopt.structured_hinge(scores, grades, group=group, loss="ap", relevant_at=2, reduction="sum")
    np.testing.assert_array_equal(grad, expected)


def test_bad_input_is_refused_with_the_sizes():
    _, grades, group = _ranking_data()
    objective = lightgbm_objective("ap")
    predictions = np.zeros(grades.size)
    with pytest.raises(
        ValueError, match=f"summing to the number of rows \\({grades.size}\\), got 20 sizes summing to 299"
    ):
        objective(grades, predictions, None, np.r_[group[:-1], 14])
    with pytest.raises(ValueError, match="group sizes.*regression or classification objective slot"):
        objective(grades, predictions, None, None)
    with pytest.raises(ValueError, match="finite predictions.*diverged"):
        objective(grades, np.full(grades.size, np.nan), None, group)
    with pytest.raises(ValueError, match="multiclass"):
        objective(grades, np.zeros((grades.size, 3)), None, group)
    with pytest.raises(ValueError, match="no sample weights"):
        objective(grades, predictions, np.ones(grades.size), group)
    with pytest.raises(ValueError, match="hessian"):
        lightgbm_objective("ap", hessian=0.0)


def test_the_objective_survives_the_deep_copy_boosters_make():
    import copy
    import pickle

    objective = lightgbm_objective("ndcg_graded", k=5)
    _, grades, group = _ranking_data()
    predictions = np.random.default_rng(2).normal(size=grades.size)
    for twin in (copy.deepcopy(objective), pickle.loads(pickle.dumps(objective))):
        np.testing.assert_array_equal(
            twin(grades, predictions, None, group)[0], objective(grades, predictions, None, group)[0]
        )


def test_importing_rankopt_imports_neither_library():
    import subprocess
    import sys

    code = "import rankopt, sys; print('lightgbm' in sys.modules, 'xgboost' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
