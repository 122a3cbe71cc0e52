"""Input validation shared by the public entry points.

The Cython kernels run without bounds checks, so everything that reaches
them passes through here first.  Errors read "expected …, got … instead".
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


def as_float_vector(values, name: str, *, scan: bool = True) -> np.ndarray:
    """A 1-D finite float array (float32 kept, anything else made float64).

    ``scan=False`` leaves the values unread (a kernel that reads them anyway
    checks them: :func:`check_negative_scores`'s contract).
    """
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
        arr = arr.astype(np.float64, copy=False)
    if scan and arr.size and not math.isfinite(largest_magnitude(arr)):
        raise not_finite_error(name)
    return np.ascontiguousarray(arr)


#: The reductions of a loss over queries, as PyTorch's losses name them.
REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction) -> str:
    """``reduction`` if it is one of :data:`REDUCTIONS`, else "expected …, got … instead"."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"expected reduction to be one of {list(REDUCTIONS)}, got {reduction!r} instead")
    return reduction


def not_finite_error(name: str) -> ValueError:
    """The one refusal of an array holding NaN or infinity, wherever it is detected (NumPy or a kernel)."""
    return ValueError(f"expected {name} to be finite, got NaN or infinity instead")


def nothing_kept_error() -> ValueError:
    """The one refusal of a padded batch's mask that keeps no document, on any device."""
    return ValueError("expected mask to keep some document, got a mask that is False everywhere instead")


def negative_grade_error(name: str, lowest: str) -> ValueError:
    """The one refusal of a negative grade other than the −1 of {−1, 1} labels (``lowest`` as printed), on any
    device."""
    return ValueError(
        f"expected {name} to hold integer relevance grades >= 0 (or binary labels in {{-1, 1}}), got {lowest} instead"
    )


def check_scores(pos_scores, neg_scores, *, scan_negatives: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Validate the two score arrays of loss-augmented inference; share a dtype.

    Both must be finite and their sums over the query overflow-safe
    (:func:`check_score_sums`).  With ``scan_negatives=False`` the negatives'
    values are not read here: the caller checks them
    (:func:`check_negative_scores`, or a kernel's first pass over them, with
    the same errors).
    """
    pos = as_float_vector(pos_scores, "pos_scores")
    neg = as_float_vector(neg_scores, "neg_scores", scan=scan_negatives)
    if pos.size == 0:
        raise ValueError("expected at least one positive score, got an empty pos_scores instead")
    if neg.size == 0:
        raise ValueError("expected at least one negative score, got an empty neg_scores instead")
    if pos.dtype != neg.dtype:
        pos, neg = pos.astype(np.float64), neg.astype(np.float64)
    if scan_negatives:
        check_score_sums(max(largest_magnitude(pos), largest_magnitude(neg)), pos.size + neg.size, pos.dtype)
    return pos, neg


def check_negative_scores(pos: np.ndarray, neg: np.ndarray) -> None:
    """The part of :func:`check_scores` that ``scan_negatives=False`` left out, on its output."""
    largest_neg = largest_magnitude(neg)
    if not math.isfinite(largest_neg):
        raise not_finite_error("neg_scores")
    check_score_sums(max(largest_magnitude(pos), largest_neg), pos.size + neg.size, pos.dtype)


def check_query_scores(scores: np.ndarray) -> None:
    """One query's scores as a problem computed them (a 1-D float array): finite, and sums that cannot overflow.

    :func:`check_scores` for a caller that splits the array itself: one reduction over all of it.
    """
    largest = largest_magnitude(scores)
    if not math.isfinite(largest):
        raise ValueError("expected finite scores, got NaN or infinity instead; rescale the features or w")
    check_score_sums(largest, scores.size, scores.dtype)


#: log2 of the largest |score| × (documents of a query) inference accepts, per score type: the
#: exact methods add up to n scores and take differences of such sums, so every sum stays
#: at least 2⁸ below the type's overflow (float64: 2¹⁰²⁴, float32: 2¹²⁸).
_SCORE_SUM_LOG2 = {np.dtype(np.float64): 1016, np.dtype(np.float32): 120}


def largest_magnitude(values: np.ndarray) -> float:
    """max |value| of a non-empty float array, NaN when it holds a NaN (inf with an infinity).

    Two reductions without a temporary (``np.abs`` would allocate one as large as the array): the
    finiteness check and the overflow-safe-sum check of the scores in one go.
    """
    low, high = float(np.min(values)), float(np.max(values))
    if math.isnan(low) or math.isnan(high):
        return math.nan
    return max(-low, high)


def score_sum_bound(dtype) -> float:
    """The largest |score| × (documents of a query) inference accepts for ``dtype`` scores."""
    return 2.0 ** _SCORE_SUM_LOG2[np.dtype(dtype)]


def check_score_sums(largest: float, n_documents: int, dtype) -> None:
    """Refuse scores whose sums over one query could overflow: inference would be wrong, not just rounded.

    Kernels that check scores themselves compare the same doubles (``_scan.pxd``).
    """
    if largest * n_documents > score_sum_bound(dtype):
        raise score_sums_error(largest, n_documents, dtype)


def score_sums_error(largest: float, n_documents: int, dtype) -> ValueError:
    """:func:`check_score_sums`'s refusal, for a kernel that found the scores over the bound itself."""
    return ValueError(
        f"expected scores whose sums over a query stay finite, got |score| up to {largest:.3g} over "
        f"{n_documents} documents (the product must be at most 2**{_SCORE_SUM_LOG2[np.dtype(dtype)]} = "
        f"{score_sum_bound(dtype):.3g} for {np.dtype(dtype).name} scores) instead; scale the features or w down"
    )


def _numbers_from_objects(arr: np.ndarray, name: str) -> np.ndarray:
    """An object array of numbers (as pandas and mixed lists give) as float64.

    A non-numeric entry keeps NumPy's exception type (TypeError for, say, a
    dict; ValueError for an unparsable string), as scikit-learn's checks expect.
    """
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"expected {name} to hold real numbers, got an object array with a non-numeric entry instead: {exc}"
        ) from exc


def describe_values(values, limit: int = 5) -> str:
    """The distinct values of ``values`` for an error message: a few, sorted when comparable.

    "'neg', 'pos'" or "'a', 'b', 'c', 'd', 'e', … (7 distinct)", so that the
    reader sees which labels they passed rather than only their dtype.
    """
    distinct = list(dict.fromkeys(np.asarray(values, dtype=object).ravel().tolist()))
    try:
        distinct.sort()
    except TypeError:  # mixed types (a string and a number) keep their order of appearance
        pass
    shown = ", ".join(repr(value) for value in distinct[:limit])
    return shown if len(distinct) <= limit else f"{shown}, … ({len(distinct)} distinct)"


def _labels_from_objects(y: np.ndarray, name: str, expected: str) -> np.ndarray:
    """An object array of labels as float64, or an error that shows the labels given."""
    try:
        return y.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"expected {name} to hold {expected}, got the labels {describe_values(y)} instead") from exc


