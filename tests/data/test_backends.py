"""In-memory data backends: dispatch by type, the two products, float32 end to end, chunked checks."""

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import rankopt._validation as validation
import rankopt.data.backends as backends
from rankopt import RankSVM
from rankopt._validation import all_finite
from rankopt.data.backends import NumpyBackend, SparseBackend, backend_for, check_matrix, register_backend
from rankopt.exceptions import ConvergenceWarning
from rankopt.features.linear import LinearFeatureMap


def _data(rng, n=300, d=7, dtype=np.float64, density=None):
    if density is None:
        X = rng.standard_normal((n, d)).astype(dtype)
    else:
        X = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=dtype)
        X.data[:] = rng.standard_normal(X.nnz)
    return X


def _ranking_data(rng, n=400, d=6, dtype=np.float64):
    X = rng.standard_normal((n, d))
    y = X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(n) > 1.0
    return X.astype(dtype), y


# --- dispatch ----------------------------------------------------------------------------------


def test_backend_is_chosen_by_type(tmp_path, rng):
    X = _data(rng)
    np.save(tmp_path / "x.npy", X)
    assert isinstance(backend_for(X), NumpyBackend)
    assert isinstance(backend_for(np.load(tmp_path / "x.npy", mmap_mode="r")), NumpyBackend)  # a subclass
    assert isinstance(backend_for(sp.csr_matrix(X)), SparseBackend)
    assert isinstance(backend_for(sp.csr_array(X)), SparseBackend)


@pytest.mark.parametrize(
    "X", [sp.csc_matrix(np.eye(3)), [[1.0, 2.0]], sp.coo_array(np.eye(2))], ids=["csc", "list", "coo"]
)
def test_unsupported_types_are_named(X):
    with pytest.raises(ValueError, match=f"got .*{type(X).__qualname__} instead"):
        backend_for(X)


def test_register_backend_needs_a_backend():
    class Fake:
        pass

    with pytest.raises(ValueError, match="expected a DataBackend instance"):
        register_backend(Fake, object())


# --- the two products --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("density", [None, 0.3], ids=["dense", "csr"])
def test_products_match_float64_reference(rng, dtype, density):
    X = _data(rng, dtype=dtype, density=density)
    dense = X.toarray() if sp.issparse(X) else X
    reference = dense.astype(np.float64)
    w, coef = rng.standard_normal(X.shape[1]), rng.standard_normal(X.shape[0])
    fmap = LinearFeatureMap()
    scores = fmap.scores(X, w)
    combined = fmap.combine(X, coef)
    assert scores.dtype == dtype and scores.shape == (X.shape[0],)
    assert combined.dtype == np.float64 and combined.shape == (X.shape[1],)
    # Scores are computed with w rounded to the data's type, as documented.
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(scores, reference @ w.astype(dtype).astype(np.float64), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(combined, reference.T @ coef.astype(dtype).astype(np.float64), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("density", [None, 0.5], ids=["dense", "csr"])
def test_float32_combination_accumulates_in_float64(rng, monkeypatch, density):
    """Blocks of rows summed in float64: a float32 running sum of 2·10⁵ ones would stall at 2²⁴ first."""
    monkeypatch.setattr(backends, "_BLOCK_ELEMENTS", 64)  # many blocks on small data
    X = _data(rng, n=2003, d=5, dtype=np.float32, density=density)
    coef = rng.standard_normal(X.shape[0])
    dense = X.toarray() if sp.issparse(X) else X
    exact = dense.astype(np.float64).T @ coef.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(backend_for(X).combine(X, coef), exact, rtol=1e-6, atol=1e-6)

    # With one row per block the sum is exact in float64, where float32 would stall at 2²⁴.
    monkeypatch.setattr(backends, "_BLOCK_ELEMENTS", 1)
    column = np.ones((1001, 1), dtype=np.float32)
    column[0] = 2.0**24
    assert backend_for(column).combine(column, np.ones(1001))[0] == 2.0**24 + 1000


# --- validation without big temporaries --------------------------------------------------------


def test_all_finite_is_checked_block_by_block(monkeypatch):
    monkeypatch.setattr(validation, "_FINITE_BLOCK", 10)
    X = np.zeros((101, 3), dtype=np.float32)
    assert all_finite(X)
    for value in (np.nan, np.inf, -np.inf):
        X[100, 2] = value  # in the last block
        assert not all_finite(X)
        assert not all_finite(X.T)  # a strided view
        assert not all_finite(X.ravel())
    X[100, 2] = 0
    assert all_finite(np.asfortranarray(X))


def test_check_matrix_allocates_no_n_by_d_temporary(rng):
    X = rng.standard_normal((8000, 500), dtype=np.float32)  # 16 MB: an n × d boolean would be 4 MB
    tracemalloc.start()
    try:
        checked = check_matrix(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert checked is X
    assert peak < 2 * validation._FINITE_BLOCK < X.size


def test_check_matrix_still_rejects_non_finite_in_large_arrays(rng):
    X = rng.standard_normal((3 * validation._FINITE_BLOCK // 10 + 7, 10))
    X[-1, -1] = np.nan
    with pytest.raises(ValueError, match="expected X to be finite"):
        check_matrix(X)
    S = sp.csr_matrix(X)
    with pytest.raises(ValueError, match="expected X to be finite"):
        check_matrix(S)


# --- estimators on every in-memory backend -----------------------------------------------------


def _fit(X, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        return RankSVM(C=10.0, tol=1e-6, **params).fit(X, y)


@pytest.mark.parametrize("loss", ["ap", "auc", "zero_one"])
def test_float32_and_sparse_reach_the_float64_solution(rng, loss):
    X, y = _ranking_data(rng)
    reference = _fit(X, y, loss=loss)
    for data in (X.astype(np.float32), sp.csr_matrix(X), sp.csr_matrix(X.astype(np.float32))):
        model = _fit(data, y, loss=loss)
        # Exact to the solver's tolerance: ½‖w − w*‖² ≤ primal gap ≤ C·tol.
        np.testing.assert_allclose(model.coef_, reference.coef_, atol=np.sqrt(2 * 10.0 * 1e-6))
        scores = model.decision_function(data)
        assert scores.dtype == data.dtype


def test_memory_mapped_data_trains_like_in_memory(tmp_path, rng):
    X, y = _ranking_data(rng, dtype=np.float32)
    np.save(tmp_path / "x.npy", X)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert check_matrix(mapped) is not None
    np.testing.assert_array_equal(_fit(mapped, y).coef_, _fit(X, y).coef_)
