"""``python -m experiments.learners``: boosted trees on the hinges against the libraries' ranking objectives."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("lightgbm")
pytest.importorskip("xgboost")

from experiment_cli import experiment_main  # noqa: E402

from experiments import learners  # noqa: E402
from rankopt.data.loaders import SvmLightData  # noqa: E402


def _letor_split(rng, n_queries, first_qid):
    sizes = rng.integers(8, 20, n_queries)
    qid = rng.permutation(np.repeat(np.arange(first_qid, first_qid + n_queries), sizes))  # rows not grouped
    X = rng.standard_normal((qid.size, 20))
    grades = np.clip(np.round(X[:, 0] + X[:, 1] + rng.standard_normal(qid.size)), 0, 4)
    return SvmLightData(X=sp.csr_matrix(X), y=grades, qid=qid, path="synthetic")


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return _letor_split(rng, 14, 1), _letor_split(rng, 9, 100)


def test_quick_learners_run_fills_every_row(tmp_path):
    out, js = tmp_path / "t.md", tmp_path / "r.json"
    result = learners.run_learners_experiment(data=_data(), quick=True, output=out, json_output=js)
    assert [row.method for row in result.rows] == [spec.name for spec in learners.LEARNERS]
    for row in result.rows:
        assert len(row.test["NDCG@10"]) == 2 and len(row.per_query["NDCG@10"]) == 8
        assert 0 < np.mean(row.test["NDCG@10"]) <= 1 and 0 < row.validation <= 1
    assert "smoke test" in out.read_text()
    assert json.loads(js.read_text())["reference"] == "lgbm_lambdarank"


def test_quick_hessian_study_covers_every_hessian_and_scale():
    result = learners.run_hessian_study(data=_data(1), quick=True)
    assert len(result.rows) == len(learners.HESSIANS) * len(learners.SCALES)
    assert result.reference == "ndcg_graded h=1.0 s=1"


def test_the_split_is_the_deep_experiments():
    fit, valid, test = learners.mslr_splits(_data(), quick=False)
    assert fit.group.size == 14 - 3 and valid.group.size == 3 and test.group.size == 9
    for split in (fit, valid, test):
        assert np.all(np.diff(split.qid) >= 0)  # grouped, as the libraries take queries


def test_tuning_picks_the_best_mean_validation(monkeypatch):
    """The setting whose seeds' validation is best on average wins; each seed keeps its own best round."""
    outcomes = {0.1: [0.5, 0.7], 0.2: [0.8, 0.3]}

    def fake_fit(spec, setting, seed, fit, valid, max_rounds):
        return (lambda X: np.zeros(len(X))), outcomes[setting["learning_rate"]][seed], 10 + seed

    monkeypatch.setitem(learners._FITS, "lightgbm", fake_fit)
    fit, valid, test = learners.mslr_splits(_data())
    row = learners.tune_trees(
        learners.LEARNERS[0], (0, 1), fit, valid, test, grid={"learning_rate": (0.1, 0.2), "num_leaves": (7,)}
    )
    assert row.setting.startswith("learning_rate=0.1, num_leaves=7, rounds 10–11") and row.validation == 0.6


def test_cli_refuses_no_seeds():
    with pytest.raises(SystemExit, match="expected --seeds >= 1"):
        experiment_main(["learners", "trees", "--seeds", "0"])
