"""Issue 51: a multi-query fit on a Dask X runs its inference on the row chunks, where the data is.

The driver holds O(d) per chunk and never an N-vector; the fit equals the in-memory fit (same iterations,
w to 1e-10 relative) for ap, ndcg_graded, pairwise and a plugin loss; a query split across chunks and bad
labels are refused with the in-memory messages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

da = pytest.importorskip("dask.array")

from rankopt import RankSVM, structured_hinge  # noqa: E402
from rankopt.data import dask_client  # noqa: E402
from rankopt.data.dask_backend import DaskBackend, RowChunks  # noqa: E402

#: The losses of the issue: two binary (thresholded grades), a graded one, a pairwise one and a plugin's.
LOSSES = ["ap", "ndcg_graded", "pairwise", "rbp_graded"]


def click_like(rng, n_queries=90, d=6, longest=40, dtype=np.float64):
    """Queries of Zipf-like lengths, rows sorted by qid, grades 0–4 from a hidden linear model plus noise."""
    sizes = np.minimum(rng.zipf(1.6, n_queries) + 1, longest)
    qid = np.repeat(rng.permutation(10 * n_queries)[:n_queries].cumsum(), sizes)  # increasing, with gaps
    X = rng.normal(size=(qid.size, d)).astype(dtype)
    latent = X @ rng.normal(size=d) + rng.normal(size=qid.size)
    y = np.digitize(latent, np.quantile(latent, [0.4, 0.7, 0.85, 0.95]))
    return X, y, qid


def query_chunks(qid, n_chunks):
    """Row chunks that end where queries do, about equal."""
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
    cuts = starts[np.searchsorted(starts, np.linspace(0, qid.size, n_chunks + 1)[1:-1])]
    return tuple(int(c) for c in np.diff(np.r_[0, np.unique(cuts), qid.size]))


def on_dask(X, y, qid, n_chunks=4):
    chunks = query_chunks(qid, n_chunks)
    return (
        da.from_array(X, chunks=(chunks, X.shape[1])),
        da.from_array(y, chunks=(chunks,)),
        da.from_array(qid, chunks=(chunks,)),
    )


def assert_same_fit(in_memory, chunked, rtol=1e-10):
    assert chunked.n_iter_ == in_memory.n_iter_
    assert chunked.converged_ and in_memory.converged_
    scale = np.max(np.abs(in_memory.coef_))
    np.testing.assert_allclose(chunked.coef_, in_memory.coef_, rtol=0, atol=rtol * scale)
    assert (chunked.n_queries_, chunked.n_queries_used_) == (in_memory.n_queries_, in_memory.n_queries_used_)


@pytest.fixture
def no_gather(monkeypatch):
    """Fail on any product that brings an N-vector to the driver (scores) or sends one (coefficients)."""

    def refuse(*args, **kwargs):
        raise AssertionError("an N-vector crossed to or from the driver")

    monkeypatch.setattr(DaskBackend, "scores", refuse)
    monkeypatch.setattr(DaskBackend, "combine", refuse)


@pytest.mark.parametrize("loss", LOSSES)
def test_the_chunked_fit_is_the_in_memory_fit(rng, loss, no_gather):
    X, y, qid = click_like(rng)
    params = {"loss": loss, "C": 10.0, "tol": 1e-4, "relevant_at": 2}
    in_memory = RankSVM(**params).fit(X, y, qid=qid)
    chunked = RankSVM(**params).fit(*on_dask(X, y, qid)[:2], qid=on_dask(X, y, qid)[2])
    assert_same_fit(in_memory, chunked)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unsorted_queries_within_chunks_and_float32(rng, no_gather, dtype):
    """Rows of a query need not be contiguous within a chunk.  Float32 chunks compute their products in
    float32 per chunk, where the in-memory backend blocks its rows otherwise: the same iterations, and w
    equal to float32's rounding of the planes."""
    X, y, qid = click_like(rng, dtype=dtype)
    chunks = query_chunks(qid, 3)
    # Shuffle the rows within each chunk: queries stay whole within chunks, but not contiguous.
    order = np.concatenate(
        [start + rng.permutation(size) for start, size in zip(np.r_[0, np.cumsum(chunks)[:-1]], chunks, strict=True)]
    )
    X, y, qid = X[order], y[order], qid[order]
    in_memory = RankSVM(loss="ndcg_graded", C=10.0, tol=1e-4).fit(X, y, qid=qid)
    Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
    chunked = RankSVM(loss="ndcg_graded", C=10.0, tol=1e-4).fit(Xd, y, qid=qid)  # NumPy labels are chunked like X
    assert_same_fit(in_memory, chunked, rtol=1e-10 if dtype == np.float64 else 1e-4)


