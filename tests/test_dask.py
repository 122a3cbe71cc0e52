"""The Dask backend: validation without gathering, products per chunk, out-of-core and distributed fits."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from dask.callbacks import Callback

from rankopt import RankSVM
from rankopt.data import dask_client, open_npy
from rankopt.data.backends import backend_for, check_matrix
from rankopt.data.dask_backend import DaskBackend
from rankopt.exceptions import ConvergenceWarning
from rankopt.features.linear import LinearFeatureMap

TOL = 1e-6
C = 10.0


def _ranking_data(rng, n=600, d=6, dtype=np.float64):
    X = rng.standard_normal((n, d))
    y = X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(n) > 1.0
    return X.astype(dtype), y


def _fit(X, y, **params):
    params = {"C": C, "tol": TOL, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        return RankSVM(**params).fit(X, y)


class _LargestResult(Callback):
    """Records the largest task result of the computations run inside it (local schedulers)."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.n_tasks = 0

    def _posttask(self, key, result, dsk, state, worker_id):
        self.n_tasks += 1
        self.largest = max(self.largest, getattr(result, "nbytes", 0) or 0)

    def __exit__(self, exc_type, *args):
        super().__exit__(exc_type, *args)
        if exc_type is None:
            assert self.n_tasks > 0, "no task ran on a local scheduler: a distributed client is active"


# --- validation --------------------------------------------------------------------------------


def test_dask_arrays_get_the_dask_backend():
    X = da.ones((10, 3), chunks=5)
    assert isinstance(backend_for(X), DaskBackend)


def test_check_matrix_keeps_the_array_lazy_and_chunked(rng):
    X = da.from_array(rng.standard_normal((1000, 8)), chunks=(100, 4))
    with _LargestResult() as seen:
        checked = check_matrix(X)
    assert isinstance(checked, da.Array) and checked.chunks == X.chunks
    assert seen.largest <= 100 * 4 * 8  # one chunk at most, never the array


def test_integer_arrays_are_cast_lazily():
    X = check_matrix(da.ones((6, 2), chunks=3, dtype=np.int32))
    assert isinstance(X, da.Array) and X.dtype == np.float64


def test_float32_is_kept():
    assert check_matrix(da.ones((6, 2), chunks=3, dtype=np.float32)).dtype == np.float32


def _unknown_chunks():
    X = da.ones((10, 3), chunks=5)
    return X[X[:, 0] > 0]


def _mixed_dtypes():
    return da.ones((10, 3), chunks=5, dtype=np.float32).map_blocks(lambda b: b.astype(np.float64), dtype=np.float32)


def _non_finite():
    X = np.ones((10, 3))
    X[7, 2] = np.inf
    return da.from_array(X, chunks=5)


@pytest.mark.parametrize(
    "make, fragments",
    [
        (_unknown_chunks, ["unknown chunk sizes", "compute_chunk_sizes"]),
        (_mixed_dtypes, ["mixed dtypes", "chunk (0, 0)", "float64", "X's dtype float32"]),
        (_non_finite, ["finite", "chunk (1, 0)"]),
        (lambda: da.ones((10, 3), chunks=5).map_blocks(sp.coo_matrix), ["no backend", "coo_matrix"]),
        (lambda: da.ones((10, 3), chunks=5, dtype=complex), ["complex"]),
        (lambda: da.ones(10, chunks=5), ["2-D"]),
        (lambda: da.ones((0, 3), chunks=5), ["non-empty"]),
        (lambda: da.ones((10, 3), chunks=5, dtype="datetime64[s]"), ["real numbers"]),
    ],
    ids=["unknown-chunks", "mixed-dtypes", "non-finite", "coo-chunks", "complex", "1-D", "empty", "datetime"],
)
def test_bad_dask_arrays_are_named(make, fragments):
    with pytest.raises(ValueError) as excinfo:
        check_matrix(make())
    for fragment in fragments:
        assert fragment in str(excinfo.value)


def test_fit_reports_bad_dask_input(rng):
    _, y = _ranking_data(rng, n=10)
    with pytest.raises(ValueError, match="mixed dtypes"):
        RankSVM().fit(_mixed_dtypes(), y)