#: Entries per block when checking a large array for NaN and infinity.
_FINITE_BLOCK = 1 << 20


def all_finite(values: np.ndarray) -> bool:
    """Whether every entry of ``values`` is finite, checked block by block.

    ``np.isfinite`` over the whole array would allocate a boolean temporary
    as large as the data has entries (640 MB for 10⁷ × 64); blocks of
    leading-axis slices keep the temporary at about 1 MB.
    """
    values = np.asarray(values)
    if values.size <= _FINITE_BLOCK or values.ndim == 0:
        return bool(np.isfinite(values).all())
    step = max(1, _FINITE_BLOCK // max(1, values[0].size))
    return all(bool(np.isfinite(values[i : i + step]).all()) for i in range(0, values.shape[0], step))


def check_non_empty_shape(shape, name: str = "X") -> None:
    """At least one sample and one feature, for any backend's 2-D shape."""
    for axis, what in ((0, "sample"), (1, "feature")):
        if shape[axis] == 0:
            # the wording after "got" is scikit-learn's, which its estimator checks match
            raise ValueError(
                f"expected a non-empty {name}, got 0 {what}(s) (shape={shape}) while a minimum of 1 is required."
            )


def check_in_memory_matrix(X, name: str = "X"):
    """A 2-D, non-empty, finite in-memory design matrix: dense float32/float64 or CSR.

    Lists, integer and boolean arrays and other sparse formats are converted;
    anything else is refused.  Arrays that live elsewhere (Dask) are checked
    by their own backend: :func:`rankopt.data.backends.check_matrix` is the
    entry point that dispatches to both.
    """
    if sp.issparse(X):
        X = sp.csr_matrix(X) if X.format != "csr" else X
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        if not X.has_canonical_format:
            # SciPy sorts indices and sums duplicates in place on first need (abs, max along an axis):
            # done here on a copy, the caller's matrix is never changed.
            X = X.copy()
            X.sum_duplicates()
        data = X.data
    else:
        try:
            X = np.asarray(X)
        except Exception as exc:
            raise ValueError(f"expected {name} to be a 2-D array, got {type(X).__name__}: {exc}") from exc
        if X.dtype == object:
            X = _numbers_from_objects(X, name)
        if not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_):
            raise ValueError(f"expected {name} to hold real numbers, got dtype {X.dtype} instead")
        if np.iscomplexobj(X):
            raise ValueError(
                f"expected {name} to hold real numbers, got complex values instead (Complex data not supported)"
            )
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        data = X
    if X.ndim != 2:
        raise ValueError(
            f"expected {name} to be 2-D, got an array of shape {X.shape} instead. Reshape your data with "
            f"{name}.reshape(-1, 1) if it has a single feature or {name}.reshape(1, -1) if it is a single sample"
        )
    check_non_empty_shape(X.shape, name)
    if not all_finite(data):
        raise ValueError(f"expected {name} to be finite, got NaN or infinity instead")
    return X


