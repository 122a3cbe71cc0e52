"""The digits demo: its results table, JSON, plot and the ``rankopt demo`` command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rankopt.cli import main
from rankopt.experiments.demo import JSON_FILE, METHODS, PLOT_FILE, QUICK_CLASSES, ROW_COLUMNS, run_demo
from rankopt.experiments.report import format_table, interpolated_precision
from rankopt.metrics import average_precision

METHOD_NAMES = [name for name, _ in METHODS]


@pytest.fixture(scope="module")
def result():
    return run_demo(classes=(0, 8))


def test_one_row_per_class_and_method_with_the_expected_columns(result):
    assert [(r["class"], r["method"]) for r in result.rows] == [(c, m) for c in (0, 8) for m in METHOD_NAMES]
    losses = dict(METHODS)
    for row in result.rows:
        assert tuple(row) == ROW_COLUMNS
        assert row["loss"] == losses[row["method"]]
        assert 0.0 <= row["test_ap"] <= 1.0 and 0.0 <= row["test_ndcg"] <= 1.0
        assert row["n_iter"] >= 1 and row["fit_time_s"] >= 0.0
    assert {row["loss"] for row in result.rows} == {"zero_one", "ap", "ndcg", "auc"}


def test_rows_agree_with_the_stored_scores(result):
    for row in result.rows:
        scores = result.test_scores[(row["class"], row["method"])]
        assert scores.shape == (result.n_test,)
        assert row["test_ap"] == average_precision(result.y_test == row["class"], scores)
    assert result.n_train + result.n_test == 1797


def test_every_method_ranks_the_test_half_well(result):
    # A sanity floor, far below what the methods reach (≈0.87 for digit 8,
    # ≈1.0 for digit 0): it catches a broken pipeline, not small changes.
    for method, mean in result.mean_rows().items():
        assert mean["test_ap"] > 0.85, method


def test_summary_and_table(result):
    summary = result.method_summary()
    assert list(summary) == METHOD_NAMES
    for s in summary.values():
        assert s["n_fits"] == 2 and s["max_n_iter"] >= s["mean_n_iter"] >= 1
    table = format_table(result)
    for text in ["test AP", "test NDCG", "class 0", "class 8", "mean", "fit time", *METHOD_NAMES]:
        assert text in table
    assert table.count("\nmean") == 2
    # the fit-time column is a sum over the method's fits, and says so
    assert "total fit time (2 fits)" in table and "the sum of the 2 fits' wall-clock times" in table
    for method, s in summary.items():
        rows = [r for r in result.rows if r["method"] == method]
        assert s["fit_time_s"] == pytest.approx(sum(r["fit_time_s"] for r in rows))


def test_demo_outputs_are_ignored_by_git():
    from pathlib import Path

    patterns = (Path(__file__).resolve().parents[1] / ".gitignore").read_text().split()
    assert JSON_FILE in patterns and (PLOT_FILE in patterns or "*.png" in patterns)


def test_unknown_class_is_refused():
    with pytest.raises(ValueError, match="digit classes"):
        run_demo(classes=(10,))


def test_interpolated_precision_is_the_upper_envelope():
    # Ranking: +, -, +, -, +  → (recall, precision) = (1/3, 1), (2/3, 2/3), (1, 3/5).
    y = np.array([1, 0, 1, 0, 1])
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    got = interpolated_precision(y, scores, np.array([0.0, 0.2, 1 / 3, 0.5, 2 / 3, 0.9, 1.0]))
    np.testing.assert_allclose(got, [1.0, 1.0, 1.0, 2 / 3, 2 / 3, 0.6, 0.6])


def test_rankopt_demo_quick_writes_png_json_and_table(tmp_path, capsys):
    assert main(["demo", "--quick", "--output-dir", str(tmp_path / "out")]) == 0
    out, _ = capsys.readouterr()
    for text in ["test AP", "test NDCG", "mean", *METHOD_NAMES, *(f"class {c}" for c in QUICK_CLASSES)]:
        assert text in out
    assert "class 5" not in out

    png = tmp_path / "out" / PLOT_FILE
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    data = json.loads((tmp_path / "out" / JSON_FILE).read_text())
    assert data["columns"] == list(ROW_COLUMNS)
    assert data["classes"] == list(QUICK_CLASSES)
    assert len(data["rows"]) == len(QUICK_CLASSES) * len(METHODS)
    assert all(set(row) == set(ROW_COLUMNS) for row in data["rows"])
    assert set(data["mean"]) == set(METHOD_NAMES) == set(data["per_method"])
    assert [m["loss"] for m in data["methods"]] == ["zero_one", "ap", "ndcg", "auc"]


def test_rankopt_demo_bad_c_is_a_one_line_error(tmp_path, capsys):
    assert main(["demo", "--quick", "--C", "0", "--output-dir", str(tmp_path)]) == 2
    _, err = capsys.readouterr()
    assert err.strip().splitlines() == ["rankopt: error: expected C to be a positive finite number, got 0.0 instead"]
    assert "Traceback" not in err