@pytest.mark.filterwarnings("ignore:cutting plane stopped uncertified")  # three iterations: the traffic, not the fit
def test_the_driver_receives_a_d_vector_per_chunk_whatever_the_rows(rng, monkeypatch):
    """The traffic per step is O(d × chunks): four times the rows, the same bytes to the driver."""
    received = {}
    original = RowChunks._settle

    def counting(self, tasks, args):
        results = original(self, tasks, args)
        received.setdefault(self.X.shape[0], []).append(self.received_bytes)
        return results

    monkeypatch.setattr(RowChunks, "_settle", counting)
    per_step = {}
    for n_queries in (60, 240):
        X, y, qid = click_like(np.random.default_rng(3), n_queries=n_queries)
        RankSVM(loss="pairwise", C=1.0, max_iter=3).fit(
            *on_dask(X, y, qid, n_chunks=4)[:2], qid=on_dask(X, y, qid, 4)[2]
        )
        counts = np.diff(received[X.shape[0]])
        per_step[X.shape[0]] = counts.max()
    small, large = sorted(per_step)
    assert large >= 3 * small
    assert per_step[large] <= per_step[small] + 256  # a few bytes of pickled integers may differ
    assert per_step[large] < 4 * 1024  # four chunks, six features: well under a kilobyte each


def test_a_query_split_across_chunks_is_refused(rng):
    X, y, qid = click_like(rng)
    split = (X.shape[0] // 2 + 1, X.shape[0] - X.shape[0] // 2 - 1)
    while qid[split[0] - 1] != qid[split[0]]:  # the cut must fall inside a query
        split = (split[0] + 1, split[1] - 1)
    with pytest.raises(
        ValueError, match=r"expected every query whole within one row chunk .* got query id \d+ in chunks 0 and 1"
    ):
        RankSVM(loss="ap").fit(da.from_array(X, chunks=(split, X.shape[1])), y, qid=qid)


def test_a_query_in_two_distant_chunks_is_refused(rng):
    """Ids not sorted: the chunks' id ranges overlap, and the ids themselves are compared on the chunks."""
    X, y, qid = click_like(rng)
    order = rng.permutation(qid.size)
    X, y, qid = X[order], y[order], qid[order]
    with pytest.raises(ValueError, match=r"got query id \d+ in chunks \d+ and \d+ instead: sort the rows by qid"):
        RankSVM(loss="pairwise").fit(da.from_array(X, chunks=(60, X.shape[1])), y, qid=qid)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda y, qid: (y - 3, qid), "expected y to hold integer relevance grades >= 0"),
        (lambda y, qid: (y + 0.5, qid), "whole numbers|integer relevance grades"),
        (lambda y, qid: (y, qid + 0.5), "qid"),
        (lambda y, qid: (y[:-1], qid), r"expected y to hold one value per row of X"),
        (lambda y, qid: (np.zeros_like(y), qid), "expected some query"),
    ],
)
def test_bad_labels_and_query_ids_get_the_in_memory_messages(rng, change, message):
    X, y, qid = click_like(rng)
    y, qid = change(y, qid)
    chunks = query_chunks(np.asarray(qid if qid.size == X.shape[0] else qid), 3)
    with pytest.raises(ValueError, match=message):
        RankSVM(loss="ndcg_graded").fit(da.from_array(X, chunks=(chunks, X.shape[1])), y, qid=qid)


