"""Batched inference: the compiled batch equals one single-query call per query, bit for bit."""

import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankopt.api import ground_truth_coefficients, most_violated_rankings, most_violated_rankings_per_query
from rankopt.inference import batched, kernel_base
from rankopt.losses import PositionDiscountLoss, RankLoss
from rankopt.plugins import default_registry

#: Every binary loss with every method exact for it that has a compiled per-query form.
COMPILED = [
    ("ap", "qs"),
    ("ap", "select"),
    ("ap", "search"),
    ("ap", "greedy"),
    ("ap", "auto"),
    ("ndcg", "qs"),
    ("ndcg", "greedy"),
    ("auc", "qs"),
    ("auc", "greedy"),
]
N_QUERY_SETS = 1000


def random_query_set(rng, dtype):
    """A batch of 1–6 queries: empty, one-document, one-class and mixed queries; tied scores often."""
    n_queries = int(rng.integers(1, 7))
    sizes = rng.choice([0, 1, 2, 3, 5, 8, 13, 40], size=n_queries)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(offsets[-1])
    kind = rng.integers(3)
    if kind == 0:
        scores = rng.integers(-3, 4, n) * 0.25  # many exact ties, differences of exactly 1/2
    elif kind == 1:
        scores = rng.normal(0, 1, n)
    else:
        scores = rng.normal(0, 1e-3, n) + rng.integers(0, 2, n)
    relevance = (rng.random(n) < rng.choice([0.0, 0.2, 0.5, 0.9, 1.0])).astype(np.int64)
    grades = rng.integers(0, rng.integers(1, 5), n)
    return scores.astype(dtype), relevance, grades, offsets


def assert_same(fast, slow):
    np.testing.assert_array_equal(fast.usable, slow.usable)
    np.testing.assert_array_equal(fast.coef, slow.coef)
    np.testing.assert_array_equal(fast.losses, slow.losses)
    # Σ coef·s is summed in another order than NumPy's einsum.
    np.testing.assert_allclose(fast.values, slow.values, rtol=1e-12, atol=1e-12)


def test_batched_equals_per_query_on_random_query_sets():
    """1,000 query sets, each through the pairwise loss and one binary (loss, method) pair in turn.

    Every pair meets over a hundred sets, both score types, all kinds of query.
    """
    rng = np.random.default_rng(2026)
    checked = {pair: 0 for pair in COMPILED + [("pairwise", "auto")]}
    for t in range(N_QUERY_SETS):
        dtype = np.float32 if (t // len(COMPILED)) % 2 else np.float64
        scores, relevance, grades, offsets = random_query_set(rng, dtype)
        loss, method = COMPILED[t % len(COMPILED)]
        fast = most_violated_rankings(loss, scores, relevance, offsets, method)
        assert_same(fast, most_violated_rankings_per_query(loss, scores, relevance, offsets, method))
        checked[loss, method] += 1
        fast = most_violated_rankings("pairwise", scores, grades, offsets)
        assert_same(fast, most_violated_rankings_per_query("pairwise", scores, grades, offsets))
        checked["pairwise", "auto"] += 1
    assert min(checked.values()) > 100 and checked["pairwise", "auto"] == N_QUERY_SETS


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_large_queries_take_the_kernels_large_input_paths(dtype, monkeypatch):
    """qs's distribution level (≥ 2¹⁴ negatives), select by value (≥ 2¹²), NumPy's pairwise sums (> 128)."""
    monkeypatch.setattr(batched, "DOCS_PER_THREAD", 1)
    rng = np.random.default_rng(8)
    sizes = [20000, 300, 5000, 1, 129]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n = int(offsets[-1])
    scores = np.concatenate([rng.normal(0, 1, 20000), rng.normal(0, 1, n - 20000)]).astype(dtype)
    relevance = (rng.random(n) < 0.05).astype(np.int64)
    relevance[20300:25300] = rng.random(5000) < 0.5
    for loss, method in [("ap", "qs"), ("ap", "select"), ("ndcg", "qs"), ("auc", "qs")]:
        fast = most_violated_rankings(loss, scores, relevance, offsets, method, n_threads=2)
        assert_same(fast, most_violated_rankings_per_query(loss, scores, relevance, offsets, method))


def test_results_do_not_depend_on_threads(monkeypatch):
    monkeypatch.setattr(batched, "DOCS_PER_THREAD", 1)  # threads even for this small batch
    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 60, 300)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n = int(offsets[-1])
    scores = rng.normal(0, 1, n)
    relevance = (rng.random(n) < 0.3).astype(np.int64)
    one = most_violated_rankings("ap", scores, relevance, offsets, n_threads=1)
    grades = rng.integers(0, 4, n)
    one_graded = most_violated_rankings("pairwise", scores, grades, offsets, n_threads=1)
    for n_threads in (2, 3, 8):
        many = most_violated_rankings("ap", scores, relevance, offsets, n_threads=n_threads)
        many_graded = most_violated_rankings("pairwise", scores, grades, offsets, n_threads=n_threads)
        for field in ("coef", "losses", "values", "usable"):
            np.testing.assert_array_equal(getattr(one, field), getattr(many, field))
            np.testing.assert_array_equal(getattr(one_graded, field), getattr(many_graded, field))
    assert most_violated_rankings("ap", scores, relevance, offsets).losses.tolist() == one.losses.tolist()