def check_feature_names(estimator, X, *, reset: bool) -> None:
    """Set (``reset=True``, in fit) or check ``estimator.feature_names_in_`` from X's column names.

    scikit-learn's own check, so its behaviour and messages: fitting on a
    DataFrame with string column names stores them; at prediction, names
    that differ from fit's or come in another order raise a ValueError
    listing them, and names on one side only warn.  ``X`` is the input as
    given (before :func:`check_matrix` turns it into an array); input
    without column names — arrays, lists of bags, Dask arrays — has none.
    """
    # Imported here: the plugin registry imports this module, and ``rankopt plugins``
    # must not pay a second for scikit-learn.
    from sklearn.utils.validation import _check_feature_names

    frames = sys.modules.get("dask.dataframe")
    if frames is not None and isinstance(X, frames.DataFrame):
        X = X._meta  # the frame's empty pandas twin: its column names, without computing a partition
    _check_feature_names(estimator, X, reset=reset)


def check_n_features(estimator, n_features: int, name: str = "X") -> None:
    """Refuse input with another number of features than ``estimator`` was fitted on.

    One sentence, in scikit-learn's words, which its estimator checks match.
    """
    expected = estimator.n_features_in_
    if n_features != expected:
        raise ValueError(
            f"{name} has {n_features} features, but {type(estimator).__name__} is expecting {expected} "
            "features as input, as in fit"
        )


def check_eval_sets(eval_set) -> list[tuple]:
    """The validation sets as 3-tuples ``(X_val, y_val, qid_val)`` (``qid_val`` None if absent).

    ``eval_set`` is one set — a tuple ``(X_val, y_val)`` or ``(X_val, y_val,
    qid_val)`` (a list of two or three arrays is read the same way) — or a
    list of such tuples, LightGBM's form.  Only the structure is checked
    here; the parts are checked like fit's X, y and qid by the estimator.
    """
    expected = "eval_set=(X_val, y_val[, qid_val]) or a list of such tuples"
    if isinstance(eval_set, list) and eval_set and all(isinstance(item, tuple) for item in eval_set):
        sets = eval_set
    elif isinstance(eval_set, (tuple, list)):
        sets = [eval_set]
    else:
        raise ValueError(f"expected {expected}, got {type(eval_set).__name__} instead")
    checked = []
    for item in sets:
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            got = (
                f"a {type(item).__name__} of {len(item)} items"
                if isinstance(item, (tuple, list))
                else type(item).__name__
            )
            raise ValueError(f"expected {expected}, got {got} instead")
        X_val, y_val, *rest = item
        checked.append((X_val, y_val, rest[0] if rest else None))
    return checked


def _label_vector(y, n_samples: int | None, name: str, what: str) -> np.ndarray:
    """``y`` as a non-empty 1-D array, one entry per row of X when ``n_samples`` is given; ``what`` the
    labels expected (for the message when an object array holds something else)."""
    y = np.asarray(y)
    if y.dtype == object:
        y = _labels_from_objects(y, name, what)
    if y.ndim != 1:
        raise ValueError(f"expected {name} to be 1-D, got an array of shape {y.shape} instead")
    if n_samples is not None and y.shape[0] != n_samples:
        raise ValueError(f"expected {name} to have {n_samples} entries (one per row of X), got {y.shape[0]} instead")
    if y.size == 0:
        raise ValueError(f"expected a non-empty {name}, got an empty array instead")
    return y


