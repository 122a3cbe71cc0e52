"""Brute-force references for small queries: every ordering, every order, every labelling of the pairs.

Written from the definitions, sharing no code with the kernels they check; the structure kernels'
:meth:`~rankopt.inference.kernel_base.StructureKernel.check` compares them with the fast inference, and
:func:`rankopt.testing.check_loss` runs those checks.
"""

from __future__ import annotations

import itertools

import numpy as np

from rankopt.losses.base import RankLoss

__all__ = ["brute_force_graded", "brute_force_most_violated", "brute_force_pairs"]


def brute_force_most_violated(loss: RankLoss, pos_scores, neg_scores) -> float:
    """max_R w·Ψ(X, R) + Δ(R*, R) by enumerating every ordering (tiny inputs only)."""
    pos = np.asarray(pos_scores, dtype=np.float64)
    neg = np.asarray(neg_scores, dtype=np.float64)
    n_pos, n_neg = pos.size, neg.size
    if n_pos + n_neg > 9:
        raise ValueError(f"expected at most 9 samples for enumeration, got {n_pos + n_neg} instead")
    best = -np.inf
    for positions in itertools.combinations(range(n_pos + n_neg), n_pos):
        pattern = np.zeros(n_pos + n_neg, dtype=bool)
        pattern[list(positions)] = True
        pattern_loss = float(loss.value(pattern))
        # Which positive / negative fills which slot of the pattern.
        for pos_perm in itertools.permutations(range(n_pos)):
            for neg_perm in itertools.permutations(range(n_neg)):
                rank = np.empty(n_pos + n_neg, dtype=np.int64)
                rank[np.flatnonzero(pattern)] = pos_perm
                rank[np.flatnonzero(~pattern)] = np.asarray(neg_perm) + n_pos
                order = np.empty(n_pos + n_neg, dtype=np.int64)
                order[rank] = np.arange(n_pos + n_neg)  # order[sample] = position
                above = order[:n_pos, None] < order[None, n_pos:]
                R = np.where(above, 1.0, -1.0)
                score = float(np.sum(R * (pos[:, None] - neg[None, :]))) / (n_pos * n_neg)
                best = max(best, score + pattern_loss)
    return best


def brute_force_graded(structure, scores, grades) -> float:
    """max_π Σ_{π(i) ≤ k'} A(π(i)) s_i + Δ(π) over every order of one query, from a position structure's definition.

    ``structure`` is a :class:`~rankopt.losses.structure.GradedPositionStructure`;
    Δ(π) = 1 − Σ_{j ≤ k'} D(j) G(g_{π⁻¹(j)}) / IDCG and A = D / Σ_{j ≤ k'} D(j).
    At most 8 documents.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size > 8:
        raise ValueError(f"expected at most 8 documents for enumeration, got {scores.size} instead")
    gains = structure.gains(np.asarray(grades))
    discount = structure.position_weights(scores.size)
    weights = discount / discount.sum()
    ideal = float(np.sort(gains)[::-1][: discount.size] @ discount)
    best = -np.inf
    for order in itertools.permutations(range(scores.size)):  # order[j]: the document at position j + 1
        top = list(order[: discount.size])
        best = max(best, float(weights @ scores[top]) + 1.0 - float(discount @ gains[top]) / ideal)
    return best


def brute_force_pairs(structure, scores, grades) -> float:
    """max over every labelling y of the pairs g_i > g_j of Σ w_ij (y_ij (s_i − s_j) + [y_ij = −1]) / Σ w_ij.

    ``structure`` is a :class:`~rankopt.losses.structure.GradedPairStructure`; at most 10 pairs.
    """
    scores = np.asarray(scores, dtype=np.float64)
    grades = np.asarray(grades, dtype=np.int64)
    pairs = [(i, j) for i in range(grades.size) for j in range(grades.size) if grades[i] > grades[j]]
    if len(pairs) > 10:
        raise ValueError(f"expected at most 10 pairs for enumeration, got {len(pairs)} instead")
    levels = np.unique(grades)
    matrix = structure.weight_matrix(levels)
    level = {int(g): t for t, g in enumerate(levels)}
    weights = [matrix[level[int(grades[i])], level[int(grades[j])]] for i, j in pairs]
    best = -np.inf
    for signs in itertools.product((1.0, -1.0), repeat=len(pairs)):
        total = sum(
            w * (y * (scores[i] - scores[j]) + (y < 0)) for (i, j), y, w in zip(pairs, signs, weights, strict=True)
        )
        best = max(best, total / sum(weights))
    return best
