"""The AP-specific exact methods "search" and "select" against greedy and brute force.

Both must return exactly the greedy's interleaving ranks on every input,
ties included (``rankopt/inference/_ap.pyx`` explains why they can): the
greedy is itself checked against brute force in ``test_greedy.py``, and a
direct brute-force check over all (P + N)! rankings is repeated here.
"""

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.brute_force import brute_force_max, exact_objective

import rankopt
from rankopt.inference import _ap
from rankopt.inference.ap_methods import SearchMethod, SelectMethod
from rankopt.inference.base import descending_order
from rankopt.losses import APLoss
from rankopt.plugins import default_registry

METHODS = ["search", "select"]
REL = 1e-9


def _assert_same_as_greedy(pos, neg, methods=METHODS):
    """The same optimal value as greedy; where the objective ties (to rounding), another maximiser — other
    ranks, its own Δ — is as right, so the ranks and Δ are compared only where they agree."""
    greedy = rankopt.most_violated_ranking("ap", pos, neg, inference="greedy")
    for method in methods:
        result = rankopt.most_violated_ranking("ap", pos, neg, inference=method)
        assert result.value == pytest.approx(greedy.value, rel=REL, abs=1e-12), method
        if np.array_equal(result.neg_ranks, greedy.neg_ranks):
            assert result.loss == pytest.approx(greedy.loss, rel=REL, abs=1e-12), method


def _random_instance(rng, kind, n_pos, n_neg):
    if kind == "normal":
        spread = rng.choice([0.01, 0.3, 3.0])
        return spread * rng.normal(size=n_pos), spread * rng.normal(size=n_neg)
    if kind == "grid":  # heavy ties within and across the classes
        grid = int(rng.integers(1, 6))
        step = rng.choice([1.0, 0.5, 0.25, 1 / 3])
        return step * rng.integers(0, grid, n_pos), step * rng.integers(0, grid, n_neg)
    if kind == "below":  # every negative far below every positive (select's sweet spot)
        return 10.0 + rng.normal(size=n_pos), rng.normal(size=n_neg)
    if kind == "mostly_below":  # a few negatives reach the positives
        neg = rng.normal(size=n_neg) - 3.0
        neg[rng.random(n_neg) < 0.02] += 4.0
        return rng.normal(size=n_pos), neg
    if kind == "above":  # every negative far above every positive
        return rng.normal(size=n_pos), 10.0 + rng.normal(size=n_neg)
    raise AssertionError(kind)


KINDS = ["normal", "grid", "below", "mostly_below", "above"]


# --------------------------------------------------------------------------
# Equal to greedy


@pytest.mark.parametrize("kind", KINDS)
def test_equal_to_greedy_on_random_instances(kind):
    """200 instances per kind (1,000 in all), sizes mostly small, up to |N| = 5,000."""
    rng = np.random.default_rng(KINDS.index(kind))
    for t in range(200):
        if t % 50 == 0:
            n_pos, n_neg = int(rng.integers(1, 200)), int(rng.integers(1000, 5001))
        elif t % 5 == 0:  # P > N, P = 1, N = 1 are all frequent here
            n_pos, n_neg = int(rng.integers(1, 40)), int(rng.integers(1, 8))
        else:
            n_pos, n_neg = int(rng.integers(1, 30)), int(rng.integers(1, 300))
        pos, neg = _random_instance(rng, kind, n_pos, n_neg)
        _assert_same_as_greedy(pos, neg)


@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (1, 50), (50, 1), (7, 3), (3, 7), (5, 5)])
@pytest.mark.parametrize("kind", KINDS)
def test_equal_to_greedy_at_the_edges(kind, n_pos, n_neg):
    rng = np.random.default_rng(100 * n_pos + n_neg)
    for _ in range(5):
        _assert_same_as_greedy(*_random_instance(rng, kind, n_pos, n_neg))


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5])
def test_all_scores_equal(value):
    for n_pos, n_neg in [(1, 1), (3, 10), (10, 3), (20, 500)]:
        _assert_same_as_greedy(np.full(n_pos, value), np.full(n_neg, value))