def check_binary_labels(y, n_samples: int | None = None, name: str = "y") -> np.ndarray:
    """Labels in {0, 1} or {-1, 1} (both classes present) as a bool array."""
    if y is None:
        raise ValueError(
            f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got None instead: "
            f"requires {name} to be passed, but the target {name} is None"
        )
    y = _label_vector(y, n_samples, name, "labels in {0, 1} or {-1, 1}")
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_):
        raise ValueError(
            f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got the labels {describe_values(y)} "
            f"(dtype {y.dtype}) instead"
        )
    if np.issubdtype(y.dtype, np.floating) and not np.all(np.isfinite(y)):
        raise ValueError(f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got NaN or infinity instead")
    values = set(np.unique(y).tolist())
    if not (values <= {0, 1} or values <= {-1, 1}):
        raise ValueError(f"expected {name} to hold labels in {{0, 1}} or {{-1, 1}}, got {sorted(values)} instead")
    positive = y > 0
    if positive.all() or not positive.any():
        raise ValueError(
            f"expected {name} to contain both a positive and a negative sample, "
            f"got only one class (label {y.flat[0].item()!r}) instead"
        )
    return positive


def check_positive_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected {name} to be a positive finite number, got {value!r} instead")
    return float(value)


def check_n_threads(n_threads) -> int | None:
    """Threads for a compiled kernel or a reader: a positive integer, or None for the default."""
    if n_threads is not None and (
        isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral) or n_threads < 1
    ):
        raise ValueError(f"expected n_threads to be a positive integer or None, got {n_threads!r} instead")
    return None if n_threads is None else int(n_threads)


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"expected {name} to be a positive integer, got {value!r} instead")
    return int(value)


# ------------------------------------------------------------------ queries and graded labels


@dataclass(frozen=True)
class QueryIndex:
    """Which rows belong to which query.

    Rows of one query need not be contiguous: ``order`` lists the rows
    grouped by query — queries by increasing qid, rows within a query in
    their input order (a stable sort) — and ``offsets[q]:offsets[q + 1]``
    is the q-th query's slice of ``order``.

    Attributes
    ----------
    order : ndarray of intp, shape (n_samples,)
        Row indices grouped by query.
    offsets : ndarray of intp, shape (n_queries + 1,)
    qid : ndarray of int64, shape (n_queries,)
        The query id of each group, increasing.
    """

    order: np.ndarray
    offsets: np.ndarray
    qid: np.ndarray

    @property
    def n_queries(self) -> int:
        return self.qid.size

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def single(cls, n_samples: int) -> QueryIndex:
        """All rows as one query (qid 0)."""
        return cls(
            np.arange(n_samples, dtype=np.intp), np.array([0, n_samples], dtype=np.intp), np.zeros(1, dtype=np.int64)
        )


def check_qid(qid, n_samples: int, name: str = "qid") -> QueryIndex:
    """Integer query ids, one per sample, as a :class:`QueryIndex`.

    Integer dtypes, and floats holding whole numbers (as a parser may give),
    are accepted; NaN, infinity and fractions are refused, as is anything
    but one id per row of X.
    """
    return group_queries(query_ids(qid, n_samples, name))


def query_ids(qid, n_samples: int, name: str = "qid", per: str = "row of X") -> np.ndarray:
    """The checks of :func:`check_qid`: ``n_samples`` integer query ids as int64 (one per ``per``)."""
    if qid is None:
        raise ValueError(f"expected {name} to hold one integer query id per sample, got None instead")
    arr = np.asarray(qid)
    if arr.dtype == object:
        arr = _query_ids_from_objects(arr, name)
    if arr.ndim != 1:
        raise ValueError(f"expected {name} to be 1-D, got an array of shape {arr.shape} instead")
    if arr.shape[0] != n_samples:
        raise ValueError(f"expected {name} to have {n_samples} entries (one per {per}), got {arr.shape[0]} instead")
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise ValueError(
            f"expected {name} to hold integer query ids, got {describe_values(arr)} (dtype {arr.dtype}) instead"
        )
    check_whole_numbers(arr, name, "integer query ids")
    if np.issubdtype(arr.dtype, np.floating) and arr.size and np.max(np.abs(arr)) >= 2.0**53:
        raise _float_ids_error(name, arr[np.abs(arr) >= 2.0**53])
    _check_fits_int64(arr, name, "integer query ids")
    return arr.astype(np.int64, copy=False)


