"""Graded NDCG@k with the position-based Ψ: inference against every ranking, the assignment and the fit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import rankopt
from rankopt.api import ground_truth_coefficients, most_violated_rankings, most_violated_rankings_per_query
from rankopt.inference import batched
from rankopt.losses import GradedNDCGLoss


def _gains(grades, kind):
    grades = np.asarray(grades, dtype=np.float64)
    return np.exp2(grades) - 1.0 if kind == "exponential" else grades


def brute_force(scores, grades, k, kind):
    """max over all n! rankings of Σ_i A(π(i)) s_i + 1 − DCG@k(π)/IDCG@k, from the definitions."""
    n = len(scores)
    kk = min(k, n)
    discount = [1.0 / math.log2(1.0 + j) for j in range(1, kk + 1)]
    total = sum(discount)
    gains = _gains(grades, kind)
    ideal = sum(d * g for d, g in zip(discount, sorted(gains, reverse=True), strict=False))
    best = -math.inf
    for order in itertools.permutations(range(n)):  # order[j] = the document at position j + 1
        psi = sum(discount[j] / total * scores[order[j]] for j in range(kk))
        dcg = sum(discount[j] * gains[order[j]] for j in range(kk))
        best = max(best, psi + 1.0 - dcg / ideal)
    return best


def _random_queries(rng, n_queries, max_size):
    sizes = rng.integers(1, max_size + 1, n_queries)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grades = np.concatenate([rng.integers(0, int(rng.integers(1, 5)), size) for size in sizes])
    scores = np.concatenate([np.round(rng.normal(size=size) * rng.choice([0.3, 3.0]), 1) for size in sizes])
    return scores, grades, offsets


@pytest.mark.parametrize("kind", ["exponential", "linear"])
def test_inference_is_the_best_of_all_rankings(kind):
    """≥ 500 small queries: ties in scores and grades, all-equal grades, one document, k ≥ n and k < n."""
    rng = np.random.default_rng(0)
    checked = 0
    for k in (1, 2, 3, 10):
        loss = GradedNDCGLoss(k=k, gains=kind)
        scores, grades, offsets = _random_queries(rng, 250, 5)
        result = most_violated_rankings(loss, scores, grades, offsets)
        for q in range(offsets.size - 1):
            s, g = scores[offsets[q] : offsets[q + 1]], grades[offsets[q] : offsets[q + 1]]
            if g.max() == g.min():  # nothing to order, all-equal grades and one-document queries
                assert not result.usable[q] and result.losses[q] == 0 and result.values[q] == 0
                assert np.all(result.coef[offsets[q] : offsets[q + 1]] == 0)
                continue
            assert result.usable[q]
            assert result.values[q] == pytest.approx(brute_force(s.tolist(), g, k, kind), abs=1e-12)
            coef = result.coef[offsets[q] : offsets[q + 1]]
            assert result.values[q] == pytest.approx(coef @ s + result.losses[q], abs=1e-12)
            # k positions carry weight; a tie group (equal score and grade) across the k-th shares it.
            assert coef.sum() == pytest.approx(1.0) and np.count_nonzero(coef) >= min(k, s.size)
            for score, grade in set(zip(s.tolist(), g.tolist(), strict=True)):
                tied = coef[(s == score) & (g == grade)]
                assert np.all(tied == tied[0])
            checked += 1
    assert checked >= 500


def test_the_sort_equals_the_assignment_on_large_queries():
    rng = np.random.default_rng(1)
    scores, grades, offsets = _random_queries(rng, 300, 120)
    for k in (1, 5, 10, 32, 33, 200):  # a top by insertion up to 32 places, by partial_sort beyond
        loss = GradedNDCGLoss(k=k)
        fast = most_violated_rankings(loss, scores, grades, offsets, n_threads=2)
        slow = most_violated_rankings(loss, scores, grades, offsets, "assignment")
        reference = most_violated_rankings_per_query(loss, scores, grades, offsets)
        np.testing.assert_array_equal(fast.usable, slow.usable)
        np.testing.assert_allclose(fast.values, slow.values, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(reference.values, slow.values, rtol=1e-12, atol=1e-12)


def test_results_do_not_depend_on_threads_or_float_type(monkeypatch):
    monkeypatch.setattr(batched, "DOCS_PER_THREAD", 1)
    rng = np.random.default_rng(2)
    scores, grades, offsets = _random_queries(rng, 500, 30)
    one = most_violated_rankings("ndcg_graded", scores, grades, offsets, n_threads=1)
    two = most_violated_rankings("ndcg_graded", scores, grades, offsets, n_threads=2)
    for a, b in ((one.coef, two.coef), (one.losses, two.losses), (one.values, two.values)):
        np.testing.assert_array_equal(a, b)
    single = most_violated_rankings("ndcg_graded", scores.astype(np.float32), grades, offsets)
    np.testing.assert_allclose(single.values, one.values, rtol=1e-6, atol=1e-6)


def test_ground_truth_is_the_tie_averaged_ideal_order():
    grades = np.array([2, 0, 2, 1, 3, 3, 3, 0])  # query 0: 4 documents; query 1: all 3 (nothing to order)
    offsets = [0, 4, 7, 8]
    coef = ground_truth_coefficients(GradedNDCGLoss(k=3), grades, offsets)
    d = 1.0 / np.log2(np.arange(2, 5))
    a = d[:3] / d[:3].sum()  # positions 1..3 carry weight, position 4 none
    # ideal order of query 0: the two 2s share positions 1-2, then the 1 at 3, the 0 at 4
    np.testing.assert_allclose(coef[:4], [(a[0] + a[1]) / 2, 0.0, (a[0] + a[1]) / 2, a[2]])
    np.testing.assert_array_equal(coef[4:], 0.0)
    # the ideal order has loss 0: Δ = 0 at every ranking that sorts by grade
    result = most_violated_rankings(
        GradedNDCGLoss(k=3), -np.arange(4.0) * 0 + [10.0, -10.0, 9.0, 5.0], grades[:4], [0, 4]
    )
    assert result.losses[0] == 0.0


@pytest.mark.parametrize(
    "loss, message",
    [
        (GradedNDCGLoss(k=0), "expected k to be an integer >= 1"),
        (GradedNDCGLoss(k=2.5), "expected k to be an integer >= 1"),
        (GradedNDCGLoss(k=True), "expected k to be an integer >= 1"),
        (GradedNDCGLoss(gains="log"), "expected gains to be one of"),
    ],
)
def test_bad_parameters_name_the_parameter(loss, message):
    with pytest.raises(ValueError, match=message):
        most_violated_rankings(loss, np.zeros(3), [0, 1, 2], [0, 3])
    X = np.random.default_rng(0).standard_normal((6, 2))
    with pytest.raises(ValueError, match=message):
        rankopt.RankSVM(loss=loss).fit(X, [0, 1, 2, 0, 1, 2], qid=[0, 0, 0, 1, 1, 1])


def test_grades_that_overflow_and_negative_grades_are_refused():
    with pytest.raises(ValueError, match="grades <= 1023 with gains='exponential'"):
        most_violated_rankings("ndcg_graded", np.zeros(3), [0, 1, 1024], [0, 3])
    linear = most_violated_rankings(GradedNDCGLoss(gains="linear"), np.zeros(3), [0, 1, 1024], [0, 3])
    assert linear.usable[0]
    with pytest.raises(ValueError, match="grades >= 0"):
        most_violated_rankings("ndcg_graded", np.zeros(3), [0, -1, 2], [0, 3])


def test_method_names():
    scores, grades, offsets = np.array([0.3, 0.1, 0.2]), np.array([0, 2, 1]), [0, 3]
    with pytest.raises(ValueError, match=r"one of \['sort', 'assignment'\]"):
        most_violated_rankings("ndcg_graded", scores, grades, offsets, "qs")
    a = most_violated_rankings("ndcg_graded", scores, grades, offsets, "sort")
    b = most_violated_rankings("ndcg_graded", scores, grades, offsets, "assignment")
    assert a.values[0] == pytest.approx(b.values[0])


def test_a_subclass_is_refused_over_queries():
    class Other(GradedNDCGLoss):
        name = "other_ndcg"

    with pytest.raises(ValueError, match="not subclasses"):
        most_violated_rankings(Other(), np.zeros(3), [0, 1, 2], [0, 3])


def test_ranksvm_trains_certified_on_graded_ndcg_and_beats_chance():
    rng = np.random.default_rng(3)
    n_queries, size, d = 40, 15, 6
    w_true = rng.normal(size=d)
    X = rng.normal(size=(n_queries * size, d))
    latent = X @ w_true + 0.5 * rng.normal(size=X.shape[0])
    qid = np.repeat(np.arange(n_queries), size)
    grades = np.digitize(latent, np.quantile(latent, [0.5, 0.8, 0.95]))
    model = rankopt.RankSVM(loss="ndcg_graded", C=10.0).fit(X, grades, qid=qid)
    assert model.converged_ and model.n_queries_used_ == n_queries
    trained = rankopt.metrics.ndcg_at_k(grades, model.decision_function(X), qid, k=10)
    chance = rankopt.metrics.ndcg_at_k(grades, rng.normal(size=X.shape[0]), qid, k=10)
    assert trained > chance + 0.2
    # the engine's certificate: the objective at coef_ is within C·tol of the best dual bound
    assert model.duality_gap_ <= 10.0 * model.tol


def test_as_a_binary_rank_loss_it_is_ndcg_at_k_with_binary_gains():
    loss = GradedNDCGLoss(k=2)
    pattern = np.array([False, True, True, False])  # positives at positions 2 and 3, k = 2
    d = 1.0 / np.log2(np.arange(2, 4))
    assert loss.value(pattern) == pytest.approx(1 - d[1] / (d[0] + d[1]))
    rankopt.testing.check_loss(loss)


@pytest.mark.parametrize("method", ["auto", "sort", "assignment"])
def test_empty_queries_are_unusable_on_every_graded_path(method):
    """Repeated offsets are empty queries, as the pairwise loss takes them (NumPy's reduction errors before)."""
    loss = GradedNDCGLoss(k=2)
    scores, grades = np.array([0.3, -0.1, 0.2]), np.array([2, 0, 1])
    whole = most_violated_rankings(loss, scores, grades, [0, 3], method)
    for offsets in ([0, 0, 3], [0, 3, 3], [0, 0, 3, 3]):
        empty = [q for q in range(len(offsets) - 1) if offsets[q] == offsets[q + 1]]
        for call in (most_violated_rankings, most_violated_rankings_per_query):
            result = call(loss, scores, grades, offsets, method)
            assert not result.usable[empty].any() and np.all(result.losses[empty] == 0)
            np.testing.assert_allclose(result.coef, whole.coef, rtol=0, atol=1e-15)
        coef = ground_truth_coefficients(loss, grades, offsets)
        np.testing.assert_array_equal(coef, ground_truth_coefficients(loss, grades, [0, 3]))


def test_ties_of_equal_score_and_grade_share_their_positions_whatever_the_row_order():
    """The sort broke such ties by row index before; now each member gets the group's mean coefficient."""
    rng = np.random.default_rng(3)
    scores, grades, offsets = _random_queries(rng, 300, 12)
    for k in (1, 3, 10):
        loss = GradedNDCGLoss(k=k)
        base = most_violated_rankings(loss, scores, grades, offsets)
        reference = most_violated_rankings(loss, scores, grades, offsets, "assignment")
        np.testing.assert_allclose(reference.values, base.values, rtol=1e-12, atol=1e-12)
        perm = np.concatenate([lo + rng.permutation(hi - lo) for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)])
        moved = most_violated_rankings(loss, scores[perm], grades[perm], offsets)
        coef = np.empty_like(moved.coef)
        coef[perm] = moved.coef
        np.testing.assert_allclose(coef, base.coef, rtol=0, atol=1e-15)
        np.testing.assert_array_equal(moved.losses, base.losses)


