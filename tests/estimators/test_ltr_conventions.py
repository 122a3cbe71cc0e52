"""LightGBM's ranking conventions on RankSVM: predict, group=, eval_set lists, eval_metric, evals_result_."""

from __future__ import annotations

import numpy as np
import pytest

from rankopt import RankSVM
from rankopt.estimators.evaluation import KNOWN_METRICS, plot_metric
from rankopt.metrics import mean_average_precision, ndcg_at_k, precision_at_k


def _queries(rng, n_queries=30, size=12, d=5):
    w = rng.normal(size=d)
    X = rng.normal(size=(n_queries * size, d))
    latent = X @ w + rng.normal(size=X.shape[0])
    grades = np.digitize(latent, np.quantile(latent, [0.6, 0.85, 0.95]))
    return X, grades, np.repeat(np.arange(n_queries), size), np.full(n_queries, size)


@pytest.fixture
def data(rng):
    train = _queries(rng)
    valid = [_queries(rng, n_queries=10), _queries(rng, n_queries=8)]
    return train, valid


def test_predict_is_the_ranking_score(data):
    (X, y, qid, _), _ = data
    model = RankSVM(max_iter=50).fit(X, y, qid=qid)
    np.testing.assert_array_equal(model.predict(X), model.decision_function(X))


def test_group_sizes_are_contiguous_queries(data):
    (X, y, qid, sizes), _ = data
    by_qid = RankSVM().fit(X, y, qid=qid)
    by_group = RankSVM().fit(X, y, group=sizes)
    np.testing.assert_array_equal(by_group.coef_, by_qid.coef_)
    assert by_group.fitted_with_qid_ and by_group.n_queries_ == sizes.size


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"qid": "same", "group": "sizes"}, "expected qid or group, got both instead"),
        ({"group": [12] * 29}, r"summing to the number of rows \(360\), got 29 sizes summing to 348 instead"),
        ({"group": [0] * 29 + [360]}, "positive group sizes"),
        ({"group": [[12] * 30]}, "non-empty 1-D list of group sizes"),
    ],
)
def test_bad_group(data, kwargs, message):
    (X, y, qid, sizes), _ = data
    kwargs = {k: (qid if v == "same" else sizes if v == "sizes" else v) for k, v in kwargs.items()}
    with pytest.raises(ValueError, match=message):
        RankSVM().fit(X, y, **kwargs)


def _kept_iterate(model) -> int:
    """The index in history_ of coef_ without early stopping: with the line search, every record shows the
    solve's current point, and the last one is what the fit returns."""
    return len(model.history_) - 1


def _eval_set(valid):
    return [(Xv, yv, qv) for Xv, yv, qv, _ in valid]


def test_every_metric_of_every_set_is_recorded_per_iteration(data):
    (X, y, qid, _), valid = data

    def top_grade(y_true, scores, qid):
        return float(np.mean([y_true[qid == q][np.argmax(scores[qid == q])] for q in np.unique(qid)]))

    metrics = ["ndcg@5", "map", "p@3", top_grade]
    model = RankSVM(C=10.0, eval_metric=metrics).fit(X, y, qid=qid, eval_set=_eval_set(valid))
    assert list(model.evals_result_) == ["valid_0", "valid_1"]
    kept = _kept_iterate(model)
    for name, (Xv, yv, qv, _) in zip(model.evals_result_, valid, strict=True):
        result = model.evals_result_[name]
        assert list(result) == ["ndcg@5", "map", "p@3", "top_grade"]
        assert all(len(values) == model.n_iter_ for values in result.values())
        scores = model.decision_function(Xv)  # coef_ is one of the iterates: its record holds its values
        assert result["ndcg@5"][kept] == pytest.approx(ndcg_at_k(yv, scores, qv, k=5))
        assert result["map"][kept] == pytest.approx(mean_average_precision(yv, scores, qv))
        assert result["p@3"][kept] == pytest.approx(precision_at_k(yv, scores, qv, k=3))
        assert result["top_grade"][kept] == pytest.approx(top_grade(yv, scores, qv))
    # the first metric of the last set decides: history_'s validation_score and the best iteration
    deciding = model.evals_result_["valid_1"]["ndcg@5"]
    assert [r.validation_score for r in model.history_] == deciding
    assert model.best_iteration_ == int(np.argmax(deciding)) + 1
    assert model.best_validation_score_ == max(deciding)


def test_early_stopping_reads_the_first_metric_of_the_last_set(data):
    (X, y, qid, _), valid = data
    model = RankSVM(C=100.0, tol=1e-6, eval_metric=["p@3", "map"], early_stopping_patience=2).fit(
        X, y, qid=qid, eval_set=_eval_set(valid)
    )
    deciding = model.evals_result_["valid_1"]["p@3"]
    assert model.best_validation_score_ == max(deciding)
    if model.stop_reason_ == "callback":
        assert len(deciding) == model.best_iteration_ + 2  # two iterations without improvement
    Xv, yv, qv, _ = valid[1]
    assert precision_at_k(yv, model.decision_function(Xv), qv, k=3) == pytest.approx(model.best_validation_score_)


def test_eval_group_gives_the_validation_queries(data):
    (X, y, qid, sizes), valid = data
    sets = [(Xv, yv) for Xv, yv, _, _ in valid]
    groups = [g for _, _, _, g in valid]
    a = RankSVM(max_iter=20).fit(X, y, group=sizes, eval_set=sets, eval_group=groups)
    b = RankSVM(max_iter=20).fit(X, y, qid=qid, eval_set=_eval_set(valid))
    assert a.evals_result_ == b.evals_result_
    with pytest.raises(ValueError, match="one list of group sizes per eval_set"):
        RankSVM().fit(X, y, qid=qid, eval_set=sets, eval_group=groups[:1])
    with pytest.raises(ValueError, match="eval_group only with eval_set"):
        RankSVM().fit(X, y, qid=qid, eval_group=groups)


@pytest.mark.parametrize("metric", ["ndgc", "ndcg@0", "zero_one", 3, ["map", "map"], []])
def test_unknown_metrics_list_the_known_ones(data, metric):
    (X, y, qid, _), valid = data
    with pytest.raises(ValueError, match="eval_metric"):
        RankSVM(eval_metric=metric).fit(X, y, qid=qid, eval_set=_eval_set(valid))
    assert "ndcg@k" in KNOWN_METRICS


def test_one_query_without_qid_is_monitored_by_ap(rng):
    X = rng.normal(size=(200, 4))
    y = X[:, 0] + rng.normal(size=200) > 0.8
    model = RankSVM(eval_metric=["map", "ndcg@10"]).fit(X[:150], y[:150], eval_set=(X[150:], y[150:]))
    assert list(model.evals_result_["valid_0"]) == ["map", "ndcg@10"]
    kept = _kept_iterate(model)
    assert model.evals_result_["valid_0"]["map"][kept] == pytest.approx(model.score(X[150:], y[150:]))


def test_plot_metric(data):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    (X, y, qid, _), valid = data
    model = RankSVM(max_iter=30, eval_metric=["ndcg@10", "map"]).fit(X, y, qid=qid, eval_set=_eval_set(valid))
    ax = plot_metric(model, "map")
    assert [line.get_label() for line in ax.get_lines()][:2] == ["valid_0", "valid_1"]
    assert ax.get_ylabel() == "map"
    with pytest.raises(ValueError, match="expected metric to be one of"):
        plot_metric(model, "p@3")
    with pytest.raises(ValueError, match="fitted with eval_set"):
        plot_metric(RankSVM().fit(X, y, qid=qid))
