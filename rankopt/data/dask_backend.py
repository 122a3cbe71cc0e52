"""The Dask backend: out-of-core and distributed scores and joint features.

Imported by :mod:`rankopt.data.backends` when a Dask array is first seen.
The products are computed where the chunks are, on Dask's active scheduler
(the ``dask.distributed`` client, if one is active, as
:func:`dask_client` makes one; else Dask's default):

* scores: each chunk computes its rows' partial X w, summed over column
  chunks; the N-vector s is gathered on the driver, where the
  loss-augmented inference runs;
* joint feature: the driver's coefficient vector c is split by row chunks,
  each chunk computes its Xᵀ c in float64, and a tree sum brings one
  d-vector to the driver.

So per cutting-plane iteration the data is read twice and only the score
vector (N floats) and one d-vector reach the driver.  Each chunk is handled
by the in-memory backend for its own type (:class:`~rankopt.data.backends.NumpyBackend`
or :class:`~rankopt.data.backends.SparseBackend`), so float32 and CSR chunks
keep their behaviour and precision exactly.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import sys

import cloudpickle
import numpy as np

from rankopt._validation import check_non_empty_shape
from rankopt.data.backends import DataBackend, aligned, backend_for, register_backend

__all__ = ["DaskBackend", "RowChunks", "check_dask_matrix", "dask_client", "import_dask", "open_npy"]

logger = logging.getLogger(__name__)


def import_dask(module: str = "dask.array"):
    """Import a Dask module, or fail saying how to install it (:func:`rankopt._optional.require`)."""
    from rankopt._optional import require

    return require(module, purpose=f"training on Dask arrays ({module})", extra="scale")


da = import_dask("dask.array")
import dask  # noqa: E402  (dask.array imports it)

# ------------------------------------------------------------------ per-chunk kernels (run on the workers)


def _chunk_scores(block, w):
    """Partial scores of one chunk, as a (rows, 1) column."""
    return backend_for(block).scores(block, w)[:, None]


def _chunk_combine(block, coef):
    """Xᵀ c of one chunk in float64, as a (1, cols) row."""
    return backend_for(block).combine(block, coef)[None, :]


def _spread(scores):
    """(min, max, max |·|) of one chunk's scores as a (1, 3) row, float64."""
    if scores.size == 0:
        return np.array([[np.inf, -np.inf, 0.0]])
    values = scores.astype(np.float64, copy=False)
    return np.array([[values.min(), values.max(), np.abs(values).max()]])


def _chunk_report(block, declared_dtype):
    """[chunk type supported, dtype is the array's, all entries finite] for one chunk."""
    try:
        backend = backend_for(block)
    except ValueError:
        return np.array([[[False, False, False]]])
    if block.dtype != declared_dtype:
        return np.array([[[True, False, False]]])
    return np.array([[[True, True, backend.all_finite(block)]]])


# ------------------------------------------------------------------ the backend


