"""Ranking metrics for one query with binary relevance, and over many queries with graded relevance.

The single-query metrics take ``(y_true, scores)``: labels in {0, 1} or
{−1, 1} and real scores, higher meaning more relevant.  Tied scores are
treated the way scikit-learn treats them, so that every metric equals its
scikit-learn counterpart on all inputs, not only tie-free ones: AP steps at
distinct thresholds, NDCG averages the discount over a tie group, ROC area
counts a tied pair as half ordered, precision@k takes the expectation over
the orders of the tie group straddling k.

Over queries — :func:`mean_average_precision`, :func:`ndcg_at_k` and
:func:`precision_at_k` with ``qid`` — labels are relevance grades (integers
≥ 0, LETOR's 0–4 say; {−1, 1} reads as {0, 1}), each query is scored on its
own with the same tie rules, and the mean is taken over queries.  AP and
P@k count a document relevant when its grade reaches ``relevant_at`` (1 by
default, LETOR's convention for MAP); NDCG uses the grades as gains.
A query without a relevant document (no grade ≥ ``relevant_at``; for NDCG
no grade > 0) has no AP or NDCG (0/0) and is left out of every mean —
trec_eval would count it as 0, LightGBM as 1 — and ``average=False``
returns NaN for it.  Precision@k divides by min(k, query size), as the
single-query one does (trec_eval divides by k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankopt._validation import (
    SCORE_GRADES_ADVICE,
    as_float_vector,
    check_binary_labels,
    check_grades,
    check_labels_shape,
    check_one_query_labels,
    check_positive_int,
    check_qid,
    check_relevant_at,
    qid_or_group,
)

__all__ = [
    "average_precision",
    "loss_metric",
    "mean_average_precision",
    "ndcg",
    "ndcg_at_k",
    "precision_at_k",
    "roc_auc",
]


def _prepare(y_true, scores, advice: str | None = None):
    """One query's relevance and scores, sorted by score (high first, ties in input order); with ``advice``,
    graded labels are refused with it (a function that takes qid)."""
    _check_labels_shape(y_true, scores)
    scores = as_float_vector(scores, "scores").astype(np.float64)
    if advice is None:
        positive = check_binary_labels(y_true, scores.size, name="y_true")
    else:
        positive = check_one_query_labels(y_true, scores.size, advice, name="y_true")
    order = np.argsort(-scores, kind="stable")
    return positive[order], scores[order]


def _group_ends(sorted_scores):
    """Index one past the end of each run of equal scores (scores sorted)."""
    return np.append(np.flatnonzero(np.diff(sorted_scores)) + 1, sorted_scores.size)


def average_precision(y_true, scores) -> float:
    """AP = Σ_k (R_k − R_{k−1}) P_k over the distinct score thresholds."""
    return _average_precision_sorted(*_prepare(y_true, scores))


def _average_precision_sorted(positive, sorted_scores) -> float:
    ends = _group_ends(sorted_scores)
    tp = np.cumsum(positive)[ends - 1]
    precision = tp / ends
    recall_steps = np.diff(np.concatenate(([0], tp))) / tp[-1]
    return float(np.sum(recall_steps * precision))


def ndcg(y_true, scores) -> float:
    """NDCG with binary gains and discount D(i) = 1/log2(1 + i) over the full list."""
    positive, sorted_scores = _prepare(y_true, scores)
    discount = 1.0 / np.log2(np.arange(2, positive.size + 2))
    ends = _group_ends(sorted_scores)
    starts = np.concatenate(([0], ends[:-1]))
    cumulative = np.concatenate(([0.0], np.cumsum(discount)))
    mean_discount = (cumulative[ends] - cumulative[starts]) / (ends - starts)
    gains = np.add.reduceat(positive.astype(np.float64), starts)
    ideal = cumulative[int(positive.sum())]
    return float(np.dot(gains, mean_discount) / ideal)


def roc_auc(y_true, scores) -> float:
    """Area under the ROC curve: P(score⁺ > score⁻) + ½ P(score⁺ = score⁻)."""
    positive, sorted_scores = _prepare(y_true, scores)
    ends = _group_ends(sorted_scores)
    starts = np.concatenate(([0], ends[:-1]))
    pos_in_group = np.add.reduceat(positive.astype(np.int64), starts)
    neg_in_group = (ends - starts) - pos_in_group
    neg_above = np.cumsum(neg_in_group) - neg_in_group
    n_pos, n_neg = pos_in_group.sum(), neg_in_group.sum()
    misordered = np.sum(pos_in_group * (neg_above + 0.5 * neg_in_group))
    return float(1.0 - misordered / (n_pos * n_neg))


def precision_at_k(y_true, scores, qid=None, k: int = 10, *, relevant_at=1, average: bool = True, group=None):
    """Fraction of positives among the k highest scores (k capped at the list length).

    Parameters
    ----------
    y_true : array-like of int, shape (n_samples,)
        Without ``qid``: labels in {0, 1} or {−1, 1}.  With ``qid``:
        relevance grades ≥ 0, relevant from ``relevant_at`` on.
    scores : array-like of float, shape (n_samples,)
    qid : array-like of int, shape (n_samples,), optional
        The query of each sample; None for one query.  Third, as in
        :func:`mean_average_precision` and :func:`ndcg_at_k`: the cutoff
        comes after it, so a single query's P@5 is ``precision_at_k(y, s, k=5)``.
    k : int, default 10
    relevant_at : float, default 1
        Used with ``qid`` only.
    average : bool, default True
        With ``qid``: False returns each query's P@k, queries by increasing
        qid, NaN for a query without a relevant document.
    group : array-like of int, optional
        LightGBM's contiguous group sizes, instead of ``qid``.
    """
    if qid is not None and np.ndim(qid) == 0:
        raise ValueError(
            f"expected qid to hold one query id per sample, got the scalar {qid!r} instead; the cutoff "
            f"is the fourth argument, precision_at_k(y_true, scores, qid=None, k=10): pass k={qid!r}"
        )
    k = check_positive_int(k, "k")
    qid = _qid_or_group(qid, group, scores, y_true)
    if qid is not None:
        return _over_queries(_precision_at_k_batched, y_true, scores, qid, average, relevant_at=relevant_at, k=k)
    positive, sorted_scores = _prepare(y_true, scores, SCORE_GRADES_ADVICE)
    return _precision_at_k_sorted(positive, sorted_scores, k)


def _precision_at_k_sorted(positive, sorted_scores, k) -> float:
    k = min(k, positive.size)
    ends = _group_ends(sorted_scores)
    starts = np.concatenate(([0], ends[:-1]))
    pos_in_group = np.add.reduceat(positive.astype(np.float64), starts)
    taken = np.clip(k - starts, 0, ends - starts)  # how many of each group fall in the top k
    return float(np.sum(pos_in_group * taken / (ends - starts)) / k)


# ------------------------------------------------------------------ over queries


def _qid_or_group(qid, group, scores, y_true):
    """``qid``, or the query ids of LightGBM's ``group`` sizes over the rows of ``scores`` (and ``y_true``,
    one label per score: checked first, as every door checks it)."""
    _check_labels_shape(y_true, scores)
    return qid_or_group(qid, group, np.shape(scores)[0] if np.ndim(scores) == 1 else 0)


def _check_labels_shape(y_true, scores) -> None:
    if np.ndim(scores) == 1:  # other scores are refused by their own check
        check_labels_shape(np.shape(scores), np.shape(y_true), "y_true")


def _qid_or_one_query(qid, group, scores, y_true):
    """``qid``, the query ids of ``group``'s sizes, or, with neither, one query holding every row.

    With neither, labels above 1 are refused, as :class:`~rankopt.RankSVM` refuses them without qid: grades
    come from files of many queries, and scoring such a file as one query is a silent wrong number.
    """
    qid = _qid_or_group(qid, group, scores, y_true)
    if qid is None:
        n_samples = np.shape(scores)[0] if np.ndim(scores) == 1 else 0
        grades = check_grades(y_true, n_samples, name="y_true")
        if grades.size and grades.max() > 1:
            raise ValueError(
                f"expected y_true to hold labels in {{0, 1}} without qid or group (one query), got grades up to "
                f"{grades.max()} instead; {SCORE_GRADES_ADVICE}"
            )
        qid = np.zeros(n_samples, dtype=np.int64)
    return qid


def _mean_of_defined(values: np.ndarray, average: bool, what: str, weights=None):
    """The mean of the queries' values that are not NaN, weighted by ``weights`` (one per query) when given
    (or, without ``average``, the values themselves); a ValueError naming ``what`` a query needs when no
    query has a value."""
    if not average:
        return values
    defined = ~np.isnan(values)
    if not defined.any():
        raise ValueError(f"expected some query (qid) to hold {what}, got none of the {values.size} queries")
    if weights is None:
        return float(np.mean(values[defined]))
    weights = np.asarray(weights, dtype=np.float64)[defined]
    if not weights.sum() > 0:
        raise ValueError(
            f"expected a weight > 0 on some query that holds {what}, got weights of 0 on all {weights.size} of them "
            "(a weighted mean over nothing)"
        )
    return float(np.average(values[defined], weights=weights))


def _grouped(y_true, scores, qid):
    """Validated grades and scores, and per query the slice of an order that sorts each query's scores."""
    scores = as_float_vector(scores, "scores").astype(np.float64)
    grades = check_grades(y_true, scores.size, name="y_true")
    queries = check_qid(qid, scores.size)
    query_of_row = np.empty(scores.size, dtype=np.intp)
    query_of_row[queries.order] = np.repeat(np.arange(queries.n_queries), queries.sizes)
    # Queries by increasing qid; within a query scores high to low, ties in input order (lexsort is stable).
    order = np.lexsort((-scores, query_of_row))
    return grades[order], scores[order], queries


