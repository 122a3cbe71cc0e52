"""Top-k count losses (precision at k): the ``topk`` method against enumeration and ``dp``; the fit's warnings."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import rankopt
from rankopt.api import most_violated_rankings, most_violated_rankings_per_query
from rankopt.exceptions import ConstantRankerWarning, SlowInferenceWarning
from rankopt.losses import PositionDiscountLoss, RankLoss
from rankopt.losses.precision import PrecisionAtKLoss
from rankopt.losses.structure import TopKCountStructure
from rankopt.models import ranking
from rankopt.plugins import PluginContractError, create_plugin_manager, default_registry
from rankopt.testing import brute_force_most_violated, check_loss


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
        np.testing.assert_allclose(batch.coef, single.coef, atol=1e-12)


def test_precision_at_k_passes_the_plugin_checks():
    for k in (1, 2, 5):
        check_loss(PrecisionAtKLoss(k))


def test_a_false_top_k_claim_is_refused_at_registration():
    class NotACount(PositionDiscountLoss):
        """NDCG's discount, claimed to depend on the count in the top 2 only."""

        name = "false_topk_test"

        def discount(self, positions):
            return 1.0 / np.log2(1.0 + np.asarray(positions, dtype=np.float64))

        def structure(self):
            return TopKCountStructure(k=2, loss_of_count=lambda m, n_pos, n_neg: 1.0 - np.asarray(m) / min(2, n_pos))

    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [NotACount]

    with pytest.raises(PluginContractError, match=r"loss 'false_topk_test' declares a TopKCountStructure.*the ranking"):
        create_plugin_manager(autoload=False).register(Plugin(), name="liar")


class _PlainPrecisionAtK(PositionDiscountLoss):
    """P@k as a plugin author writes it from the discount alone: C3 fails, no structure declared, so "dp"."""

    name = "patk_plain_test"

    def __init__(self, k=10):
        self.k = k

    def discount(self, positions):
        return (np.asarray(positions, dtype=np.float64) <= self.k).astype(np.float64)


def _data(rng, n=600, d=5, relevant=0.4):
    X = rng.normal(size=(n, d))
    latent = X @ rng.normal(size=d) + rng.normal(size=n)
    return X, (latent > np.quantile(latent, 1 - relevant)).astype(int)


def test_a_slow_method_warns_once_and_verbose_says_why(rng, monkeypatch, caplog):
    """dp at 17 s for two iterations said nothing before; the threshold is lowered to keep the test small."""
    monkeypatch.setattr(ranking, "SLOW_INFERENCE_RATIO", 5.0)
    X, y = _data(rng)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO, logger="rankopt"):
        warnings.simplefilter("always")
        rankopt.RankSVM(loss=_PlainPrecisionAtK(), C=10.0, max_iter=4).fit(X, y)
    slow = [w for w in caught if issubclass(w.category, SlowInferenceWarning)]
    assert len(slow) == 1
    assert "runs method 'dp'" in str(slow[0].message) and "times the cost of the compiled" in str(slow[0].message)
    notes = [r.getMessage() for r in caplog.records if "inference for loss 'patk_plain_test'" in r.getMessage()]
    assert len(notes) == 1 and "'dp', since qs, greedy: C3 fails" in notes[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rankopt.RankSVM(loss=PrecisionAtKLoss(), C=10.0, max_iter=4).fit(X, y)
    assert not [w for w in caught if issubclass(w.category, SlowInferenceWarning)]


def test_a_certified_constant_ranker_warns_once(rng):
    """P@10 with hundreds of positives certified w = 0 in silence (test AP at the base rate)."""
    X, y = _data(rng, n=800)
    with pytest.warns(ConstantRankerWarning) as caught:
        model = rankopt.RankSVM(loss=PrecisionAtKLoss(10), C=1.0).fit(X, y)
    assert model.converged_ and not np.any(model.coef_)
    constant = [w for w in caught if issubclass(w.category, ConstantRankerWarning)]
    assert len(constant) == 1
    message = str(constant[0].message)
    assert "the certified optimum is w = 0" in message and "'precision_at_k' at C = 1" in message
    assert "a top-k loss whose k is far below the number of relevant documents" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantRankerWarning)
        rankopt.RankSVM(loss="ap", C=1.0).fit(X, y)  # a ranker that ranks: no warning


class _SquaredTopK(RankLoss):
    """Δ = 1 − (m / min(k, |P|))²: a count loss outside the position-discount family, decomposed by telescoping.

    With b the negatives in the top k' = min(k, n), m = k' − b; δ_j(i) = [i + j − 1 ≤ k'] (F(j) − F(j − 1))
    + F(0) / |N| sums to F(b) over any ranking (the negatives in the top k' are the first b).
    """

    name = "squared_topk_test"

    def __init__(self, k=4):
        self.k = k

    def _f(self, b, n_pos, n_neg):
        kept = min(self.k, n_pos + n_neg)
        return 1.0 - ((kept - np.asarray(b, dtype=float)) / min(self.k, n_pos)) ** 2

    def value(self, pattern):
        pattern = np.asarray(pattern, dtype=bool)
        return float(1.0 - (pattern[: self.k].sum() / min(self.k, pattern.sum())) ** 2)

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.asarray(j), np.asarray(i)
        inside = (i + j - 1) <= min(self.k, n_pos + n_neg)
        step = self._f(j, n_pos, n_neg) - self._f(j - 1, n_pos, n_neg)
        return np.where(inside, step, 0.0) + self._f(0, n_pos, n_neg) / n_neg

    def structure(self):
        return TopKCountStructure(
            k=self.k, loss_of_count=lambda m, n_pos, n_neg: 1.0 - (np.asarray(m) / min(self.k, n_pos)) ** 2
        )


def test_a_count_loss_outside_the_discount_family_runs_compiled_and_exact():
    loss = _SquaredTopK(4)
    assert loss.structure().contract_problem(loss) is None
    rng = np.random.default_rng(3)
    for _ in range(300):
        n_pos, n_neg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pos, neg = rng.integers(-2, 3, n_pos) / 2.0, rng.integers(-2, 3, n_neg) / 2.0
        got = rankopt.most_violated_ranking(loss, pos, neg, "topk")
        assert got.value == pytest.approx(brute_force_most_violated(loss, pos, neg), abs=1e-12)
    sizes = rng.integers(1, 25, 300)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    relevance = (rng.random(offsets[-1]) < 0.4).astype(int)
    scores = np.round(rng.normal(size=offsets[-1]), 1)
    batch = most_violated_rankings(loss, scores, relevance, offsets, n_threads=2)
    single = most_violated_rankings_per_query(loss, scores, relevance, offsets, "topk")
    reference = most_violated_rankings_per_query(loss, scores, relevance, offsets, "dp")
    np.testing.assert_allclose(batch.coef, single.coef, atol=1e-12)
    np.testing.assert_allclose(batch.losses, single.losses, atol=1e-12)
    np.testing.assert_allclose(batch.values, reference.values, atol=1e-9)
