"""Input validation shared by the public entry points.

The Cython kernels run without bounds checks, so everything that reaches
them passes through here first.  Errors read "expected …, got … instead".
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp


def as_float_vector(values, name: str) -> np.ndarray:
    """A 1-D finite float array (float32 kept, anything else made float64)."""
    try:
        arr = np.asarray(values)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"expected {name} to be a 1-D array of numbers, got {type(values).__name__}: {exc}") from exc
    if arr.ndim != 1:
        raise ValueError(f"expected {name} to be 1-D, got an array of shape {arr.shape} instead")
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.number)):
        raise ValueError(f"expected {name} to hold real numbers, got dtype {arr.dtype} instead")
    if np.iscomplexobj(arr):
        raise ValueError(f"expected {name} to hold real numbers, got complex values instead")
    if arr.dtype != np.float32:
        arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"expected {name} to be finite, got NaN or infinity instead")
    return np.ascontiguousarray(arr)


def check_scores(pos_scores, neg_scores) -> tuple[np.ndarray, np.ndarray]:
    """Validate the two score arrays of loss-augmented inference; share a dtype."""
    pos = as_float_vector(pos_scores, "pos_scores")
    neg = as_float_vector(neg_scores, "neg_scores")
    if pos.size == 0:
        raise ValueError("expected at least one positive score, got an empty pos_scores instead")
    if neg.size == 0:
        raise ValueError("expected at least one negative score, got an empty neg_scores instead")
    if pos.dtype != neg.dtype:
        pos, neg = pos.astype(np.float64), neg.astype(np.float64)
    return pos, neg


def check_matrix(X, name: str = "X"):
    """A 2-D, non-empty, finite design matrix: dense float32/float64 or CSR."""
    if sp.issparse(X):
        X = sp.csr_matrix(X) if X.format != "csr" else X
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        data = X.data
    else:
        try:
            X = np.asarray(X)
        except Exception as exc:
            raise ValueError(f"expected {name} to be a 2-D array, got {type(X).__name__}: {exc}") from exc
        if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_):
            raise ValueError(f"expected {name} to hold real numbers, got dtype {X.dtype} instead")
        if np.iscomplexobj(X):
            raise ValueError(f"expected {name} to hold real numbers, got complex values instead")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        data = X
    if X.ndim != 2:
        raise ValueError(f"expected {name} to be 2-D, got an array of shape {X.shape} instead")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"expected a non-empty {name}, got shape {X.shape} instead")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"expected {name} to be finite, got NaN or infinity instead")
    return X


def check_binary_labels(y, n_samples: int | None = None, name: str = "y") -> np.ndarray:
    """Labels in {0, 1} or {-1, 1} (both classes present) as a bool array."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"expected {name} to be 1-D, got an array of shape {y.shape} instead")
    if n_samples is not None and y.shape[0] != n_samples:
        raise ValueError(f"expected {name} to have {n_samples} entries (one per row of X), got {y.shape[0]} instead")
    if y.size == 0:
        raise ValueError(f"expected a non-empty {name}, got an empty array instead")
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_):
        raise ValueError(f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got dtype {y.dtype} instead")
    if np.issubdtype(y.dtype, np.floating) and not np.all(np.isfinite(y)):
        raise ValueError(f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got NaN or infinity instead")
    values = set(np.unique(y).tolist())
    if not (values <= {0, 1} or values <= {-1, 1}):
        raise ValueError(
            f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got {sorted(values)} instead"
        )
    positive = y > 0
    if positive.all() or not positive.any():
        raise ValueError(
            f"expected {name} to contain both a positive and a negative sample, "
            f"got only the label {y.flat[0]!r} instead"
        )
    return positive


def check_positive_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"expected {name} to be a positive finite number, got {value!r} instead")
    return float(value)


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"expected {name} to be a positive integer, got {value!r} instead")
    return int(value)
