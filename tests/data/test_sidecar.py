"""The Python reader takes LightGBM's ``.query`` sidecar as the CLI does (issue 38, point 16)."""

from __future__ import annotations

import gzip
import logging
import shutil

import numpy as np
import pytest

from rankopt.data.loaders import read_svmlight

LINES = ["2 1:0.5 2:1", "0 1:0.1 2:0.2", "1 1:0.3 2:0.1", "0 1:0.9 2:0.4", "1 1:0.2 2:0.7"]


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "rank.train"
    path.write_text("\n".join(LINES) + "\n")
    return path


def test_the_reader_takes_the_sidecars_queries_and_says_so(data_file, caplog):
    (data_file.parent / "rank.train.query").write_text("2\n3\n")
    with caplog.at_level(logging.INFO, logger="rankopt.data.loaders"):
        data = read_svmlight(data_file)
    np.testing.assert_array_equal(data.qid, [0, 0, 1, 1, 1])
    assert data.query_file == str(data_file) + ".query"
    assert "2 queries from LightGBM's group sizes" in caplog.text


def test_without_a_sidecar_there_are_no_queries(data_file):
    data = read_svmlight(data_file)
    assert data.qid is None and data.query_file is None


def test_a_gzipped_files_sidecar_may_be_named_after_the_uncompressed_file(data_file):
    gz = data_file.parent / "rank.train.gz"
    with open(data_file, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    (data_file.parent / "rank.train.query").write_text("3\n2\n")
    data = read_svmlight(gz)
    np.testing.assert_array_equal(data.qid, [0, 0, 0, 1, 1])


def test_qid_on_the_lines_wins_over_the_sidecar(tmp_path, caplog):
    path = tmp_path / "q.txt"
    path.write_text("1 qid:7 1:1\n0 qid:7 1:2\n1 qid:9 1:3\n")
    (tmp_path / "q.txt.query").write_text("1\n2\n")
    with caplog.at_level(logging.INFO, logger="rankopt.data.loaders"):
        data = read_svmlight(path)
    np.testing.assert_array_equal(data.qid, [7, 7, 9])
    assert "is ignored" in caplog.text


def test_the_sidecar_can_be_turned_off_and_a_bad_one_is_refused(data_file):
    (data_file.parent / "rank.train.query").write_text("2\n2\n")
    assert read_svmlight(data_file, queries_from_sidecar=False).qid is None
    with pytest.raises(ValueError, match="group sizes"):
        read_svmlight(data_file)
    (data_file.parent / "rank.train.query").write_text("2\nx\n")
    with pytest.raises(ValueError, match="expected a positive group size on every line"):
        read_svmlight(data_file)
