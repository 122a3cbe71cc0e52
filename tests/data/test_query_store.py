"""Issue 51: query stores on disk (LETOR files read in bounded memory, every query whole in one partition)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("zarr")
pytest.importorskip("dask.array")

from rankopt import RankSVM  # noqa: E402
from rankopt.data import (  # noqa: E402
    QueryStoreWriter,
    is_query_store,
    letor,
    open_query_store,
    read_svmlight,
    write_query_store,
    write_svmlight,
)


@pytest.fixture
def letor_file(tmp_path, rng):
    sizes = rng.integers(1, 40, 150)
    qid = np.repeat(np.arange(sizes.size) * 7 + 3, sizes)
    X = rng.normal(size=(qid.size, 5))
    X[:, 2] = 0.0  # a column that is never written
    y = rng.integers(0, 5, qid.size)
    path = tmp_path / "train.txt"
    write_svmlight(path, X, y, qid=qid)
    return path


def test_a_file_read_in_small_blocks_is_the_file(letor_file, tmp_path, monkeypatch):
    monkeypatch.setattr(letor, "BLOCK_BYTES", 2048)  # many blocks, queries cut between them
    info = write_query_store(letor_file, tmp_path / "s.zarr", partition_rows=500, dtype=np.float64, progress=False)
    data = read_svmlight(letor_file)
    X, y, qid = open_query_store(tmp_path / "s.zarr")
    np.testing.assert_array_equal(X.compute(), data.X.toarray())
    np.testing.assert_array_equal(y.compute(), data.y)
    np.testing.assert_array_equal(qid.compute(), data.qid)
    assert (info.n_rows, info.n_features, info.n_queries) == (data.X.shape[0], 5, 150)
    ids = qid.compute()
    starts = np.cumsum(X.chunks[0])[:-1]
    assert X.chunks[0] == y.chunks[0] == qid.chunks[0] and len(starts) >= 3
    assert np.all(ids[starts] != ids[starts - 1])  # every partition starts a query
    assert all(size >= 500 for size in X.chunks[0][:-1])


def test_a_store_trains_as_the_file_does(letor_file, tmp_path):
    write_query_store(letor_file, tmp_path / "s.zarr", partition_rows=400, dtype=np.float64, progress=False)
    data = read_svmlight(letor_file)
    in_memory = RankSVM(loss="ndcg_graded", C=10.0).fit(data.X.toarray(), data.y, qid=data.qid)
    chunked = RankSVM(loss="ndcg_graded", C=10.0).fit(
        *open_query_store(tmp_path / "s.zarr")[:2], qid=open_query_store(tmp_path / "s.zarr")[2]
    )
    assert chunked.n_iter_ == in_memory.n_iter_
    np.testing.assert_allclose(chunked.coef_, in_memory.coef_, rtol=0, atol=1e-10 * np.abs(in_memory.coef_).max())


def test_the_writer_refuses_a_query_whose_rows_are_apart(tmp_path):
    with pytest.raises(ValueError, match="expected the rows of each query together, got query id 1 again"):
        with QueryStoreWriter(tmp_path / "s.zarr", 2) as writer:
            writer.append(np.ones((3, 2)), [0, 1, 1], [1, 2, 2])
            writer.append(np.ones((1, 2)), [0], [1])
    with pytest.raises(ValueError, match="got query id 5 again"):
        QueryStoreWriter(tmp_path / "t.zarr", 2).append(np.ones((3, 2)), [0, 1, 1], [5, 6, 5])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda w: w.append(np.ones((2, 3)), [0, 1], [1, 1]), "expected rows of 2 features"),
        (lambda w: w.append(np.ones((2, 2)), [0], [1, 1]), "expected one label and one query id per row"),
        (lambda w: w.append(np.array([[1.0, np.nan], [0, 0]]), [0, 1], [1, 1]), "expected finite features"),
        (lambda w: w.append(np.ones((2, 2)), [0, 1], [1.5, 1.5]), "expected integer query ids"),
        (lambda w: w.close(), "expected some rows"),
    ],
)
def test_the_writer_refuses_bad_rows(tmp_path, make, message):
    with pytest.raises(ValueError, match=message):
        make(QueryStoreWriter(tmp_path / "s.zarr", 2))


def test_files_and_paths_it_refuses(tmp_path, rng):
    plain = tmp_path / "plain.txt"
    write_svmlight(plain, rng.normal(size=(4, 2)), [0, 1, 0, 1])
    with pytest.raises(ValueError, match="expected qid: on every line"):
        write_query_store(plain, tmp_path / "a.zarr", progress=False)
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError, match="exists: pass overwrite=True"):
        QueryStoreWriter(tmp_path / "exists", 2)
    assert not is_query_store(tmp_path / "exists") and not is_query_store(plain)
    with pytest.raises(ValueError, match="expected a query store written by rankopt.data.write_query_store"):
        open_query_store(tmp_path / "exists")
    with pytest.raises(ValueError, match="expected dtype float32 or float64"):
        QueryStoreWriter(tmp_path / "b.zarr", 2, dtype=np.int32)


def test_the_command_line_writes_a_store_and_trains_on_it(letor_file, tmp_path, rankopt_command):
    rankopt = rankopt_command
    done = rankopt("store", letor_file, tmp_path / "s.zarr", "--partition-rows", 600)
    assert done.returncode == 0, done.stderr
    assert "rows in 150 queries x 5 features" in done.stdout
    done = rankopt("train", tmp_path / "s.zarr", tmp_path / "m.npz", "--loss", "pairwise", "--C", "3")
    assert done.returncode == 0, done.stderr
    assert "on the query store" in done.stdout and "150 queries" in done.stdout and "converged" in done.stdout
    assert rankopt("evaluate", tmp_path / "m.npz", letor_file).returncode == 0
    again = rankopt("store", letor_file, tmp_path / "s.zarr")
    assert again.returncode == 2 and "which exists" in again.stderr  # a usage error, as the other commands give