def test_unusable_queries_and_empty_batches():
    scores = np.array([0.3, 0.1, 0.2, 0.5, -1.0])
    relevance = np.array([1, 1, 0, 1, 0])
    res = most_violated_rankings("ap", scores, relevance, [0, 2, 2, 3, 5])
    np.testing.assert_array_equal(res.usable, [False, False, False, True])
    np.testing.assert_array_equal(res.losses[:3], 0.0)
    np.testing.assert_array_equal(res.coef[:3], 0.0)
    assert res.usable.dtype == bool and res.coef.dtype == np.float64
    none = most_violated_rankings("ap", np.zeros(0), np.zeros(0, dtype=int), [0])
    assert none.coef.shape == (0,) and none.losses.shape == (0,)
    gt = ground_truth_coefficients("ap", relevance, [0, 2, 2, 3, 5])
    np.testing.assert_array_equal(gt, [0, 0, 0, 1.0, -1.0])


def test_ground_truth_coefficients_are_the_ranking_models():
    rng = np.random.default_rng(9)
    relevance = (rng.random(30) < 0.4).astype(int)
    offsets = [0, 10, 30]
    gt = ground_truth_coefficients("ndcg", relevance, offsets)
    for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
        y = relevance[lo:hi].astype(bool)
        np.testing.assert_array_equal(gt[lo:hi], np.where(y, 1.0 / y.sum(), -1.0 / (~y).sum()))


def test_bool_and_float_relevance_are_accepted():
    scores = np.array([0.3, 0.1, 0.2])
    ref = most_violated_rankings("ap", scores, np.array([1, 0, 1]), [0, 3])
    for rel in (np.array([True, False, True]), np.array([1.0, 0.0, 1.0])):
        np.testing.assert_array_equal(most_violated_rankings("ap", scores, rel, [0, 3]).coef, ref.coef)


@pytest.mark.parametrize("loss", ["ap", "precision_at_k", "pairwise", "ndcg_graded"])
def test_int8_grades_give_the_int64_answers(rng, loss):
    """A binary loss's kernel reads int8 grades as they are (``Kernel.label_dtypes``), a graded one gets them as
    int64: the same answers either way, relevant_at included."""
    sizes = rng.integers(1, 40, 60)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    grades = rng.integers(0, 5, offsets[-1])
    scores = rng.normal(size=offsets[-1])
    options = {} if loss in ("pairwise", "ndcg_graded") else dict(relevant_at=2)
    wide = most_violated_rankings(loss, scores, grades, offsets, relative_to_truth=True, **options)
    narrow = most_violated_rankings(loss, scores, grades.astype(np.int8), offsets, relative_to_truth=True, **options)
    for field in ("coef", "losses", "values", "usable"):
        np.testing.assert_array_equal(getattr(narrow, field), getattr(wide, field))


class _PythonOnlyAUC(RankLoss):
    """The ROC-area loss without a compiled form: batches fall back to one Python call per query."""

    name = "python_only_auc"

    def value(self, pattern):
        pattern = np.asarray(pattern, dtype=bool)
        n_pos = pattern.sum()
        return float(np.sum(np.cumsum(~pattern)[pattern]) / (n_pos * (pattern.size - n_pos)))

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=float), np.asarray(i, dtype=float))
        return (n_pos + 1.0 - i) / (n_pos * n_neg)

    def delta_diff(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=float), np.asarray(i, dtype=float))
        return np.full(i.shape, -1.0 / (n_pos * n_neg))


