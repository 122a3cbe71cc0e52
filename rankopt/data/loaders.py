"""Dataset loaders: scikit-learn's bundled digits and SVM-light files.

Nothing here downloads: the digits ship inside scikit-learn, and SVM-light
files are read with scikit-learn's parser.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from rankopt._validation import check_matrix

__all__ = ["SvmLightData", "load_digits", "read_svmlight", "write_svmlight"]

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
    """

    X: sp.csr_matrix
    y: np.ndarray
    qid: np.ndarray | None
    path: str

    @property
    def n_queries(self) -> int:
        return 1 if self.qid is None else int(np.unique(self.qid).size)


def read_svmlight(path, *, n_features: int | None = None) -> SvmLightData:
    """Read an SVM-light file (one-based feature indices, optional ``qid:``).

    Feature indices are read as one-based, as the SVM-light format defines
    them, rather than guessed per file: a guess could shift the features of
    a test file against those of the training file.

    Parameters
    ----------
    path : str or os.PathLike
    n_features : int, optional
        Width of X (e.g. a model's).  The file may use fewer features; using
        more is an error.

    Raises
    ------
    OSError
        The file cannot be opened.
    ValueError
        The file is not valid SVM-light, is empty, holds non-finite values or
        uses more than ``n_features`` features.
    """
    from sklearn.datasets import load_svmlight_file

    path = os.fspath(path)
    try:
        X, y, qid = load_svmlight_file(path, zero_based=False, query_id=True)
    except ValueError as exc:
        raise ValueError(f"cannot read {path!r} as SVM-light: {exc}") from None
    if X.shape[0] == 0:
        raise ValueError(f"expected at least one sample in {path!r}, got an empty file instead")
    if n_features is not None:
        if X.shape[1] > n_features:
            raise ValueError(
                f"expected {path!r} to use at most {n_features} features, got feature index "
                f"{X.shape[1]} instead"
            )
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    try:
        X = check_matrix(X, name=f"the features of {path!r}")
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    return SvmLightData(X=X, y=np.asarray(y, dtype=np.float64), qid=qid if qid.size else None, path=path)


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
