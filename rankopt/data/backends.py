"""Data backends: the two products the engine needs, for each kind of array.

Per cutting-plane iteration the engine touches the training data only
through the scores s = X w and the joint feature Xᵀ c (``ARCHITECTURE.md``).
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

from rankopt._validation import all_finite

__all__ = [
    "DataBackend",
    "NumpyBackend",
    "SparseBackend",
    "backend_for",
    "dask_array_type",
    "dask_client",
    "open_npy",
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

    @abc.abstractmethod
    def all_finite(self, X) -> bool:
        """Whether every stored entry of X is finite (without an n × d temporary)."""


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
_LAZY_BACKENDS = {"dask.array": "rankopt.data.dask_backend"}


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

    X is expected to have passed :func:`rankopt._validation.check_matrix`,
    which turns lists, other sparse formats and integer data into one of the
    supported types.
    """
    _load_lazy_backends()
    backend = _dispatch(X)
    if backend is None:
        raise ValueError(
            "expected a NumPy array, a scipy.sparse CSR matrix or a Dask array, got "
            f"{type(X).__module__}.{type(X).__qualname__} instead"
        )
    return backend


def dask_array_type() -> type | None:
    """``dask.array.Array`` if Dask's array module is loaded, else None.

    No Dask array can exist before ``dask.array`` is imported, so this tells
    whether an object may be one without importing Dask.
    """
    module = sys.modules.get("dask.array")
    return None if module is None else module.Array


NUMPY = NumpyBackend()
SPARSE = SparseBackend()
register_backend(np.ndarray, NUMPY)
register_backend(sp.csr_matrix, SPARSE)
register_backend(sp.csr_array, SPARSE)


def dask_client(address=None, *, timeout=10, **cluster_kwargs):
    """A ``dask.distributed`` client: to the scheduler at ``address``, or a new ``LocalCluster``.

    Use it as a context manager around fitting on a Dask array; rankopt
    computes on Dask's active scheduler, which a client makes itself::

        with dask_client() as client:             # LocalCluster on this machine
            RankSVM().fit(X_dask, y)
        with dask_client("tcp://10.0.0.5:8786"):  # an existing cluster
            RankSVM().fit(X_dask, y)

    Parameters
    ----------
    address : str, optional
        A scheduler address.  None starts a ``LocalCluster`` that closes with
        the client.
    timeout : float, default 10
        Seconds to wait for the scheduler.
    **cluster_kwargs
        Passed to ``LocalCluster`` (``n_workers``, ``threads_per_worker``,
        ``processes``, ``memory_limit``, …); only without ``address``.

    Raises
    ------
    ImportError
        ``dask.distributed`` is not installed.
    ConnectionError
        The scheduler at ``address`` cannot be reached within ``timeout``.
    """
    from rankopt.data.dask_backend import import_dask

    distributed = import_dask("distributed")
    if address is None:
        return distributed.Client(timeout=timeout, **cluster_kwargs)
    if cluster_kwargs:
        raise ValueError(
            f"expected no LocalCluster options with a scheduler address, got {sorted(cluster_kwargs)} instead"
        )
    try:
        # Connect once without becoming Dask's default: a Client that fails to connect
        # stays registered as the default (distributed 2026.8), breaking later computations.
        distributed.Client(address, timeout=timeout, set_as_default=False).close()
    except ValueError as exc:
        raise ValueError(
            f"expected a Dask scheduler address such as 'tcp://host:8786', got {address!r} instead: {exc}"
        ) from exc
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(
            f"cannot reach the Dask scheduler at {address!r} within {timeout:g} s: {exc}"
        ) from exc
    return distributed.Client(address, timeout=timeout)


def open_npy(path, chunk_rows=None):
    """A Dask array over a ``.npy`` file whose chunks are read on the workers.

    Only the path travels in the task graph; each task memory-maps the file
    and reads its block of rows, so the file never has to fit in memory.
    See :func:`rankopt.data.dask_backend.open_npy`.
    """
    from rankopt.data.dask_backend import open_npy as _open_npy

    return _open_npy(path, chunk_rows)
