"""Brute force for the pairwise (graded ROC-area) loss, from its definition.

For one query with grades g and scores s, the pairs are (i, j) with
g_i > g_j; an output labels each pair y_ij = ±1 (+1: i above j) and

    objective(y) = (Σ y_ij (s_i − s_j) + #{y_ij = −1}) / #pairs,
    Ψ(y) coefficients: coef_i = (Σ_j y_ij − Σ_j y_ji) / #pairs.

:func:`best_over_labelings` enumerates all 2^#pairs labellings (the output
space of SVM^rank's 1-slack formulation); :func:`best_over_rankings` only
those induced by a ranking (a permutation).  Shares no code with rankopt.
"""

from __future__ import annotations

import itertools

import numpy as np


def pairs_of(grades):
    n = len(grades)
    return [(i, j) for i in range(n) for j in range(n) if grades[i] > grades[j]]


def _objective(scores, pairs, signs):
    total = 0.0
    for (i, j), y in zip(pairs, signs, strict=True):
        total += y * (float(scores[i]) - float(scores[j])) + (1.0 if y < 0 else 0.0)
    return total / len(pairs)


def _coef(n, pairs, signs):
    coef = np.zeros(n)
    for (i, j), y in zip(pairs, signs, strict=True):
        coef[i] += y
        coef[j] -= y
    return coef / len(pairs)


def best_over_labelings(scores, grades):
    """(max objective, list of (coef, loss) of every maximiser within 1e-12); None when no pair."""
    pairs = pairs_of(grades)
    if not pairs:
        return None
    results = []
    for signs in itertools.product((1, -1), repeat=len(pairs)):
        results.append((_objective(scores, pairs, signs), signs))
    best = max(v for v, _ in results)
    maximisers = [
        (_coef(len(scores), pairs, signs), sum(y < 0 for y in signs) / len(pairs))
        for v, signs in results
        if v >= best - 1e-12
    ]
    return best, maximisers


def best_over_rankings(scores, grades):
    """Max objective over the labellings induced by a ranking (permutation)."""
    pairs = pairs_of(grades)
    if not pairs:
        return None
    best = -np.inf
    for perm in itertools.permutations(range(len(scores))):
        position = {doc: k for k, doc in enumerate(perm)}
        signs = [1 if position[i] < position[j] else -1 for i, j in pairs]
        best = max(best, _objective(scores, pairs, signs))
    return best
