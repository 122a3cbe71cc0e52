"""A LightGBM or SVM^rank user's files and habits on the ``rankopt`` command."""

from __future__ import annotations

import numpy as np
import pytest
from oracles.model_files import lying_files
from test_cli import assert_one_line_error, run

from rankopt import RankSVM
from rankopt.cli import main
from rankopt.data import load_model, write_svmlight
from rankopt.metrics import ndcg_at_k
from rankopt.plugins import PluginKind, default_registry


def _letor(rng, n_queries, size=12, d=6):
    X = rng.normal(size=(n_queries * size, d))
    latent = X @ rng.normal(size=d) + rng.normal(size=X.shape[0])
    grades = np.digitize(latent, np.quantile(latent, [0.5, 0.8, 0.95]))
    return X, grades, np.full(n_queries, size)


@pytest.fixture
def lightgbm_files(tmp_path, rng):
    """LightGBM's layout: rank.train / rank.test without qid:, the group sizes in rank.train.query."""
    paths = {}
    for part, n_queries in (("train", 20), ("test", 10)):
        X, grades, sizes = _letor(rng, n_queries)
        path = tmp_path / f"rank.{part}"
        write_svmlight(path, X, grades)
        (tmp_path / f"rank.{part}.query").write_text("".join(f"{s}\n" for s in sizes))
        paths[part] = (path, X, grades, sizes)
    return paths


def test_train_and_evaluate_read_lightgbms_group_file(tmp_path, capsys, lightgbm_files):
    """Read as one query before: "... in 1 queries", and NDCG@10 of 0.2952 where per query it is 0.7545."""
    train, X, grades, sizes = lightgbm_files["train"]
    model_path = tmp_path / "m.npz"
    status, out, err = run(capsys, "train", "--loss", "ndcg_graded", "--C", "10", train, model_path)
    assert status == 0, err
    assert "in 20 queries" in out
    assert err.strip().splitlines() == [f"rankopt: 20 queries from LightGBM's group sizes in {str(train) + '.query'!r}"]
    expected = RankSVM(loss="ndcg_graded", C=10.0).fit(X, grades, group=sizes)
    np.testing.assert_allclose(load_model(model_path).coef_, expected.coef_, rtol=1e-12)

    test, X_test, grades_test, sizes_test = lightgbm_files["test"]
    status, out, err = run(capsys, "evaluate", model_path, test)
    assert status == 0, err
    ndcg10 = ndcg_at_k(grades_test, expected.decision_function(X_test), group=sizes_test, k=10)
    line = next(line for line in out.splitlines() if line.startswith("NDCG@10"))
    assert float(line.split()[1]) == pytest.approx(ndcg10, abs=1e-4)
    assert out.startswith("queries  10 ")

    status, out, err = run(capsys, "predict", model_path, test)
    assert status == 0 and len(out.split()) == X_test.shape[0]
    assert "10 queries from LightGBM's group sizes" in err


def test_graded_labels_without_queries_are_refused_like_the_python_api(tmp_path, capsys, lightgbm_files):
    train, *_ = lightgbm_files["train"]
    (tmp_path / "rank.train.query").unlink()
    status, _, err = run(capsys, "train", train, tmp_path / "m.npz")
    assert_one_line_error(status, err, "expected queries for", "graded labels", "rank.train.query")
    model = tmp_path / "binary.npz"
    X = np.random.default_rng(0).normal(size=(20, 6))
    write_svmlight(tmp_path / "binary.svm", X, (X[:, 0] > 0).astype(int))
    assert run(capsys, "train", tmp_path / "binary.svm", model)[0] == 0
    status, _, err = run(capsys, "evaluate", model, train)
    assert_one_line_error(status, err, "expected queries for", "graded labels")


@pytest.mark.parametrize(
    "sizes, fragment",
    [
        ("12\n0\n", "got '0' on line 2"),
        ("12\nx\n", "got 'x' on line 2"),
        ("12\n-3\n", "got '-3' on line 2"),
        ("12\n\u00b2\n", "got '\u00b2' on line 2"),
        ("", "got an empty file"),
        ("12\n12\n", "summing to the number of rows (240), got 2 sizes summing to 24 instead"),
    ],
)
def test_a_bad_group_file_is_one_line_error(tmp_path, capsys, lightgbm_files, sizes, fragment):
    train, *_ = lightgbm_files["train"]
    (tmp_path / "rank.train.query").write_text(sizes)
    status, _, err = run(capsys, "train", train, tmp_path / "m.npz")
    assert_one_line_error(status, err, fragment)


def test_qid_in_the_file_wins_over_a_group_file(tmp_path, capsys, rng):
    X, grades, sizes = _letor(rng, 4)
    path = tmp_path / "q.svm"
    write_svmlight(path, X, grades, qid=np.repeat(np.arange(4), sizes))
    (tmp_path / "q.svm.query").write_text("48\n")
    status, out, err = run(capsys, "train", path, tmp_path / "m.npz")
    assert status == 0 and "in 4 queries" in out and "is ignored" in err


@pytest.mark.parametrize("command", ["train", "evaluate", "predict"])
def test_the_group_file_itself_is_refused_as_data(tmp_path, capsys, lightgbm_files, command):
    """train said "expected a non-empty the features of ..."; evaluate printed metrics with a warning."""
    train, *_ = lightgbm_files["train"]
    model = tmp_path / "m.npz"
    assert run(capsys, "train", train, model)[0] == 0
    query_file = str(train) + ".query"
    argv = (command, query_file, tmp_path / "x.npz") if command == "train" else (command, model, query_file)
    status, _, err = run(capsys, *argv)
    assert_one_line_error(status, err, "expected feature:value pairs in", "LightGBM's group-size file")


def test_svm_rank_dash_c_is_refused_with_a_hint(tmp_path, capsys, lightgbm_files):
    """ "unrecognized arguments: -c ..." before, with no hint."""
    train, *_ = lightgbm_files["train"]
    status, _, err = run(capsys, "train", "-c", "10", train, tmp_path / "m.npz")
    assert_one_line_error(status, err, "expected --C for the slack weight, got SVM^rank's -c 10", "--C 10")
    assert not (tmp_path / "m.npz").exists()


def test_train_help_lists_every_registered_loss(capsys):
    """ndcg_graded, which the README uses, was missing; plugins' losses too."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    registry = default_registry()
    names = [info.name for info in registry.list(PluginKind.LOSS)]
    assert {"ndcg_graded", "pairwise", "ap"} <= set(names)
    for name in names:
        assert f'"{name}"' in out


def test_hostile_model_files_end_in_one_line_errors(tmp_path, capsys, lightgbm_files):
    """A header claiming 4 GB made predict and evaluate exit 1 with a MemoryError traceback under a limit."""
    train, *_ = lightgbm_files["train"]
    model = tmp_path / "m.npz"
    assert run(capsys, "train", train, model)[0] == 0
    for hostile in lying_files(tmp_path, model):
        for command in ("predict", "evaluate"):
            status, _, err = run(capsys, command, hostile, train)
            assert_one_line_error(status, err, "damaged rankopt model file", "claims 4000000000 stored bytes")
