"""Data backends: the two products the engine needs, for each kind of array.

Per cutting-plane iteration the engine touches the training data only
through the scores s = X w and the joint feature Xᵀ c.
A :class:`DataBackend` computes those two products for one kind of array;
:func:`backend_for` picks it from the array's type (``functools.singledispatch``,
so subclasses such as ``np.memmap`` share their base's backend):

=====================================  =====================================================
``numpy.ndarray`` (incl. memmaps)      :class:`NumpyBackend`
``scipy.sparse`` CSR matrix or array   :class:`SparseBackend`
``dask.array.Array``                   :class:`rankopt.data.dask_backend.DaskBackend`
                                       (dense or CSR chunks, out of core, distributed)
=====================================  =====================================================

Precision: scores keep the data's float type (float32 data gives float32
scores, which the inference kernels take as they are); the joint feature is
always float64.  For float32 data it is accumulated in float64 over blocks of
rows, so summing 10⁷ rows does not lose float32's few digits — and no
float64 copy of the data is ever made.

The Dask backend is registered lazily, when a Dask array is first seen: a
Dask array can only exist once ``dask.array`` is imported, so rankopt never
imports Dask itself unless it is given Dask data.  Other array types can be
added with :func:`register_backend`.
"""

from __future__ import annotations

import abc
import functools
import importlib
import sys
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from rankopt._validation import all_finite, check_in_memory_matrix

__all__ = [
    "DataBackend",
    "NumpyBackend",
    "SparseBackend",
    "backend_for",
    "check_matrix",
    "column_max_abs",
    "dask_array_type",
    "register_backend",
]

#: Rows per block when float32 data is reduced in float64 (about 1 MiB of float32 per block at
#: d = 256): small enough for the block's temporaries to stay in cache, large enough for BLAS.
_BLOCK_ELEMENTS = 1 << 18