def test_fallbacks_run_per_query_and_are_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(kernel_base, "_LOGGED_FALLBACKS", set())
    scores = np.array([0.3, 0.1, 0.2, 0.5, -1.0, 0.0])
    relevance = np.array([1, 0, 1, 0, 1, 0])
    offsets = [0, 3, 6]
    compiled = most_violated_rankings("auc", scores, relevance, offsets, "qs")
    with caplog.at_level(logging.WARNING, logger="rankopt.inference.batched"):
        for _ in range(2):
            res = most_violated_rankings(_PythonOnlyAUC(), scores, relevance, offsets, "qs")
            np.testing.assert_array_equal(res.coef, compiled.coef)
            res = most_violated_rankings("ap", scores, relevance, offsets, "dp")
            assert_same(res, most_violated_rankings_per_query("ap", scores, relevance, offsets, "qs"))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "no compiled form" in messages[0] and "'dp' has no compiled batched form" in messages[1]


class _HalfDiscount(PositionDiscountLoss):
    """A convex discount with D(1) ≠ 1: the batch's tables equal the single path's up to rounding."""

    name = "half_discount"

    def discount(self, positions):
        return 2.0 / (1.0 + np.asarray(positions, dtype=float))


def test_position_discount_plugins_run_compiled():
    rng = np.random.default_rng(12)
    sizes = rng.integers(2, 50, 40)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n = int(offsets[-1])
    scores = rng.normal(0, 1, n)
    relevance = (rng.random(n) < 0.3).astype(np.int64)
    for method in ("qs", "greedy"):
        fast = most_violated_rankings(_HalfDiscount(), scores, relevance, offsets, method)
        slow = most_violated_rankings_per_query(_HalfDiscount(), scores, relevance, offsets, method)
        np.testing.assert_array_equal(fast.coef, slow.coef)
        np.testing.assert_allclose(fast.losses, slow.losses, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("longest", [120, 300])
@pytest.mark.parametrize("loss", ["ndcg", _HalfDiscount()], ids=["ndcg", "half_discount"])
def test_a_position_discounts_tables_kept_per_positive_count_equal_the_single_paths(loss, longest):
    """Queries of one |P| and many lengths share a thread's normalised table (batches whose longest query
    is ≤ 255 documents); a longer batch divides at every query.  Both equal the single path to the bit."""
    rng = np.random.default_rng(longest)
    sizes = np.concatenate([rng.integers(6, 100, 60), [longest]])
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    relevance = np.zeros(int(offsets[-1]), dtype=np.int64)
    for q in range(sizes.size):  # three or five positives each: two rows, reused by many queries
        relevance[offsets[q] + rng.choice(sizes[q], 3 + 2 * (q % 2), replace=False)] = 1
    for dtype in (np.float64, np.float32):
        scores = rng.normal(0, 1, relevance.size).astype(dtype)
        fast = most_violated_rankings(loss, scores, relevance, offsets, "qs")
        slow = most_violated_rankings_per_query(loss, scores, relevance, offsets, "qs")
        np.testing.assert_array_equal(fast.coef, slow.coef)
        np.testing.assert_allclose(fast.losses, slow.losses, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("loss", ["ap", "auc", "precision_at_k"])
def test_every_query_length_sorts_its_negatives_like_the_single_path(loss):
    """Queries of 1 … 90 documents, many tied: the distribution sort's running sum over its 4n + 1 bucket
    counts takes eight at a time, then the rest one by one; every remainder is met."""
    rng = np.random.default_rng(5)
    sizes = np.arange(1, 91)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n = int(offsets[-1])
    scores = np.where(rng.random(n) < 0.5, rng.integers(-4, 4, n) / 4.0, rng.normal(0, 1, n))
    relevance = (rng.random(n) < 0.2).astype(np.int64)
    fast = most_violated_rankings(loss, scores, relevance, offsets)
    assert_same(fast, most_violated_rankings_per_query(loss, scores, relevance, offsets))


@pytest.mark.parametrize("k", [1, 2, 5, 10, 50])
def test_top_k_batch_orders_only_what_it_reads_and_agrees_with_the_fully_sorted_path(k):
    """The batch's top-k method puts in order only the top's negatives and those at or above the lowest
    positive; the per-query method sorts every negative.  Same ranks and Δ on queries whose negatives lie
    mostly below every positive, tied with the lowest positive or across the top's edge, with one positive,
    one negative, more positives than negatives, and scores of both dtypes."""
    from rankopt.losses import PrecisionAtKLoss

    rng = np.random.default_rng(k)
    loss = PrecisionAtKLoss(k=k)
    for _ in range(150):
        sizes = rng.choice([1, 2, 3, 12, 40, 100], size=int(rng.integers(1, 5)))
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        n = int(offsets[-1])
        relevance = (rng.random(n) < rng.choice([0.05, 0.3, 0.9])).astype(np.int64)
        shift = rng.choice([0.0, 1.0, 3.0])  # positives above most negatives, or among them
        scores = rng.normal(0, 1, n) + shift * relevance
        if rng.random() < 0.5:  # ties everywhere, the lowest positive's score among the negatives'
            scores = np.round(scores * 2) / 2
        for dtype in (np.float32, np.float64):
            fast = most_violated_rankings(loss, scores.astype(dtype), relevance, offsets)
            slow = most_violated_rankings_per_query(loss, scores.astype(dtype), relevance, offsets)
            assert_same(fast, slow)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"offsets": [0, 2]}, "relevance to hold the offsets' 2 documents, got 4"),
        ({"offsets": [0, 3, 2, 4]}, "non-decreasing offsets"),
        ({"offsets": [1, 4]}, "start at 0"),
        ({"offsets": [0.0, 4.0]}, "integer offsets"),
        ({"offsets": [[0, 4]]}, "non-empty 1-D"),
        ({"offsets": []}, "non-empty 1-D"),
        ({"scores": [0.1, np.nan, 0.2, 0.3]}, "scores to be finite"),
        ({"scores": [0.1, np.inf, 0.2, 0.3]}, "scores to be finite"),
        ({"scores": ["a", "b", "c", "d"]}, "real numbers"),
        ({"scores": [[0.1, 0.2, 0.3, 0.4]]}, "1-D"),
        ({"scores": [0.1, 0.2, 0.3]}, "relevance of the same length as scores"),
        ({"relevance": [1, 0, 1]}, "relevance to hold the offsets' 4 documents"),
        ({"relevance": [[1, 0, 1, 0]]}, "relevance to be 1-D"),
        ({"relevance": [1, 0, 2, 0]}, "0/1 relevance for the binary loss 'ap'"),
        ({"relevance": [1, 0, -1, 0]}, "0/1 relevance"),
        ({"relevance": [1, 0, 0.5, 0]}, "integer relevance"),
        ({"inference": "nope"}, "unknown inference method"),
        ({"inference": "search", "loss": "ndcg"}, "cannot be used with loss 'ndcg'"),
        ({"loss": "zero_one"}, "rank loss"),
        ({"n_threads": 0}, "n_threads"),
        ({"n_threads": 1.5}, "n_threads"),
    ],
)
def test_bad_input(kwargs, match):
    args = {
        "loss": "ap",
        "scores": [0.1, 0.2, 0.3, 0.4],
        "relevance": [1, 0, 1, 0],
        "offsets": [0, 1, 4],
        "inference": "auto",
    }
    args.update(kwargs)
    n_threads = args.pop("n_threads", None)
    with pytest.raises(ValueError, match=match):
        most_violated_rankings(**args, n_threads=n_threads)


