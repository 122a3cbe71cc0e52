"""Dataset loaders: scikit-learn's bundled digits and SVM-light/LETOR files.

Nothing here downloads: the digits ship inside scikit-learn, and SVM-light
files are read with scikit-learn's parser.  (The MSLR sample, which is
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

from rankopt._validation import query_ids_from_group
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

    query_file: str | None = None


def read_svmlight(
    path,
    *,
    n_features: int | None = None,
    zero_based="auto",
    max_features: int = DEFAULT_MAX_FEATURES,
    queries_from_sidecar: bool = True,
) -> SvmLightData:
    """Read an SVM-light or LETOR file (optional ``qid:``, graded labels kept as written).

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
        trained on the file would need that many weights).
    queries_from_sidecar : bool, default True
        For a file without ``qid:``, read the query ids from LightGBM's group-size file beside it, as
        LightGBM does: ``FILE.query`` (for ``FILE.gz`` or ``FILE.bz2`` also ``FILE.query``), one group
        size per line, rows in file order (logged at INFO, and named in ``query_file``).  A file with
        ``qid:`` keeps its own, and the sidecar is ignored (logged).

    Raises
    ------
    OSError
        The file cannot be opened.
    ValueError
        The file is not valid SVM-light, is empty, names no feature, holds non-finite values,
        uses more than ``n_features`` or ``max_features`` features, a feature
        index of 2³¹ or more or a query id of 2⁶³ or more, or gives ``qid:``
        on some lines and not on others; its sidecar holds anything but positive group sizes summing to
        the file's rows.
    """
    path = os.fspath(path)
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"expected zero_based to be True, False or 'auto', got {zero_based!r} instead")
    if isinstance(max_features, bool) or not isinstance(max_features, numbers.Integral) or max_features < 1:
        raise ValueError(f"expected max_features to be a positive integer, got {max_features!r} instead")
    X, y, qid = _parse_svmlight(path, zero_based)
    if X.shape[0] == 0:
        raise ValueError(f"expected at least one sample in {path!r}, got an empty file instead")
    if qid.size not in (0, X.shape[0]):
        raise ValueError(
            f"expected qid: on every line of {path!r} or on none, got it on {qid.size} of {X.shape[0]} lines "
            f"(the first line without it: {_first_line_without_qid(path)})"
        )

    X, zero_based, file_width = _fit_columns(X, path, zero_based, n_features, max_features)
    try:
        X = check_matrix(X, name=f"the features of {path!r}")
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    data = SvmLightData(
        X=X,
        y=np.asarray(y, dtype=np.float64),
        qid=qid if qid.size else None,
        path=path,
        zero_based=bool(zero_based),
        file_width=file_width,
    )
    return _with_sidecar_queries(data) if queries_from_sidecar else data


def _fit_columns(X, path: str, zero_based, n_features, max_features):
    """X with its columns as the file's indices say ("auto": zero-based exactly when index 0 occurs),
    widened to ``n_features``: (X, zero_based, the file's own width)."""
    if zero_based == "auto":
        zero_based = bool(X.nnz) and int(X.indices.min()) == 0
        if not zero_based:  # column 0 is empty: the indices are one-based
            X = X[:, 1:] if X.shape[1] > 1 else sp.csr_matrix((X.shape[0], 0), dtype=X.dtype)
    if X.shape[1] > max_features:
        raise ValueError(
            f"expected {path!r} to use at most {max_features} features, got a file {X.shape[1]} features wide "
            "instead; pass max_features= to read wider data (on the command line --max-features)"
        )
    file_width = X.shape[1]
    if file_width == 0:
        raise ValueError(
            f"expected feature:value pairs in {path!r}, got lines holding a label only (no line names a "
            "feature); if it is LightGBM's group-size file (FILE.query), pass the data file FILE instead"
        )
    if n_features is not None:
        if X.shape[1] > n_features:
            base = "zero" if zero_based else "one"
            raise ValueError(
                f"expected {path!r} to use at most {n_features} features, got feature index "
                f"{X.shape[1] - (1 if zero_based else 0)} instead (read as {base}-based; if the "
                "training file counted from the other base, say which with zero_based / --zero-based)"
            )
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    return X, zero_based, file_width


def _parse_svmlight(path: str, zero_based):
    """scikit-learn's reader on ``path``: (X, y, qid), its failures as one ValueError naming the file."""
    from sklearn.datasets import load_svmlight_file

    try:
        return load_svmlight_file(path, zero_based=zero_based is not False, query_id=True)
    except OverflowError:
        raise ValueError(
            f"cannot read {path!r} as SVM-light: a feature index of 2**31 or more, or a qid of 2**63 or more"
        ) from None
    except ValueError as exc:
        hint = ""
        if zero_based is False and "Invalid index 0" in str(exc):
            hint = (
                " (the file counts features from 0, as scikit-learn's dump_svmlight_file does by default: "
                "read it with zero_based=True or 'auto', on the command line --zero-based yes or auto)"
            )
        raise ValueError(f"cannot read {path!r} as SVM-light: {exc}{hint}") from None


#: LightGBM's sidecar of group sizes: FILE.query beside the data file FILE.
SIDECAR_SUFFIX = ".query"
#: Compressed files whose sidecar may be named after the uncompressed file (rank.train.gz → rank.train.query).
_COMPRESSED_SUFFIXES = (".gz", ".bz2")


def sidecar_candidates(path: str) -> list[str]:
    """Where LightGBM's group sizes for ``path`` may be: ``path.query``, and for ``FILE.gz`` also ``FILE.query``."""
    candidates = [path + SIDECAR_SUFFIX]
    for suffix in _COMPRESSED_SUFFIXES:
        if path.endswith(suffix):
            candidates.append(path[: -len(suffix)] + SIDECAR_SUFFIX)
    return candidates


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


def _first_line_without_qid(path: str) -> str:
    """``line N: <start of the line>`` for the first sample line of ``path`` without a ``qid:``."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.split(b"#", 1)[0].strip()
            if line and not any(token.startswith(b"qid:") for token in line.split()):
                return f"line {number}: {line[:60].decode('utf-8', errors='replace')!r}"
    return "none found"  # pragma: no cover - the reader found one


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
