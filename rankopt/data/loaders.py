"""Dataset loaders: scikit-learn's bundled digits and SVM-light/LETOR files.

Nothing here downloads: the digits ship inside scikit-learn, and SVM-light
files are read with rankopt's own parser (:mod:`rankopt.data.letor`).  (The MSLR sample, which is
fetched once, is :mod:`rankopt.data.mslr`.)
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from rankopt._validation import QueryRuns, check_n_threads, query_ids_from_group
from rankopt.data.backends import check_matrix

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_FEATURES", "SvmLightData", "load_digits", "read_svmlight", "write_svmlight"]

#: Widest X :func:`read_svmlight` builds unless told otherwise: 2²⁰ columns, far beyond any
#: LETOR data set (MSLR-WEB 136, Yahoo! LTR 700, Istella 220 features).  Training keeps dense
#: d-vectors (w, and one per working-set plane), so a file naming a larger feature index (a typo,
#: or a hostile 38-byte file with index 2³¹ − 1 or 10⁷) is refused before anything of its width
#: is allocated; wider data, such as hashed text features, passes ``max_features=``.
DEFAULT_MAX_FEATURES = 1 << 20

#: Largest pixel value of the digits (8×8 images of 4×4 blocks, 0 … 16 counts).
DIGITS_MAX_PIXEL = 16.0


def load_digits(scale: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 8×8 handwritten digits bundled with scikit-learn.

    Parameters
    ----------
    scale : bool, default True
        Divide the pixel counts (0 … 16) by 16 so every feature lies in
        [0, 1].  The divisor is a constant of the data set, not estimated
        from it, so scaling leaks nothing between a train and a test split.

    Returns
    -------
    X : ndarray of shape (1797, 64), float64
    digit : ndarray of shape (1797,), int
        The class 0 … 9 of each image.
    """
    from sklearn.datasets import load_digits as _sklearn_digits

    X, digit = _sklearn_digits(return_X_y=True)
    X = X.astype(np.float64)
    if scale:
        X /= DIGITS_MAX_PIXEL
    return X, digit.astype(np.int64)


@dataclass(frozen=True)
class SvmLightData:
    """The contents of one SVM-light file.

    Attributes
    ----------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
        The labels as written (float64); callers validate them for their use.
    qid : ndarray of shape (n_samples,) or None
        The ``qid:`` of each line, or None when the file has no qid column.
    path : str
    zero_based : bool
        Whether the file's feature indices were read as zero-based.
    file_width : int
        The features the file itself spans (its largest feature index, one-based);
        ``X`` is wider when ``n_features`` asked for more.
    query_file : str or None
        LightGBM's group-size file the query ids came from (``FILE.query``), or None.
    """

    X: sp.csr_matrix
    y: np.ndarray
    qid: np.ndarray | None
    path: str
    zero_based: bool = False
    file_width: int = 0

    @property
    def n_queries(self) -> int:
        return 1 if self.qid is None else int(np.unique(self.qid).size)

    @property
    def group(self) -> np.ndarray | None:
        """LightGBM's and XGBoost's ``group=``: each query's size, queries in the order of the rows.

        None for a file without queries.  ``np.unique(qid, return_counts=True)[1]`` is not this: it orders
        the sizes by qid, which is the rows' order only when the file's queries are sorted.

        Raises
        ------
        ValueError
            A query's rows are not together in the file (group sizes cannot say so): sort the rows by
            qid first (a stable sort keeps each query's order).
        """
        if self.qid is None:
            return None
        runs = QueryRuns(where=f" in {self.path!r} for group sizes", fix=", or pass qid= where it is taken")
        starts = runs.add(self.qid)
        return np.diff(np.r_[starts, self.qid.size])

    query_file: str | None = None