def _query_ids_from_objects(arr: np.ndarray, name: str) -> np.ndarray:
    """An object array of query ids (Python ints, the numeric strings of a pandas or Dask string column) as
    numbers, integers kept exact: through float64 alone, distinct ids from 2**53 on would merge into one query."""
    as_float = _numbers_from_objects(arr, name)
    if as_float.size == 0 or not np.all(np.isfinite(as_float)) or np.max(np.abs(as_float)) < 2.0**53:
        return as_float  # exact below 2**53; NaN and infinity are refused by the caller's checks
    check_whole_numbers(as_float, name, "integer query ids")
    big = arr[np.abs(as_float) >= 2.0**53]
    if any(isinstance(value, (float, np.floating)) for value in big.tolist()):
        raise _float_ids_error(name, big)
    try:
        return arr.astype(np.int64)  # int() of each entry: exact for integers and integer strings
    except OverflowError:
        _check_fits_int64(as_float, name, "integer query ids")
        raise
    except (TypeError, ValueError):  # a float written as a string: "1e20"
        raise _float_ids_error(name, big) from None


def _float_ids_error(name: str, big: np.ndarray) -> ValueError:
    return ValueError(
        f"expected {name} to hold integer query ids, got floats from 2**53 on ({describe_values(big, limit=2)}), "
        "where distinct ids may already have merged into one; pass them as integers (int64, or strings of integers)"
    )


def check_group_sizes(group, n_samples: int, name: str = "group") -> np.ndarray:
    """LightGBM's ``group``: the sizes of contiguous queries, positive integers summing to ``n_samples``.

    Each size is checked as a Python integer before any cast, so sizes whose
    int64 sum would wrap are refused rather than summed; object arrays are
    checked entry by entry (a fraction or None is refused, never truncated).
    Returns the sizes as int64.
    """
    try:
        sizes = np.asarray(group)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"expected {name} to be a 1-D list of group sizes, got {type(group).__name__}: {exc}") from exc
    if sizes.ndim != 1 or sizes.size == 0:
        raise ValueError(f"expected {name} to be a non-empty 1-D list of group sizes, got shape {sizes.shape} instead")
    if sizes.dtype == np.bool_ or not (np.issubdtype(sizes.dtype, np.number) or sizes.dtype == object):
        raise ValueError(f"expected {name} to hold integer group sizes, got dtype {sizes.dtype} instead")
    total = 0
    for position, size in enumerate(sizes.tolist()):
        if isinstance(size, float) and size.is_integer():
            size = int(size)
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise ValueError(f"expected {name} to hold integer group sizes, got {size!r} at {name}[{position}] instead")
        if size < 1:
            raise ValueError(
                f"expected {name} to hold positive group sizes, got {size} at {name}[{position}] instead "
                "(an empty query has no rows: leave it out)"
            )
        total += int(size)
        if total > n_samples:
            raise ValueError(
                f"expected {name} to hold group sizes summing to the number of rows ({n_samples}), got sizes "
                f"whose sum passes it at {name}[{position}] = {size} instead"
            )
    if total != n_samples:
        raise ValueError(
            f"expected {name} to hold group sizes summing to the number of rows ({n_samples}), got "
            f"{sizes.size} sizes summing to {total} instead"
        )
    return sizes.astype(np.int64)


class QueryRuns:
    """The runs of equal query ids in rows met a block at a time, refusing a query id met again after other
    queries (its rows apart): the one check of a query store's writer, its file's first pass and the group
    sizes of a read file.  ``where`` and ``fix`` go into the message."""

    def __init__(self, where: str = "", fix: str = ""):
        self.where, self.fix = where, fix
        self.seen: set[int] = set()
        self.last: int | None = None

    def add(self, qid: np.ndarray, *, continues: bool = True) -> np.ndarray:
        """The start of each run in these rows; ``continues``: the first run may go on from the last rows'."""
        if qid.size == 0:
            return np.empty(0, dtype=np.intp)
        starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
        ids = qid[starts].tolist()
        new: set[int] = set()
        for number, query in enumerate(ids):
            if number == 0 and continues and query == self.last:
                continue
            if query in self.seen or query in new:
                raise ValueError(
                    f"expected the rows of each query together{self.where}, got query id {query} again after other "
                    f"queries: sort the rows by qid (a stable sort keeps each query's order){self.fix}"
                )
            new.add(query)
        self.seen |= new
        self.last = ids[-1]
        return starts


def query_ids_from_group(group, n_samples: int, name: str = "group") -> np.ndarray:
    """One int64 query id per row from LightGBM's contiguous group sizes (:func:`check_group_sizes`)."""
    sizes = check_group_sizes(group, n_samples, name)
    return np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)


def qid_or_group(qid, group, n_samples: int, names: tuple[str, str] = ("qid", "group")):
    """``qid`` as given, or one query id per row from ``group``'s sizes; None for neither.

    The one place where ``fit``, ``score``, eval sets, :class:`~rankopt.RankSVMCV`
    and the metrics over queries accept LightGBM's ``group=`` instead of ``qid=``.
    """
    if group is None:
        return qid
    if qid is not None:
        raise ValueError(f"expected {names[0]} or {names[1]}, got both instead")
    return query_ids_from_group(group, n_samples, names[1])