def test_binary_labels_in_minus_one_and_one_read_across_chunks(rng, no_gather):
    """{−1, 1} labels are read as grades {0, 1} as in memory, even where a chunk holds only −1."""
    X, y, qid = click_like(rng)
    labels = np.where(y >= 2, 1, -1)
    chunks = query_chunks(qid, 3)
    labels[: chunks[0]] = -1
    labels[chunks[0]] = 1  # the first query of chunk 1 keeps its relevant document
    in_memory = RankSVM(loss="ap", C=1.0).fit(X, labels, qid=qid)
    chunked = RankSVM(loss="ap", C=1.0).fit(da.from_array(X, chunks=(chunks, X.shape[1])), labels, qid=qid)
    assert_same_fit(in_memory, chunked)
    mixed = labels.copy()
    mixed[-1] = 2  # −1 beside a grade other than 1, in another chunk
    with pytest.raises(ValueError, match=r"\(or binary labels in \{-1, 1\}\), got -1 instead"):
        RankSVM(loss="ap").fit(da.from_array(X, chunks=(chunks, X.shape[1])), mixed, qid=qid)


@pytest.mark.distributed
def test_two_worker_processes_give_the_in_memory_fit(rng):
    """The CI-sized check of the issue: a LocalCluster of 2 process workers, the four losses."""
    X, y, qid = click_like(rng, n_queries=120)
    Xd, yd, qd = on_dask(X, y, qid, n_chunks=4)
    with dask_client(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"):
        for loss in LOSSES:
            params = {"loss": loss, "C": 10.0, "tol": 1e-4, "relevant_at": 2}
            assert_same_fit(RankSVM(**params).fit(X, y, qid=qid), RankSVM(**params).fit(Xd, yd, qid=qd))


def test_a_dask_dataframe_and_its_columns(rng, no_gather):
    """X a Dask DataFrame, y and qid its Series: the partitions are the chunks."""
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y, qid = click_like(rng)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y, qid=qid)
    chunks = query_chunks(qid, 3)
    divisions = tuple(int(i) for i in np.r_[0, np.cumsum(chunks)[:-1]]) + (len(frame) - 1,)
    ddf = dd.from_pandas(frame, npartitions=1).repartition(divisions=divisions)
    features = [f"f{i}" for i in range(X.shape[1])]
    chunked = RankSVM(loss="ndcg_graded", C=10.0, tol=1e-4).fit(ddf[features], ddf["label"], qid=ddf["qid"])
    in_memory = RankSVM(loss="ndcg_graded", C=10.0, tol=1e-4).fit(X, y, qid=qid)
    assert_same_fit(in_memory, chunked)
    assert list(chunked.feature_names_in_) == features


def test_warm_starts_and_the_solver_table_work_unchanged(rng, no_gather):
    X, y, qid = click_like(rng)
    Xd, yd, qd = on_dask(X, y, qid)
    model = RankSVM(loss="pairwise", C=1.0, tol=1e-4, warm_start=True).fit(Xd, yd, qid=qd)
    model.set_params(C=10.0).fit(Xd, yd, qid=qd)
    cold = RankSVM(loss="pairwise", C=10.0, tol=1e-4).fit(X, y, qid=qid)
    assert model.converged_
    # Both certified to C·tol: ½‖w − w*‖² ≤ C·tol each.
    assert np.linalg.norm(model.coef_ - cold.coef_) <= 2 * np.sqrt(2 * 10.0 * 1e-4)
    with pytest.raises(ValueError, match="expected NumPy or CSR data with solver='bcfw'"):
        RankSVM(loss="pairwise", solver="bcfw").fit(Xd, yd, qid=qd)


def test_an_empty_chunk_and_a_chunk_with_nothing_to_order(rng, no_gather):
    """Dask allows empty chunks; a chunk whose queries all hold one grade contributes nothing."""
    X, y, qid = click_like(rng)
    chunks = query_chunks(qid, 3)
    y[: chunks[0]] = 0  # every query of the first chunk: one grade
    with_empty = (chunks[0], 0, chunks[1], chunks[2])
    in_memory = RankSVM(loss="pairwise", C=10.0, tol=1e-4).fit(X, y, qid=qid)
    chunked = RankSVM(loss="pairwise", C=10.0, tol=1e-4).fit(
        da.from_array(X, chunks=(with_empty, X.shape[1])), y, qid=qid
    )
    assert_same_fit(in_memory, chunked)
    assert chunked.n_queries_used_ < chunked.n_queries_


