"""The rankopt command on LETOR files: qid:, graded labels, zero-based indices, metrics over queries."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from rankopt import RankSVM
from rankopt.cli import main
from rankopt.data.loaders import read_svmlight
from rankopt.data.model_file import load_model
from rankopt.metrics import mean_average_precision, ndcg_at_k, precision_at_k


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def letor(tmp_path):
    rng = np.random.default_rng(3)
    n_queries, size, d = 12, 15, 6
    X = rng.standard_normal((n_queries * size, d))
    X[:, 0] = np.abs(X[:, 0]) + 0.1  # feature 0 used everywhere: a zero-based file shows index 0
    grades = np.clip(np.round(X[:, 1] + rng.standard_normal(X.shape[0]) + 1), 0, 4).astype(int)
    qid = np.repeat(np.arange(1, n_queries + 1), size)
    paths = {}
    for name, zero_based in (("one", False), ("zero", True)):
        for part, rows in (("train", slice(0, 120)), ("test", slice(120, None))):
            path = tmp_path / f"{part}.{name}.txt"
            dump_svmlight_file(X[rows], grades[rows], str(path), zero_based=zero_based, query_id=qid[rows])
            paths[part, name] = path
    return X, grades, qid, paths


def test_train_over_queries_and_evaluate_prints_metrics_averaged_over_queries(tmp_path, letor, capsys):
    X, grades, qid, paths = letor
    model_file = tmp_path / "m"
    status, out, err = run(capsys, "train", paths["train", "one"], model_file, "--relevant-at", "2")
    assert status == 0, err
    assert "in 8 queries" in out
    model = load_model(model_file)
    reference = RankSVM(relevant_at=2).fit(X[:120], grades[:120], qid=qid[:120])
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-6, atol=1e-9)

    per_query = tmp_path / "per-query.tsv"
    status, out, err = run(capsys, "evaluate", model_file, paths["test", "one"], "--per-query", per_query)
    assert status == 0, err
    printed = {line[:9].strip(): line[9:].strip() for line in out.strip().splitlines()}
    scores = reference.decision_function(X[120:])
    g, q = grades[120:], qid[120:]
    assert printed["queries"].startswith("4 (")
    assert float(printed["MAP"]) == pytest.approx(mean_average_precision(g, scores, q, 2), abs=5e-5)
    for k in (1, 5, 10):
        assert float(printed[f"NDCG@{k}"]) == pytest.approx(ndcg_at_k(g, scores, q, k=k), abs=5e-5)
    assert float(printed["P@10"]) == pytest.approx(precision_at_k(g, scores, q, k=10, relevant_at=2), abs=5e-5)

    rows = [line.split("\t") for line in per_query.read_text().splitlines()]
    assert rows[0] == ["qid", "documents", "AP", "NDCG@1", "NDCG@5", "NDCG@10", "P@10"]
    assert [int(r[0]) for r in rows[1:]] == [9, 10, 11, 12] and all(r[1] == "15" for r in rows[1:])
    np.testing.assert_allclose(
        [float(r[2]) for r in rows[1:]], mean_average_precision(g, scores, q, 2, average=False), atol=5e-7
    )


def test_train_help_names_every_built_in_loss(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name in ("ap", "ndcg", "auc", "pairwise", "zero_one"):
        assert f'"{name}"' in out


def test_zero_based_files_are_detected_and_give_the_same_model(tmp_path, letor, capsys):
    _, _, _, paths = letor
    for name in ("one", "zero"):
        status, _, err = run(capsys, "train", paths["train", name], tmp_path / f"{name}.model", "--loss", "pairwise")
        assert status == 0, err
    np.testing.assert_allclose(
        load_model(tmp_path / "zero.model").coef_, load_model(tmp_path / "one.model").coef_, rtol=1e-9
    )
    assert read_svmlight(paths["train", "zero"], zero_based="auto").zero_based
    assert not read_svmlight(paths["train", "one"], zero_based="auto").zero_based
    # read as one-based, the zero-based file has an index 0 and is refused
    status, _, err = run(capsys, "train", paths["train", "zero"], tmp_path / "x", "--zero-based", "no")
    assert status == 2 and "Invalid index 0" in err
    assert "counts features from 0" in err and "--zero-based yes or auto" in err and len(err.splitlines()) == 1


def test_a_file_in_scikit_learns_default_format_runs_through_train_predict_evaluate(tmp_path, capsys):
    """dump_svmlight_file's defaults (zero-based, no qid, binary labels) need no option anywhere."""
    rng = np.random.default_rng(5)
    X = np.abs(rng.standard_normal((80, 4))) + 0.1  # every feature non-zero: index 0 occurs
    y = (X[:, 1] + 0.3 * rng.standard_normal(80) > 1.0).astype(int)
    train, test = tmp_path / "train.svm", tmp_path / "test.svm"
    dump_svmlight_file(X[:60], y[:60], str(train))
    dump_svmlight_file(X[60:], y[60:], str(test))
    assert train.read_text().split()[1].startswith("0:")  # the writer's default is zero-based
    status, out, err = run(capsys, "train", train, tmp_path / "m", "--C", "10")
    assert status == 0, err
    assert "x 4 features" in out
    expected = RankSVM(loss="ap", C=10.0).fit(X[:60], y[:60])
    np.testing.assert_allclose(load_model(tmp_path / "m").coef_, expected.coef_, rtol=1e-6, atol=1e-9)
    status, out, err = run(capsys, "predict", tmp_path / "m", test)
    assert status == 0, err
    np.testing.assert_allclose(np.array(out.split(), dtype=float), expected.decision_function(X[60:]), rtol=1e-9)
    status, out, err = run(capsys, "evaluate", tmp_path / "m", test)
    assert status == 0, err
    assert out.startswith("samples") and "AP" in out