def _active_client():
    """The ``dask.distributed`` client Dask computes on now, or None."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        client = distributed.default_client()
    except ValueError:  # no client
        return None
    return client if dask.base.get_scheduler() == client.get else None


def _rows_to_workers(values: np.ndarray, row_chunks):
    """``values`` split like the rows of X, as a Dask array.

    On a distributed cluster the pieces are scattered to the workers, so the
    N-vector does not go through the scheduler inside the task graph.
    """
    client = _active_client()
    if client is None:
        return da.from_array(values, chunks=(row_chunks,))
    pieces = np.split(values, np.cumsum(row_chunks)[:-1])
    futures = client.scatter(pieces, hash=False)
    return da.concatenate(
        [
            da.from_delayed(dask.delayed(future), shape=piece.shape, dtype=piece.dtype, meta=piece[:0])
            for future, piece in zip(futures, pieces, strict=True)
        ]
    )


class DaskBackend(DataBackend):
    """Dask arrays with NumPy or CSR chunks, float32 or float64, validated by :func:`check_dask_matrix`."""

    name = "dask"

    def scores(self, X, w):
        return np.asarray(self._lazy_scores(X, w).compute()).ravel()

    def _lazy_scores(self, X, w):
        """X w as a lazy (N, 1) Dask array in X's float type."""
        w = np.asarray(w, dtype=np.float64).astype(X.dtype, copy=False)
        w_chunks = da.from_array(w, chunks=(X.chunks[1],))
        parts = da.blockwise(
            _chunk_scores,
            "ij",
            X,
            "ij",
            w_chunks,
            "j",
            dtype=X.dtype,
            adjust_chunks={"j": 1},
            meta=np.empty((0, 0), dtype=X.dtype),
        )
        # With column chunks, the partial scores are summed in X's float type, like one product.
        return parts if parts.numblocks[1] == 1 else parts.sum(axis=1, keepdims=True, dtype=X.dtype)

    def combine(self, X, coef):
        coef = np.asarray(coef, dtype=np.float64)
        if coef.shape != (X.shape[0],):
            raise ValueError(f"expected one coefficient per row of X ({X.shape[0]}), got shape {coef.shape} instead")
        # Cast on the driver: half the bytes to send for float32 data, and the
        # chunks would cast to their own type anyway.
        coef_chunks = _rows_to_workers(coef.astype(X.dtype, copy=False), X.chunks[0])
        parts = da.blockwise(
            _chunk_combine,
            "ij",
            X,
            "ij",
            coef_chunks,
            "i",
            dtype=np.float64,
            adjust_chunks={"i": 1},
            meta=np.empty((0, 0), dtype=np.float64),
        )
        return np.asarray(parts.sum(axis=0).compute(), dtype=np.float64)

    def all_finite(self, X):
        return bool(da.isfinite(X).all().compute())

    def score_spread(self, X, w):
        # Per row chunk (min, max, max |·|) of its scores, three numbers a chunk to the driver; an empty chunk
        # gives (inf, −inf, 0), which Dask's own min and max over chunks would not take.
        ends = self._lazy_scores(X, w).map_blocks(_spread, dtype=np.float64, chunks=((1,) * X.numblocks[0], (3,)))
        ends = np.asarray(ends.compute())
        return float(ends[:, 1].max() - ends[:, 0].min()), float(ends[:, 2].max())

    def row_chunks(self, X, columns):
        return RowChunks(X, columns)

    def validate(self, X, name: str = "X"):
        return check_dask_matrix(X, name)


register_backend(da.Array, DaskBackend())


