"""The boosting objectives and metrics as LightGBM and XGBoost users call them (issue 47, points 3-5, 11-14)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import rankopt
from rankopt.lightgbm import eval_metric as lightgbm_metric
from rankopt.lightgbm import hinge_objective as lightgbm_objective
from rankopt.xgboost import eval_metric as xgboost_metric
from rankopt.xgboost import hinge_objective as xgboost_objective


def _ranking_data(seed=0, n_queries=20, size=15, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries * size, d))
    grades = np.clip(np.round(X[:, 0] + 0.5 * rng.normal(size=X.shape[0]) + 1), 0, 4).astype(int)
    return X, grades, np.full(n_queries, size)


def test_per_query_weights_scale_each_querys_gradient_and_hessian():
    _, grades, group = _ranking_data()
    predictions = np.random.default_rng(1).normal(size=grades.size)
    objective = lightgbm_objective("ndcg_graded")
    grad, hess = objective(grades, predictions, None, group)
    per_query = np.arange(1.0, group.size + 1.0)
    per_document = np.repeat(per_query, group)
    for weights in (per_document, per_query):
        weighted_grad, weighted_hess = objective.gradients(predictions, grades, group, weights)
        np.testing.assert_array_equal(weighted_grad, grad * per_document)
        np.testing.assert_array_equal(weighted_hess, hess * per_document)
    with pytest.raises(ValueError, match="equal.*give each query one weight"):
        objective(grades, predictions, np.arange(grades.size, dtype=float), group)
    with pytest.raises(ValueError, match="finite and >= 0"):
        objective(grades, predictions, -per_document, group)
    with pytest.raises(ValueError, match="one weight per query \\(20\\) or per document \\(300\\), got 7"):
        objective(grades, predictions, np.ones(7), group)


def test_weighted_datasets_train_other_models_in_both_libraries():
    """A weighted Dataset or DMatrix used to train the unweighted model, in silence."""
    lightgbm = pytest.importorskip("lightgbm")
    xgboost = pytest.importorskip("xgboost")
    X, grades, group = _ranking_data()
    per_query = np.where(np.arange(group.size) % 2, 5.0, 0.0)
    predictions = {}
    for weight in (None, np.repeat(per_query, group)):
        dataset = lightgbm.Dataset(X, label=grades, group=group, weight=weight)
        params = {"objective": lightgbm_objective("pairwise").train_objective, "verbose": -1, "metric": "None"}
        predictions["lgb", weight is None] = lightgbm.train(params, dataset, num_boost_round=5).predict(X)
    for weight in (None, per_query):
        matrix = xgboost.DMatrix(X, label=grades, group=group, weight=weight)
        booster = xgboost.train({"tree_method": "hist"}, matrix, 5, obj=xgboost_objective("pairwise"))
        predictions["xgb", weight is None] = booster.predict(xgboost.DMatrix(X))
    assert not np.allclose(predictions["lgb", True], predictions["lgb", False])
    assert not np.allclose(predictions["xgb", True], predictions["xgb", False])


def test_the_metrics_weigh_the_queries():
    _, grades, group = _ranking_data(n_queries=6, size=6)
    predictions = np.random.default_rng(4).normal(size=grades.size)
    metric = lightgbm_metric("ndcg_graded")
    qid = np.repeat(np.arange(group.size), group)
    values = rankopt.metrics.loss_metric(grades, predictions, qid, loss="ndcg_graded", average=False)
    per_query = np.arange(1.0, group.size + 1.0)
    _, weighted, _ = metric(grades, predictions, np.repeat(per_query, group), group)
    defined = ~np.isnan(values)
    assert weighted == pytest.approx(np.average(values[defined], weights=per_query[defined]), rel=1e-12)
    _, unweighted, _ = metric(grades, predictions, None, group)
    assert unweighted == pytest.approx(np.mean(values[defined]), rel=1e-12)


def test_lightgbm_cv_refuses_folds_that_split_queries_and_takes_group_folds():
    lightgbm = pytest.importorskip("lightgbm")
    from sklearn.model_selection import GroupKFold

    X, grades, group = _ranking_data()
    params = {"objective": lightgbm_objective("pairwise").train_objective, "metric": "None", "verbose": -1}
    feval = lightgbm_metric("ndcg_graded").train_metric
    dataset = lightgbm.Dataset(X, label=grades, group=group)
    with pytest.raises(ValueError, match="folds of whole queries.*GroupKFold"):
        lightgbm.cv(params, dataset, num_boost_round=3, nfold=3, feval=feval, stratified=False)
    dataset = lightgbm.Dataset(X, label=grades, group=group)
    result = lightgbm.cv(params, dataset, num_boost_round=3, folds=GroupKFold(3), feval=feval)
    assert len(result["valid ndcg_graded-mean"]) == 3


def test_swapped_calling_forms_name_the_form_that_fits():
    lightgbm = pytest.importorskip("lightgbm")
    xgboost = pytest.importorskip("xgboost")
    X, grades, group = _ranking_data()
    dataset = lightgbm.Dataset(X, label=grades, group=group)
    with pytest.raises(TypeError, match="train_objective"):
        lightgbm.train({"objective": lightgbm_objective("ap"), "verbose": -1}, dataset, num_boost_round=2)
    matrix = xgboost.DMatrix(X, label=grades, group=group)
    with pytest.raises(TypeError, match="XGBoost takes rankopt.xgboost's objective"):
        xgboost.train({}, matrix, 2, obj=lightgbm_objective("ap"))
    with pytest.raises(TypeError, match="LightGBM takes rankopt.lightgbm's objective"):
        xgboost_objective("ap")(np.zeros(grades.size), lightgbm.Dataset(X, label=grades, group=group).construct())
    with pytest.raises(TypeError, match="LGBMRanker\\(objective=hinge_objective"):
        lightgbm.LGBMRanker(objective=lightgbm_objective("ap").train_objective, verbose=-1).fit(X, grades, group=group)
    dataset = lightgbm.Dataset(X, label=grades, group=group)
    with pytest.raises(TypeError, match="train_metric"):
        params = {"objective": lightgbm_objective("ap").train_objective, "verbose": -1, "metric": "None"}
        lightgbm.train(params, dataset, 2, valid_sets=[dataset], feval=lightgbm_metric("ap"))
    with pytest.raises(TypeError, match="XGBRanker included.*custom_metric"):
        xgboost.XGBRanker(objective="rank:ndcg", eval_metric=xgboost_metric("ap"), n_estimators=2).fit(
            X,
            grades,
            qid=np.repeat(np.arange(group.size), group),
            eval_set=[(X, grades)],
            eval_qid=[np.repeat(np.arange(group.size), group)],
        )


def test_two_metrics_of_one_loss_log_apart():
    assert lightgbm_metric("ndcg_graded").name == "ndcg_graded"
    assert lightgbm_metric("ndcg_graded", k=3).name == "ndcg_graded(k=3)"
    assert lightgbm_metric("ap", relevant_at=2).name == "ap(relevant_at=2)"
    assert xgboost_metric("ndcg_graded", k=3).name != xgboost_metric("ndcg_graded", k=10).name


def test_misleading_messages_say_what_is_wrong():
    _, grades, group = _ranking_data()
    predictions = np.zeros(grades.size)
    metric = lightgbm_metric("ndcg_graded")
    with pytest.raises(ValueError, match="one prediction per document.*shape \\(300, 2\\)"):
        metric(grades, np.zeros((grades.size, 2)), None, group)
    objective = lightgbm_objective("ap")
    with pytest.raises(ValueError, match="column of shape \\(300, 1\\).*ravel"):
        objective(grades, np.zeros((grades.size, 1)), None, group)
    # the hinge's own refusals, as every door words them, with a note for the booster's user (issue 61, point 16)
    for huge, words in ((1e308, "sums over a query stay finite"), (np.inf, "expected scores to be finite")):
        with pytest.raises(ValueError, match=words) as caught:
            objective(grades, np.full(grades.size, huge), None, group)
        if sys.version_info >= (3, 11):
            assert caught.value.__notes__ == ["the booster diverged: lower the learning rate or raise the hessian"]
    with pytest.raises(ValueError, match="relevant_at=9.*every gradient would be 0"):
        lightgbm_objective("ap", relevant_at=9)(grades, predictions, None, group)


def test_the_hinges_unknown_loss_message_lists_rank_losses_only():
    with pytest.raises(ValueError, match="unknown rank loss 'nope'") as caught:
        rankopt.structured_hinge(np.zeros(3), np.array([0, 1, 0]), loss="nope")
    assert "zero_one" not in str(caught.value) and "'ap'" in str(caught.value)


class _VanishingPairs(rankopt.losses.GradedPairwiseLoss):
    name = "vanishing_pairs_test"

    def pair_weight(self, higher, lower):
        return np.where(higher >= 3, 1.0, 0.0)


def test_loss_metric_leaves_out_the_queries_the_loss_cannot_order():
    """One rule on every path: NaN, and out of the mean (a division by zero, and a 1.0 counted, before)."""
    import rankopt_graded

    qid = np.repeat([0, 1, 2], 3)
    grades = np.array([0, 1, 0, 3, 0, 1, 2, 2, 2])
    scores = np.arange(9.0)
    values = rankopt.metrics.loss_metric(grades, scores, qid, loss=_VanishingPairs(), average=False)
    assert np.isnan(values[0]) and not np.isnan(values[1]) and np.isnan(values[2])
    assert rankopt.metrics.loss_metric(grades, scores, qid, loss=_VanishingPairs()) == values[1]
    zipf = rankopt_graded.ZipfDCGLoss(gains=(0.0, 0.0, 1.0, 3.0))
    values = rankopt.metrics.loss_metric(
        np.array([0, 1, 0, 1, 2, 0]), np.arange(6.0), [0, 0, 0, 1, 1, 1], loss=zipf, average=False
    )
    assert np.isnan(values[0]) and not np.isnan(values[1])
    _, value, _ = lightgbm_metric(zipf)(np.array([0, 1, 0, 1, 2, 0]), np.arange(6.0), None, [3, 3])
    assert value == values[1]


def test_the_metric_refuses_gains_the_hinge_refuses():
    """Grades near 1023 with exponential gains: 0.0, or "no two relevance levels", before."""
    for grades in ([1000, 1023, 1023, 1023, 5], [1023] * 4 + [0]):
        with pytest.raises(ValueError, match="2\\*\\*1000") as caught:
            rankopt.metrics.loss_metric(np.array(grades), np.arange(5.0), np.zeros(5), loss="ndcg_graded")
        with pytest.raises(ValueError, match="2\\*\\*1000") as hinge:
            rankopt.structured_hinge(np.arange(5.0), np.array(grades), loss="ndcg_graded")
        assert str(caught.value) == str(hinge.value)


def test_loss_metric_weighs_queries_and_checks_the_weights():
    grades, scores, qid = np.array([0, 1, 2, 0, 1, 1, 0]), np.arange(7.0), [0, 0, 0, 1, 1, 2, 2]
    values = rankopt.metrics.loss_metric(grades, scores, qid, loss="pairwise", average=False)
    weighted = rankopt.metrics.loss_metric(grades, scores, qid, loss="pairwise", query_weights=[1.0, 3.0, 2.0])
    assert weighted == pytest.approx(np.average(values, weights=[1.0, 3.0, 2.0]), rel=1e-12)
    with pytest.raises(ValueError, match="query_weights of shape \\(3,\\)"):
        rankopt.metrics.loss_metric(grades, scores, qid, loss="pairwise", query_weights=[1.0, 2.0])


def test_weights_of_zero_on_every_query_are_refused():
    """Issue 61, point 20: the metric raised NumPy's ZeroDivisionError, the objective returned zero gradients in
    silence."""
    _, grades, group = _ranking_data(n_queries=4, size=5)
    predictions = np.random.default_rng(2).normal(size=grades.size)
    zeros = np.zeros(grades.size)
    with pytest.raises(ValueError, match="expected a weight > 0 on some query that holds two documents"):
        lightgbm_metric("ap")(grades, predictions, zeros, group)
    with pytest.raises(ValueError, match="expected a weight > 0 on some query, got weights of 0 on all 4"):
        lightgbm_objective("ap")(grades, predictions, zeros, group)
    some = np.repeat([0.0, 1.0, 0.0, 0.0], group)  # one query weighs: both run
    grad, _ = lightgbm_objective("ap")(grades, predictions, some, group)
    assert np.any(grad != 0) and np.all(grad[: group[0]] == 0)