def check_hinge_layout(
    scores_shape: tuple,
    y_shape: tuple,
    *,
    y_dtype,
    y_numeric: bool,
    mask_shape: tuple | None = None,
    mask_dtype=None,
    mask_boolean: bool = True,
    queries_given: bool = False,
) -> None:
    """The layout of a structured hinge's batch, on shapes alone (any array type's): 1-D scores, whose queries
    ``qid`` or ``group`` give (``queries_given``), or padded (B, L) scores, each row a query and a boolean mask
    of their shape keeping its documents; integer grades ``y`` (``y_numeric``: not bool, not complex) of the
    scores' shape."""
    if len(scores_shape) == 2:
        if queries_given:
            raise ValueError(
                "expected qid and group only with 1-D scores; in the padded (B, L) layout each row is a query"
            )
    elif len(scores_shape) != 1:
        raise ValueError(f"expected scores of shape (n,) or (B, L), got shape {tuple(scores_shape)} instead")
    elif mask_shape is not None:
        raise ValueError("expected mask only with the padded (B, L) layout, got it with 1-D scores")
    if not y_numeric:
        raise ValueError(f"expected y to hold integer relevance grades >= 0, got dtype {y_dtype} instead")
    check_labels_shape(scores_shape, y_shape)
    if mask_shape is not None and (tuple(mask_shape) != tuple(scores_shape) or not mask_boolean):
        raise ValueError(
            f"expected a boolean mask of shape {tuple(scores_shape)}, got {mask_dtype} of shape {tuple(mask_shape)} "
            "instead"
        )


def check_labels_shape(scores_shape: tuple, y_shape: tuple, name: str = "y") -> None:
    """Labels of the scores' shape: the one message of every door that takes scores and labels (a hinge, a
    metric, a booster's objective), where an estimator speaks of the rows of X."""
    if tuple(y_shape) != tuple(scores_shape):
        what = "one label per score" if len(scores_shape) == 1 else "the scores' padded layout"
        raise ValueError(f"expected {name} of shape {tuple(scores_shape)} ({what}), got {tuple(y_shape)} instead")


def check_whole_numbers(values: np.ndarray, name: str, what: str) -> None:
    """Refuse NaN, infinity and fractions in a float array of integer values (as a parser gives them).

    The one check of integer-valued floats (query ids, grades, relevance), with the message
    "expected {name} to hold {what}, got … instead"; integer arrays pass untouched.
    """
    if not np.issubdtype(values.dtype, np.floating):
        return
    if not np.all(np.isfinite(values)):
        raise ValueError(f"expected {name} to hold {what}, got NaN or infinity instead")
    fractional = values != np.round(values)
    if fractional.any():
        raise ValueError(f"expected {name} to hold {what}, got {values[np.argmax(fractional)].item()!r} instead")


def _check_fits_int64(values: np.ndarray, name: str, what: str) -> None:
    """Refuse values a cast to int64 would wrap (uint64 above 2⁶³ − 1) or saturate (floats beyond ±2⁶³)."""
    if values.size == 0 or values.dtype == np.bool_:
        return
    if np.issubdtype(values.dtype, np.unsignedinteger):
        bad = values > np.iinfo(np.int64).max
    elif np.issubdtype(values.dtype, np.floating):
        wide = values.astype(np.float64, copy=False)  # ±2⁶³ is beyond float16's range: compare in float64
        bad = (wide >= 2.0**63) | (wide < -(2.0**63))
    else:
        return
    if bad.any():
        raise ValueError(
            f"expected {name} to hold {what} that fit in 64-bit integers, got {values[np.argmax(bad)].item()!r} instead"
        )


def group_queries(arr: np.ndarray) -> QueryIndex:
    """The :class:`QueryIndex` of int64 query ids checked by :func:`query_ids`."""
    if arr.size and np.all(arr[1:] >= arr[:-1]):
        order = np.arange(arr.size, dtype=np.intp)
        grouped = arr
    else:
        order = np.argsort(arr, kind="stable").astype(np.intp, copy=False)
        grouped = arr[order]
    starts = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1]))) if arr.size else np.empty(0, int)
    offsets = np.append(starts, arr.size).astype(np.intp)
    return QueryIndex(order, offsets, grouped[starts])