class RowChunks:
    """The row chunks of a Dask X, each with a state kept where it was computed: a map-reduce per step.

    A multi-query fit's oracle needs, per chunk, only that chunk's rows, labels and query ids (every query
    whole within a chunk), and sends back a d-vector and a few numbers.  ``open`` starts one state per
    chunk from the chunk's blocks of ``columns`` (labels, query ids); each :meth:`map` runs
    ``fn(state, X_block or None, *args) -> (state, result)`` on every chunk, keeps the new states where
    they are (worker memory on a ``dask.distributed`` cluster; this process on Dask's local schedulers)
    and returns the results, one per chunk.  X's blocks are read from their source at each step that asks
    for them, so X need not fit in the cluster's memory; the states (O(rows) each) must.

    ``sent_bytes`` and ``received_bytes`` count the driver's side of every step (the pickled size of the
    arguments sent with each chunk's task and of the results that come back), for the traffic table of
    docs/scale.md.
    """

    def __init__(self, X, columns: dict):
        if X.numblocks[1] > 1:  # one block per row chunk: a chunk's task sees all of its rows' features
            X = X.rechunk({1: X.shape[1]})
        if 0 in X.chunks[0]:  # an empty chunk holds no query: left out, as the columns' pieces leave it out
            X = X.rechunk({0: tuple(size for size in X.chunks[0] if size)})
        self.X = X
        self.row_chunks = X.chunks[0]
        self.n_chunks = len(self.row_chunks)
        self._blocks = list(X.to_delayed().ravel())
        # The arrays are kept: a NumPy column is scattered, and its futures must outlive the delayed blocks.
        self._column_arrays = [_rows_like(column, name, self.row_chunks) for name, column in columns.items()]
        self._scattered = [name for name, column in columns.items() if not _is_dask_column(column)]
        self._columns = [list(column.to_delayed()) for column in self._column_arrays]
        self._states: list | None = None
        self.sent_bytes = self.received_bytes = 0
        self.steps = 0

    def open(self, fn, *args) -> list:
        """Each chunk's first state, ``fn(*column_blocks, chunk_index, *args) -> (state, result)``; the results."""
        tasks = [
            dask.delayed(fn, nout=2, pure=False)(*(column[i] for column in self._columns), i, *args)
            for i in range(self.n_chunks)
        ]
        return self._settle(tasks, args)

    def map(self, fn, *args, rows: bool = False) -> list:
        """``fn(state, X_block if rows else None, *args) -> (state, result)`` on every chunk; the results."""
        if self._states is None:
            raise RuntimeError("RowChunks.map before RowChunks.open")
        tasks = [
            dask.delayed(_on_aligned_rows, nout=2, pure=False)(fn, state, block if rows else None, *args)
            for state, block in zip(self._states, self._blocks, strict=True)
        ]
        return self._settle(tasks, args)

    def reduce(self, leaf, combine, finish):
        """``finish`` of the pairwise tree of ``combine`` over ``leaf(state)`` of every chunk, computed where
        the states are: only ``finish``'s answer comes back."""
        if self._states is None:
            raise RuntimeError("RowChunks.reduce before RowChunks.open")
        values = [dask.delayed(leaf)(state) for state in self._states]
        while len(values) > 1:
            pairs = zip(values[0::2], values[1::2], strict=False)
            values = [dask.delayed(combine)(a, b) for a, b in pairs] + values[len(values) // 2 * 2 :]
        with self._lost_scattered_columns():
            result = dask.delayed(finish)(values[0]).compute()
        self.steps += 1
        self.received_bytes += len(cloudpickle.dumps(result))
        return result

    def _settle(self, tasks, args) -> list:
        with self._lost_scattered_columns():
            pairs = dask.persist(*tasks)
            self._states = [pair[0] for pair in pairs]
            results = list(dask.compute(*(pair[1] for pair in pairs)))
        self.steps += 1
        self.sent_bytes += self.n_chunks * len(cloudpickle.dumps(args))
        self.received_bytes += len(cloudpickle.dumps(results))
        return results

    @contextlib.contextmanager
    def _lost_scattered_columns(self):
        """A cancelled future of a fit whose NumPy columns were scattered: a worker holding a piece was lost, and a
        scattered piece, unlike a Dask array's chunk, cannot be computed again: say so, and how to avoid it."""
        try:
            yield
        except concurrent.futures.CancelledError as exc:
            if not self._scattered:
                raise
            names = " and ".join(self._scattered)
            raise RuntimeError(
                f"a Dask worker holding a piece of {names} was lost mid-fit: NumPy {names} are scattered to the "
                "workers once and cannot be recomputed, so the fit cannot go on; pass them as Dask arrays chunked "
                f"like X's rows (da.from_array({self._scattered[0]}, chunks=(X.chunks[0],))), which a cluster "
                "recomputes after a lost worker, as it does X's chunks"
            ) from exc


def _is_dask_column(column) -> bool:
    """A column a cluster can compute again: a Dask array, or a Dask Series or frame (X's column)."""
    return isinstance(column, (da.Array, *_frame_types()))


def _frame_types() -> tuple:
    """Dask's Series and DataFrame types, when dask.dataframe has been imported (nothing imports it here)."""
    frames = sys.modules.get("dask.dataframe")
    return () if frames is None else (frames.Series, frames.DataFrame)


def _on_aligned_rows(fn, state, block, *args):
    """``fn(state, block, *args)`` with a NumPy block realigned: a block that crossed processes arrives at any
    address, and BLAS and NumPy's sums round by alignment, so the same rows would give other last bits."""
    return fn(state, aligned(block) if isinstance(block, np.ndarray) else block, *args)


def _rows_like(column, name: str, row_chunks):
    """A label or query-id column as a Dask array chunked like X's rows (a NumPy one is scattered)."""
    if isinstance(column, _frame_types()):  # a column of X's frame
        column = column.to_dask_array(lengths=True)
    if not isinstance(column, da.Array):
        column = np.asarray(column)
    n_rows = int(sum(row_chunks))
    if column.ndim != 1 or column.shape[0] != n_rows:
        raise ValueError(f"expected {name} to hold one value per row of X ({n_rows}), got shape {column.shape} instead")
    if not isinstance(column, da.Array):
        return _rows_to_workers(column, row_chunks)
    return column if column.chunks[0] == tuple(row_chunks) else column.rechunk((tuple(row_chunks),))


def check_dask_matrix(X, name: str = "X"):
    """Validate a Dask design matrix without gathering it.

    Shape, chunk sizes and dtype are checked from the array's metadata; one
    pass over the chunks (on the active scheduler) checks that every chunk
    is an array type rankopt supports, has the array's dtype and is finite.
    Integer and boolean arrays are cast to float64 lazily, chunk by chunk.
    """
    if X.ndim != 2:
        raise ValueError(f"expected {name} to be 2-D, got a Dask array of shape {X.shape} instead")
    if any(np.isnan(size) for sizes in X.chunks for size in sizes):
        raise ValueError(
            f"expected {name} to have known chunk sizes, got a Dask array with unknown chunk sizes "
            f"(shape {X.shape}) instead: call {name}.compute_chunk_sizes() first"
        )
    check_non_empty_shape(X.shape, name)
    if X.dtype.kind == "c":
        raise ValueError(f"expected {name} to hold real numbers, got complex values instead")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"expected {name} to hold real numbers, got dtype {X.dtype} instead")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    reports = da.map_blocks(
        _chunk_report, X, X.dtype, dtype=bool, chunks=(1, 1, 3), new_axis=2, meta=np.empty((0, 0, 0), dtype=bool)
    ).compute()
    for column, problem in ((0, "of a type rankopt has no backend for"), (1, "of another dtype (mixed dtypes)")):
        bad = np.argwhere(~reports[:, :, column])
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            chunk = X.blocks[index].compute()
            raise ValueError(
                f"expected every chunk of {name} to be a NumPy or CSR array of {name}'s dtype {X.dtype}, got "
                f"chunk {index} (and {len(bad) - 1} more) {problem}: a {type(chunk).__qualname__} of dtype "
                f"{chunk.dtype} instead"
            )
    bad = np.argwhere(~reports[:, :, 2])
    if bad.size:
        raise ValueError(
            f"expected {name} to be finite, got NaN or infinity instead (in chunk {tuple(int(i) for i in bad[0])})"
        )
    logger.info("%s: Dask array of shape %s, %s, in %d x %d chunks", name, X.shape, X.dtype, *X.numblocks)
    return X


