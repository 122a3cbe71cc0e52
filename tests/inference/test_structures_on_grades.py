"""Every declared structure on graded labels, against every ranking (issue 47, point 1).

A binary loss thresholds grades at ``relevant_at``; a graded loss trains on the grades and ignores it.  Each
structure — built-in and a plugin of each kind — runs on random tiny queries with grades 0–3 and every
``relevant_at`` from 1 to the top grade, through :func:`rankopt.structured_hinge` and, for the binary losses,
through the per-query path (``dp``) too: the hinge must be the enumeration's maximum less the ground truth's
score, computed here from the definitions, and the gradient a subgradient (it sums to 0 and meets the
convexity inequality).  A top-k plugin on grades above 1 used to return a hinge above its own maximum with a
gradient of nonzero sum, on the per-query path whose ground truth counted grades as weights.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import rankopt
from rankopt.inference.batched import PreparedRankings
from rankopt.losses import GradedPairwiseLoss, PrecisionAtKLoss
from rankopt.losses.structure import GradedQueryStructure, TopKCountStructure
from rankopt.plugins import default_registry
from rankopt.testing import brute_force_graded, brute_force_most_violated, brute_force_pairs

TOP_GRADE = 3
#: Queries with something to order checked per loss: 13 losses × 160 ≥ 2,000.
MIN_CHECKED = 160
#: A query with more pairs than the pairs' enumeration takes.
TOO_LARGE = "too large"
QUERIES_PER_LOSS = 320


class SquaredTopK(PrecisionAtKLoss):
    """A top-k count plugin: Δ = (1 − m / min(k, |P|))², the issue's reproducer."""

    name = "squared_top_k_test"

    def __init__(self, k=1):
        self.k = k

    def value(self, pattern):
        pattern = np.asarray(pattern, dtype=bool)
        return float((1.0 - pattern[: self.k].sum() / min(self.k, pattern.sum())) ** 2)

    def value_at_positions(self, positions, n_neg):
        pattern = np.zeros(np.asarray(positions).size + n_neg, dtype=bool)
        pattern[np.asarray(positions) - 1] = True
        return self.value(pattern)

    def structure(self):
        k = self.k
        return TopKCountStructure(k, lambda m, p, n: (1.0 - np.asarray(m, dtype=float) / min(k, p)) ** 2)


class GapWeightedPairs(GradedPairwiseLoss):
    """A graded pair plugin: a pair weighs its grades' difference."""

    name = "gap_pairs_test"

    def pair_weight(self, higher, lower):
        return (higher - lower).astype(np.float64)


def _position_weights(n):
    weights = 1.0 / np.log2(np.arange(2, n + 2))
    return weights / weights.sum()


class EnumeratedDCG(PrecisionAtKLoss):
    """A graded query plugin: linear-gain DCG over every position, with its own inference by enumeration."""

    name = "enumerated_dcg_test"
    graded = True

    def __init__(self):
        pass

    def structure(self):
        return GradedQueryStructure(inference=self._inference, ground_truth=self._truth, probe_documents=6)

    @staticmethod
    def _loss(grades_in_order):
        weights = 1.0 / np.log2(np.arange(2, grades_in_order.size + 2))
        return 1.0 - float(weights @ grades_in_order) / float(weights @ np.sort(grades_in_order)[::-1])

    def _inference(self, scores, grades):
        weights = _position_weights(scores.size)
        best, best_order = -np.inf, None
        for order in itertools.permutations(range(scores.size)):
            value = float(weights @ scores[list(order)]) + self._loss(grades[list(order)])
            if value > best:
                best, best_order = value, list(order)
        coef = np.empty(scores.size)
        coef[best_order] = weights
        return coef, self._loss(grades[best_order])

    def _truth(self, grades):
        return _ideal_mean(grades, lambda order: _position_weights(grades.size)[np.argsort(order)])


def _ideal_mean(grades, coef_of_order) -> np.ndarray:
    """The mean of a ranking's coefficients over every ideal ranking (grades non-increasing): R* with ties."""
    ideal = [order for order in itertools.permutations(range(grades.size)) if np.all(np.diff(grades[list(order)]) <= 0)]
    return np.mean([coef_of_order(np.asarray(order)) for order in ideal], axis=0)


def _binary_truth(relevant):
    """Ψ(R*)'s coefficients of a binary loss's pairwise feature map: 1/|P| and −1/|N|."""
    n_pos = relevant.sum()
    return np.where(relevant, 1.0 / n_pos, -1.0 / (relevant.size - n_pos))