def _in_process_client():
    """A dask.distributed client in this process: NumPy labels and query ids are scattered to its worker."""
    return dask_client(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0")


def test_an_empty_chunk_with_numpy_labels_on_a_client():
    """Issue 61, point 8a: an empty row chunk with NumPy y and qid on a dask.distributed client raised
    IndexError in RowChunks.open (the scattered pieces left the empty chunk out, X's chunks did not)."""
    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(40), 5)
    X, y = rng.normal(size=(qid.size, 4)), rng.integers(0, 3, qid.size)
    with _in_process_client():
        chunked = RankSVM().fit(da.from_array(X, chunks=((50, 50, 0, 50, 50), 4)), y, qid=qid)
    assert chunked.n_queries_ == 40
    np.testing.assert_allclose(chunked.coef_, RankSVM().fit(X, y, qid=qid).coef_, rtol=1e-9, atol=1e-12)


def test_scattered_labels_lost_with_a_worker_are_named_with_the_way_out(monkeypatch):
    """Issue 61, point 8b: a worker killed mid-fit with NumPy y and qid (scattered) ended in "FutureCancelledError
    … already forgotten"; Dask y and qid recover.  The scattered pieces cannot be computed again: the fit now
    says so, and how to pass them.  (The loss of a worker is simulated by cancelling the scattered pieces.)"""
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(40), 5)
    X, y = rng.normal(size=(qid.size, 4)), rng.integers(0, 3, qid.size)
    scattered = []
    real_scatter, real_map = distributed.Client.scatter, RowChunks.map

    def recording_scatter(self, *args, **kwargs):
        futures = real_scatter(self, *args, **kwargs)
        scattered.extend(futures)
        return futures

    def losing_map(self, *args, **kwargs):
        distributed.get_client().cancel(scattered)  # what a lost worker does to the pieces it held
        return real_map(self, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "scatter", recording_scatter)
    monkeypatch.setattr(RowChunks, "map", losing_map)
    with _in_process_client(), pytest.raises(RuntimeError, match="holding a piece of y and qid was lost") as caught:
        RankSVM().fit(da.from_array(X, chunks=(50, 4)), y, qid=qid)
    assert scattered and "da.from_array(y, chunks=(X.chunks[0],))" in str(caught.value)


@pytest.mark.parametrize("seed, loss", [(0, "ndcg"), (1, "auc"), (2, "pairwise")])
def test_the_chunked_fit_is_as_optimal_as_the_in_memory_fit(seed, loss):
    """Issue 61, point 5b: the chunked fit need not reach the in-memory fit's w.  Where the inference ties at
    the optimum (the plane cache's cuts leave it there), last-bit differences of the chunks' sums pick another
    maximiser, and w differs: in a sweep of 96 fit pairs (6 seeds × 8 losses × C in {1, 10}, 4 chunks), 7
    differed by up to 6.6 % (these seeds and losses among them).  The guarantee is the certificate's: each w's
    objective, evaluated exactly by one function, is within C·tol of the best lower bound either fit proved
    (0.995 C·tol at worst in that sweep), so the two objectives agree to C·tol."""
    rng = np.random.default_rng(seed)
    X, y, qid = click_like(rng, n_queries=120)
    for C in (1.0, 10.0):
        in_memory = RankSVM(loss=loss, C=C, relevant_at=2).fit(X, y, qid=qid)
        chunked = RankSVM(loss=loss, C=C, relevant_at=2).fit(*on_dask(X, y, qid)[:2], qid=on_dask(X, y, qid)[2])
        assert in_memory.converged_ and chunked.converged_
        assert (chunked.n_queries_, chunked.n_queries_used_) == (in_memory.n_queries_, in_memory.n_queries_used_)
        lower = max(record.dual_objective for model in (in_memory, chunked) for record in model.history_)
        for model in (in_memory, chunked):
            per_query, _ = structured_hinge(X @ model.coef_, y, qid=qid, loss=loss, relevant_at=2, reduction="none")
            objective = 0.5 * model.coef_ @ model.coef_ + C * per_query.sum() / model.n_queries_used_
            assert objective - lower <= C * model.tol * (1 + 1e-9)
    guide = (Path(__file__).resolve().parents[1] / "docs" / "scale.md").read_text(encoding="utf-8")
    assert "The guarantee is the\n  certificate's" in guide and "It is not guaranteed" in guide