# ------------------------------------------------------------------ clusters


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
        raise ConnectionError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g} s: {exc}") from exc
    return distributed.Client(address, timeout=timeout)


# ------------------------------------------------------------------ on-disk arrays


class _NpyRows:
    """A lazily opened ``.npy`` file: pickles as its path, reads slices through a memmap."""

    def __init__(self, path):
        self.path = os.fspath(path)
        header = np.load(self.path, mmap_mode="r")
        self.shape, self.dtype, self.ndim = header.shape, header.dtype, header.ndim

    def __getitem__(self, index):
        return np.array(np.load(self.path, mmap_mode="r")[index])


def open_npy(path, chunk_rows=None):
    """A Dask array of the 2-D ``.npy`` file at ``path``, in chunks of ``chunk_rows`` rows.

    Each task opens the file memory-mapped and copies out its rows, so only
    the path is in the task graph and the file need not fit in memory.
    ``chunk_rows`` defaults to about 64 MiB of data per chunk.
    """
    rows = _NpyRows(path)
    if rows.ndim != 2:
        raise ValueError(f"expected a 2-D array in {rows.path!r}, got shape {rows.shape} instead")
    if chunk_rows is None:
        chunk_rows = max(1, (64 << 20) // max(1, rows.shape[1] * rows.dtype.itemsize))
    token = dask.base.tokenize(rows.path, os.path.getmtime(rows.path), rows.shape, rows.dtype.str, chunk_rows)
    return da.from_array(
        rows,
        chunks=(int(chunk_rows), rows.shape[1]),
        asarray=False,
        meta=np.empty((0, 0), dtype=rows.dtype),
        name=f"npy-{token}",
    )