def test_method_is_the_deprecated_name_of_inference():
    args = ("ap", [0.1, 0.2, 0.3], [1, 0, 1], [0, 3])
    with pytest.warns(FutureWarning, match=r"most_violated_rankings\(method=...\) is deprecated"):
        old = most_violated_rankings(*args, method="greedy")
    new = most_violated_rankings(*args, inference="greedy")
    np.testing.assert_array_equal(old.coef, new.coef)
    with pytest.raises(ValueError, match="expected inference= or the deprecated method=, got both"):
        most_violated_rankings(*args, inference="qs", method="greedy")


def test_ground_truth_bad_input():
    with pytest.raises(ValueError, match="non-decreasing"):
        ground_truth_coefficients("ap", [1, 0, 1], [0, 2, 1, 3])
    with pytest.raises(ValueError, match="0/1 relevance"):
        ground_truth_coefficients("ap", [1, 3, 0], [0, 3])


def test_registry_is_used_for_names():
    registry = default_registry()
    res = most_violated_rankings("ap", [0.1, 0.2], [1, 0], [0, 2], registry=registry)
    assert res.usable.all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    data=st.data(),
    pair=st.sampled_from(COMPILED + [("pairwise", "auto")]),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_batched_equals_per_query_property(sizes, data, pair, dtype):
    """Any batch — scores drawn from a small grid of ties or freely — agrees with the per-query loop."""
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(offsets[-1])
    score = st.sampled_from([-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0]) | st.floats(-3, 3, width=32)
    scores = np.array(data.draw(st.lists(score, min_size=n, max_size=n)), dtype=dtype)
    loss, method = pair
    top = 4 if loss == "pairwise" else 1
    relevance = np.array(data.draw(st.lists(st.integers(0, top), min_size=n, max_size=n)), dtype=np.int64)
    fast = most_violated_rankings(loss, scores, relevance, offsets, method)
    assert_same(fast, most_violated_rankings_per_query(loss, scores, relevance, offsets, method))


