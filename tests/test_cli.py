"""The ``rankopt`` command, the SVM-light helpers and the model file format."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from experiment_cli import experiment_main, experiment_parser
from oracles.model_files import rewrite_archive

from rankopt import RankSVM, __version__
from rankopt.cli import build_parser, main
from rankopt.data import ModelFileError, load_digits, load_model, read_svmlight, save_model, write_svmlight
from rankopt.data.model_file import MODEL_FORMAT_VERSION
from rankopt.metrics import average_precision, ndcg, precision_at_k, roc_auc

POSITIVE_DIGIT = 3


@pytest.fixture(scope="module")
def digits_split():
    X, digit = load_digits()
    y = (digit == POSITIVE_DIGIT).astype(np.int64)
    return (X[:300], y[:300]), (X[300:500], y[300:500])


@pytest.fixture
def files(tmp_path, digits_split):
    (X_train, y_train), (X_test, y_test) = digits_split
    train, test = tmp_path / "train.svmlight", tmp_path / "test.svmlight"
    write_svmlight(train, X_train, 2 * y_train - 1)  # {-1, +1} labels
    write_svmlight(test, X_test, y_test)  # {0, 1} labels
    return train, test


def run(capsys, *argv):
    """main(argv) -> (status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status, err, *fragments):
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rankopt: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


# --- train / predict / evaluate ------------------------------------------------------------


def test_train_predict_evaluate_round_trip(tmp_path, files, digits_split, capsys):
    train, test = files
    (X_train, y_train), (X_test, y_test) = digits_split
    model_file = tmp_path / "model.bin"  # no .npz suffix: the name is kept as given

    status, out, err = run(capsys, "train", train, model_file, "--loss", "ndcg", "--C", "10")
    assert status == 0, err
    assert "ndcg" in out and "converged" in out
    assert model_file.exists() and not (tmp_path / "model.bin.npz").exists()

    reference = RankSVM(loss="ndcg", C=10.0).fit(X_train, y_train)
    model = load_model(model_file)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-6, atol=1e-9)
    assert model.n_features_in_ == 64 and model.loss == "ndcg" and model.C == 10.0
    assert model.n_iter_ == reference.n_iter_ and model.converged_

    scores_file = tmp_path / "scores.txt"
    status, out, err = run(capsys, "predict", model_file, test, "--output", scores_file)
    assert status == 0, err
    scores = np.loadtxt(scores_file)
    assert scores.shape == (X_test.shape[0],)
    np.testing.assert_allclose(scores, reference.decision_function(X_test), rtol=1e-9, atol=1e-9)

    status, out, err = run(capsys, "predict", model_file, test)
    assert status == 0
    np.testing.assert_allclose(np.array(out.split(), dtype=float), scores)

    status, out, err = run(capsys, "evaluate", model_file, test)
    assert status == 0, err
    printed = {line[:9].strip(): line[9:].strip() for line in out.strip().splitlines()}
    assert printed["samples"] == f"{X_test.shape[0]} ({int(y_test.sum())} relevant)"
    for label, metric in (("AP", average_precision), ("NDCG", ndcg), ("ROC AUC", roc_auc), ("P@10", precision_at_k)):
        assert float(printed[label]) == pytest.approx(metric(y_test, scores), abs=5e-5)
    assert float(printed["AP"]) > 0.8  # the model learned something


def test_labels_in_zero_one_and_plus_minus_one_train_the_same_model(tmp_path, digits_split, capsys):
    (X, y), _ = digits_split
    write_svmlight(tmp_path / "01.svm", X, y)
    lines = (tmp_path / "01.svm").read_text().splitlines()
    relabel = {"0": "-1", "1": "+1"}
    (tmp_path / "pm.svm").write_text(
        "".join(relabel[label] + " " + rest + "\n" for label, rest in (line.split(" ", 1) for line in lines))
    )
    for name in ("01", "pm"):
        assert run(capsys, "train", tmp_path / f"{name}.svm", tmp_path / f"{name}.model", "--loss", "auc")[0] == 0
    np.testing.assert_array_equal(load_model(tmp_path / "01.model").coef_, load_model(tmp_path / "pm.model").coef_)


