"""The Cora loader (files of the graphdatascience package) and the quick Cora experiment."""

import numpy as np
import pytest

import rankopt.data.cora as cora


@pytest.fixture(scope="module")
def data():
    return cora.load_cora()


def test_sizes(data):
    assert data.X.shape == (2708, 1433)
    assert data.n_samples == 2708 and data.n_features == 1433
    assert set(np.unique(data.X.data)) == {1.0}
    np.testing.assert_array_equal(np.bincount(data.subject), [818, 180, 217, 426, 351, 418, 298])
    assert data.citations.shape == (5429, 2)
    assert data.citations.min() >= 0 and data.citations.max() < 2708
    pairs = data.similar_pairs()
    assert pairs.shape == (5278, 2)  # mutual citations counted once
    assert np.all(pairs[:, 0] < pairs[:, 1])


def test_labels(data):
    assert data.labels(0).sum() == 818
    np.testing.assert_array_equal(data.labels("Case_Based"), data.subject == 6)
    with pytest.raises(ValueError, match="subject"):
        data.labels(7)
    with pytest.raises(ValueError, match="subject"):
        data.labels("Biology")


def test_does_not_import_graphdatascience(data):
    import sys

    assert "graphdatascience" not in sys.modules or sys.modules["graphdatascience"] is not None
    assert (cora.cora_dir() / "cora_rels.parquet.gzip").is_file()


def test_quick_experiment(tmp_path):
    from experiments.cora import METHODS, run_cora_experiment

    out = tmp_path / "table.md"
    result = run_cora_experiment(quick=True, subjects=[0], output=out)
    assert result.subjects == ["Neural_Networks"]
    for method in METHODS:
        values = result.ap[method]["Neural_Networks"]
        assert len(values) == 2 and all(0.0 <= v <= 1.0 for v in values)
    # one hyperparameter setting per outer fold; HOAP-SVM takes HOB-SVM's η (C in AP-SVM units)
    for method in METHODS:
        assert len(result.params[method]["Neural_Networks"]) == 2
    assert [p["eta"] for p in result.params["HOAP-SVM"]["Neural_Networks"]] == [
        p["eta"] for p in result.params["HOB-SVM"]["Neural_Networks"]
    ]
    text = out.read_text()
    assert "| HOAP-SVM |" in text and "mean fit (s)" in text


def test_experiment_rejects_unknown_settings():
    from experiments.cora import run_cora_experiment

    with pytest.raises(ValueError, match="settings"):
        run_cora_experiment(quick=True, n_trees=3)