def _over_queries(metric, y_true, scores, qid, average, *, relevant_at=None, **kwargs):
    """``metric(relevance, sorted_scores, ties, **kwargs)``: every query's value at once; their mean or the raw
    values.

    With ``relevant_at`` the metric sees bool relevance (grade ≥ relevant_at)
    and a query without a relevant document is undefined; without it, it
    sees the grades and a query without a positive grade is undefined.  The
    batched metrics compute what the per-query ones (``_*_sorted``) compute, query by query, in whole-array
    passes (``tests/test_metrics_queries.py`` holds them equal on ties, one-document and long queries).
    """
    grades, sorted_scores, queries = _grouped(y_true, scores, qid)
    if relevant_at is not None:
        relevance = grades >= check_relevant_at(relevant_at)
        what = f"a relevant document (y_true >= relevant_at={relevant_at:g})"
    else:
        relevance = grades
        what = "a document of grade > 0 in y_true"
    ties = _Ties.of(sorted_scores, queries.offsets)
    defined = np.add.reduceat(relevance.astype(bool), ties.query_starts_rows) > 0
    values = np.full(queries.n_queries, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        computed = metric(relevance, ties, **kwargs)
    values[defined] = computed[defined]
    return _mean_of_defined(values, average, what)


@dataclass(frozen=True)
class _Ties:
    """The tie groups of scores sorted high to low within queries: a group is a run of equal scores of one
    query.  Everything is indexed by group unless it says rows."""

    starts: np.ndarray  # the group's first row
    ends: np.ndarray  # one past its last row
    query: np.ndarray  # the query it belongs to
    local_starts: np.ndarray  # its first place within the query (0-based)
    local_ends: np.ndarray
    query_starts_rows: np.ndarray  # each query's first row
    query_first_group: np.ndarray  # each query's first group
    query_sizes: np.ndarray

    @classmethod
    def of(cls, sorted_scores: np.ndarray, offsets: np.ndarray) -> _Ties:
        n = sorted_scores.size
        new_query = np.zeros(n, dtype=bool)
        new_query[offsets[:-1]] = True
        change = new_query.copy()
        change[1:] |= sorted_scores[1:] != sorted_scores[:-1]
        starts = np.flatnonzero(change)
        ends = np.append(starts[1:], n)
        query = np.cumsum(new_query)[starts] - 1
        first_row = offsets[:-1]
        return cls(
            starts=starts,
            ends=ends,
            query=query,
            local_starts=starts - first_row[query],
            local_ends=ends - first_row[query],
            query_starts_rows=first_row,
            query_first_group=np.flatnonzero(new_query[starts]),
            query_sizes=np.diff(offsets),
        )

    def per_query(self, per_group: np.ndarray) -> np.ndarray:
        """Each query's sum of its groups' values, in group order."""
        return np.add.reduceat(per_group, self.query_first_group)


def _average_precision_batched(positive, ties: _Ties) -> np.ndarray:
    """Each query's AP (``_average_precision_sorted``): Σ over its tie groups of the recall step × precision."""
    seen = np.concatenate(([0], np.cumsum(positive, dtype=np.int64)))
    before = seen[ties.query_starts_rows]
    tp = seen[ties.ends] - before[ties.query]
    total = seen[np.append(ties.query_starts_rows[1:], positive.size)] - before
    previous = np.concatenate(([0], tp[:-1]))
    previous[ties.query_first_group] = 0
    steps = (tp - previous) / total[ties.query]
    return ties.per_query(steps * (tp / ties.local_ends))


def _precision_at_k_batched(positive, ties: _Ties, k) -> np.ndarray:
    """Each query's P@k (``_precision_at_k_sorted``): a tie group across the cutoff counts its share."""
    cut = np.minimum(k, ties.query_sizes)
    sizes = ties.ends - ties.starts
    pos_in_group = np.add.reduceat(positive.astype(np.float64), ties.starts)
    taken = np.clip(cut[ties.query] - ties.local_starts, 0, sizes)
    return ties.per_query(pos_in_group * taken / sizes) / cut


def mean_average_precision(y_true, scores, qid=None, relevant_at=1, *, average: bool = True, group=None):
    """Mean over queries of each query's average precision (MAP).

    Parameters
    ----------
    y_true : array-like of int, shape (n_samples,)
        Relevance grades ≥ 0; a document is relevant when its grade is at
        least ``relevant_at``.
    scores : array-like of float, shape (n_samples,)
    qid : array-like of int, shape (n_samples,), optional
        The query of each sample (rows of a query need not be contiguous);
        None for one query of labels in {0, 1} (grades need ``qid``, as in
        :meth:`rankopt.RankSVM.fit`: pass ``np.zeros(n_samples)`` for one query).
    relevant_at : float, default 1
    average : bool, default True
        False returns each query's AP instead, queries by increasing qid,
        NaN for a query without a relevant document.
    group : array-like of int, optional
        LightGBM's contiguous group sizes, instead of ``qid``.

    Ties are scikit-learn's: AP steps at distinct score thresholds.
    """
    qid = _qid_or_one_query(qid, group, scores, y_true)
    return _over_queries(_average_precision_batched, y_true, scores, qid, average, relevant_at=relevant_at)


def _exponential_gains(grades: np.ndarray) -> np.ndarray:
    """2^g − 1, divided by 2^(max g − 512) when the largest grade is above 512.

    NDCG is a ratio of sums of one query's gains, so a common factor leaves it
    unchanged; without it 2^g overflows float64 from g = 1024 (and a sum of
    many such gains sooner).  Below 512 the gains are 2^g − 1 exactly as
    written.
    """
    shift = max(0, int(grades.max(initial=0)) - 512)
    if shift == 0:
        return np.exp2(grades) - 1.0
    return np.exp2((grades - shift).astype(np.float64)) - np.exp2(-float(shift))


#: Gain functions of graded relevance for :func:`ndcg_at_k`.
GAINS = {"exponential": _exponential_gains, "linear": lambda grades: grades.astype(np.float64)}


def _ndcg_at_k_sorted(grades, sorted_scores, k, gain) -> float:
    """NDCG@k of one query (scores sorted high to low), the discount averaged over each tie group."""
    gains = gain(grades)
    n = grades.size
    discount = np.zeros(n)
    cut = min(k, n)
    discount[:cut] = 1.0 / np.log2(np.arange(2, cut + 2))
    cumulative = np.concatenate(([0.0], np.cumsum(discount)))
    ends = _group_ends(sorted_scores)
    starts = np.concatenate(([0], ends[:-1]))
    mean_gain = np.add.reduceat(gains, starts) / (ends - starts)
    dcg = np.dot(mean_gain, cumulative[ends] - cumulative[starts])
    ideal = np.dot(np.sort(gains)[::-1][:cut], discount[:cut])
    return float(dcg / ideal)


def _ndcg_at_k_batched(grades, ties: _Ties, k, gain) -> np.ndarray:
    """Each query's NDCG@k (``_ndcg_at_k_sorted``): a tie group shares its mean gain over its places."""
    gains = _gains_per_query(grades, ties, gain)
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    cumulative = np.concatenate(([0.0], np.cumsum(discount)))
    mean_gain = np.add.reduceat(gains, ties.starts) / (ties.ends - ties.starts)
    weight = cumulative[np.minimum(ties.local_ends, k)] - cumulative[np.minimum(ties.local_starts, k)]
    dcg = ties.per_query(mean_gain * weight)
    query_of_row = np.repeat(np.arange(ties.query_sizes.size), ties.query_sizes)
    best_first = np.lexsort((-gains, query_of_row))
    place = np.arange(gains.size) - np.repeat(ties.query_starts_rows, ties.query_sizes)
    top = place < k
    ideal = np.bincount(
        query_of_row[top], weights=gains[best_first][top] * discount[place[top]], minlength=ties.query_sizes.size
    )
    return dcg / ideal


def _gains_per_query(grades: np.ndarray, ties: _Ties, gain) -> np.ndarray:
    """``gain`` of each query's grades, as ``_ndcg_at_k_sorted`` applies it to one query at a time (the
    exponential gains' common factor is the query's own)."""
    if gain is not _exponential_gains:
        return gain(grades)
    largest = np.maximum.reduceat(grades, ties.query_starts_rows)
    shift = np.repeat(np.maximum(0, largest - 512), ties.query_sizes)
    if not shift.any():
        return np.exp2(grades) - 1.0
    return np.exp2((grades - shift).astype(np.float64)) - np.exp2(-shift.astype(np.float64))


def ndcg_at_k(y_true, scores, qid=None, k: int = 10, gains: str = "exponential", *, average: bool = True, group=None):
    """Mean over queries of NDCG@k with graded gains.

    DCG@k = Σ_{i ≤ k} gain(rel_i) / log2(i + 1), divided by the DCG@k of
    the ideal order.

    Parameters
    ----------
    y_true : array-like of int, shape (n_samples,)
        Relevance grades ≥ 0.
    scores : array-like of float, shape (n_samples,)
    qid : array-like of int, shape (n_samples,), optional
        The query of each sample; None for one query of labels in {0, 1}
        (grades need ``qid``, as in :meth:`rankopt.RankSVM.fit`: pass
        ``np.zeros(n_samples)`` for one query).
    k : int, default 10
        The cutoff (a query shorter than k is scored over its full list).
    gains : {"exponential", "linear"}, default "exponential"
        2^rel − 1 (Burges et al., the LETOR and LightGBM convention) or rel
        (trec_eval's, and scikit-learn's ``ndcg_score`` given the grades).
    average : bool, default True
        False returns each query's NDCG@k, queries by increasing qid, NaN
        for a query whose grades are all 0.
    group : array-like of int, optional
        LightGBM's contiguous group sizes, instead of ``qid``.

    Ties are scikit-learn's (``ndcg_score`` with ``ignore_ties=False``): the
    documents of a tie group share the group's mean gain, so the value does
    not depend on the order among equal scores.
    """
    k = check_positive_int(k, "k")
    if gains not in GAINS:
        raise ValueError(f"expected gains to be one of {sorted(GAINS)}, got {gains!r} instead")
    qid = _qid_or_one_query(qid, group, scores, y_true)
    return _over_queries(_ndcg_at_k_batched, y_true, scores, qid, average, k=k, gain=GAINS[gains])


def loss_metric(
    y_true,
    scores,
    qid=None,
    *,
    loss="ndcg_graded",
    relevant_at=1,
    average: bool = True,
    group=None,
    registry=None,
    query_weights=None,
    device: str = "cpu",
    **loss_params,
):
    """Mean over queries of 1 − Δ(R*, R): the metric a registered rank loss stands for, exactly as it defines it.

    For ``loss="ap"`` this is AP, for ``"ndcg_graded"`` NDCG@10 with gains 2^g − 1, for ``"pairwise"`` the
    fraction of pairs of different grades ordered right, for a plugin whatever its Δ says: the number a
    boosted model or a network trained on that loss's hinge is early-stopped on
    (:func:`rankopt.lightgbm.eval_metric`, :func:`rankopt.xgboost.eval_metric`).

    Parameters
    ----------
    y_true : array-like of int, shape (n_samples,)
        Relevance grades ≥ 0; a binary loss counts a document relevant from ``relevant_at`` on.
    scores : array-like of float, shape (n_samples,)
    qid : array-like of int, shape (n_samples,), optional
        The query of each sample, or ``group``, LightGBM's group sizes; None for one query of labels in {0, 1}
        (grades need ``qid``: pass ``np.zeros(n_samples)`` for one query).
    loss : str or RankLoss, default "ndcg_graded"
        Any registered rank loss whose structure gives Δ of a ranking (every built-in one; a loss that
        declares only its own one-query inference is refused): a name (with ``loss_params``, as
        :func:`rankopt.structured_hinge` takes them) or an instance.
    relevant_at : float, default 1
    average : bool, default True
        False returns each query's value, queries by increasing qid, NaN for a query with nothing to order
        (one relevance level, gains all equal, pairs that all weigh 0: the queries a fit leaves out), which
        the mean leaves out.
    registry : PluginRegistry, optional
        Where a loss name is looked up; the default registry otherwise.
    query_weights : array-like of float, shape (n_queries,), optional
        Each query's weight in the mean, queries by increasing qid (the boosting metrics' sample weights).
    device : str, default "cpu"
        Whose kernel gives Δ of a ranking (:meth:`rankopt.inference.kernel_base.Kernel.ranking_loss`): the
        compiled kernels', or any registered device's.

    Tied scores are broken against the ground truth (the lower grade first), so a constant scorer scores
    its worst ranking: early stopping never rewards a model for ties.
    """
    from rankopt.inference.batched import resolve_rank_loss
    from rankopt.inference.structure_table import kernel_for_loss

    if registry is None:
        from rankopt.plugins import default_registry

        registry = default_registry()
    rank_loss = resolve_rank_loss(loss, registry, **loss_params)
    check_relevant_at(relevant_at)  # a graded loss does not read it, but it is checked at every door alike
    kernel, structure = kernel_for_loss(rank_loss, device)
    qid = _qid_or_one_query(qid, group, scores, y_true)
    scores = as_float_vector(scores, "scores").astype(np.float64)
    grades = check_grades(y_true, scores.size, name="y_true")
    queries = check_qid(qid, scores.size)
    relevance = kernel.relevance(grades, relevant_at)
    if query_weights is not None:
        query_weights = np.asarray(query_weights, dtype=np.float64)
        if query_weights.shape != (queries.n_queries,):
            raise ValueError(
                f"expected query_weights of shape ({queries.n_queries},) (one per query), got shape "
                f"{query_weights.shape} instead"
            )
    orders = _queries_the_loss_orders(rank_loss, relevance[queries.order], queries.offsets, registry)
    values = np.full(queries.n_queries, np.nan)
    for q in np.flatnonzero(orders):
        rows = queries.order[queries.offsets[q] : queries.offsets[q + 1]]
        level = relevance[rows]
        ordered = level[np.lexsort((level, -scores[rows]))]
        values[q] = 1.0 - kernel.ranking_loss(rank_loss, structure, ordered)
    return _mean_of_defined(values, average, "two documents that the loss orders apart", query_weights)


def _queries_the_loss_orders(rank_loss, grouped_relevance, offsets, registry) -> np.ndarray:
    """Which queries ``rank_loss`` orders two documents of apart: its kernel's verdict at zero scores.

    The rule of a fit (:func:`rankopt.inference.batched.check_queries_the_loss_orders`): a query of one
    relevance level, of grades whose gains are all equal, or whose pairs all weigh 0 has no Δ to measure, and
    is NaN here.  The kernel's preparation refuses, with its own message, grades whose gains its sums cannot
    hold, at the same bound as the hinge.
    """
    from rankopt.inference.batched import most_violated_rankings

    zeros = np.zeros(grouped_relevance.size)
    return most_violated_rankings(rank_loss, zeros, grouped_relevance, offsets, registry=registry).usable