def test_one_qid_trains_the_single_query_model_several_train_over_queries(tmp_path, digits_split, capsys):
    (X, y), _ = digits_split
    one, two = tmp_path / "one.svm", tmp_path / "two.svm"
    write_svmlight(one, X, y, qid=np.full(y.size, 7))
    write_svmlight(two, X, y, qid=np.repeat([1, 2], [150, 150]))
    model_file = tmp_path / "m"
    assert run(capsys, "train", one, model_file)[0] == 0
    np.testing.assert_allclose(load_model(model_file).coef_, RankSVM().fit(X, y).coef_, rtol=1e-9, atol=1e-12)
    status, out, _ = run(capsys, "train", two, tmp_path / "m2")
    assert status == 0 and "in 2 queries" in out
    qid = np.repeat([1, 2], [150, 150])
    np.testing.assert_allclose(
        load_model(tmp_path / "m2").coef_, RankSVM().fit(X, y, qid=qid).coef_, rtol=1e-9, atol=1e-12
    )
    status, out, _ = run(capsys, "predict", model_file, two)
    assert status == 0 and len(out.splitlines()) == y.size


def test_convergence_warning_is_one_line_and_the_model_is_still_written(tmp_path, files, capsys):
    train, _ = files
    status, out, err = run(capsys, "train", train, tmp_path / "m", "--max-iter", "1")
    assert status == 0
    assert "NOT converged" in out
    assert err.startswith("rankopt: warning: ") and len(err.strip().splitlines()) == 1
    assert not load_model(tmp_path / "m").converged_


def test_verbose_logs_iterations(tmp_path, files, capsys, caplog):
    train, _ = files
    rankopt_logger = logging.getLogger("rankopt")
    level = rankopt_logger.level
    try:
        with caplog.at_level(logging.INFO, logger="rankopt"):
            assert run(capsys, "train", train, tmp_path / "m", "-v")[0] == 0
    finally:
        rankopt_logger.setLevel(level)
    assert any("iteration 1:" in record.getMessage() for record in caplog.records)


# --- plugins ---------------------------------------------------------------------------------


def test_plugins_lists_name_kind_provider(capsys):
    status, out, _ = run(capsys, "plugins")
    assert status == 0
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows[0] == ["name", "kind", "provider"]
    listed = {tuple(row) for row in rows[1:]}
    for expected in [
        ("ap", "loss", "rankopt.losses.ap"),
        ("ndcg", "loss", "rankopt.losses.discount"),
        ("zero_one", "loss", "rankopt.losses.zero_one"),
        ("greedy", "inference_method", "rankopt.inference.greedy"),
        ("linear", "feature_map", "rankopt.features.linear"),
    ]:
        assert expected in listed


# --- error paths -------------------------------------------------------------------------------


@pytest.fixture
def model_file(tmp_path, files, capsys):
    train, _ = files
    path = tmp_path / "good.model"
    assert run(capsys, "train", train, path)[0] == 0
    return path


def test_missing_data_file(tmp_path, capsys):
    status, _, err = run(capsys, "train", tmp_path / "nope.svm", tmp_path / "m")
    assert_one_line_error(status, err, "nope.svm", "No such file")


def test_missing_model_file(tmp_path, files, capsys):
    status, _, err = run(capsys, "predict", tmp_path / "nope.model", files[1])
    assert_one_line_error(status, err, "nope.model", "No such file")


def test_unknown_loss(tmp_path, files, capsys):
    status, _, err = run(capsys, "train", files[0], tmp_path / "m", "--loss", "no_such_loss")
    assert_one_line_error(status, err, "unknown loss 'no_such_loss'", "'ap'")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "option", [("--C", "-1"), ("--tol", "0"), ("--max-iter", "0"), ("--inference", "no_such_method")]
)
def test_bad_parameters(tmp_path, files, capsys, option):
    status, _, err = run(capsys, "train", files[0], tmp_path / "m", *option)
    assert_one_line_error(status, err)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"junk line\n", "as SVM-light"),
        (b"", "empty file"),
        (b"1 1:1\n-2 1:2\n0 2:1\n", "grades >= 0"),
        (b"1.5 1:1\n2 1:2\n0 2:1\n", "grades >= 0, got 1.5"),
        (b"1 1:1\n1 2:1\n", "both a positive and a negative"),
        (b"1 1:nan\n0 2:1\n", "finite"),
    ],
)
def test_bad_training_files(tmp_path, capsys, content, fragment):
    data = tmp_path / "bad.svm"
    data.write_bytes(content)
    status, _, err = run(capsys, "train", data, tmp_path / "m")
    assert_one_line_error(status, err, fragment)