def test_a_fit_without_qid_trains_the_position_based_psi(rng):
    """docs/maths.md said one query trained the pairwise-Ψ NDCG@k; it trains the position-based Ψ, as documented now."""
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] + rng.normal(size=60) > 0.3).astype(int)
    single = rankopt.RankSVM(loss="ndcg_graded", C=10.0).fit(X, y)
    over_one_query = rankopt.RankSVM(loss="ndcg_graded", C=10.0).fit(X, y, qid=np.zeros(60))
    assert single.inference_ == over_one_query.inference_ == "sort"
    np.testing.assert_array_equal(single.coef_, over_one_query.coef_)


@pytest.mark.parametrize("k", [1, 5, 10, 32])
@pytest.mark.parametrize("arrangement", ["spread", "increasing u", "decreasing u", "all equal", "one outlier", "ties"])
def test_a_short_tops_search_finds_the_definitions_top(arrangement, k):
    """A top of ≤ 32 places is searched among the buckets up to the one completing it (counted, then
    placed by counting), or by insertion when many candidates remain or the keys cannot be spread: every
    path puts the definition's documents in the definition's places."""
    rng = np.random.default_rng(k)
    n_queries, size = 40, 90
    grades = rng.integers(0, 5, (n_queries, size)) * (rng.random((n_queries, size)) < 0.2)
    grades[:, 0] = 1  # two grades in every query
    grades[:, 1] = 0
    scores = {
        "spread": rng.normal(size=(n_queries, size)),
        "increasing u": np.sort(rng.normal(size=(n_queries, size)), axis=1),
        "decreasing u": -np.sort(rng.normal(size=(n_queries, size)), axis=1),
        "all equal": np.zeros((n_queries, size)),
        "one outlier": np.where(np.arange(size) == 7, 1e6, rng.normal(0, 1e-9, (n_queries, size))),
        "ties": rng.integers(-2, 3, (n_queries, size)) * 0.5,
    }[arrangement]
    offsets = np.arange(n_queries + 1) * size
    loss = GradedNDCGLoss(k=k)
    fast = most_violated_rankings(loss, scores.ravel(), grades.ravel(), offsets)
    reference = most_violated_rankings_per_query(loss, scores.ravel(), grades.ravel(), offsets)
    np.testing.assert_allclose(fast.coef, reference.coef, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fast.losses, reference.losses, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fast.values, reference.values, rtol=1e-9, atol=1e-9)
