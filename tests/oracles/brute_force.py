"""Brute-force loss-augmented inference over every permutation of P + N samples.

Everything here is written straight from the definitions of
Mohapatra et al. (2018) §2 (with the corrections listed in docs/maths.md) and
shares no code with rankopt, so that it checks rankopt independently:

* Ψ(X, R) = (1/(|P||N|)) Σ_{x∈P, y∈N} R_xy (ψ(x) − ψ(y)), hence
  w·Ψ(X, R) = (1/(|P||N|)) Σ R_xy (s_x − s_y), R_xy = ±1 as x is above/below y;
* Δ_AP   = 1 − (1/|P|) Σ_{x∈P} ind⁺(x)/ind(x);
* Δ_NDCG = 1 − Σ_{x∈P} D(ind(x)) / Σ_{i≤|P|} D(i),  D(i) = 1/log2(1 + i);
* Δ_AUC  = fraction of positive–negative pairs with the negative above.

A ranking is a permutation of sample ids 0…P+N−1, ids < P being the
positives (in input order) and ids ≥ P the negatives.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np

__all__ = [
    "LOSSES",
    "all_objectives",
    "ap_loss",
    "auc_loss",
    "brute_force_max",
    "joint_score",
    "ndcg_loss",
    "pattern_from_neg_ranks",
]


def ap_loss(pattern) -> float:
    """1 − AP of a ±-pattern (sequence of bools, True = positive), by the definition."""
    total, n_pos_seen = 0.0, 0
    for index, is_pos in enumerate(pattern, start=1):
        if is_pos:
            n_pos_seen += 1
            total += n_pos_seen / index
    return 1.0 - total / n_pos_seen


def ndcg_loss(pattern, discount=lambda i: 1.0 / math.log2(1.0 + i)) -> float:
    """1 − NDCG of a ±-pattern with binary relevance and discount D."""
    pattern = list(pattern)
    n_pos = sum(1 for p in pattern if p)
    gain = sum(discount(index) for index, is_pos in enumerate(pattern, start=1) if is_pos)
    ideal = sum(discount(i) for i in range(1, n_pos + 1))
    return 1.0 - gain / ideal


def auc_loss(pattern) -> float:
    """Fraction of (positive, negative) pairs ordered negative-first."""
    misordered, negatives_seen, n_pos = 0, 0, 0
    for is_pos in pattern:
        if is_pos:
            n_pos += 1
            misordered += negatives_seen
        else:
            negatives_seen += 1
    return misordered / (n_pos * negatives_seen)


LOSSES = {"ap": ap_loss, "ndcg": ndcg_loss, "auc": auc_loss}


def joint_score(order, pos_scores, neg_scores) -> float:
    """w·Ψ(X, R) for one ranking ``order`` (sample ids, top first), by the pairwise sum."""
    n_pos, n_neg = len(pos_scores), len(neg_scores)
    position = {sample: k for k, sample in enumerate(order)}
    total = 0.0
    for x in range(n_pos):
        for y in range(n_neg):
            r_xy = 1.0 if position[x] < position[n_pos + y] else -1.0
            total += r_xy * (float(pos_scores[x]) - float(neg_scores[y]))
    return total / (n_pos * n_neg)


def pattern_from_neg_ranks(neg_ranks, n_pos: int) -> list[bool]:
    """The ±-pattern in which the negatives have interleaving ranks ``neg_ranks``.

    Walks the positives top to bottom: before the k-th positive come the
    negatives of rank k; the negatives of rank |P| + 1 close the list.
    """
    ranks = [int(r) for r in neg_ranks]
    pattern: list[bool] = []
    for rank in range(1, n_pos + 2):
        pattern.extend([False] * sum(1 for r in ranks if r == rank))
        if rank <= n_pos:
            pattern.append(True)
    return pattern


@functools.cache
def _all_permutations(n: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)


def all_objectives(loss, pos_scores, neg_scores) -> tuple[np.ndarray, np.ndarray]:
    """Every ranking of the P + N samples and its w·Ψ(X, R) + Δ(R*, R).

    ``loss`` is a name in :data:`LOSSES` or a function of a ±-pattern.  The
    pairwise sum is evaluated for all permutations at once with NumPy (the
    formula of :func:`joint_score`); Δ is evaluated once per distinct
    ±-pattern, since many permutations share one.

    Returns
    -------
    perms : ndarray of int, shape ((P + N)!, P + N)
    values : ndarray of float, shape ((P + N)!,)
    """
    loss_fn = LOSSES[loss] if isinstance(loss, str) else loss
    pos = np.asarray(pos_scores, dtype=np.float64)
    neg = np.asarray(neg_scores, dtype=np.float64)
    n_pos, n_neg = pos.size, neg.size
    perms = _all_permutations(n_pos + n_neg)
    position = np.argsort(perms, axis=1)  # position[p, sample] = place of sample in ranking p
    above = position[:, :n_pos, None] < position[:, None, n_pos:]  # (perm, x, y): x above y
    r = np.where(above, 1.0, -1.0)
    score = np.einsum("pxy,xy->p", r, pos[:, None] - neg[None, :]) / (n_pos * n_neg)

    patterns = perms < n_pos
    codes = patterns @ (1 << np.arange(n_pos + n_neg))  # one integer per ±-pattern
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    pattern_losses = np.array([float(loss_fn(patterns[k].tolist())) for k in first])
    return perms, score + pattern_losses[inverse.ravel()]


def brute_force_max(loss, pos_scores, neg_scores) -> float:
    """max over ALL (P + N)! rankings R of w·Ψ(X, R) + Δ(R*, R)."""
    return float(np.max(all_objectives(loss, pos_scores, neg_scores)[1]))


def exact_objective(loss, pos, neg, neg_ranks) -> Fraction:
    """Δ(R) + Σ_{i,j} y_ij (p_i − n_j) / (|P||N|) in rationals; positive i (descending) above negative j
    exactly when i < r_j."""
    pos_desc = sorted(pos, reverse=True)
    n_pos, n_neg = len(pos), len(neg)
    pattern = []
    for rank in range(1, n_pos + 2):
        pattern += [False] * sum(1 for r in neg_ranks if r == rank)
        if rank <= n_pos:
            pattern.append(True)
    # The pattern lists, top to bottom: negatives of rank 1, positive 1, negatives of rank 2, ...
    delta = Fraction(float(loss.value(np.array(pattern))))
    joint = Fraction(0)
    for i, p in enumerate(pos_desc, start=1):
        for n, r in zip(neg, neg_ranks, strict=True):
            joint += (1 if i < r else -1) * (Fraction(p) - Fraction(n))
    return delta + joint / (n_pos * n_neg)


def exact_maximum(loss, pos, neg) -> Fraction:
    return max(
        exact_objective(loss, pos, neg, ranks) for ranks in itertools.product(range(1, len(pos) + 2), repeat=len(neg))
    )
