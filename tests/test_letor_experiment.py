"""The letor experiment on a small synthetic LETOR set (no download)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from experiment_cli import experiment_main, experiment_parser

from experiments import letor
from rankopt.data.loaders import SvmLightData


def _split(rng, n_queries, first_qid):
    sizes = rng.integers(8, 20, n_queries)
    qid = np.repeat(np.arange(first_qid, first_qid + n_queries), sizes)
    X = rng.standard_normal((qid.size, 6)) * np.array([1, 10, 100, 1, 1, 0.1])  # LETOR-like scales
    grades = np.clip(np.round(X[:, 0] + X[:, 1] / 10 + rng.standard_normal(qid.size)), 0, 4)
    return SvmLightData(X=sp.csr_matrix(X), y=grades.astype(float), qid=qid, path="synthetic")


@pytest.fixture
def data():
    rng = np.random.default_rng(5)
    return _split(rng, 15, 1), _split(rng, 10, 100)


def test_quick_run_fills_every_row_and_the_table(tmp_path, data):
    pytest.importorskip("lightgbm")
    out, js = tmp_path / "t.md", tmp_path / "r.json"
    result = letor.run_letor_experiment(data=data, quick=True, output=out, json_output=js)
    assert [r.method for r in result.rows] == list(letor.METHODS)
    assert result.n_train_queries == 12 and result.n_test_queries == 10
    for row in result.rows:
        assert 0.3 < row.test_map <= 1 and 0 < row.test_ndcg10 <= 1 and row.fit_seconds >= 0
        if row.method != "lightgbm":
            assert row.C in letor.QUICK_C_GRID and row.cv_fits == 2 * 3
            assert row.converged and row.cv_fits_converged == row.cv_fits
    table = out.read_text()
    main_table, *paired = table.split("Paired over test queries")
    assert main_table.count("\n| ") == len(letor.METHODS) + 1 and "GroupKFold" in table
    # two paired tables (against LGBMRanker and against the binary NDCG loss), a row per other method
    assert len(paired) == 2 and all(part.count("\n| ") == len(letor.METHODS) for part in paired)
    ndcg = result.rows[1]
    assert ndcg.method == "ndcg" and len(ndcg.test_ndcg10_per_query) == result.n_test_queries
    assert np.nanmean(ndcg.test_ndcg10_per_query) == pytest.approx(ndcg.test_ndcg10)
    assert json.loads(js.read_text())["rows"][0]["method"] == "ap"


def test_missing_lightgbm_gives_an_install_hint(monkeypatch, data):
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import lightgbm now raises ModuleNotFoundError
    with pytest.raises(
        ModuleNotFoundError, match=r'needs lightgbm, which is not installed: pip install "rankopt\[experiments\]"'
    ):
        letor.run_letor_experiment(data=data, quick=True)
    # without LightGBM the linear methods still run
    result = letor.run_letor_experiment(data=data, quick=True, methods=("pairwise",))
    assert [r.method for r in result.rows] == ["pairwise"]


def test_unknown_method_is_refused(data):
    with pytest.raises(ValueError, match="expected methods among"):
        letor.run_letor_experiment(data=data, methods=("svmrank",))


def test_cli_subcommand_prints_the_table(monkeypatch, capsys, data):

    run = letor.run_letor_experiment
    monkeypatch.setattr(letor, "run_letor_experiment", lambda **kwargs: run(data=data, **kwargs))
    assert experiment_main(["letor", "--quick", "--methods", "ap", "pairwise", "--relevant-at", "2"]) == 0
    out = capsys.readouterr().out
    assert "relevant = grade >= 2" in out and out.count("| RankSVM") == 2


def test_progress_plan_and_the_quick_warning(data):
    from rankopt.experiments.report import QUICK_WARNING

    messages = []
    result = letor.run_letor_experiment(data=data, quick=True, methods=("pairwise", "ap"), progress=messages.append)
    assert any("pairwise C=0.1: validation MAP" in m for m in messages)
    assert any(m.split("] ", 1)[1].startswith("ap: test MAP") for m in messages)
    assert result.quick and QUICK_WARNING in letor.format_table(result)
    full = letor.run_letor_experiment(data=data, methods=("pairwise",), C_grid=(1.0,))
    assert not full.quick and "WARNING" not in letor.format_table(full)
    args = experiment_parser("letor").parse_args(["--quick", "--methods", "ap", "lightgbm"])
    assert letor.plan(args).startswith("letor --quick: ap, lightgbm") and "8 fits; a few seconds" in letor.plan(
        args
    )  # 1 x 2 C x 3 folds + 2 final
    assert "about a minute" in letor.plan(experiment_parser("letor").parse_args([]))