def _exact_tie_instances():
    """Instances where e_j(i) = 0 exactly but rounds to a tiny negative value.

    With s⁺_i − s*_j = Δ = N·i / (2(i+j−1)(i+j)) the derivative of f_j at i
    vanishes (a plateau of f_j at its maximum).  Positives above i score far
    higher, so the greedy's running sum f is large there and absorbs the
    rounded step: the greedy moves up to the plateau's upper end, while a
    bare binary search on the computed sign would stop one rank short.
    """
    for n_pos in range(2, 6):
        for j in range(2, 12):
            for i in range(2, n_pos + 1):
                for n_neg in range(j, 400):
                    delta = Fraction(n_neg * i, 2 * (i + j - 1) * (i + j))
                    if delta.denominator & (delta.denominator - 1):
                        continue  # Δ must be a float exactly
                    loss_term = -float(i) / (n_pos * float(i + j - 1) * float(i + j))
                    if loss_term + 2.0 / (float(n_pos) * n_neg) * float(delta) >= 0.0:
                        continue  # rounds to 0 or above: no trap
                    pos = np.full(n_pos, 10.0 + float(delta))
                    pos[: i - 1] = 1000.0
                    neg = np.full(n_neg, -1e6)
                    neg[: j - 1] = 1e6
                    neg[j - 1] = 10.0
                    yield pos, neg, j, i


def test_exact_plateaus_hidden_by_rounding_are_maximised_by_every_method():
    """An exact plateau whose step rounds below zero: SEARCH/SELECT, which sum f_j from the start of the
    walk, take its upper end (the large sum absorbs the rounded step); greedy and qs, which sum the
    steps from the best rank so far (exact at extreme score spans: test_extreme_spans.py), stop at the
    computed sign, its lower end.  Both ends maximise f_j exactly: the objectives are equal in rationals
    (up to value()'s rounding of Δ, a few ulps of 1)."""
    instances = list(_exact_tie_instances())
    armed = [(pos, neg) for pos, neg, j, i in instances if j > len(pos)]
    assert len(armed) > 50
    loss = rankopt.get_loss("ap")
    for pos, neg, j, i in instances:
        if j > len(pos):  # f_j is concave: SEARCH takes the plateau's upper end
            assert rankopt.most_violated_ranking("ap", pos, neg, inference="search").neg_ranks[j - 1] == i + 1
        for p, n in ((pos, neg), (pos[::-1].copy(), neg[::-1].copy())):  # and the other input order
            objectives = {
                exact_objective(loss, p.tolist(), n.tolist(), most_violated_ranking_ranks(p, n, method))
                for method in ["greedy", "qs", *METHODS]
            }
            assert max(objectives) - min(objectives) <= Fraction(1, 10**12), objectives


def most_violated_ranking_ranks(pos, neg, method):
    return rankopt.most_violated_ranking("ap", pos, neg, inference=method).neg_ranks.tolist()


@pytest.mark.parametrize("n_pos", [1, 2, 5])
def test_exact_zero_derivatives_on_integer_grids(n_pos):
    """|N| a multiple of 12 makes e_j(i) = 0 for small integer gaps, often."""
    rng = np.random.default_rng(n_pos)
    for _ in range(150):
        n_neg = int(rng.choice([12, 24, 36, 48, 60, 72, 120]))
        step = rng.choice([1.0, 0.5])
        pos = step * rng.integers(0, 6, n_pos)
        neg = step * rng.integers(-3, 3, n_neg)
        _assert_same_as_greedy(pos, neg)


@settings(max_examples=150, deadline=None)
@given(
    pos=st.lists(st.integers(-4, 4), min_size=1, max_size=12),
    neg=st.lists(st.integers(-4, 4), min_size=1, max_size=60),
    scale=st.sampled_from([1.0, 0.5, 0.1, 1 / 3, 7.0]),
)
def test_equal_to_greedy_property(pos, neg, scale):
    _assert_same_as_greedy(scale * np.array(pos, dtype=float), scale * np.array(neg, dtype=float))


@pytest.mark.parametrize("method", METHODS)
def test_float32_input(method):
    rng = np.random.default_rng(7)
    for kind in KINDS:
        pos, neg = _random_instance(rng, kind, 20, 400)
        pos32, neg32 = pos.astype(np.float32), neg.astype(np.float32)
        greedy = rankopt.most_violated_ranking("ap", pos32, neg32, inference="greedy")
        result = rankopt.most_violated_ranking("ap", pos32, neg32, inference=method)
        np.testing.assert_array_equal(result.neg_ranks, greedy.neg_ranks)
        assert result.value == pytest.approx(greedy.value, rel=REL)


# --------------------------------------------------------------------------
# Brute force


@pytest.mark.parametrize("n_pos,n_neg", list(itertools.product(range(1, 5), range(1, 5))))
@pytest.mark.parametrize("method", METHODS)
def test_equal_to_brute_force(method, n_pos, n_neg):
    rng = np.random.default_rng(10 * n_pos + n_neg)
    for trial in range(4):
        if trial % 2:
            pos, neg = rng.integers(0, 3, n_pos).astype(float), rng.integers(0, 3, n_neg).astype(float)
        else:
            spread = rng.choice([0.05, 0.5, 3.0])
            pos, neg = spread * rng.normal(size=n_pos), spread * rng.normal(size=n_neg)
        result = rankopt.most_violated_ranking("ap", pos, neg, inference=method)
        assert result.value == pytest.approx(brute_force_max("ap", pos, neg), abs=1e-9)