@pytest.mark.parametrize(
    "content, fragments",
    [
        (b"1 qid:1 2147483648:1\n0 qid:1 1:0.1\n", ["feature index of 2**31 or more"]),
        (b"1 qid:9223372036854775808 1:1\n0 qid:1 1:0.1\n", ["qid of 2**63 or more"]),
        (b"1 qid:1 2147483647:1\n0 qid:1 1:0.1\n", ["at most 1048576 features", "--max-features"]),
        (b"1 qid:1 10000000:1\n0 qid:1 1:0.1\n", ["at most 1048576 features", "10000000 features wide"]),
        (
            b"1 qid:1 1:1\n0 1:0.1\n1 qid:2 1:1\n0 qid:2 2:1\n1 1:3\n0 qid:3 1:1\n",
            ["qid: on every line", "on 4 of 6 lines", "line 2: '0 1:0.1'"],
        ),
    ],
)
def test_hostile_training_files_are_one_line_errors(tmp_path, capsys, content, fragments):
    data = tmp_path / "bad.svm"
    data.write_bytes(content)
    status, _, err = run(capsys, "train", data, tmp_path / "m")
    assert_one_line_error(status, err, *fragments)
    assert not (tmp_path / "m").exists()


def test_max_features_reads_wider_files(tmp_path, capsys):
    data = tmp_path / "wide.svm"
    data.write_bytes(b"1 1:1 300:1\n0 2:1\n")
    status, _, err = run(capsys, "train", data, tmp_path / "m", "--max-features", 100)
    assert_one_line_error(status, err, "at most 100 features", "300 features wide")
    status, out, _ = run(capsys, "train", data, tmp_path / "m", "--max-features", 300)
    assert status == 0 and "x 300 features" in out


def test_outputs_never_overwrite_an_input(tmp_path, files, model_file, capsys):
    train, test = files
    before = train.read_bytes()
    status, _, err = run(capsys, "train", train, train)
    assert_one_line_error(status, err, "output path other than the input")
    assert train.read_bytes() == before
    (tmp_path / "link.svm").symlink_to(train)
    status, _, err = run(capsys, "train", train, tmp_path / "link.svm")
    assert_one_line_error(status, err, "output path other than the input")
    for output in (test, model_file):
        kept = output.read_bytes()
        status, _, err = run(capsys, "predict", model_file, test, "-o", output)
        assert_one_line_error(status, err, "output path other than the input")
        assert output.read_bytes() == kept
        status, _, err = run(capsys, "evaluate", model_file, test, "--per-query", output)
        assert_one_line_error(status, err, "output path other than the input")
        assert output.read_bytes() == kept


def test_a_file_narrower_than_the_model_warns(tmp_path, model_file, capsys):
    data = tmp_path / "narrow.svm"
    data.write_text("1 1:1 5:0.5\n0 2:1\n")
    status, out, err = run(capsys, "evaluate", model_file, data)
    assert status == 0 and "AP" in out
    assert err.startswith("rankopt: warning: ") and "spans 5 features, the model 64: features 6-64 are read as 0" in err


def test_data_with_more_features_than_the_model(tmp_path, model_file, capsys):
    data = tmp_path / "wide.svm"
    data.write_text("1 1:1 70:1\n0 2:1\n")
    status, _, err = run(capsys, "evaluate", model_file, data)
    assert_one_line_error(status, err, "at most 64 features")


def test_data_with_fewer_features_than_the_model_is_widened(tmp_path, model_file, capsys):
    data = tmp_path / "narrow.svm"
    data.write_text("1 1:1 5:0.5\n0 2:1\n")
    status, out, _ = run(capsys, "predict", model_file, data)
    assert status == 0
    coef = load_model(model_file).coef_
    np.testing.assert_allclose(np.array(out.split(), dtype=float), [coef[0] + 0.5 * coef[4], coef[1]], rtol=1e-9)


