"""On-disk query stores: X, labels and query ids in zarr, partitioned so that every query is whole in one part.

A multi-query fit on a Dask X runs its inference on the row chunks (``docs/scale.md``), which needs every
query whole within a chunk.  A query store keeps that promise on disk: :func:`write_query_store` (or
:class:`QueryStoreWriter` for data made in pieces) writes the rows in order, closing a partition only
between queries, and :func:`open_query_store` gives Dask arrays chunked by those partitions::

    write_query_store("MSLR-WEB30K/Fold1/train.txt", "train.zarr")          # bounded memory, a progress bar
    X, y, qid = open_query_store("train.zarr")
    with dask_client(n_workers=2):
        RankSVM(loss="ndcg_graded").fit(X, y, qid=qid)

Layout: a zarr group with arrays ``X`` (rows × features), ``y`` and ``qid`` (one per row), and the
attributes ``rankopt_query_store`` (the format version) and ``partitions`` (the row offsets where
partitions start, and the row count).  The zarr chunks need not follow the partitions: a partition reads
the zarr chunks it overlaps.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass

import numpy as np

from rankopt._validation import check_positive_int

__all__ = ["QueryStoreWriter", "is_query_store", "open_query_store", "write_query_store"]

logger = logging.getLogger(__name__)

#: The store format this module writes and reads.
FORMAT_VERSION = 1
#: Rows a partition holds at least (it closes at the next query boundary), by default.
DEFAULT_PARTITION_ROWS = 1 << 20
#: Bytes of the source file parsed at a time by :func:`write_query_store`.
READ_BLOCK_BYTES = 64 << 20


def _zarr():
    from rankopt._optional import require

    return require("zarr", purpose="query stores on disk (rankopt.data.query_store)", extra="scale")


@dataclass(frozen=True)
class QueryStoreInfo:
    """What a writer wrote: its path, rows, features, queries and partitions."""

    path: str
    n_rows: int
    n_features: int
    n_queries: int
    partitions: tuple[int, ...]  # start offsets and the row count


class QueryStoreWriter:
    """Write whole queries to a query store, in order, in bounded memory.

    Each :meth:`append` takes rows that hold whole queries, rows of a query contiguous (as LETOR files and
    click logs list them); a query id met again after other queries is refused, since its rows would no
    longer be together.  A partition closes at the first query boundary once it holds ``partition_rows``
    rows.  Use it as a context manager, or call :meth:`close` to write the partition table.
    """

    def __init__(
        self,
        path,
        n_features: int,
        *,
        dtype=np.float32,
        label_dtype=np.float64,
        partition_rows: int = DEFAULT_PARTITION_ROWS,
        chunk_rows: int | None = None,
        overwrite: bool = False,
    ):
        zarr = _zarr()
        self.path = os.fspath(path)
        self.n_features = check_positive_int(n_features, "n_features")
        self.partition_rows = check_positive_int(partition_rows, "partition_rows")
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"expected dtype float32 or float64, got {np.dtype(dtype)} instead")
        if os.path.exists(self.path) and not overwrite:
            raise FileExistsError(f"{self.path!r} exists: pass overwrite=True to replace it")
        if chunk_rows is None:
            # About 16 MiB of X per zarr chunk, and at most a quarter of a partition: a partition reads every
            # zarr chunk it overlaps, so chunks much larger than partitions would be read many times over.
            chunk_rows = max(
                1024, min((16 << 20) // (self.n_features * np.dtype(dtype).itemsize), self.partition_rows // 4)
            )
        self._group = zarr.open_group(self.path, mode="w")
        self._X = self._group.create_array(
            "X", shape=(0, self.n_features), chunks=(chunk_rows, self.n_features), dtype=dtype, compressors=None
        )
        self._y = self._group.create_array("y", shape=(0,), chunks=(chunk_rows,), dtype=label_dtype)
        self._qid = self._group.create_array("qid", shape=(0,), chunks=(chunk_rows,), dtype=np.int64)
        self._partitions = [0]
        self.n_rows = self.n_queries = 0
        self._last_qid: int | None = None
        self._seen: set[int] = set()
        self._closed = False

    def append(self, X, y, qid) -> None:
        """Append rows holding whole queries (features, labels, query ids); the next call starts a new query."""
        if self._closed:
            raise ValueError(f"expected an open writer, got one already closed ({self.path!r})")
        X = np.asarray(X.toarray() if hasattr(X, "toarray") else X)
        y, qid = np.asarray(y), np.asarray(qid)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"expected rows of {self.n_features} features, got shape {X.shape} instead")
        if y.shape != (X.shape[0],) or qid.shape != (X.shape[0],):
            raise ValueError(
                f"expected one label and one query id per row ({X.shape[0]}), got shapes {y.shape} and {qid.shape} "
                "instead"
            )
        if X.shape[0] == 0:
            return
        if not np.all(np.isfinite(X)):
            raise ValueError("expected finite features, got NaN or infinity instead")
        if qid.dtype.kind == "f" and not np.all(qid == np.round(qid)):
            raise ValueError("expected integer query ids, got fractions instead")
        qid = qid.astype(np.int64)
        starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
        ids = qid[starts]
        repeated = [int(i) for i in ids if int(i) in self._seen]
        if np.unique(ids).size != ids.size or repeated:
            again = repeated[0] if repeated else int(ids[np.argmax(np.unique(ids, return_counts=True)[1] > 1)])
            raise ValueError(
                f"expected the rows of each query together, got query id {again} again after other queries: "
                "sort the rows by qid (a stable sort keeps each query's order) before writing"
            )
        self._seen.update(int(i) for i in ids)
        self._close_partitions(self.n_rows + starts)
        self._X.append(X.astype(self._X.dtype, copy=False))
        self._y.append(y.astype(self._y.dtype, copy=False))
        self._qid.append(qid)
        self.n_rows += X.shape[0]
        self.n_queries += ids.size

    def _close_partitions(self, query_starts: np.ndarray) -> None:
        """Close partitions at the first query start (in these new rows) where each reaches its size."""
        for start in query_starts.tolist():
            if start - self._partitions[-1] >= self.partition_rows:
                self._partitions.append(int(start))

    def close(self) -> QueryStoreInfo:
        """Write the partition table; the store is then complete (an empty one is refused)."""
        if not self._closed:
            if self.n_rows == 0:
                raise ValueError(f"expected some rows to write to {self.path!r}, got none instead")
            partitions = [*self._partitions, self.n_rows]
            self._group.attrs.update({"rankopt_query_store": FORMAT_VERSION, "partitions": partitions})
            self._closed = True
        return QueryStoreInfo(
            self.path, self.n_rows, self.n_features, self.n_queries, tuple(self._group.attrs["partitions"])
        )

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.close()


def is_query_store(path) -> bool:
    """Whether ``path`` is a directory holding a complete query store."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return False
    try:
        group = _zarr().open_group(path, mode="r")
    except Exception:  # not a zarr group  # noqa: BLE001
        return False
    return group.attrs.get("rankopt_query_store") is not None