@pytest.mark.parametrize(
    ("loss", "method", "graded"),
    [*((loss, method, False) for loss, method in COMPILED), ("pairwise", "auto", True), ("ndcg_graded", "auto", True)],
)
def test_relative_to_truth_subtracts_the_ground_truth(loss, method, graded):
    """The hinge form: coefficients minus the ground truth's, values minus its score, on every path
    (subtracted inside the compiled binary kernel, after the inference elsewhere).  Its coefficients are the
    symmetric subgradient: a most violated ranking's, averaged over each tie group of one score and one
    relevance (issue 61, point 10), which the plain form, a ranking's Ψ, need not be."""
    rng = np.random.default_rng(7)
    for _ in range(150):
        scores, relevance, grades, offsets = random_query_set(rng, np.float64)
        labels = grades if graded else relevance
        plain = most_violated_rankings(loss, scores, labels, offsets, method)
        relative = most_violated_rankings(loss, scores, labels, offsets, method, relative_to_truth=True)
        truth = ground_truth_coefficients(loss, labels, offsets)
        symmetric = _mean_over_tie_groups(plain.coef, scores, labels, offsets)
        np.testing.assert_allclose(relative.coef, symmetric - truth, rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(relative.losses, plain.losses)
        np.testing.assert_array_equal(relative.usable, plain.usable)
        truth_dot = np.array([truth[lo:hi] @ scores[lo:hi] for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)])
        expected = np.where(plain.usable, plain.values - truth_dot, 0.0)
        np.testing.assert_allclose(relative.values, expected, rtol=1e-12, atol=1e-12)
        assert np.all(relative.values[relative.usable] >= -1e-12)  # R = R* is a candidate


def _mean_over_tie_groups(coef, scores, labels, offsets):
    """``coef`` averaged over each query's documents of one score and one label (the slow reference)."""
    out = np.array(coef, dtype=np.float64)
    for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
        keys = list(zip(scores[lo:hi].tolist(), np.asarray(labels)[lo:hi].tolist(), strict=True))
        for key in set(keys):
            members = lo + np.flatnonzero([k == key for k in keys])
            out[members] = out[members].mean()
    return out