@pytest.mark.parametrize("kind", ["text", "truncated", "foreign_npz", "no_coef", "bad_coef", "bad_json"])
def test_corrupt_or_foreign_model_file(tmp_path, model_file, files, capsys, kind):
    bad = tmp_path / "bad.model"
    if kind == "text":
        bad.write_text("this is not a model\n")
    elif kind == "truncated":
        bad.write_bytes(model_file.read_bytes()[:200])
    elif kind == "foreign_npz":
        with open(bad, "wb") as handle:
            np.savez(handle, weights=np.ones(3))
    elif kind == "no_coef":
        rewrite_archive(model_file, bad, coef=None)
    elif kind == "bad_coef":
        rewrite_archive(model_file, bad, coef=np.ones(5))
    else:
        rewrite_archive(model_file, bad, params="{not json")
    with pytest.raises(ModelFileError):
        load_model(bad)
    status, _, err = run(capsys, "predict", bad, files[1])
    assert_one_line_error(status, err, "bad.model")


def test_model_of_another_format_version(tmp_path, model_file, files, capsys):
    future = tmp_path / "future.model"
    rewrite_archive(model_file, future, format_version=MODEL_FORMAT_VERSION + 1, rankopt_version="9.9.9")
    status, _, err = run(capsys, "evaluate", future, files[1])
    assert_one_line_error(
        status,
        err,
        f"format version {MODEL_FORMAT_VERSION + 1}",
        "rankopt 9.9.9",
        f"reads version {MODEL_FORMAT_VERSION} only",
    )


def test_model_file_records_how_it_was_trained(model_file):
    with np.load(model_file, allow_pickle=False) as archive:
        assert str(archive["format"]) == "rankopt-model"
        assert int(archive["format_version"]) == MODEL_FORMAT_VERSION
        assert str(archive["rankopt_version"]) == __version__
        assert str(archive["loss"]) == "ap"
        assert str(archive["model_type"]) == "RankSVM"
        assert json.loads(str(archive["params"])) == {
            "loss": "ap",
            "loss_params": None,
            "C": 1.0,
            "tol": 1e-3,
            "max_iter": 1000,
            "inference": "auto",
            "verbose": False,
            "approx": None,
            "relevant_at": 1,
            "early_stopping_patience": None,
            "eval_metric": None,
            "warm_start": False,
            "solver": "cutting_plane",
            "model": "auto",
            "feature_map": "linear",
        }


def test_save_model_needs_a_fitted_model(tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        save_model(RankSVM(), tmp_path / "m")


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["train"], ["train", "a", "b", "--C", "abc"], ["no_such_command"]):
        with pytest.raises(SystemExit) as excinfo:
            main(argv)
        assert excinfo.value.code == 2
    capsys.readouterr()


# --- SVM-light helpers ------------------------------------------------------------------------


def test_svmlight_round_trip_is_one_based(tmp_path):
    X = np.array([[0.0, 2.5, 0.0], [1.0, 0.0, 3.0]])
    path = tmp_path / "x.svm"
    write_svmlight(path, X, np.array([1.0, -1.0]))
    assert path.read_text().splitlines() == ["1 2:2.5", "-1 1:1 3:3"]
    data = read_svmlight(path)
    np.testing.assert_array_equal(data.X.toarray(), X)
    np.testing.assert_array_equal(data.y, [1, -1])
    assert data.qid is None and data.n_queries == 1
    assert read_svmlight(path, n_features=5).X.shape == (2, 5)


# --- the entry point ----------------------------------------------------------------------------