def open_query_store(path):
    """(X, y, qid) of the query store at ``path`` as Dask arrays, one chunk per partition (queries whole).

    Nothing is read but the partition table: each chunk reads its rows from disk when computed, on Dask's
    active scheduler.
    """
    import dask.array as da

    path = os.fspath(path)
    if not is_query_store(path):
        raise ValueError(
            f"expected a query store written by rankopt.data.write_query_store at {path!r}, got "
            f"{'a directory without its partition table' if os.path.isdir(path) else 'no such directory'} instead"
        )
    group = _zarr().open_group(path, mode="r")
    version = group.attrs["rankopt_query_store"]
    if version != FORMAT_VERSION:
        raise ValueError(f"expected a query store of format {FORMAT_VERSION}, got format {version!r} instead")
    sizes = tuple(int(n) for n in np.diff(group.attrs["partitions"]))
    X, y, qid = group["X"], group["y"], group["qid"]
    if not sizes or sum(sizes) != X.shape[0] or y.shape != (X.shape[0],) or qid.shape != (X.shape[0],):
        raise ValueError(f"expected a complete query store at {path!r}, got arrays and partitions that disagree")
    name = f"query-store-{os.path.abspath(path)}-{os.path.getmtime(path)}"
    return (
        da.from_array(X, chunks=(sizes, X.shape[1]), name=f"{name}-X"),
        da.from_array(y, chunks=(sizes,), name=f"{name}-y"),
        da.from_array(qid, chunks=(sizes,), name=f"{name}-qid"),
    )