# --- products ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chunk_type", ["dense", "csr"])
def test_products_match_in_memory(rng, dtype, chunk_type):
    X = rng.standard_normal((500, 9)).astype(dtype)
    X[rng.random(X.shape) < 0.6] = 0
    Xd = da.from_array(X, chunks=(120, 4))  # column chunks too
    if chunk_type == "csr":
        Xd = Xd.map_blocks(sp.csr_matrix, meta=sp.csr_matrix((0, 0), dtype=dtype))
    w, coef = rng.standard_normal(9), rng.standard_normal(500)
    fmap = LinearFeatureMap()
    scores = fmap.scores(Xd, w)
    assert isinstance(scores, np.ndarray) and scores.dtype == dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(scores, fmap.scores(X, w), rtol=rtol, atol=rtol)
    combined = fmap.combine(Xd, coef)
    assert isinstance(combined, np.ndarray) and combined.dtype == np.float64
    np.testing.assert_allclose(combined, fmap.combine(X, coef), rtol=rtol, atol=rtol)


def test_combine_checks_the_coefficient_count():
    with pytest.raises(ValueError, match="one coefficient per row"):
        DaskBackend().combine(da.ones((6, 2), chunks=3), np.ones(5))


# --- fitting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["ap", "ndcg", "zero_one"])
def test_fit_on_dask_matches_numpy_without_gathering_the_data(rng, loss):
    X, y = _ranking_data(rng)
    reference = _fit(X, y, loss=loss)
    Xd = da.from_array(X, chunks=(100, 3))
    with _LargestResult() as seen:
        model = _fit(Xd, da.from_array(y, chunks=100), loss=loss)
    np.testing.assert_allclose(model.coef_, reference.coef_, atol=1e-9)
    assert model.n_iter_ == reference.n_iter_
    # The largest thing any task produced: the N scores (or a chunk), never X.
    assert seen.largest <= max(X.shape[0] * 8, 100 * 3 * 8) < X.nbytes
    np.testing.assert_allclose(model.decision_function(Xd), reference.decision_function(X), atol=1e-9)


def test_float32_sparse_chunks(rng):
    X, y = _ranking_data(rng, dtype=np.float32)
    X[np.abs(X) < 0.7] = 0
    Xd = da.from_array(X, chunks=(150, 6)).map_blocks(sp.csr_matrix, meta=sp.csr_matrix((0, 0), dtype=np.float32))
    model, reference = _fit(Xd, y), _fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(model.coef_, reference.coef_, atol=np.sqrt(2 * C * TOL))
    assert model.decision_function(Xd).dtype == np.float32


def test_approx_on_dask(rng):
    X, y = _ranking_data(rng)
    model, reference = _fit(da.from_array(X, chunks=(100, 6)), y, approx=50), _fit(X, y, approx=50)
    np.testing.assert_allclose(model.coef_, reference.coef_, atol=1e-9)
    assert model.n_hard_constraints_ == reference.n_hard_constraints_


# --- the other estimators ----------------------------------------------------------------------


def _stacked_bags(rng, n_bags=16, d=4):
    sizes = rng.integers(2, 5, size=n_bags)
    ids = np.repeat(np.arange(n_bags), sizes)
    X = rng.standard_normal((ids.size, d))
    y = np.arange(n_bags) % 2
    for bag in np.flatnonzero(y):
        X[np.flatnonzero(ids == bag)[0], 0] += 3.0
    return X, y[ids], ids


@pytest.mark.parametrize("name", ["LatentAPSVM", "LatentSVM"])
def test_latent_models_on_dask(rng, name):
    import rankopt

    X, y, ids = _stacked_bags(rng)
    cls = getattr(rankopt, name)
    reference = cls(n_init=1, random_state=0).fit(X, y, bags=ids)
    Xd = da.from_array(X, chunks=(12, 4))
    with _LargestResult() as seen:
        model = cls(n_init=1, random_state=0).fit(Xd, y, bags=ids)
    np.testing.assert_allclose(model.coef_, reference.coef_, atol=1e-9)
    assert seen.largest < X.nbytes
    np.testing.assert_allclose(
        model.decision_function(Xd, bags=ids), reference.decision_function(X, bags=ids), atol=1e-9
    )


@pytest.mark.parametrize(
    "make", [lambda X: X.astype(np.float32), lambda X: da.from_array(X, chunks=(10, 2))], ids=["float32", "dask"]
)
def test_hob_svm_on_other_backends(rng, make):
    from rankopt import HOBSVM

    groups = rng.integers(0, 6, 40)
    y = (rng.uniform(size=6) < 0.4)[groups] ^ (rng.uniform(size=40) < 0.1)
    y[:2] = [True, False]
    X = rng.normal(size=(40, 3)) + 0.6 * y[:, None] * (np.arange(3) == 0)
    reference = HOBSVM(C=10.0, tol=TOL).fit(X, y, groups=groups)
    model = HOBSVM(C=10.0, tol=TOL).fit(make(X), y, groups=groups)
    np.testing.assert_allclose(model.coef_, reference.coef_, atol=np.sqrt(2 * 10.0 * TOL))