def _position_truth(structure, grades):
    discount = structure.position_weights(grades.size)
    weights = np.zeros(grades.size)
    weights[: discount.size] = discount / discount.sum()
    return _ideal_mean(grades, lambda order: weights[np.argsort(order)])


def _pair_truth(structure, grades):
    levels = np.unique(grades)
    matrix = structure.weight_matrix(levels)
    level = np.searchsorted(levels, grades)
    coef, total = np.zeros(grades.size), 0.0
    for i, j in itertools.product(range(grades.size), repeat=2):
        if grades[i] > grades[j]:
            weight = matrix[level[i], level[j]]
            coef[i] += weight
            coef[j] -= weight
            total += weight
    return coef / total


def _expected_hinge(loss, scores, grades, relevant_at) -> float | None:
    """max_R [Δ + c(R)·s] − c(R*)·s by enumeration; None for a query with nothing to order."""
    structure = loss.structure()
    if not loss.graded:
        relevant = grades >= relevant_at
        if relevant.all() or not relevant.any():
            return None
        best = brute_force_most_violated(loss, scores[relevant], scores[~relevant])
        return best - float(_binary_truth(relevant) @ scores)
    if np.unique(grades).size < 2:
        return None
    if isinstance(structure, GradedQueryStructure):
        coef, delta = structure.inference(scores, grades)
        return float(coef @ scores) + delta - float(structure.ground_truth(grades) @ scores)
    if hasattr(structure, "weight_matrix"):
        if np.sum(grades[:, None] > grades[None, :]) > 10:
            return TOO_LARGE
        return brute_force_pairs(structure, scores, grades) - float(_pair_truth(structure, grades) @ scores)
    return brute_force_graded(structure, scores, grades) - float(_position_truth(structure, grades) @ scores)


def _losses():
    import rankopt_graded  # the example graded plugin package, installed with the tests

    import rankopt_rbp.plugin

    return [
        rankopt.get_loss("ap"),
        rankopt.get_loss("ndcg"),
        rankopt.get_loss("auc"),
        rankopt_rbp.plugin.RBPLoss(0.7),
        rankopt.get_loss("precision_at_k", k=1),
        rankopt.get_loss("precision_at_k", k=2),
        SquaredTopK(1),
        SquaredTopK(2),
        rankopt.get_loss("ndcg_graded", k=3),
        rankopt_graded.ZipfDCGLoss(k=2),
        rankopt.get_loss("pairwise"),
        GapWeightedPairs(),
        EnumeratedDCG(),
    ]


@pytest.mark.parametrize("loss", _losses(), ids=lambda loss: loss.name)
def test_every_structure_on_graded_labels_equals_enumeration(loss):
    rng = np.random.default_rng(sum(map(ord, loss.name)))
    registry = default_registry()
    # The per-query path (one Python call per query) where the general dp method is exact for the loss.
    per_query_method = next((m for m in registry.inference_methods() if m.name == "dp"), None)
    per_query_path = not loss.graded and per_query_method.unsupported_reason(loss) is None
    checked = 0
    for query in range(QUERIES_PER_LOSS):
        n = int(rng.integers(2, 7))
        grades = rng.integers(0, TOP_GRADE + 1, n)
        scores = rng.integers(-2, 3, n) / 2.0  # ties within and across grades
        relevant_at = 1 + query % TOP_GRADE
        expected = _expected_hinge(loss, scores, grades, relevant_at)
        values, grad = rankopt.structured_hinge(
            scores, grades, group=[n], loss=loss, relevant_at=relevant_at, reduction="none"
        )
        if expected is TOO_LARGE:
            continue
        if expected is None:
            assert values[0] == 0.0 and not grad.any()
            continue
        assert values[0] == pytest.approx(expected, abs=1e-12), (scores, grades, relevant_at)
        assert grad.sum() == pytest.approx(0.0, abs=1e-12)
        other = scores + rng.normal(size=n)
        h_other, _ = rankopt.structured_hinge(other, grades, group=[n], loss=loss, relevant_at=relevant_at)
        assert h_other >= values[0] + grad @ (other - scores) - 1e-12
        if per_query_path:
            per_query = PreparedRankings(
                loss, grades, [0, n], "dp", relative_to_truth=True, relevant_at=relevant_at, registry=registry
            )(scores)
            assert per_query.values[0] == pytest.approx(expected, abs=1e-12)
            assert per_query.coef.sum() == pytest.approx(0.0, abs=1e-12)
        checked += 1
    assert checked >= MIN_CHECKED


def test_enough_queries_in_all():
    """The issue's floor: at least 2,000 random queries over the structures."""
    assert QUERIES_PER_LOSS * len(_losses()) >= 2000