def _python_m_rankopt(*argv):
    # From a neutral directory: the checkout itself would shadow the installed package.
    return subprocess.run(
        [sys.executable, "-m", "rankopt", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )


def test_python_m_rankopt_runs_the_command(tmp_path, files):
    done = _python_m_rankopt("plugins")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == ["name", "kind", "provider"]

    done = _python_m_rankopt("predict", tmp_path / "missing.model", files[1])
    assert done.returncode == 2
    assert done.stderr.startswith("rankopt: error: ") and "Traceback" not in done.stderr


# --- the papers' experiments ---------------------------------------------------------------------


QUICK_WARNING_START = "WARNING: --quick is a smoke test"


def assert_plan_progress_and_warning(err, out, plan_start, progress_fragment):
    lines = err.splitlines()
    assert lines[0].startswith(f"rankopt: {plan_start}") and not re.search(r"\d+ min", lines[0])  # quick: seconds
    assert lines[1].startswith(f"rankopt: {QUICK_WARNING_START}")
    assert any(progress_fragment in line for line in lines[2:-1])
    assert lines[-1].startswith(f"rankopt: {QUICK_WARNING_START}")  # said again under the table
    assert QUICK_WARNING_START in out  # and in the table itself


def test_latent_subcommand_quick_run_prints_the_table(capsys, tmp_path):
    table = tmp_path / "latent.md"
    assert experiment_main(["latent", "--quick", "--output", str(table)]) == 0
    out, err = capsys.readouterr()
    assert "| Latent AP-SVM |" in out and "| Latent SVM |" in out and "| Latent SSVM |" in out
    assert table.read_text().startswith("| method |") and QUICK_WARNING_START in table.read_text()
    assert_plan_progress_and_warning(err, out, "latent --quick: latent_svm", "musk1 seed 0 fold 1")


def test_cora_subcommand_quick_run_prints_the_table(capsys, tmp_path):
    table = tmp_path / "cora.md"
    assert experiment_main(["cora", "--quick", "--output", str(table)]) == 0
    out, err = capsys.readouterr()
    for method in ("SVM", "AP-SVM", "HOB-SVM", "HOAP-SVM"):
        assert f"| {method} |" in out
    assert QUICK_WARNING_START in table.read_text()
    assert_plan_progress_and_warning(err, out, "cora --quick", "outer fold 14/14")


def test_full_experiments_say_how_long_they_take():
    from experiments import cora, latent

    assert "roughly 24 min" in cora.plan(False, None, 1) and "7 subject(s)" in cora.plan(False, None, 1)
    assert "roughly 12 min" in cora.plan(False, None, 2) and "roughly 3 min" in cora.plan(False, [0], 1)
    args = experiment_parser("latent").parse_args([])
    assert "135 fold runs" in latent.plan(args) and "52 min" in latent.plan(args)


def test_every_subcommand_has_a_description_and_every_option_a_help_text():
    import argparse

    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(subparsers.choices) == {"train", "store", "predict", "evaluate", "plugins", "demo"}
    for name, sub in subparsers.choices.items():
        assert sub.description, name
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and action.help is not argparse.SUPPRESS or action.dest == "verbose", (
                    name,
                    action.option_strings,
                )
    for name in ("cora", "latent", "letor", "deep"):  # the experiments outside the package: the same rules
        experiment = experiment_parser(name)
        assert experiment.description and experiment.prog == f"python -m experiments.{name}"
        for action in experiment._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and action.help is not argparse.SUPPRESS or action.dest == "verbose", name


def test_experiment_options_are_validated():
    with pytest.raises(SystemExit) as excinfo:
        experiment_main(["latent", "--datasets", "not-a-dataset"])
    assert excinfo.value.code == 2


def test_integer_parameters_stay_integers_through_model_files(tmp_path, capsys):
    """A model trained with --relevant-at 2 loaded as RankSVM(relevant_at=2.0) before."""
    data = tmp_path / "graded.svm"
    data.write_text("2 qid:1 1:1 2:0.5\n0 qid:1 1:0.1\n1 qid:1 2:1\n3 qid:2 1:1\n0 qid:2 2:0.3\n")
    status, _, _ = run(capsys, "train", data, tmp_path / "m.npz", "--relevant-at", "2")
    assert status == 0
    model = load_model(tmp_path / "m.npz")
    assert model.relevant_at == 2 and isinstance(model.relevant_at, int)
    assert repr(model) == "RankSVM(relevant_at=2)"
    status, _, _ = run(capsys, "train", data, tmp_path / "h.npz", "--relevant-at", "1.5")
    assert status == 0 and load_model(tmp_path / "h.npz").relevant_at == 1.5