def read_svmlight(
    path,
    *,
    n_features: int | None = None,
    zero_based="auto",
    max_features: int = DEFAULT_MAX_FEATURES,
    queries_from_sidecar: bool = True,
    dtype=np.float64,
    dense: bool = False,
    n_threads: int | None = None,
    progress: bool = False,
) -> SvmLightData:
    """Read an SVM-light or LETOR file (optional ``qid:``, graded labels kept as written).

    rankopt's own reader (:mod:`rankopt.data.letor`): linear in the file, its blocks parsed on
    ``n_threads`` threads; gzip and bzip2 files are read as such (recognised by their first bytes);
    LF, CRLF and lone-CR line ends and ``#`` comments are taken.  Every value scikit-learn's
    ``load_svmlight_file`` reads is read to the same float.

    Parameters
    ----------
    path : str or os.PathLike
    n_features : int, optional
        Width of X (e.g. a model's).  The file may use fewer features; using
        more is an error.
    zero_based : bool or "auto", default "auto"
        Whether feature indices start at 0.  SVM-light defines them
        one-based; some writers (scikit-learn's ``dump_svmlight_file`` by
        default, some LETOR exports) start at 0.  ``"auto"`` (the default,
        as in scikit-learn's ``load_svmlight_file``) guesses: zero-based
        exactly when index 0 occurs in the file.  A guess
        can shift a test file that happens not to use feature 0 against its
        zero-based training file, so say which when you know it.
    max_features : int, default 2**20
        The widest X to build: a feature index beyond it is refused (a model
        trained on the file would need that many weights), as soon as the
        block holding it is read.
    queries_from_sidecar : bool, default True
        For a file without ``qid:``, read the query ids from LightGBM's group-size file beside it, as
        LightGBM does: ``FILE.query`` or ``FILE.group`` (for ``FILE.gz`` or ``FILE.bz2`` also
        ``FILE.query``), one group size per line, rows in file order (logged at INFO, and named in
        ``query_file``).  A file with ``qid:`` keeps its own, and the sidecar is ignored (logged).
    dtype : float64 or float32, default float64
        The features' type; a value beyond float32's range is refused rather than read as infinity.
    dense : bool, default False
        Return X as a dense ndarray (built block by block, never as a whole CSR first).
    n_threads : int, optional
        Threads parsing blocks; by default every core this process may use.
    progress : bool, default False
        Report the reading on stderr: a tqdm bar on a terminal, else a line per 5 % (or per minute).

    Raises
    ------
    OSError
        The file cannot be opened.
    ValueError
        The file is not valid SVM-light (the message names the line), is empty, names no feature, holds
        non-finite labels or values, uses more than ``n_features`` or ``max_features`` features, a feature
        index of 2³¹ or more or a query id of 2⁶³ or more, gives feature indices out of order or twice on a
        line, or gives ``qid:`` on some lines and not on others; its sidecar holds anything but positive
        group sizes summing to the file's rows.
    """
    from rankopt.data.letor import read_letor

    path = os.fspath(path)
    check_read_options(zero_based=zero_based, max_features=max_features, n_features=n_features, dtype=dtype)
    read = read_letor(
        path,
        dtype=dtype,
        zero_based=zero_based,
        n_features=n_features,
        max_features=max_features,
        dense=dense,
        n_threads=check_n_threads(n_threads),
        progress=progress,
    )
    data = SvmLightData(
        X=read.X, y=read.y, qid=read.qid, path=path, zero_based=read.zero_based, file_width=read.file_width
    )
    return _with_sidecar_queries(data) if queries_from_sidecar else data


def check_read_options(*, zero_based="auto", max_features=DEFAULT_MAX_FEATURES, n_features=None, dtype=np.float64):
    """Refuse reader options out of their range, before a file is opened."""
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"expected zero_based to be True, False or 'auto', got {zero_based!r} instead")
    if isinstance(max_features, bool) or not isinstance(max_features, numbers.Integral) or max_features < 1:
        raise ValueError(f"expected max_features to be a positive integer, got {max_features!r} instead")
    if n_features is not None and (
        isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral) or n_features < 1
    ):
        raise ValueError(f"expected n_features to be a positive integer, got {n_features!r} instead")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"expected dtype float32 or float64, got {np.dtype(dtype)} instead")


#: LightGBM's sidecars of group sizes: FILE.query (or FILE.group) beside the data file FILE.
SIDECAR_SUFFIXES = (".query", ".group")
#: Compressed files whose sidecar may be named after the uncompressed file (rank.train.gz → rank.train.query).
_COMPRESSED_SUFFIXES = (".gz", ".bz2")


def sidecar_candidates(path: str) -> list[str]:
    """Where LightGBM's group sizes for ``path`` may be: ``path.query`` or ``path.group``, and for ``FILE.gz``
    also ``FILE.query`` or ``FILE.group``."""
    stems = [path] + [path[: -len(suffix)] for suffix in _COMPRESSED_SUFFIXES if path.endswith(suffix)]
    return [stem + sidecar for stem in stems for sidecar in SIDECAR_SUFFIXES]


def _with_sidecar_queries(data: SvmLightData) -> SvmLightData:
    """``data`` with query ids from LightGBM's ``FILE.query`` when the file has no qid: and a sidecar exists."""
    sidecar = next((c for c in sidecar_candidates(data.path) if os.path.isfile(c)), None)
    if sidecar is None:
        return data
    if data.qid is not None:
        logger.info("%r has qid: on its lines; %r is ignored", data.path, sidecar)
        return data
    sizes = read_group_sizes(sidecar)
    qid = query_ids_from_group(sizes, data.X.shape[0], name=f"the group sizes in {sidecar!r}")
    logger.info("%d queries from LightGBM's group sizes in %r", len(sizes), sidecar)
    return dataclasses.replace(data, qid=qid, query_file=sidecar)


def read_group_sizes(path: str) -> list[int]:
    """One positive integer per non-blank line, as LightGBM writes its ``.query`` files."""
    sizes = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            text = line.strip()
            if not text:
                continue
            if not (text.isascii() and text.isdigit()) or int(text) == 0:
                raise ValueError(
                    f"expected a positive group size on every line of {path!r} (LightGBM's query file), got "
                    f"{text[:40]!r} on line {number} instead"
                )
            sizes.append(int(text))
    if not sizes:
        raise ValueError(f"expected group sizes in {path!r} (LightGBM's query file), got an empty file instead")
    return sizes


def write_svmlight(path, X, y, *, qid=None, comment: str | None = None) -> None:
    """Write X and labels y as SVM-light with one-based feature indices.

    Integer-valued labels are written without a decimal point (``1``, ``-1``).
    """
    from sklearn.datasets import dump_svmlight_file

    X = check_matrix(X)
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"expected y of shape ({X.shape[0]},), got {y.shape} instead")
    if y.dtype == np.bool_ or (np.issubdtype(y.dtype, np.floating) and np.all(y == np.round(y))):
        y = y.astype(np.int64)
    dump_svmlight_file(X, y, os.fspath(path), zero_based=False, query_id=qid, comment=comment)
