"""The pairwise (graded ROC-area) loss: exact inference against brute force, AUC on binary labels."""

import itertools

import numpy as np
import pytest
from oracles.pairwise import best_over_labelings, best_over_rankings

import rankopt
import rankopt.testing
from rankopt.api import ground_truth_coefficients, most_violated_rankings
from rankopt.inference import _pairwise
from rankopt.losses import AUCLoss, PairwiseLoss
from rankopt.plugins import default_registry


def _single(scores, grades):
    """The pairwise inference of one query through the public batched call (Q = 1)."""
    res = most_violated_rankings("pairwise", scores, grades, [0, len(scores)], n_threads=1)
    return res.coef, float(res.losses[0]), float(res.values[0]), bool(res.usable[0])


def _tiny_cases():
    rng = np.random.default_rng(1306)
    cases = []
    # Ties: scores on a grid of 1/4 make differences of exactly 1/2 common.
    for n in range(1, 6):
        for _ in range(25):
            grades = rng.integers(0, rng.integers(1, 5), n)
            scores = rng.integers(-4, 5, n) * 0.25
            cases.append((scores, grades))
            cases.append((rng.normal(0, 0.7, n), grades))
    cases.append((np.array([0.3]), np.array([2])))  # one document
    cases.append((np.zeros(4), np.array([1, 1, 1, 1])))  # all grades equal
    cases.append((np.array([0.0, 0.1, 0.2, 0.3, 0.4]), np.array([0, 1, 2, 3, 4])))  # every grade distinct
    cases.append((np.array([0.6, 0.3, 0.0]), np.array([2, 1, 0])))  # the cycle of docs/maths.md
    return cases


TINY = _tiny_cases()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_inference_equals_brute_force_over_labelings(dtype):
    checked = 0
    for scores, grades in TINY:
        scores = scores.astype(dtype)
        coef, loss, value, usable = _single(scores, grades)
        brute = best_over_labelings(scores.astype(np.float64), grades)
        if brute is None:
            assert not usable and loss == 0.0 and value == 0.0 and not coef.any()
            continue
        best, maximisers = brute
        assert usable
        assert value == pytest.approx(best, abs=1e-12)
        assert any(
            np.allclose(coef, c, atol=1e-12) and loss == pytest.approx(value, abs=1e-12) for c, value in maximisers
        )
        checked += 1
    assert checked > 120


def test_kernel_of_one_query_equals_public_call():
    """Grade levels by sorting (the kernel's default) and by counting (the batch's for small grades) agree."""
    for scores, grades in TINY:
        expected = _single(scores, grades)
        for n_grade_values in (0, int(grades.max()) + 1, 64):
            coef, loss, value, usable = _pairwise.pairwise_query(scores, grades.astype(np.int64), n_grade_values)
            np.testing.assert_array_equal(coef, expected[0])
            assert (loss, value, usable) == expected[1:]


