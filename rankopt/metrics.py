"""Ranking metrics for one query with binary relevance.

Each takes ``(y_true, scores)``: labels in {0, 1} or {−1, 1} and real
scores, higher meaning more relevant.  Tied scores are treated the way
scikit-learn treats them, so that every metric equals its scikit-learn
counterpart on all inputs, not only tie-free ones: AP steps at distinct
thresholds, NDCG averages the discount over a tie group, ROC area counts a
tied pair as half ordered, precision@k takes the expectation over the
orders of the tie group straddling k.
"""
from __future__ import annotations

import numpy as np

from rankopt._validation import as_float_vector, check_binary_labels, check_positive_int

__all__ = ["average_precision", "ndcg", "precision_at_k", "roc_auc"]


def _prepare(y_true, scores):
    scores = as_float_vector(scores, "scores").astype(np.float64)
    positive = check_binary_labels(y_true, scores.size, name="y_true")
    order = np.argsort(-scores, kind="stable")
    return positive[order], scores[order]


def _group_ends(sorted_scores):
    """Index one past the end of each run of equal scores (scores sorted)."""
    return np.append(np.flatnonzero(np.diff(sorted_scores)) + 1, sorted_scores.size)


def average_precision(y_true, scores) -> float:
    """AP = Σ_k (R_k − R_{k−1}) P_k over the distinct score thresholds."""
    positive, sorted_scores = _prepare(y_true, scores)
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


def precision_at_k(y_true, scores, k: int = 10) -> float:
    """Fraction of positives among the k highest scores (k capped at the list length)."""
    k = check_positive_int(k, "k")
    positive, sorted_scores = _prepare(y_true, scores)
    k = min(k, positive.size)
    ends = _group_ends(sorted_scores)
    starts = np.concatenate(([0], ends[:-1]))
    pos_in_group = np.add.reduceat(positive.astype(np.float64), starts)
    taken = np.clip(k - starts, 0, ends - starts)  # how many of each group fall in the top k
    return float(np.sum(pos_in_group * taken / (ends - starts)) / k)