def write_query_store(
    source,
    path,
    *,
    n_features: int | None = None,
    zero_based="auto",
    dtype=np.float32,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    overwrite: bool = False,
    progress: bool = True,
) -> QueryStoreInfo:
    """Read an SVM-light / LETOR file with ``qid:`` into a query store at ``path``, in bounded memory.

    The file is parsed a block of lines at a time (about 64 MiB) with scikit-learn's reader, the rows of a
    query that a block cuts carried to the next, so memory stays at a few blocks whatever the file's size.
    Without ``n_features``, or with ``zero_based="auto"``, a first pass finds the width and the index base
    (zero-based exactly when index 0 occurs, as :func:`rankopt.data.read_svmlight` decides).  ``progress``
    shows a bar per pass (tqdm) on standard error.

    Raises ``ValueError`` for a line without ``qid:``, a query whose rows are not together, a feature
    beyond ``n_features``, or what :func:`rankopt.data.read_svmlight` refuses.
    """
    source = os.fspath(source)
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"expected zero_based to be True, False or 'auto', got {zero_based!r} instead")
    if n_features is None or zero_based == "auto":
        width, has_zero = _scan(source, progress)
        zero_based = has_zero if zero_based == "auto" else zero_based
        n_features = (width if zero_based else width - 1) if n_features is None else n_features
    with QueryStoreWriter(path, n_features, dtype=dtype, partition_rows=partition_rows, overwrite=overwrite) as writer:
        held = None  # the rows of the last query of the previous block, which the next may continue
        for X, y, qid in _blocks(source, n_features, zero_based, progress, "writing"):
            if held is not None:
                X, y, qid = _stack(held, (X, y, qid))
            last = np.flatnonzero(qid != qid[-1])
            cut = int(last[-1]) + 1 if last.size else 0
            held = (X[cut:], y[cut:], qid[cut:])
            writer.append(X[:cut], y[:cut], qid[:cut])
        if held is not None:
            writer.append(*held)
    info = writer.close()
    logger.info(
        "wrote %d rows, %d queries and %d features to %s in %d partitions",
        info.n_rows,
        info.n_queries,
        info.n_features,
        info.path,
        len(info.partitions) - 1,
    )
    return info


def _stack(a, b):
    import scipy.sparse as sp

    return sp.vstack([a[0], b[0]], format="csr"), np.concatenate([a[1], b[1]]), np.concatenate([a[2], b[2]])


def _line_blocks(source: str, progress: bool, what: str):
    """The file's bytes in blocks of whole lines, with a progress bar over the bytes read."""
    from tqdm.auto import tqdm

    size = os.path.getsize(source)
    with (
        open(source, "rb") as file,
        tqdm(
            total=size, unit="B", unit_scale=True, desc=f"{what} {os.path.basename(source)}", disable=not progress
        ) as bar,
    ):
        rest = b""
        while True:
            block = file.read(READ_BLOCK_BYTES)
            bar.update(len(block))
            if not block:
                break
            block = rest + block
            end = block.rfind(b"\n") + 1
            rest, block = block[end:], block[:end]
            if block.strip():
                yield block
        if rest.strip():
            yield rest


def _parse(block: bytes, source: str, n_features, zero_based):
    from sklearn.datasets import load_svmlight_file

    try:
        X, y, qid = load_svmlight_file(
            io.BytesIO(block), n_features=n_features, zero_based=zero_based, query_id=True, dtype=np.float64
        )
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"cannot read {source!r} as SVM-light: {exc}") from None
    if qid.size != X.shape[0]:
        raise ValueError(f"expected qid: on every line of {source!r} (a query store holds queries), got lines without")
    return X, y, qid


def _scan(source: str, progress: bool) -> tuple[int, bool]:
    """The file's width as read zero-based, and whether index 0 occurs (a first pass)."""
    width, has_zero = 0, False
    for block in _line_blocks(source, progress, "scanning"):
        X, _, _ = _parse(block, source, None, True)
        width = max(width, X.shape[1])
        has_zero = has_zero or bool(X.nnz and X.indices.min() == 0)
    if width == 0:
        raise ValueError(f"expected feature:value pairs in {source!r}, got none")
    return width, has_zero


def _blocks(source: str, n_features: int, zero_based: bool, progress: bool, what: str):
    for block in _line_blocks(source, progress, what):
        try:
            yield _parse(block, source, n_features, zero_based)
        except ValueError as exc:
            if "exceeds" in str(exc) or "n_features" in str(exc):
                raise ValueError(
                    f"expected {source!r} to use at most {n_features} features, got a wider line: {exc}"
                ) from None
            raise