def test_labelings_beat_rankings_only_when_grades_cycle():
    """With two grades the best labelling is a ranking's; with three it can be a cycle."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(2, 6))
        grades = rng.integers(0, 2, n)
        scores = rng.normal(0, 0.6, n)
        if len(set(grades)) < 2:
            continue
        assert best_over_rankings(scores, grades) == pytest.approx(best_over_labelings(scores, grades)[0], abs=1e-12)
    scores, grades = np.array([0.6, 0.3, 0.0]), np.array([2, 1, 0])
    # b above a (0.3 < 1/2), c above b, a above c (0.6 >= 1/2): no ranking does all three.
    assert best_over_rankings(scores, grades) < _single(scores, grades)[2] - 0.05


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reduces_to_auc_on_binary_labels(dtype):
    rng = np.random.default_rng(11)
    for trial in range(200):
        sizes = rng.integers(1, 40, rng.integers(1, 6))
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        n = int(offsets[-1])
        scores = (rng.integers(-6, 7, n) * 0.25 if trial % 2 else rng.normal(0, 1, n)).astype(dtype)
        labels = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(np.int64)
        pairwise = most_violated_rankings("pairwise", scores, labels, offsets, n_threads=1)
        auc = most_violated_rankings("auc", scores, labels, offsets, n_threads=1)
        np.testing.assert_array_equal(pairwise.coef, auc.coef)
        np.testing.assert_array_equal(pairwise.losses, auc.losses)
        np.testing.assert_array_equal(pairwise.usable, auc.usable)
        np.testing.assert_allclose(pairwise.values, auc.values, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(
            ground_truth_coefficients("pairwise", labels, offsets), ground_truth_coefficients("auc", labels, offsets)
        )


def test_ground_truth_coefficients_rank_higher_grades_first():
    grades = np.array([2, 0, 1, 2, 0])
    coef = ground_truth_coefficients("pairwise", grades, [0, 5])
    # 8 pairs; a grade-2 document is above 3 lower ones, a grade-1 above 2 and below 2.
    np.testing.assert_allclose(coef, np.array([3, -3, 0, 3, -3]) / 8)
    # The hinge at w = 0: value − Ψ(R*)·s = Δ = 1 (every pair swapped when scores tie).
    scores = np.zeros(5)
    res = most_violated_rankings("pairwise", scores, grades, [0, 5], n_threads=1)
    assert res.losses[0] == 1.0 and res.values[0] - coef @ scores == 1.0


def test_registered_and_a_valid_rank_loss():
    loss = default_registry().get_loss("pairwise")
    assert isinstance(loss, PairwiseLoss) and isinstance(loss, AUCLoss) and loss.graded
    assert not AUCLoss.graded and loss != AUCLoss()
    assert "pairwise" in [info.name for info in rankopt.list_plugins("loss")]
    rankopt.testing.check_loss(loss)
    # As a binary rank loss (the single-query API) it is the ROC-area loss.
    pos, neg = np.array([0.3, -0.2]), np.array([0.1, 0.0, 0.5])
    a = rankopt.most_violated_ranking("pairwise", pos, neg)
    b = rankopt.most_violated_ranking("auc", pos, neg)
    np.testing.assert_array_equal(a.neg_ranks, b.neg_ranks)
    assert a.loss == b.loss


@pytest.mark.parametrize(
    "grades, match",
    [
        (np.array([0, -1, 2]), "grades >= 0"),
        (np.array([0.5, 1, 2]), "integer relevance"),
        (np.array(["a", "b", "c"]), "integer or bool relevance"),
    ],
)
def test_bad_grades(grades, match):
    with pytest.raises(ValueError, match=match):
        most_violated_rankings("pairwise", np.zeros(3), grades, [0, 3])


def test_methods_of_the_graded_loss():
    scores, grades = np.array([0.0, 1.0]), np.array([1, 0])
    same = [most_violated_rankings("pairwise", scores, grades, [0, 2], m).coef for m in ("auto", "level_sweep")]
    np.testing.assert_array_equal(*same)
    with pytest.warns(FutureWarning, match="inference='pairwise' is deprecated .* now inference='level_sweep'"):
        renamed = most_violated_rankings("pairwise", scores, grades, [0, 2], "pairwise").coef
    np.testing.assert_array_equal(renamed, same[0])
    with pytest.raises(ValueError, match="expected inference 'auto' or 'level_sweep'"):
        most_violated_rankings("pairwise", scores, grades, [0, 2], "qs")


def test_many_grades_and_large_queries_equal_the_pair_matrix(monkeypatch):
    """O(n log n) counting = the O(n²) definition (the per-query reference) on larger queries."""
    from rankopt.api import most_violated_rankings_per_query
    from rankopt.inference import batched

    monkeypatch.setattr(batched, "DOCS_PER_THREAD", 1)

    rng = np.random.default_rng(5)
    sizes = [1, 300, 2, 500, 57]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n = int(offsets[-1])
    for grades in (rng.integers(0, 5, n), rng.integers(0, 1000, n), np.arange(n)):
        for scores in (rng.normal(0, 1, n), rng.integers(-8, 9, n) * 0.25):
            fast = most_violated_rankings("pairwise", scores, grades, offsets, n_threads=2)
            slow = most_violated_rankings_per_query("pairwise", scores, grades, offsets)
            np.testing.assert_array_equal(fast.coef, slow.coef)
            np.testing.assert_array_equal(fast.losses, slow.losses)
            np.testing.assert_array_equal(fast.usable, slow.usable)
            np.testing.assert_allclose(fast.values, slow.values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_few_graded_documents_test_every_pair_and_equal_the_pair_matrix(dtype):
    """Up to 32 documents above a query's lowest grade the kernel tests those pairs directly (LETOR's
    queries: most documents of grade 0); beyond, it sweeps. Both equal the definition, ties at ½ included,
    with 1, 2, 5, 7 and 60 documents of the lowest grade (the dense test takes them four at a time)."""
    from rankopt.api import most_violated_rankings_per_query

    rng = np.random.default_rng(12)
    for n_upper in (0, 1, 5, 31, 32, 33, 40):
        sizes = np.array([n_upper + 1, n_upper + 60, n_upper + 7, n_upper + 2, n_upper + 5])
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        grades = np.concatenate(
            [rng.permutation(np.r_[rng.integers(1, 5, n_upper), np.zeros(m - n_upper, int)]) for m in sizes]
        )
        for scores in (rng.normal(0, 1, offsets[-1]), rng.integers(-6, 7, offsets[-1]) * 0.25):
            scores = scores.astype(dtype)
            fast = most_violated_rankings("pairwise", scores, grades, offsets)
            slow = most_violated_rankings_per_query("pairwise", scores, grades, offsets)
            np.testing.assert_array_equal(fast.coef, slow.coef)
            np.testing.assert_array_equal(fast.losses, slow.losses)
            np.testing.assert_allclose(fast.values, slow.values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "case", ["crowded", "all equal", "span at the accepted limit", "subnormal", "float32", "half steps"]
)
def test_kernel_sort_handles_any_scores(case):
    # The kernel orders scores by distribution (std::sort when they crowd into
    # few buckets, one run when they cannot be spread); the counts must be the
    # pair matrix's whatever the scores.
    from rankopt.api import most_violated_rankings_per_query

    rng = np.random.default_rng(11)
    n = 400
    scores = {
        "crowded": np.r_[1e6, rng.normal(0, 1e-9, n - 1)],
        "all equal": np.full(n, 0.5),
        # |score| × 400 documents ≤ 2**1016, the widest span inference accepts
        "span at the accepted limit": np.r_[1.7e303, -1.7e303, rng.normal(0, 1, n - 2)],
        "subnormal": rng.normal(0, 1e-310, n),
        "float32": rng.normal(0, 1, n).astype(np.float32),
        "half steps": rng.integers(-6, 7, n) * 0.5,
    }[case]
    grades = rng.integers(0, 4, n)
    offsets = np.array([0, 150, n])
    fast = most_violated_rankings("pairwise", scores, grades, offsets)
    slow = most_violated_rankings_per_query("pairwise", scores, grades, offsets)
    np.testing.assert_array_equal(fast.coef, slow.coef)
    np.testing.assert_array_equal(fast.losses, slow.losses)


def test_every_pair_counted_once():
    """Σ coef = 0 over a query (each pair adds +y and −y), and Δ·#pairs is an integer."""
    rng = np.random.default_rng(3)
    for n, k in itertools.product((2, 7, 40), (2, 3, 6)):
        grades = rng.integers(0, k, n)
        coef, loss, _, usable = _single(rng.normal(0, 1, n), grades)
        if usable:
            n_pairs = sum(int(a > b) for a in grades for b in grades)
            assert abs(coef.sum()) < 1e-12
            assert loss * n_pairs == pytest.approx(round(loss * n_pairs), abs=1e-9)