def test_read_svmlight_detects_the_base_by_default(tmp_path):
    X = np.array([[1.0, 0.0, 2.0], [0.5, 3.0, 0.0]])
    zero, one = tmp_path / "zero.svm", tmp_path / "one.svm"
    dump_svmlight_file(X, [1, 0], str(zero))
    dump_svmlight_file(X, [1, 0], str(one), zero_based=False)
    for path, zero_based in ((zero, True), (one, False)):
        data = read_svmlight(path)
        assert data.zero_based is zero_based
        np.testing.assert_array_equal(data.X.toarray(), X)
    with pytest.raises(ValueError, match=r"Invalid index 0.*counts features from 0.*zero_based=True or 'auto'"):
        read_svmlight(zero, zero_based=False)


def test_a_file_read_in_the_wrong_base_against_a_model_gets_a_hint(tmp_path, letor, capsys):
    _, _, _, paths = letor
    model_file = tmp_path / "m"
    assert run(capsys, "train", paths["train", "one"], model_file)[0] == 0
    wide = tmp_path / "wide.txt"
    wide.write_text("1 qid:1 1:1 7:1\n0 qid:1 2:1\n")
    status, _, err = run(capsys, "evaluate", model_file, wide)
    assert status == 2 and "at most 6 features" in err and "--zero-based" in err


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"1 qid:1 1:1\n0 qid:2 2:1\n", "some query (qid) to hold both a relevant document"),
        (b"1 qid:1 1:1\n0 qid:1 2:1\n", "relevant_at=5 to be reached"),
        (b"-3 qid:1 1:1\n0 qid:1 2:1\n", "grades >= 0"),
    ],
)
def test_bad_letor_files(tmp_path, capsys, content, fragment):
    data = tmp_path / "bad.txt"
    data.write_bytes(content)
    extra = ("--relevant-at", "5") if "relevant_at=5" in fragment else ()
    status, _, err = run(capsys, "train", data, tmp_path / "m", *extra)
    assert status == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_train_with_max_abs_scaling_saves_weights_for_raw_features(tmp_path, capsys, caplog):
    # Columns of very different ranges and one of zeros: the saved model is
    # the RankSVM fitted on the scaled columns, its weights divided back.
    rng = np.random.default_rng(8)
    n_queries, size = 10, 12
    X = rng.standard_normal((n_queries * size, 4)) * np.array([1e6, 0.0, 1.0, 1e-4])
    grades = np.clip(np.round(X[:, 2] + X[:, 0] / 1e6 + rng.standard_normal(X.shape[0])), 0, 3).astype(int)
    qid = np.repeat(np.arange(n_queries), size)
    path = tmp_path / "train.txt"
    dump_svmlight_file(X, grades, str(path), query_id=qid)
    model_file = tmp_path / "m"
    with caplog.at_level("INFO", logger="rankopt.cli"):
        status, out, err = run(capsys, "train", path, model_file, "--scale", "max-abs")
    assert status == 0, err
    assert "scaled by their largest absolute values" in caplog.text
    data = read_svmlight(path)
    assert data.X.shape[1] == 4
    scale = np.abs(data.X.toarray()).max(axis=0)
    scale[scale == 0] = 1.0
    reference = RankSVM().fit(data.X.toarray() / scale, grades, qid=qid)
    model = load_model(model_file)
    np.testing.assert_allclose(model.coef_, reference.coef_ / scale, rtol=1e-6, atol=1e-12)
    status, out, err = run(capsys, "predict", model_file, path)
    assert status == 0, err
    np.testing.assert_allclose(
        np.loadtxt(out.splitlines()), reference.decision_function(data.X.toarray() / scale), rtol=1e-6, atol=1e-9
    )


def test_evaluate_says_which_ndcg_gains_it_prints_and_takes_linear_ones(tmp_path, letor, capsys):
    """Issue 47, point 22: 0.762 printed where scikit-learn's ndcg_score gives 0.812, with no word of the gains."""
    X, grades, qid, paths = letor
    model_file = tmp_path / "m"
    assert run(capsys, "train", paths["train", "one"], model_file)[0] == 0
    scores = load_model(model_file).decision_function(X[120:])
    g, q = grades[120:], qid[120:]
    for option, gains, said in ((), "exponential", "2^g - 1"), (("--gains", "linear"), "linear", "g in"):
        status, out, err = run(capsys, "evaluate", model_file, paths["test", "one"], *option)
        assert status == 0, err
        printed = {line[:9].strip(): line[9:].strip() for line in out.strip().splitlines()}
        assert printed["gains"].startswith(said)
        assert float(printed["NDCG@10"]) == pytest.approx(ndcg_at_k(g, scores, q, k=10, gains=gains), abs=5e-5)
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "2^g - 1" in capsys.readouterr().out