# --- out of core, on a distributed cluster -----------------------------------------------------


@pytest.fixture(scope="module")
def client():
    with dask_client(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as client:
        yield client


@pytest.fixture
def on_disk(tmp_path, rng):
    X, y = _ranking_data(rng, n=800)
    np.save(tmp_path / "x.npy", X)
    da.from_array(X, chunks=(150, 6)).to_zarr(str(tmp_path / "x.zarr"))
    return X, y, tmp_path


def test_distributed_fit_on_disk_matches_in_memory(client, on_disk):
    X, y, path = on_disk
    reference = _fit(X, y, tol=1e-4)
    for Xd in (da.from_zarr(str(path / "x.zarr")), open_npy(path / "x.npy", chunk_rows=150)):
        assert Xd.dtype == np.float64 and Xd.numblocks == (6, 1)
        model = _fit(Xd, y, tol=1e-4)
        np.testing.assert_allclose(model.coef_, reference.coef_, atol=1e-9)
        np.testing.assert_allclose(model.decision_function(Xd), reference.decision_function(X), atol=1e-9)
    assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.workers)) == 1


def test_coefficients_are_scattered_not_put_in_the_graph(client):
    import pickle

    from rankopt.data.dask_backend import _active_client, _rows_to_workers

    assert _active_client() is client
    values = np.arange(40_000.0)
    pieces = _rows_to_workers(values, (10_000,) * 4)
    assert pieces.chunks == ((10_000,) * 4,)
    assert len(pickle.dumps(dict(pieces.__dask_graph__()))) < values.nbytes / 10
    np.testing.assert_array_equal(pieces.compute(), values)
    with dask.config.set(scheduler="threads"):  # the client is not the active scheduler then
        assert _active_client() is None


def test_open_npy_graph_holds_the_path_not_the_data(on_disk):
    import pickle

    X, _, path = on_disk
    Xd = open_npy(path / "x.npy", chunk_rows=100)
    assert len(pickle.dumps(dict(Xd.__dask_graph__()))) < X.nbytes / 4
    np.testing.assert_array_equal(Xd.compute(), X)
    np.save(path / "v.npy", np.ones(3))
    with pytest.raises(ValueError, match="2-D"):
        open_npy(path / "v.npy")


def test_scheduler_at_an_address(rng):
    import distributed

    X, y = _ranking_data(rng, n=300)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=":0"
    ) as cluster:
        with dask_client(cluster.scheduler_address) as client:
            assert client.scheduler.address == cluster.scheduler_address
            model = _fit(da.from_array(X, chunks=(100, 6)), y)
    np.testing.assert_allclose(model.coef_, _fit(X, y).coef_, atol=1e-9)


def test_unreachable_scheduler_is_a_clear_error():
    import distributed

    before = dask.config.get("scheduler", None)
    with pytest.raises(ConnectionError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        dask_client("tcp://127.0.0.1:9", timeout=0.5)
    # The failed attempt left no half-made default client behind: Dask's default scheduler still works.
    assert dask.config.get("scheduler", None) == before
    if before is None:
        with pytest.raises(ValueError):
            distributed.default_client()
        assert da.ones(3, chunks=2).sum().compute() == 3


@pytest.mark.parametrize("address, fragment", [("127.0.0.1", "port"), ("nonsense://host:1", "scheme")])
def test_malformed_scheduler_address(address, fragment):
    before = dask.config.get("scheduler", None)
    with pytest.raises(ValueError, match=fragment):
        dask_client(address, timeout=0.5)
    assert dask.config.get("scheduler", None) == before


def test_cluster_options_need_a_local_cluster():
    with pytest.raises(ValueError, match="no LocalCluster options"):
        dask_client("tcp://127.0.0.1:9", n_workers=2)


def test_a_dask_frame_with_a_bool_column_fits_as_the_pandas_frame_does():
    """Issue 61, point 8c: a Dask DataFrame with a bool column was refused as "got dtype object" (its values
    were an object array); the same pandas frame fits.  A column of strings is named."""
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    from rankopt import RankSVM

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=200), "b": rng.normal(size=200) > 0, "c": rng.integers(0, 5, 200)})
    y = (frame["a"] + rng.normal(size=200) > 0.5).astype(int).to_numpy()
    in_memory = RankSVM().fit(frame, y)
    chunked = RankSVM().fit(dd.from_pandas(frame, npartitions=2), dd.from_pandas(pd.Series(y), npartitions=2))
    np.testing.assert_allclose(chunked.coef_, in_memory.coef_, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="got column 's' of dtype"):
        RankSVM().fit(dd.from_pandas(frame.assign(s=["x"] * 200), npartitions=2), y)
