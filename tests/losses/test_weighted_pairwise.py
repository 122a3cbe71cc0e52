"""Pairwise losses over grades with a weight per pair of grades (GradedPairStructure.weight), issue 29."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import rankopt
from rankopt.api import ground_truth_coefficients, most_violated_rankings, most_violated_rankings_per_query
from rankopt.losses import GradedPairwiseLoss
from rankopt.plugins import PluginContractError, create_plugin_manager


class GradeGapPairwise(GradedPairwiseLoss):
    """Pairs weighted by their grades' difference."""

    name = "pairwise_gap_test"

    def pair_weight(self, higher, lower):
        return (np.asarray(higher) - np.asarray(lower)).astype(np.float64)


def _enumerate(scores, grades, weight) -> float:
    """max over every labelling of the pairs of the weighted objective, from the definition."""
    pairs = [(i, j) for i in range(len(grades)) for j in range(len(grades)) if grades[i] > grades[j]]
    weights = [weight(grades[i], grades[j]) for i, j in pairs]
    total = sum(weights)
    best = -np.inf
    for signs in itertools.product((1, -1), repeat=len(pairs)):
        value = sum(
            w * (y * (scores[i] - scores[j]) + (y < 0)) for (i, j), y, w in zip(pairs, signs, weights, strict=True)
        )
        best = max(best, value / total)
    return best


def test_inference_is_the_best_of_all_labellings():
    rng = np.random.default_rng(0)
    sizes = rng.integers(2, 6, 400)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grades = rng.integers(0, 4, offsets[-1])
    scores = rng.integers(-2, 3, offsets[-1]) / 2.0  # ties, and differences of exactly 1/2
    result = most_violated_rankings(GradeGapPairwise(), scores, grades, offsets)
    checked = 0
    for q in range(sizes.size):
        s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
        n_pairs = int(np.sum(g[:, None] > g[None, :]))
        if n_pairs == 0:
            assert not result.usable[q]
            continue
        if n_pairs > 9:
            continue
        expected = _enumerate(s.tolist(), g.tolist(), lambda h, lo: float(h - lo))
        assert result.values[q] == pytest.approx(expected, abs=1e-12)
        coef = result.coef[offsets[q] : offsets[q + 1]]
        assert result.values[q] == pytest.approx(coef @ s + result.losses[q], abs=1e-12)
        checked += 1
    assert checked >= 250


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_compiled_batch_equals_the_pair_matrix(dtype):
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 40, 500)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grades = rng.integers(0, 7, offsets[-1])
    scores = np.round(rng.normal(size=offsets[-1]), 1).astype(dtype)
    loss = GradeGapPairwise()
    fast = most_violated_rankings(loss, scores, grades, offsets, n_threads=2)
    slow = most_violated_rankings_per_query(loss, scores, grades, offsets)
    np.testing.assert_array_equal(fast.usable, slow.usable)
    np.testing.assert_allclose(fast.coef, slow.coef, atol=1e-12)
    np.testing.assert_allclose(fast.losses, slow.losses, atol=1e-12)
    np.testing.assert_allclose(fast.values, slow.values, atol=1e-9)


def test_unit_weights_are_the_pairwise_loss_and_the_ground_truth_keeps_every_pair():
    class Unit(GradedPairwiseLoss):
        name = "pairwise_unit_test"

        def pair_weight(self, higher, lower):
            return np.ones(np.shape(higher))

    rng = np.random.default_rng(2)
    offsets = np.array([0, 7, 7, 20])
    grades = rng.integers(0, 4, 20)
    scores = rng.normal(size=20)
    weighted = most_violated_rankings(Unit(), scores, grades, offsets)
    plain = most_violated_rankings("pairwise", scores, grades, offsets)
    np.testing.assert_allclose(weighted.coef, plain.coef, atol=1e-15)
    np.testing.assert_allclose(weighted.losses, plain.losses, atol=1e-15)
    np.testing.assert_allclose(
        ground_truth_coefficients(Unit(), grades, offsets),
        ground_truth_coefficients("pairwise", grades, offsets),
        atol=1e-15,
    )
    # Ψ*: every pair kept, as inference returns for scores far apart in the grades' order.
    gap = GradeGapPairwise()
    far = most_violated_rankings(gap, grades * 100.0, grades, offsets)
    np.testing.assert_allclose(ground_truth_coefficients(gap, grades, offsets), far.coef, atol=1e-15)


def test_ranksvm_trains_certified_with_a_weighted_pairwise_loss(rng):
    X = rng.normal(size=(240, 4))
    grades = np.digitize(X @ np.array([1.0, 0.5, 0.0, -0.5]) + 0.3 * rng.normal(size=240), [-1.0, 0.0, 1.0])
    qid = np.repeat(np.arange(20), 12)
    model = rankopt.RankSVM(loss=GradeGapPairwise(), C=10.0).fit(X, grades, qid=qid)
    assert model.converged_ and model.inference_ == "level_sweep"
    assert rankopt.metrics.ndcg_at_k(grades, model.decision_function(X), qid) > 0.8


@pytest.mark.parametrize("weight, message", [(-1.0, r"w\(1, 0\) = -1.0"), (np.nan, r"w\(1, 0\) = nan")])
def test_a_negative_or_nan_weight_is_refused_at_registration(weight, message):
    class Bad(GradedPairwiseLoss):
        name = "bad_weights_test"

        def pair_weight(self, higher, lower):
            return np.full(np.shape(higher), weight)

    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [Bad]

    with pytest.raises(
        PluginContractError,
        match=f"plugin 'bad': loss 'bad_weights_test' declares a GradedPairStructure.*weight: {message}",
    ):
        create_plugin_manager(autoload=False).register(Plugin(), name="bad")


def test_check_loss_enumerates_the_labellings_of_a_pair_structure():
    from rankopt.testing import check_loss

    check_loss(GradeGapPairwise())
    check_loss(rankopt.get_loss("pairwise"))


@pytest.mark.parametrize("top", [5, 2**16 + 3])
def test_grade_levels_equal_numpys_unique_on_small_and_large_grades(top):
    from rankopt.losses.structure import grade_levels

    grades = np.random.default_rng(top).integers(0, top, 500)
    levels, inverse = grade_levels(grades)
    expected_levels, expected_inverse = np.unique(grades, return_inverse=True)
    np.testing.assert_array_equal(levels, expected_levels)
    np.testing.assert_array_equal(inverse, expected_inverse.ravel())
    assert grade_levels(np.zeros(0, dtype=np.int64))[0].size == 0
