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

import contextlib
import logging
import os
import secrets
import shutil
from dataclasses import dataclass

import numpy as np

from rankopt._validation import QueryRuns, check_positive_int
from rankopt.data.loaders import DEFAULT_MAX_FEATURES

__all__ = ["QueryStoreWriter", "is_query_store", "open_query_store", "write_query_store"]

logger = logging.getLogger(__name__)

#: The store format this module writes and reads.
FORMAT_VERSION = 1
#: Rows a partition holds at least (it closes at the next query boundary), by default.
DEFAULT_PARTITION_ROWS = 1 << 20


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
    """Write whole queries to a query store, in order, in bounded memory, all or nothing.

    Each :meth:`append` takes rows that hold whole queries, rows of a query contiguous (as LETOR files and
    click logs list them); a query id met again after other queries is refused, since its rows would no
    longer be together.  A partition closes at the first query boundary once it holds ``partition_rows``
    rows.  Labels are checked as the fit checks grades (integers >= 0, or {-1, 1}), features once cast to
    ``dtype`` (finite).

    The store is written to a hidden sibling of ``path`` and renamed into place by :meth:`close`, so
    ``path`` holds the old content (or nothing) until the store is complete; :meth:`abort`, or leaving the
    ``with`` block by an exception, removes the sibling.  ``overwrite=True`` replaces a query store only.
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
        from rankopt._validation import GradeSigns

        zarr = _zarr()
        self.path = os.fspath(path)
        self.n_features = check_positive_int(n_features, "n_features")
        self.partition_rows = check_positive_int(partition_rows, "partition_rows")
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"expected dtype float32 or float64, got {np.dtype(dtype)} instead")
        self.dtype = np.dtype(dtype)
        check_destination(self.path, overwrite)
        self.overwrite = overwrite
        if chunk_rows is None:
            # About 16 MiB of X per zarr chunk, and at most a quarter of a partition: a partition reads every
            # zarr chunk it overlaps, so chunks much larger than partitions would be read many times over.
            chunk_rows = max(
                1024, min((16 << 20) // (self.n_features * np.dtype(dtype).itemsize), self.partition_rows // 4)
            )
        _remove_stale_partials(self.path)
        self._partial = _sibling(self.path, f"{_PARTIAL}{os.getpid()}-{secrets.token_hex(4)}")
        self._group = zarr.open_group(self._partial, mode="w-")
        self._X = self._group.create_array(
            "X", shape=(0, self.n_features), chunks=(chunk_rows, self.n_features), dtype=dtype, compressors=None
        )
        self._y = self._group.create_array("y", shape=(0,), chunks=(chunk_rows,), dtype=label_dtype)
        self._qid = self._group.create_array("qid", shape=(0,), chunks=(chunk_rows,), dtype=np.int64)
        self._chunk_rows = chunk_rows
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_rows = 0
        self._partitions = [0]
        self.n_rows = self.n_queries = 0
        self._runs = QueryRuns(fix=" before writing")
        self._signs = GradeSigns(False, False, False)
        self._closed = False
        self.info: QueryStoreInfo | None = None

    def append(self, X, y, qid) -> None:
        """Append rows holding whole queries (features, labels, query ids); the next call starts a new query."""
        from rankopt._validation import check_grade_block

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
        X = X.astype(self._X.dtype, copy=False)
        if not np.all(np.isfinite(X)):
            raise ValueError(f"expected finite features (as {self._X.dtype}), got NaN or infinity instead")
        self._signs |= check_grade_block(y, name="the labels")[1]
        qid = _integer_query_ids(qid)
        starts = self._runs.add(qid, continues=False)  # each append holds whole queries
        self._close_partitions(self.n_rows + starts)
        self._pending.append((X, y.astype(self._y.dtype, copy=False), qid))
        self._pending_rows += X.shape[0]
        self.n_rows += X.shape[0]
        self.n_queries += starts.size
        if self._pending_rows >= self._chunk_rows:
            self._flush(whole_chunks=True)

    def _flush(self, whole_chunks: bool) -> None:
        """Write the rows held back, whole zarr chunks only unless at the end: a chunk written in pieces
        would be read back and rewritten at every piece."""
        if not self._pending:
            return
        X, y, qid = (np.concatenate([piece[i] for piece in self._pending]) for i in range(3))
        n = X.shape[0] - X.shape[0] % self._chunk_rows if whole_chunks else X.shape[0]
        self._X.append(X[:n])
        self._y.append(y[:n])
        self._qid.append(qid[:n])
        self._pending = [(X[n:], y[n:], qid[n:])] if n < X.shape[0] else []
        self._pending_rows = X.shape[0] - n

    def _close_partitions(self, query_starts: np.ndarray) -> None:
        """Close partitions at the first query start (in these new rows) where each reaches its size."""
        for start in query_starts.tolist():
            if start - self._partitions[-1] >= self.partition_rows:
                self._partitions.append(int(start))

    def close(self) -> QueryStoreInfo:
        """Write the partition table and move the store into place (an empty one is refused)."""
        if not self._closed:
            if self.n_rows == 0:
                self.abort()
                raise ValueError(f"expected some rows to write to {self.path!r}, got none instead")
            try:
                self._signs.check("the labels")
            except ValueError:
                self.abort()
                raise
            self._flush(whole_chunks=False)
            partitions = [*self._partitions, self.n_rows]
            self._group.attrs.update({"rankopt_query_store": FORMAT_VERSION, "partitions": partitions})
            self.info = QueryStoreInfo(self.path, self.n_rows, self.n_features, self.n_queries, tuple(partitions))
            _move_into_place(self._partial, self.path, self.overwrite)
            self._closed = True
        assert self.info is not None
        return self.info

    def abort(self) -> None:
        """Drop what was written; ``path`` stays as it was."""
        self._closed = True
        shutil.rmtree(self._partial, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.close()
        elif not self._closed:
            self.abort()


#: The hidden siblings a writer works in: ".NAME.rankopt-partial-PID-TOKEN" and, while a store is replaced,
#: ".NAME.rankopt-old-PID-TOKEN".
_PARTIAL = "rankopt-partial-"
_OLD = "rankopt-old-"


def _sibling(path: str, tag: str) -> str:
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.{tag}")


def _remove_stale_partials(path: str) -> None:
    """Remove the partial siblings of writers that died (a SIGKILL leaves one behind)."""
    parent, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}."
    for entry in os.listdir(parent) if os.path.isdir(parent) else ():
        tag = entry[len(prefix) :] if entry.startswith(prefix) else ""
        kind = next((k for k in (_PARTIAL, _OLD) if tag.startswith(k)), None)
        pid = tag[len(kind) :].split("-", 1)[0] if kind else ""
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_destination(path: str, overwrite: bool, sources=()) -> None:
    """Refuse a destination that exists (unless ``overwrite`` and it is a query store) or holds a source."""
    for source in sources:
        inside = os.path.commonpath([os.path.realpath(source), os.path.realpath(path)])
        if inside == os.path.realpath(path):
            raise ValueError(f"expected a store path apart from the file it reads, got {path!r}, which holds it")
    if not os.path.lexists(path):
        return
    if not overwrite:
        raise FileExistsError(f"{path!r} exists: pass overwrite=True to replace it")
    if not is_query_store(path):
        raise ValueError(
            f"expected overwrite to replace a query store, got {path!r}, which is not one (a file, or a directory "
            "without the partition table a complete store has): remove it yourself if it should go"
        )


def _move_into_place(partial: str, path: str, overwrite: bool) -> None:
    """Rename the complete store to ``path``, an existing store there first set aside and then removed."""
    if not os.path.lexists(path):
        os.rename(partial, path)
        return
    check_destination(path, overwrite)  # it may have changed while the store was written
    old = _sibling(path, f"{_OLD}{os.getpid()}-{secrets.token_hex(4)}")
    os.rename(path, old)
    os.rename(partial, path)
    shutil.rmtree(old, ignore_errors=True)


def _integer_query_ids(qid: np.ndarray) -> np.ndarray:
    if qid.dtype.kind == "f" and not np.all(qid == np.round(qid)):
        raise ValueError("expected integer query ids, got fractions instead")
    if qid.dtype.kind not in "iub" and not (qid.dtype.kind == "f" and np.all(np.abs(qid) < 2.0**63)):
        raise ValueError(f"expected integer query ids, got dtype {qid.dtype} instead")
    return qid.astype(np.int64)


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
    max_features: int = DEFAULT_MAX_FEATURES,
    n_threads: int | None = None,
) -> QueryStoreInfo:
    """Read an SVM-light / LETOR file with ``qid:`` into a query store at ``path``, in bounded memory.

    The file is read with rankopt's reader (:mod:`rankopt.data.letor`: gzip and bzip2 too, blocks parsed on
    ``n_threads`` threads), the rows of a query that a block cuts carried to the next, so memory stays at a
    few blocks whatever the file's size.  A file without ``qid:`` takes its queries from LightGBM's
    ``FILE.query`` / ``FILE.group`` beside it.

    Nothing is written until the file has passed: without ``n_features``, or with ``zero_based="auto"``,
    a first pass finds the width and the index base and checks every label (integer grades >= 0, or
    {-1, 1}), query id and value (finite once cast to ``dtype``).  The store is then written to a hidden
    sibling directory and renamed into place when complete, so a refusal, an error or a killed process
    leaves ``path`` as it was (a killed write's sibling is removed by the next write beside it).
    ``overwrite=True`` replaces only a query store, never another file or directory.  ``progress`` shows
    a tqdm bar on a terminal, else a line per 5 % (or per minute) on standard error.

    Raises
    ------
    FileExistsError
        ``path`` exists and ``overwrite`` is False.
    ValueError
        ``path`` exists and is not a query store, or holds the source; a line without ``qid:`` (and no
        sidecar), a query whose rows are not together, a label that is not a grade, a feature beyond
        ``n_features`` or ``max_features``, or what :func:`rankopt.data.read_svmlight` refuses.
    """
    from rankopt.data.letor import Progress, base_and_width
    from rankopt.data.loaders import check_read_options

    source, path = os.fspath(source), os.fspath(path)
    check_read_options(zero_based=zero_based, max_features=max_features, n_features=n_features, dtype=dtype)
    check_destination(path, overwrite, sources=(source,))
    groups = _sidecar_groups(source)
    size = os.path.getsize(source)
    if (n_features is None or zero_based == "auto") and not os.path.isfile(source):
        raise ValueError(
            f"expected a regular file to store, got {source!r}, which cannot be read twice (a pipe): give "
            "n_features= and zero_based= (on the command line --zero-based yes or no is not enough: the width "
            "comes from a first pass), or write it to a file first"
        )
    if n_features is None or zero_based == "auto":
        with contextlib.closing(Progress(size, f"checking {os.path.basename(source)}", enabled=progress)) as meter:
            largest, smallest = _check_pass(source, dtype, zero_based, max_features, n_threads, meter, groups, size)
        zero_based, width = base_and_width(source, largest, smallest, zero_based, n_features, max_features)
        n_features = width if n_features is None else n_features
    with (
        contextlib.closing(Progress(size, f"writing {os.path.basename(source)}", enabled=progress)) as meter,
        QueryStoreWriter(path, n_features, dtype=dtype, partition_rows=partition_rows, overwrite=overwrite) as writer,
    ):
        _write_pass(source, writer, zero_based, max_features, n_threads, meter, groups)
    info = writer.info
    logger.info(
        "wrote %d rows, %d queries and %d features to %s in %d partitions",
        info.n_rows,
        info.n_queries,
        info.n_features,
        info.path,
        len(info.partitions) - 1,
    )
    return info


def _blocks(source, dtype, zero_based, max_index, n_threads, meter, groups, too_wide_message=None):
    """The file's parsed blocks, with query ids from the sidecar's groups when the file has none."""
    from rankopt.data.letor import parse_blocks

    row, from_sidecar = 0, None
    options = dict(dtype=dtype, zero_based=zero_based, n_threads=n_threads, progress=meter)
    for block in parse_blocks(source, max_index=max_index, too_wide_message=too_wide_message, **options):
        if block.n_rows and from_sidecar is None:
            from_sidecar = groups is not None and block.rows_with_qid == 0
        if from_sidecar and block.rows_with_qid:
            raise ValueError(
                f"expected no qid: in {source!r}, whose queries come from {groups[1]!r}, got one on line "
                f"{block.first_line_with_qid}"
            )
        if not from_sidecar and block.rows_with_qid != block.n_rows:
            raise ValueError(
                f"expected qid: on every line of {source!r} (a query store holds queries) or LightGBM's group "
                f"sizes beside it ({source}.query), got line {block.first_line_without_qid} without"
            )
        if from_sidecar:
            block.qid = np.searchsorted(groups[0], np.arange(row, row + block.n_rows), side="right")
        row += block.n_rows
        yield block
    if from_sidecar and row != groups[0][-1]:
        raise ValueError(
            f"expected the group sizes in {groups[1]!r} to sum to the {row} rows of {source!r}, got "
            f"{int(groups[0][-1])} instead"
        )


def _check_pass(source, dtype, zero_based, max_features, n_threads, meter, groups, size) -> tuple[int, int]:
    """The file checked whole before anything is written: (largest, smallest) feature index as written."""
    from rankopt._validation import GradeSigns, check_grade_block
    from rankopt.data.letor import refuse_no_rows

    largest, smallest, rows = -1, np.iinfo(np.int64).max, 0
    signs = GradeSigns(False, False, False)
    runs = QueryRuns(where=f" in {source!r}")
    for block in _blocks(source, dtype, zero_based, max_features, n_threads, meter, groups):
        if block.n_rows == 0:  # blank lines and comments only
            continue
        _, block_signs = check_grade_block(block.y, name=f"the labels of {source!r}")
        signs |= block_signs
        runs.add(block.qid)  # a block's first query may go on from the last block's
        largest, smallest = max(largest, block.largest_index), min(smallest, block.smallest_index)
        rows += block.n_rows
    signs.check(f"the labels of {source!r}")
    refuse_no_rows(source, rows, size)
    return largest, smallest  # a file naming no feature is refused with its width (base_and_width)


def _write_pass(source, writer, zero_based, max_features, n_threads, meter, groups) -> None:
    """The second pass: dense rows appended, the rows of a block's last query held for the next block."""
    from rankopt.data.letor import wider_than_asked

    shift = 0 if zero_based else 1
    largest = writer.n_features - 1 + shift  # the largest index the store's width holds, as written

    def words(index: int) -> str:
        return wider_than_asked(source, writer.n_features, index, zero_based)

    held = None
    for block in _blocks(source, writer.dtype, zero_based, largest, n_threads, meter, groups, words):
        X, y, qid = block.dense(writer.n_features, shift), block.y, block.qid
        if held is not None:
            X, y, qid = np.concatenate([held[0], X]), np.concatenate([held[1], y]), np.concatenate([held[2], qid])
        other = np.flatnonzero(qid != qid[-1])
        cut = int(other[-1]) + 1 if other.size else 0
        held = (X[cut:], y[cut:], qid[cut:])
        writer.append(X[:cut], y[:cut], qid[:cut])
    if held is not None:
        writer.append(*held)


def _sidecar_groups(source: str):
    """(cumulative group sizes, the sidecar's path) from LightGBM's FILE.query beside ``source``, or None."""
    from rankopt.data.loaders import read_group_sizes, sidecar_candidates

    sidecar = next((c for c in sidecar_candidates(source) if os.path.isfile(c)), None)
    if sidecar is None:
        return None
    return np.cumsum(read_group_sizes(sidecar)), sidecar