class DataBackend(abc.ABC):
    """The scores X w and the joint feature Xᵀ c for one kind of array."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def scores(self, X, w: np.ndarray) -> np.ndarray:
        """X w as a NumPy array of shape (n_samples,), in X's float type."""

    @abc.abstractmethod
    def combine(self, X, coef: np.ndarray) -> np.ndarray:
        """Xᵀ coef as a float64 NumPy array of shape (n_features,)."""

    def combine_groups(self, X, coef: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray | None:
        """Σ_{i in group g} coef_i x_i for every group g, float64 of shape (n_groups, n_features); None when
        this backend does not compute it (rows with group < 0 belong to none).

        The engine's per-query plane cache uses it (one product, like :meth:`combine`).
        """
        return None

    @abc.abstractmethod
    def all_finite(self, X) -> bool:
        """Whether every stored entry of X is finite (without an n × d temporary)."""

    def score_spread(self, X, w) -> tuple[float, float]:
        """(max − min, max |·|) of the scores X·w, without gathering them where X is elsewhere."""
        scores = np.asarray(self.scores(X, w), dtype=np.float64)
        return float(np.ptp(scores)), float(np.max(np.abs(scores), initial=0.0))

    def row_chunks(self, X, columns: dict):
        """X's row chunks with per-row ``columns`` (name → values) for an inference where the chunks are
        (:class:`~rankopt.data.dask_backend.RowChunks`); None for data in this process (the default)."""
        return None

    def validate(self, X, name: str = "X"):
        """X checked (2-D, non-empty, real, finite) and converted to a type this backend computes on.

        The default suits arrays in memory (:func:`rankopt._validation.check_in_memory_matrix`);
        a backend for arrays that live elsewhere overrides it to check them where they are.
        """
        return check_in_memory_matrix(X, name)


#: The alignment of the arrays NumPy allocates for data (its sums and BLAS round by alignment).
_ALIGNMENT = 64


def aligned(values: np.ndarray) -> np.ndarray:
    """``values``, copied to a 64-byte-aligned C-contiguous buffer unless it is one already.

    An array unpickled in another process (a Dask block, a worker's state) may start at any address; NumPy's
    and BLAS's vectorised sums peel elements until an aligned address, so the same numbers summed there
    round otherwise than in memory.  Realigned, a computation on the rows gives the in-memory bits.
    """
    if values.flags.c_contiguous and values.ctypes.data % _ALIGNMENT == 0:
        return values
    buffer = np.empty(values.nbytes + _ALIGNMENT, dtype=np.uint8)
    start = -buffer.ctypes.data % _ALIGNMENT
    copy = buffer[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    copy[...] = values
    return copy


def _rows_per_block(n_features: int) -> int:
    return max(1, _BLOCK_ELEMENTS // max(1, n_features))


def _blocked_combine(X, coef: np.ndarray) -> np.ndarray:
    """Xᵀ coef: one product in X's float type per block of rows, summed in float64.

    Float64 data is one product (BLAS accumulates in float64 already).
    """
    coef = np.asarray(coef)
    if X.dtype == np.float64:
        return np.asarray(X.T @ coef.astype(np.float64, copy=False), dtype=np.float64).ravel()
    n, d = X.shape
    total = np.zeros(d, dtype=np.float64)
    step = _rows_per_block(d)
    for start in range(0, n, step):
        stop = min(n, start + step)
        part = X[start:stop].T @ coef[start:stop].astype(X.dtype, copy=False)
        total += np.asarray(part, dtype=np.float64).ravel()
    return total


class NumpyBackend(DataBackend):
    """Dense NumPy arrays, float32 or float64, in memory or memory-mapped."""

    name = "numpy"

    def scores(self, X, w):
        return np.asarray(X @ np.asarray(w).astype(X.dtype, copy=False)).ravel()

    def combine(self, X, coef):
        return _blocked_combine(X, coef)

    def combine_groups(self, X, coef, group, n_groups):
        rows = np.flatnonzero(group >= 0)
        # The selection matrix in X's float type: float32 data is not copied to float64 (as combine).
        S = sp.csr_matrix((np.asarray(coef)[rows].astype(X.dtype), (group[rows], rows)), shape=(n_groups, X.shape[0]))
        product = S @ X
        return np.asarray(product.toarray() if sp.issparse(product) else product, dtype=np.float64)

    def all_finite(self, X):
        return all_finite(X)


class SparseBackend(NumpyBackend):
    """scipy.sparse CSR matrices and arrays, float32 or float64.

    The two products are NumPy's (``@`` and row-blocked combination work on
    CSR as they are); only the finiteness check looks at the stored values.
    """

    name = "sparse"

    def all_finite(self, X):
        return all_finite(X.data)


@functools.singledispatch
def _dispatch(X) -> DataBackend | None:
    return None


#: Backends imported on first need: module that must be loaded → module that registers the backend.
_LAZY_BACKENDS = {"dask.array": "rankopt.data.dask_backend", "dask.dataframe": "rankopt.data.dask_frame"}


def register_backend(array_type: type, backend: DataBackend) -> None:
    """Use ``backend`` for arrays of ``array_type`` (and its subclasses)."""
    if not isinstance(backend, DataBackend):
        raise ValueError(f"expected a DataBackend instance, got {backend!r} instead")
    _dispatch.register(array_type)(lambda X, _backend=backend: _backend)


def _load_lazy_backends() -> None:
    for trigger in [t for t in _LAZY_BACKENDS if t in sys.modules]:
        importlib.import_module(_LAZY_BACKENDS.pop(trigger))


def backend_for(X) -> DataBackend:
    """The backend for X's type; a ValueError names the type when there is none.

    X is expected to have passed :func:`check_matrix`, which turns lists,
    other sparse formats and integer data into one of the supported types.
    """
    _load_lazy_backends()
    backend = _dispatch(X)
    if backend is None:
        raise ValueError(
            "expected a NumPy array, a scipy.sparse CSR matrix or a Dask array, got "
            f"{type(X).__module__}.{type(X).__qualname__} instead"
        )
    return backend


def column_max_abs(X) -> np.ndarray:
    """max_i |X_ij| for every column j of a NumPy array or CSR matrix, float64, without a copy of X."""
    if sp.issparse(X):
        return np.asarray(abs(X).max(axis=0).todense(), dtype=np.float64).ravel()
    return np.maximum(np.abs(X.max(axis=0)), np.abs(X.min(axis=0))).astype(np.float64)


def dask_array_type() -> type | None:
    """``dask.array.Array`` if Dask's array module is loaded, else None.

    No Dask array can exist before ``dask.array`` is imported, so this tells
    whether an object may be one without importing Dask.
    """
    module = sys.modules.get("dask.array")
    return None if module is None else module.Array


def check_matrix(X, name: str = "X"):
    """A 2-D, non-empty, finite design matrix of a type some backend computes on.

    The backend registered for X's type validates it (a Dask array is checked
    chunk by chunk where its chunks are, never gathered); input of no
    registered type — lists, other sparse formats, integer data — is checked
    and converted as an in-memory array.
    """
    _load_lazy_backends()
    backend = _dispatch(X)
    return (NUMPY if backend is None else backend).validate(X, name)


NUMPY = NumpyBackend()
SPARSE = SparseBackend()
register_backend(np.ndarray, NUMPY)
register_backend(sp.csr_matrix, SPARSE)
register_backend(sp.csr_array, SPARSE)