def check_grades(y, n_samples: int | None = None, name: str = "y") -> np.ndarray:
    """Graded relevance labels: integers ≥ 0 (LETOR's 0–4, say), as int64.

    Binary labels in {−1, 1} are read as grades {0, 1}; any other negative
    label, a fraction, NaN or infinity is refused.
    """
    grades, signs = check_grade_block(y, n_samples, name)
    signs.check(name)
    return grades


@dataclass(frozen=True)
class GradeSigns:
    """What :func:`check_grades` decides {−1, 1} labels by, for labels checked a block at a time."""

    minus_one: bool  # some label is −1
    plus_one: bool  # some label is 1
    other: bool  # some label is neither −1 nor 1

    def __or__(self, other: GradeSigns) -> GradeSigns:
        return GradeSigns(self.minus_one or other.minus_one, self.plus_one or other.plus_one, self.other or other.other)

    def check(self, name: str = "y") -> None:
        """Refuse −1 unless every label is −1 or 1, both present (then −1 reads as grade 0)."""
        if self.minus_one and (self.other or not self.plus_one):
            _refuse_negative(name, -1)


def check_grade_block(y, n_samples: int | None = None, name: str = "y") -> tuple[np.ndarray, GradeSigns]:
    """One block of graded labels, checked as :func:`check_grades` checks them, −1 read as grade 0.

    Whether −1 may be read so depends on every block (labels in {−1, 1} only): the caller combines the
    blocks' :class:`GradeSigns` with ``|`` and calls :meth:`GradeSigns.check` on the union.
    """
    if y is None:
        raise ValueError(f"expected {name} to hold integer relevance grades >= 0, got None instead")
    y = _label_vector(y, n_samples, name, "integer relevance grades >= 0")
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_) or np.iscomplexobj(y):
        raise ValueError(
            f"expected {name} to hold integer relevance grades >= 0, got the labels {describe_values(y)} "
            f"(dtype {y.dtype}) instead"
        )
    check_whole_numbers(y, name, "integer relevance grades >= 0")
    _check_fits_int64(y, name, "integer relevance grades >= 0")
    grades = y.astype(np.int64, copy=False)  # read only: an int64 y is not copied
    lowest = int(grades.min()) if grades.size else 0
    if lowest >= 0:
        # Grades ≥ 0: some label is not 1 unless the lowest and the highest are 1 (a second pass only then;
        # the usual grades start at 0 and cost none).  Whether some label is 1 matters only where none is
        # another value, so it is "not other".
        other = bool(grades.size) and not (lowest == 1 and int(grades.max()) == 1)
        return grades, GradeSigns(False, bool(grades.size) and not other, other)
    if lowest < -1:
        _refuse_negative(name, lowest)
    minus_one = grades == -1
    other = bool(np.any(~minus_one & (grades != 1)))
    return np.where(minus_one, 0, grades), GradeSigns(True, bool(np.any(grades == 1)), other)


def _refuse_negative(name: str, lowest) -> None:
    raise negative_grade_error(name, str(lowest))


def check_relevant_at(value, name: str = "relevant_at") -> float:
    """The grade from which a document counts as relevant: a positive finite number."""
    return check_positive_float(value, name)


def relevant_from_grades(grades: np.ndarray, relevant_at: float, name: str = "y") -> np.ndarray:
    """``grades >= relevant_at`` as bool, refusing a threshold no label reaches."""
    relevant = grades >= relevant_at
    if not relevant.any():
        raise ValueError(
            f"expected relevant_at={relevant_at:g} to be reached by some label of {name}, "
            f"got labels of at most {grades.max()} instead"
        )
    return relevant


#: How to train graded labels given without queries (the advice of :func:`check_one_query_labels`).
TRAIN_GRADES_ADVICE = "relevance grades (integers >= 0) train with qid: pass qid=np.zeros(n_samples) for one query"
#: The same advice for the metrics over queries (:mod:`rankopt.metrics`).
SCORE_GRADES_ADVICE = "relevance grades (integers >= 0) are scored with qid: pass qid=np.zeros(n_samples) for one query"


def check_one_query_labels(y, n_samples: int, advice: str = TRAIN_GRADES_ADVICE, name: str = "y") -> np.ndarray:
    """Binary labels of one query; graded labels without qid get an error that says how to pass them."""
    try:
        return check_binary_labels(y, n_samples, name=name)
    except ValueError as exc:
        try:
            grades = check_grades(y, n_samples, name=name)
        except ValueError:
            raise exc from None
        if grades.max() > 1:
            raise ValueError(f"{exc}; {advice}") from None
        raise