def test_ground_truth_over_queries_equals_pair_counts():
    rng = np.random.default_rng(21)
    sizes = rng.integers(0, 12, 60)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    grades = rng.integers(0, 4, int(offsets[-1]))
    coef = ground_truth_coefficients("pairwise", grades, offsets)
    for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
        g = grades[lo:hi]
        above = (g[:, None] > g[None, :]).sum(axis=1)
        below = (g[:, None] < g[None, :]).sum(axis=1)
        n_pairs = above.sum()
        expected = (above - below) / n_pairs if n_pairs else np.zeros(hi - lo)
        np.testing.assert_array_equal(coef[lo:hi], expected)


class _OtherGradedLoss(AUCLoss):
    name = "other_graded"
    graded = True


def test_other_graded_losses_have_no_inference():
    with pytest.raises(ValueError, match="no inference over graded relevance is known for the loss 'other_graded'"):
        most_violated_rankings(_OtherGradedLoss(), np.zeros(3), np.array([0, 1, 2]), [0, 3])


class _HalvedPairwise(PairwiseLoss):
    """A subclass that changes Δ: the graded kernel hard-codes PairwiseLoss's Δ and would ignore it."""

    name = "halved_pairwise"

    def value(self, pattern):
        return 0.5 * super().value(pattern)

    def delta(self, j, i, n_pos, n_neg):
        return 0.5 * super().delta(j, i, n_pos, n_neg)

    def delta_diff(self, j, i, n_pos, n_neg):
        return 0.5 * super().delta_diff(j, i, n_pos, n_neg)


def test_a_pairwise_subclass_is_refused_over_queries_not_trained_as_pairwise():
    """It was trained as plain 'pairwise' (coef_ identical, batched Δ 1.0) while the single-query API honoured it."""
    grades = np.array([2, 1, 0, 0, 1, 2])
    with pytest.raises(ValueError, match="themselves, not subclasses"):
        most_violated_rankings(_HalvedPairwise(), np.zeros(6), grades, [0, 3, 6])
    X = np.random.default_rng(0).standard_normal((6, 2))
    with pytest.raises(ValueError, match="not subclasses"):
        rankopt.RankSVM(loss=_HalvedPairwise()).fit(X, grades, qid=[0, 0, 0, 1, 1, 1])