# --------------------------------------------------------------------------
# Kernels directly


def test_select_kernel_takes_unsorted_negatives_and_returns_input_order():
    rng = np.random.default_rng(3)
    pos = np.ascontiguousarray(np.sort(5.0 + rng.normal(size=50))[::-1])
    neg = rng.normal(size=20_000)
    neg[:30] += 6.0
    ranks = np.empty(neg.size, dtype=np.intc)
    _ap.select_ranks(pos, neg, ranks)
    greedy = rankopt.most_violated_ranking("ap", pos, neg, inference="greedy").neg_ranks
    np.testing.assert_array_equal(ranks, greedy)


def _select_cases():
    rng = np.random.default_rng(321)
    for kind in KINDS:
        for n_pos, n_neg in ((1, 3000), (40, 4000), (300, 200), (7, 1)):
            pos, neg = _random_instance(rng, kind, n_pos, n_neg)
            yield f"{kind}-P{n_pos}-N{n_neg}", pos, neg
    yield "all equal", np.zeros(20), np.zeros(3000)
    yield "outliers", 2.0 + rng.normal(size=50), np.concatenate([rng.normal(size=3000), [1e300, -1e300, 7e10]])
    yield "tiny span", 1.0 + rng.integers(0, 4, 10) * 1e-15, 1.0 + rng.integers(0, 5, 3000) * 1e-15
    yield "near zero", rng.normal(0, 1e-300, 20), rng.normal(0, 1e-300, 2000)
    yield "late", rng.normal(3, 0.5, 100), rng.normal(0, 0.5, 20_000)
    yield "float32", (3 + rng.normal(size=40)).astype(np.float32), rng.normal(size=3000).astype(np.float32)


@pytest.mark.parametrize("case", list(_select_cases()), ids=lambda c: c[0])
def test_select_by_value_equals_greedy_for_any_bucket_count(case):
    # The candidates found by value (bucket bounds at points that need not be
    # scores: bucket edges) and by selection must both give greedy's ranks.
    _, pos, neg = case
    greedy = rankopt.most_violated_ranking("ap", pos, neg, inference="greedy").neg_ranks
    pos_desc = np.ascontiguousarray(pos[np.argsort(-pos, kind="stable")])
    for n_buckets in (0, 3, 4, 17, 256, 5000, -1):
        ranks = np.empty(neg.size, dtype=np.intc)
        _ap.select_ranks(pos_desc, np.ascontiguousarray(neg), ranks, n_buckets)
        np.testing.assert_array_equal(ranks, greedy, err_msg=f"{n_buckets} buckets")


def test_select_bucket_count_is_validated():
    ranks = np.empty(3, dtype=np.intc)
    with pytest.raises(ValueError, match="n_buckets"):
        _ap.select_ranks(np.ones(2), np.zeros(3), ranks, 2)


def test_search_kernel_ranks_are_non_decreasing_in_score_order():
    rng = np.random.default_rng(4)
    pos, neg = rng.normal(size=40), rng.normal(size=3000)
    pos_desc = np.ascontiguousarray(pos[descending_order(pos)])
    neg_desc = np.ascontiguousarray(neg[descending_order(neg)])
    ranks = np.empty(neg.size, dtype=np.intc)
    _ap.search_ranks(pos_desc, neg_desc, ranks)
    assert np.all(np.diff(ranks) >= 0)
    assert ranks.min() >= 1 and ranks.max() <= pos.size + 1


# --------------------------------------------------------------------------
# Registration and refusal


def test_registered_with_priorities():
    registry = default_registry()
    assert registry.resolve_method("search", APLoss()).__class__ is SearchMethod
    assert registry.resolve_method("select", APLoss()).__class__ is SelectMethod
    assert SelectMethod.auto_priority < SearchMethod.auto_priority < 100


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("loss", ["ndcg", "auc"])
def test_refused_for_other_losses(method, loss):
    with pytest.raises(ValueError, match=rf"inference method '{method}' cannot be used with loss '{loss}'.*'ap'"):
        rankopt.most_violated_ranking(loss, [1.0, 0.0], [0.5], inference=method)


def test_refused_for_a_custom_rank_loss_and_auto_avoids_them():
    class Halved(rankopt.losses.NDCGLoss):
        name = "halved_ndcg_test"

    loss = Halved()
    for method in METHODS:
        with pytest.raises(ValueError, match="exact only for the average-precision loss"):
            rankopt.most_violated_ranking(loss, [1.0], [0.5, 2.0], inference=method)
    assert default_registry().resolve_method("auto", loss).name not in METHODS