def queries_to_order(relevance: np.ndarray, queries: QueryIndex) -> np.ndarray:
    """Which queries have something to order: two documents of different relevance.

    For binary relevance that is a relevant and a non-relevant document; for
    grades, two different grades.  ``relevance`` is in the caller's row order.
    """
    grouped = np.asarray(relevance)[queries.order]
    starts = queries.offsets[:-1]
    if grouped.size == 0:
        return np.zeros(queries.n_queries, dtype=bool)
    return np.maximum.reduceat(grouped, starts) > np.minimum.reduceat(grouped, starts)


def check_queries_to_order(relevance: np.ndarray, queries: QueryIndex, *, graded: bool, relevant_at=None) -> np.ndarray:
    """:func:`queries_to_order`, refusing relevance where no query has anything to order.

    The one message of that refusal, for the estimators and the problems they build: graded labels
    need two grades in a query; binary relevance a relevant and a non-relevant document (from
    ``relevant_at`` on, when the labels were thresholded).
    """
    usable = queries_to_order(relevance, queries)
    if usable.any():
        return usable
    refuse_queries_without_levels(queries.n_queries, graded=graded, relevant_at=relevant_at)
    return usable  # not reached


def refuse_queries_without_levels(n_queries: int, *, graded: bool, relevant_at=None) -> None:
    """The refusal of :func:`check_queries_to_order`, for callers that count the queries a block at a time."""
    if graded:
        need = "documents of two different grades in y"
    elif relevant_at is None:
        need = "both a relevant and a non-relevant document"
    else:
        need = f"both a relevant document (y >= relevant_at={relevant_at:g}) and a non-relevant one"
    raise ValueError(f"expected some query (qid) to hold {need}, got none of the {n_queries} queries instead")


def check_predictions(predictions) -> np.ndarray:
    """One float64 prediction per document, or a ValueError saying what the shape means."""
    predictions = np.asarray(predictions, dtype=np.float64)
    if predictions.ndim == 2 and predictions.shape[1] == 1:
        raise ValueError(
            f"expected one prediction per document as a 1-D array, got a column of shape {predictions.shape} "
            "instead: pass predictions.ravel()"
        )
    if predictions.ndim != 1:
        raise ValueError(
            f"expected one prediction per document (a ranking objective), got predictions of shape "
            f"{predictions.shape} instead: a multiclass or multi-output booster cannot take a ranking loss"
        )
    return predictions


def query_weights(weights, group_sizes, n_documents: int) -> np.ndarray | None:
    """One weight per query from ``weights``: None, one per query (XGBoost's ranking DMatrix), or one per
    document equal within each query (LightGBM's); finite and ≥ 0, refused otherwise.

    The hinge is a function of a whole query's scores, so a weight that varies within a query has no meaning
    for it and is refused.
    """
    if weights is None:
        return None
    weights = np.asarray(weights, dtype=np.float64).ravel()
    if weights.size == 0:
        return None
    sizes = np.asarray(group_sizes, dtype=np.int64)
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("expected sample weights that are finite and >= 0, got NaN, infinity or a negative one")
    if weights.size == sizes.size and weights.size != n_documents:
        return weights
    if weights.size != n_documents:
        raise ValueError(
            f"expected one weight per query ({sizes.size}) or per document ({n_documents}), got {weights.size} instead"
        )
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    first = weights[starts] if sizes.size else weights[:0]
    if not np.array_equal(np.repeat(first, sizes), weights):
        raise ValueError(
            "expected the sample weights of each query's documents to be equal (the hinge weighs whole queries), "
            "got weights that differ within a query: give each query one weight"
        )
    return first


def check_group_sizes_given(group_sizes):
    """The queries' group sizes of a boosting objective, refused when absent; their sizes against the
    predictions are checked where every ``group=`` is (:func:`check_group_sizes`, inside the hinge)."""
    if group_sizes is None:
        raise ValueError(
            "expected the queries' group sizes (a ranking dataset: LGBMRanker's group=, a Dataset's group, a "
            "DMatrix's group or qid), got none: a regression or classification objective slot cannot take a "
            "ranking loss"
        )
    return group_sizes


def renamed_method(inference: str, method: str | None, owner: str) -> str:
    """``inference``, or the deprecated ``method=`` of ``owner`` it replaces (the estimators' word, ``inference=``,
    is now every entry point's)."""
    if method is None:
        return inference
    if inference != "auto":
        raise ValueError("expected inference= or the deprecated method=, got both")
    import warnings

    warnings.warn(
        f"{owner}(method=...) is deprecated and will be removed: it is inference=, as in the estimators",
        FutureWarning,
        stacklevel=3,
    )
    return method