@pytest.mark.parametrize("n_grades", [3, 64, 65, 300])
def test_the_graded_position_truth_is_subtracted_to_the_bit_whatever_the_number_of_levels(n_grades):
    """Up to 64 grade levels the kernel looks each document's tie group up by its level, beyond it searches
    the groups: both give plain minus the ground truth, to the bit (repeated gains included)."""
    from rankopt.losses import GradedPositionLoss

    class Capped(GradedPositionLoss):  # gains that repeat: grades 3 and 4 tie, as do all from 5 up
        name = "capped_gain_test"

        def __init__(self, k=10):
            self.k = k

        def gain(self, grades):
            grades = np.asarray(grades, dtype=np.float64)
            return np.minimum(grades, 5.0) + (grades == 3)

        def position_discount(self, positions):
            return 1.0 / np.log2(1.0 + np.asarray(positions, dtype=np.float64))

    rng = np.random.default_rng(n_grades)
    sizes = rng.choice([1, 2, 7, 30, 120], size=40)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(offsets[-1])
    grades = np.where(rng.random(n) < 0.5, 0, rng.integers(0, n_grades, n))
    for loss in ("ndcg_graded", Capped(k=10)):
        for scores in (rng.normal(0, 1, n), rng.integers(-3, 4, n) * 0.25):
            plain = most_violated_rankings(loss, scores, grades, offsets)
            relative = most_violated_rankings(loss, scores, grades, offsets, relative_to_truth=True)
            truth = ground_truth_coefficients(loss, grades, offsets)
            np.testing.assert_array_equal(relative.coef, plain.coef - truth)
            np.testing.assert_array_equal(relative.usable, plain.usable)


@pytest.mark.parametrize(("loss", "method"), [*COMPILED, ("precision_at_k", "auto")])
def test_relevant_at_thresholds_grades_like_a_0_1_copy(loss, method):
    """Grades with ``relevant_at`` (thresholded in the kernel) give what their 0/1 threshold gives."""
    rng = np.random.default_rng(9)
    for _ in range(100):
        scores, _, grades, offsets = random_query_set(rng, np.float32)
        for relevant_at in (1, 1.5, 3, 2.0**70):
            thresholded = (grades >= relevant_at).astype(np.int64)
            expected = most_violated_rankings(loss, scores, thresholded, offsets, method, relative_to_truth=True)
            got = most_violated_rankings(
                loss, scores, grades, offsets, method, relative_to_truth=True, relevant_at=relevant_at
            )
            assert_same(got, expected)


def test_relevant_at_refuses_negative_grades_and_a_bad_threshold():
    with pytest.raises(ValueError, match="expected grades >= 0 for the loss 'ap'"):
        most_violated_rankings("ap", [0.0, 1.0], [-1, 2], [0, 2], relevant_at=1)
    with pytest.raises(ValueError, match="relevant_at"):
        most_violated_rankings("ap", [0.0, 1.0], [0, 2], [0, 2], relevant_at=0)


@pytest.mark.parametrize("loss", ["ap", "ndcg_graded", "pairwise"])
def test_a_prepared_batch_never_overwrites_a_result_someone_holds(loss):
    """The coefficient array is reused across calls only once nobody holds the previous one."""
    from rankopt.inference.batched import PreparedRankings

    rng = np.random.default_rng(3)
    grades, offsets = rng.integers(0, 4, 60), np.array([0, 20, 45, 60])
    prepared = PreparedRankings(loss, grades, offsets, relevant_at=1, registry=default_registry())
    first_scores, second_scores = rng.normal(size=60), rng.normal(size=60)
    first = prepared(first_scores)
    kept = first.coef.copy()
    second = prepared(second_scores)
    assert second.coef is not first.coef
    np.testing.assert_array_equal(first.coef, kept)
    expected = most_violated_rankings(loss, second_scores, grades, offsets, relevant_at=1)
    np.testing.assert_array_equal(second.coef, expected.coef)
    view = second.coef[:5]  # a view holds its base
    del first, second
    third = prepared(first_scores)
    assert not np.shares_memory(third.coef, view)
    np.testing.assert_array_equal(third.coef, kept)
    address = third.coef.__array_interface__["data"][0]
    del third, view
    fourth = prepared(second_scores)  # nobody held the last one: reused
    assert fourth.coef.__array_interface__["data"][0] == address
    np.testing.assert_array_equal(fourth.coef, expected.coef)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scale_into_rounds_the_float64_product_once(dtype):
    # RankHingeLoss's backward: the product in float64, rounded to the output's type, as NumPy's multiply
    # into that type does (in two passes).
    from rankopt.inference import _batched

    values = np.random.default_rng(3).normal(size=1001) * np.logspace(-30, 30, 1001)
    out = np.empty(values.size, dtype=dtype)
    _batched.scale_into(values, 1.0 / 3.0, out)
    expected = np.empty(values.size, dtype=dtype)
    np.multiply(values, 1.0 / 3.0, out=expected, casting="same_kind")
    np.testing.assert_array_equal(out, expected)
