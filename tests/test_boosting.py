"""Any registered rank loss as a boosted-trees objective (issue 41, point 1-2): LightGBM and XGBoost."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest

import rankopt
from rankopt.api import most_violated_rankings
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
    grad, hess = lightgbm_objective(loss, relevant_at=2, hessian=1.0, scale=1.0)(grades, predictions, None, group)
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
    grad, hess = objective(scores, train)
    _, expected = rankopt.structured_hinge(0.3 * scores, grades, group=group, loss="ap", relevant_at=2, reduction="sum")
    np.testing.assert_array_equal(grad, 0.3 * expected)  # the defaults: scale 0.3, the gradient's hessian
    np.testing.assert_array_equal(hess, np.maximum(np.abs(grad), rankopt.boosting.HESSIAN_FLOOR))


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
    with pytest.raises(ValueError, match="expected scores to be finite, got NaN or infinity instead"):
        objective(grades, np.full(grades.size, np.nan), None, group)
    with pytest.raises(ValueError, match="multiclass"):
        objective(grades, np.zeros((grades.size, 3)), None, group)
    with pytest.raises(ValueError, match="equal.*give each query one weight"):
        objective(grades, predictions, np.arange(grades.size, dtype=float), group)
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


def test_the_gradient_hessian_is_each_documents_absolute_gradient():
    _, grades, group = _ranking_data()
    predictions = np.random.default_rng(3).normal(size=grades.size)
    grad, hess = lightgbm_objective("ndcg_graded", hessian="gradient")(grades, predictions, None, group)
    np.testing.assert_array_equal(hess, np.maximum(np.abs(grad), rankopt.boosting.HESSIAN_FLOOR))
    with pytest.raises(ValueError, match="one of \\('gradient',\\), got 'newton'"):
        lightgbm_objective("ap", hessian="newton")


@pytest.mark.parametrize("loss", ["ap", "ndcg_graded", "pairwise", "auc", "dcg_zipf"])
def test_the_eval_metric_is_one_minus_the_loss_of_the_ranking(loss):
    from rankopt.lightgbm import eval_metric
    from rankopt.plugins import default_registry

    _, grades, group = _ranking_data(n_queries=6, size=6)
    predictions = np.random.default_rng(4).normal(size=grades.size)
    name, value, higher_is_better = eval_metric(loss, relevant_at=2)(grades, predictions, None, group)
    rank_loss = default_registry().resolve_loss(loss)
    assert name == (rank_loss.name if rank_loss.graded else f"{rank_loss.name}(relevant_at=2)") and higher_is_better
    # By definition, from the loss-augmented inference: Δ of the ranking by the scores is the loss of the most
    # violated ranking at scores so spread that the scores' own ranking wins.
    per_query = []
    for lo, hi in zip(np.r_[0, np.cumsum(group)[:-1]], np.cumsum(group), strict=True):
        level = grades[lo:hi] if rank_loss.graded else (grades[lo:hi] >= 2).astype(int)
        if level.max() == level.min():
            continue
        spread = np.argsort(np.argsort(predictions[lo:hi])) * 1e6
        inference = most_violated_rankings(rank_loss, spread, level, np.array([0, hi - lo]))
        per_query.append(1.0 - inference.losses[0])
    assert value == pytest.approx(np.mean(per_query), rel=1e-12)


def test_the_eval_metric_breaks_ties_against_the_truth_and_matches_the_metrics_module():
    from rankopt.lightgbm import eval_metric

    _, grades, group = _ranking_data()
    qid = np.repeat(np.arange(group.size), group)
    scores = np.random.default_rng(5).normal(size=grades.size)
    assert eval_metric("ndcg_graded")(grades, scores, None, group)[1] == pytest.approx(
        rankopt.metrics.ndcg_at_k(grades, scores, qid, k=10), rel=1e-12
    )
    assert eval_metric("ap")(grades, scores, None, group)[1] == pytest.approx(
        rankopt.metrics.mean_average_precision(grades, scores, qid), rel=1e-12
    )
    worst = rankopt.metrics.loss_metric(grades, np.zeros(grades.size), qid, loss="ap")
    reversed_truth = rankopt.metrics.loss_metric(grades, -(grades >= 1).astype(float), qid, loss="ap")
    assert worst == reversed_truth


def test_the_eval_metric_refuses_a_loss_without_a_ranking_loss():
    from rankopt.losses import AUCLoss
    from rankopt.losses.structure import GradedQueryStructure

    class OwnInference(AUCLoss):
        name = "own_inference_test"
        graded = True

        def structure(self):
            return GradedQueryStructure(inference=lambda s, g: (np.zeros(s.size), 0.0), ground_truth=np.zeros_like)

    _, grades, group = _ranking_data(n_queries=2, size=5)
    with pytest.raises(ValueError, match="declares only its own one-query inference"):
        rankopt.metrics.loss_metric(grades, np.zeros(grades.size), group=group, loss=OwnInference())


def test_early_stopping_on_the_eval_metric_in_both_libraries():
    lightgbm = pytest.importorskip("lightgbm")
    xgboost = pytest.importorskip("xgboost")
    from rankopt import lightgbm as rankopt_lightgbm
    from rankopt import xgboost as rankopt_xgboost

    X, grades, group = _ranking_data(n_queries=30)
    fit, valid = slice(0, 20 * 15), slice(20 * 15, None)
    ranker = lightgbm.LGBMRanker(objective=lightgbm_objective("ndcg_graded"), n_estimators=200, verbose=-1)
    # LightGBM 4.7 takes the validation set as eval_X / eval_y and deprecates eval_set; older ones know only it.
    if "eval_X" in inspect.signature(lightgbm.LGBMRanker.fit).parameters:
        validation = {"eval_X": (X[valid],), "eval_y": (grades[valid],)}
    else:
        validation = {"eval_set": [(X[valid], grades[valid])]}
    ranker.fit(
        X[fit],
        grades[fit],
        group=group[:20],
        **validation,
        eval_group=[group[20:]],
        eval_metric=rankopt_lightgbm.eval_metric("ndcg_graded"),
        callbacks=[lightgbm.early_stopping(10, verbose=False)],
    )
    assert 0 < ranker.best_iteration_ <= 200 and "ndcg_graded" in ranker.best_score_["valid_0"]
    qid = np.repeat(np.arange(group.size), group)
    train, held = (
        xgboost.DMatrix(X[fit], grades[fit], qid=qid[fit]),
        xgboost.DMatrix(X[valid], grades[valid], qid=qid[valid]),
    )
    history = {}
    xgboost.train(
        {"tree_method": "hist", "disable_default_eval_metric": 1},
        train,
        num_boost_round=200,
        obj=xgboost_objective("pairwise"),
        custom_metric=rankopt_xgboost.eval_metric("pairwise"),
        maximize=True,
        evals=[(held, "valid")],
        early_stopping_rounds=10,
        evals_result=history,
        verbose_eval=False,
    )
    assert 0 < len(history["valid"]["pairwise"]) < 200


def test_xgboosts_sklearn_estimators_are_told_to_use_xgboost_train():
    xgboost = pytest.importorskip("xgboost")
    X, grades, group = _ranking_data()
    with pytest.raises(ValueError, match="custom objective function not supported by XGBRanker"):
        xgboost.XGBRanker(objective=xgboost_objective("ap"))
    with pytest.raises(TypeError, match="expected an xgboost.DMatrix carrying the queries.*xgboost.train"):
        xgboost.XGBRegressor(objective=xgboost_objective("ap"), n_estimators=2).fit(X, grades)


def test_a_lightgbm_too_old_for_callable_objectives_is_named():
    from rankopt.lightgbm import _check_lightgbm_version

    _check_lightgbm_version("4.0.0")
    with pytest.raises(ImportError, match="LightGBM >= 4.0 .*got LightGBM 3.3.5"):
        _check_lightgbm_version("3.3.5")


def test_the_early_stopping_recipe_is_one_and_runs_from_the_docstring():
    """Issue 61, point 21: rankopt.lightgbm's docstring gave the recipe without metric="None" (it stopped on
    LightGBM's own ndcg@1..5); the README gave it with. Both say it, and the docstring's runs as written."""
    import re
    from pathlib import Path

    lightgbm = pytest.importorskip("lightgbm")
    import rankopt.lightgbm as module

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert 'LGBMRanker(objective=hinge_objective("pairwise"), metric="None"' in readme
    blocks = re.findall(r"::\n\n((?:    .*\n|\n)+)", module.__doc__)  # the docstring's literal blocks
    recipe = next(block for block in blocks if "early_stopping" in block)
    assert 'metric="None"' in recipe
    X, grades, group = _ranking_data(n_queries=30)
    fit, valid = slice(0, 20 * 15), slice(20 * 15, None)
    names = {
        "LGBMRanker": lambda **kwargs: lightgbm.LGBMRanker(verbose=-1, **kwargs),
        "hinge_objective": module.hinge_objective,
        "eval_metric": module.eval_metric,
        "lightgbm": lightgbm,
        "X": X[fit],
        "y": grades[fit],
        "sizes": group[:20],
        "X_valid": X[valid],
        "y_valid": grades[valid],
        "valid_sizes": group[20:],
    }
    if "eval_X" not in inspect.signature(lightgbm.LGBMRanker.fit).parameters:  # LightGBM before 4.7
        recipe = recipe.replace("eval_X=(X_valid,), eval_y=(y_valid,)", "eval_set=[(X_valid, y_valid)]")
    exec(textwrap.dedent(recipe), names)  # noqa: S102 - the documented recipe itself
    assert set(names["ranker"].best_score_["valid_0"]) == {"ndcg_graded"}
