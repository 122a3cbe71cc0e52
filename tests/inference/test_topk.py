"""Top-k count losses (precision at k): the ``topk`` method against enumeration and ``dp``; the fit's warnings."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import rankopt
from rankopt.api import most_violated_rankings, most_violated_rankings_per_query
from rankopt.losses.precision import PrecisionAtKLoss
from rankopt.plugins import default_registry
from rankopt.testing import brute_force_most_violated


def test_auto_picks_topk_for_precision_at_k_where_c3_fails():
    registry = default_registry()
    assert registry.resolve_method("auto", PrecisionAtKLoss(1), 40, 60).name == "qs"  # D = (1, 0, 0, ...) is convex
    for k in (2, 3, 10):
        loss = PrecisionAtKLoss(k)
        assert registry.resolve_method("auto", loss, 40, 60).name == "topk"
        with pytest.raises(ValueError, match="C3 fails"):
            registry.resolve_method("qs", loss, 40, 60)
    with pytest.raises(ValueError, match="declares a TopKCountStructure"):
        registry.resolve_method("topk", rankopt.get_loss("ap"))


def test_topk_is_the_best_of_all_rankings():
    """≥ 500 small instances: tied scores within and across classes, k ≥ |P|, k > n, P = 1, N = 1."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(600):
        k = int(rng.integers(1, 8))
        n_pos, n_neg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pos, neg = rng.integers(-2, 3, n_pos) / 2.0, rng.integers(-2, 3, n_neg) / 2.0
        loss = PrecisionAtKLoss(k)
        got = rankopt.most_violated_ranking(loss, pos, neg, "topk")
        assert got.value == pytest.approx(brute_force_most_violated(loss, pos, neg), abs=1e-12)
        assert got.value == pytest.approx(got.pos_coef @ pos + got.neg_coef @ neg + got.loss, abs=1e-12)
        checked += 1
    assert checked >= 500


def test_topk_equals_dp_on_large_random_instances():
    rng = np.random.default_rng(1)
    for _ in range(30):
        k = int(rng.integers(1, 80))
        n_pos, n_neg = int(rng.integers(1, 150)), int(rng.integers(1, 200))
        pos = np.round(rng.normal(size=n_pos), 1)
        neg = np.round(rng.normal(size=n_neg) - rng.uniform(-1, 1), 1)
        loss = PrecisionAtKLoss(k)
        fast = rankopt.most_violated_ranking(loss, pos, neg, "topk")
        slow = rankopt.most_violated_ranking(loss, pos, neg, "dp")
        assert fast.value == pytest.approx(slow.value, abs=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_over_queries_the_compiled_batch_equals_the_single_query_method(dtype, caplog):
    rng = np.random.default_rng(2)
    for k in (2, 5, 40):
        sizes = rng.integers(1, 30, 200)
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        relevance = (rng.random(offsets[-1]) < rng.uniform(0.1, 0.8)).astype(int)
        scores = np.round(rng.normal(size=offsets[-1]), 1).astype(dtype)
        loss = PrecisionAtKLoss(k)
        with caplog.at_level(logging.WARNING, logger="rankopt.inference.batched"):
            batch = most_violated_rankings(loss, scores, relevance, offsets, n_threads=2)
        assert not caplog.records  # compiled: no per-query fallback
        reference = most_violated_rankings_per_query(loss, scores, relevance, offsets, "dp")
        np.testing.assert_allclose(batch.values, reference.values, atol=1e-9)
        np.testing.assert_array_equal(batch.usable, reference.usable)
        single = most_violated_rankings_per_query(loss, scores, relevance, offsets, "topk")
        # One implementation (the per-query method runs the batch's kernel): equal to the bit, ties included.
        np.testing.assert_array_equal(batch.coef, single.coef)
        np.testing.assert_array_equal(batch.losses, single.losses)


@pytest.mark.parametrize("method", ["topk", "auto"])
def test_exact_ties_go_to_the_largest_count_on_every_path(method):
    """Issue 38, point 5: s = [0, −0.5], rel = [1, 0], k = 1 ties m = 0 and m = 1 (both values 0.5); the
    batch and the per-query method took different ones.  Now both take m = 1, Δ = 0: the negatives as low
    as they can go, the tie rule of qs and greedy (the highest interleaving rank)."""
    loss = PrecisionAtKLoss(1)
    batch = most_violated_rankings(loss, np.array([0.0, -0.5]), np.array([1, 0]), np.array([0, 2]), inference=method)
    np.testing.assert_array_equal(batch.coef, [1.0, -1.0])
    assert batch.losses[0] == 0.0 and batch.values[0] == 0.5
    single = rankopt.most_violated_ranking(loss, [0.0], [-0.5], inference="topk")
    assert single.neg_ranks.tolist() == [2] and single.loss == 0.0 and single.value == 0.5
