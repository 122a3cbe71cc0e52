"""Greedy loss-augmented inference against brute force, and the output's contract.

Exactness (developers' guide): on every instance with |P|, |N| ≤ 4 —
including tied scores (within and across classes), P = 1, N = 1 and P > N —
``most_violated_ranking(..., inference="greedy").value`` equals the maximum of
w·Ψ(X, R) + Δ(R*, R) over all (P + N)! rankings, computed independently by
``tests/oracles/brute_force.py``.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.brute_force import LOSSES, all_objectives, brute_force_max, joint_score, ndcg_loss, pattern_from_neg_ranks

import rankopt
from rankopt.losses import APLoss, PositionDiscountLoss, RankLoss

RANK_LOSSES = ["ap", "ndcg", "auc"]
SIZES = list(itertools.product(range(1, 5), range(1, 5)))  # every (|P|, |N|) with both ≤ 4
TOL = 1e-9


def _tied_scores(rng, n_pos, n_neg, grid=3):
    """Scores from a tiny integer grid: ties within and across the classes are frequent."""
    return (rng.integers(0, grid, size=n_pos).astype(np.float64), rng.integers(0, grid, size=n_neg).astype(np.float64))


def _greedy(loss, pos, neg):
    return rankopt.most_violated_ranking(loss, pos, neg, inference="greedy")


# --------------------------------------------------------------------------
# The oracle itself


def test_oracle_vectorised_score_matches_pairwise_definition(rng):
    pos, neg = rng.normal(size=3), rng.normal(size=2)
    perms, values = all_objectives(lambda pattern: 0.0, pos, neg)
    for k in rng.choice(len(perms), size=20, replace=False):
        assert values[k] == pytest.approx(joint_score(perms[k], pos, neg), abs=1e-12)


def test_oracle_ground_truth_and_reverse_order():
    pos, neg = [0.0, 0.0], [0.0, 0.0, 0.0]
    # all scores 0: the objective is the loss alone, maximised by the all-negatives-first pattern
    for name, fn in LOSSES.items():
        assert fn([True, True, False, False, False]) == 0.0
        assert brute_force_max(name, pos, neg) == pytest.approx(fn([False, False, False, True, True]))
    assert LOSSES["auc"]([False, False, False, True, True]) == 1.0


# --------------------------------------------------------------------------
# Greedy == brute force


@pytest.mark.parametrize("loss", RANK_LOSSES)
@pytest.mark.parametrize("n_pos,n_neg", SIZES)
def test_greedy_equals_brute_force_continuous(loss, n_pos, n_neg):
    rng = np.random.default_rng(1000 * n_pos + 10 * n_neg)
    for _ in range(5):
        # scores spread on the scale where the loss and w·Ψ compete
        scale = rng.choice([0.05, 0.5, 3.0])
        pos, neg = scale * rng.normal(size=n_pos), scale * rng.normal(size=n_neg)
        result = _greedy(loss, pos, neg)
        assert result.value == pytest.approx(brute_force_max(loss, pos, neg), abs=TOL)


@pytest.mark.parametrize("loss", RANK_LOSSES)
@pytest.mark.parametrize("n_pos,n_neg", SIZES)
def test_greedy_equals_brute_force_tied(loss, n_pos, n_neg):
    rng = np.random.default_rng(7 + 1000 * n_pos + 10 * n_neg)
    for _ in range(6):
        pos, neg = _tied_scores(rng, n_pos, n_neg)
        # scale so that score gaps (multiples of 1/(PN)·scale) and loss steps are comparable
        scale = rng.choice([0.01, 0.2, 1.0])
        result = _greedy(loss, scale * pos, scale * neg)
        assert result.value == pytest.approx(brute_force_max(loss, scale * pos, scale * neg), abs=TOL)


@pytest.mark.parametrize("loss", RANK_LOSSES)
def test_greedy_all_scores_equal(loss):
    for n_pos, n_neg in SIZES:
        pos, neg = np.full(n_pos, 0.25), np.full(n_neg, 0.25)
        assert _greedy(loss, pos, neg).value == pytest.approx(brute_force_max(loss, pos, neg), abs=TOL)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    loss=st.sampled_from(RANK_LOSSES),
    pos=st.lists(st.integers(-2, 2), min_size=1, max_size=4),
    neg=st.lists(st.integers(-2, 2), min_size=1, max_size=4),
    scale=st.sampled_from([0.01, 0.1, 0.5, 2.0]),
)
def test_greedy_equals_brute_force_property(loss, pos, neg, scale):
    pos = scale * np.asarray(pos, dtype=np.float64)
    neg = scale * np.asarray(neg, dtype=np.float64)
    result = _greedy(loss, pos, neg)
    assert result.value == pytest.approx(brute_force_max(loss, pos, neg), abs=TOL)
    # the reported value is attained by the reported ranking
    assert result.loss == pytest.approx(LOSSES[loss](pattern_from_neg_ranks(result.neg_ranks, pos.size)), abs=1e-12)


class _ReciprocalDiscountLoss(PositionDiscountLoss):
    """A non-built-in member of the family, D(i) = 1/i (convex), run by the compiled kernel."""

    name = "reciprocal_test"

    def discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)


def test_greedy_custom_convex_discount_equals_brute_force():
    rng = np.random.default_rng(3)
    loss = _ReciprocalDiscountLoss()

    def oracle_loss(pattern):
        return ndcg_loss(pattern, discount=lambda i: 1.0 / i)

    for n_pos, n_neg in SIZES:
        pos, neg = _tied_scores(rng, n_pos, n_neg)
        pos, neg = 0.1 * pos, 0.1 * neg
        assert _greedy(loss, pos, neg).value == pytest.approx(brute_force_max(oracle_loss, pos, neg), abs=TOL)


# --------------------------------------------------------------------------
# The output's contract


def _explicit_order(result, pos, neg):
    """The ranking the result describes, as sample ids (positives 0…P−1, negatives P…).

    Positives in descending score order (ties by index), each preceded by the
    negatives whose interleaving rank is its position among the positives.
    """
    n_pos = len(pos)
    pos_desc = sorted(range(n_pos), key=lambda k: (-pos[k], k))
    order = []
    for rank in range(1, n_pos + 2):
        order.extend(n_pos + j for j in range(len(neg)) if result.neg_ranks[j] == rank)
        if rank <= n_pos:
            order.append(pos_desc[rank - 1])
    return order


@pytest.mark.parametrize("loss", RANK_LOSSES)
@pytest.mark.parametrize("n_pos,n_neg", SIZES + [(7, 3), (3, 11), (12, 12)])
def test_output_consistency(loss, n_pos, n_neg):
    rng = np.random.default_rng(11 + 100 * n_pos + n_neg)
    for tied in (False, True):
        if tied:
            pos, neg = _tied_scores(rng, n_pos, n_neg)
            pos, neg = 0.2 * pos, 0.2 * neg
        else:
            pos, neg = rng.normal(size=n_pos), rng.normal(size=n_neg)
        r = _greedy(loss, pos, neg)
        scale = 1.0 / (n_pos * n_neg)

        assert r.neg_ranks.shape == (n_neg,) and np.issubdtype(r.neg_ranks.dtype, np.integer)
        assert r.pos_ranks.shape == (n_pos,) and np.issubdtype(r.pos_ranks.dtype, np.integer)
        assert r.pos_coef.shape == (n_pos,) and r.neg_coef.shape == (n_neg,)
        assert r.neg_ranks.min() >= 1 and r.neg_ranks.max() <= n_pos + 1
        assert r.pos_ranks.min() >= 1 and r.pos_ranks.max() <= n_neg + 1

        # .loss from the ranks, rebuilt and evaluated independently
        pattern = pattern_from_neg_ranks(r.neg_ranks, n_pos)
        assert r.loss == pytest.approx(LOSSES[loss](pattern), abs=1e-12)

        # .value is the objective of the reported output
        assert r.value == pytest.approx(np.dot(r.pos_coef, pos) + np.dot(r.neg_coef, neg) + r.loss, abs=1e-12)

        # Lemma 6, corrected (docs/maths.md)
        np.testing.assert_allclose(r.pos_coef, (n_neg + 2 - 2 * r.pos_ranks) * scale, atol=1e-15)
        np.testing.assert_allclose(r.neg_coef, (n_pos + 2 - 2 * r.neg_ranks) * scale, atol=1e-15)

        # The explicit ranking: its ranks, coefficients and w·Ψ agree with the result
        order = _explicit_order(r, pos, neg)
        place = {sample: k for k, sample in enumerate(order)}
        for x in range(n_pos):
            negatives_above = sum(place[n_pos + y] < place[x] for y in range(n_neg))
            assert r.pos_ranks[x] == 1 + negatives_above
            # c(x) = (1/PN) Σ_y R_xy
            c = sum(1 if place[x] < place[n_pos + y] else -1 for y in range(n_neg)) * scale
            assert r.pos_coef[x] == pytest.approx(c, abs=1e-15)
        for y in range(n_neg):
            positives_above = sum(place[x] < place[n_pos + y] for x in range(n_pos))
            assert r.neg_ranks[y] == 1 + positives_above
            c = -sum(1 if place[x] < place[n_pos + y] else -1 for x in range(n_pos)) * scale
            assert r.neg_coef[y] == pytest.approx(c, abs=1e-15)
        w_psi = joint_score(order, pos, neg)
        assert r.value == pytest.approx(w_psi + LOSSES[loss](pattern), abs=1e-12)
        # Observation 1 with ties broken by index (§4.2 footnote): within each class, in
        # descending (score, -index) order the interleaving ranks never decrease
        pos_desc = sorted(range(n_pos), key=lambda k: (-pos[k], k))
        assert np.all(np.diff(r.pos_ranks[pos_desc]) >= 0)
        neg_desc = sorted(range(n_neg), key=lambda k: (-neg[k], k))
        assert np.all(np.diff(r.neg_ranks[neg_desc]) >= 0)


@pytest.mark.parametrize("loss", RANK_LOSSES)
def test_output_follows_input_order(loss):
    rng = np.random.default_rng(5)
    for n_pos, n_neg in [(1, 1), (3, 2), (4, 4), (6, 15), (20, 9)]:
        pos, neg = rng.normal(size=n_pos), rng.normal(size=n_neg)  # distinct
        base = _greedy(loss, pos, neg)
        p_perm, n_perm = rng.permutation(n_pos), rng.permutation(n_neg)
        permuted = _greedy(loss, pos[p_perm], neg[n_perm])
        np.testing.assert_array_equal(permuted.neg_ranks, base.neg_ranks[n_perm])
        np.testing.assert_array_equal(permuted.pos_ranks, base.pos_ranks[p_perm])
        np.testing.assert_allclose(permuted.neg_coef, base.neg_coef[n_perm])
        np.testing.assert_allclose(permuted.pos_coef, base.pos_coef[p_perm])
        assert permuted.loss == pytest.approx(base.loss, abs=1e-12)
        assert permuted.value == pytest.approx(base.value, abs=1e-12)


@pytest.mark.parametrize("loss", RANK_LOSSES)
def test_limits_of_the_scores(loss):
    # Far-apart scores: the ground truth wins (Δ = 0); reversed: every negative first.
    pos, neg = np.array([100.0, 101.0]), np.array([-100.0, -99.0, -98.0])
    good = _greedy(loss, pos, neg)
    assert good.loss == 0.0 and np.all(good.neg_ranks == 3) and np.all(good.pos_ranks == 1)
    bad = _greedy(loss, -pos, -neg)
    assert bad.loss == pytest.approx(LOSSES[loss]([False] * 3 + [True] * 2))
    assert np.all(bad.neg_ranks == 1) and np.all(bad.pos_ranks == 4)


def test_loss_names_instances_and_auto_agree():
    pos, neg = [0.3, -0.1, 0.2], [0.0, 0.25, -0.3, 0.1]
    for name, loss in [("ap", APLoss()), ("ndcg", rankopt.get_loss("ndcg")), ("auc", rankopt.get_loss("auc"))]:
        by_name, by_instance = _greedy(name, pos, neg), _greedy(loss, pos, neg)
        np.testing.assert_array_equal(by_name.neg_ranks, by_instance.neg_ranks)
        assert by_name.value == by_instance.value
        # "auto" picks a method that is exact for the loss
        auto = rankopt.most_violated_ranking(name, pos, neg)
        assert auto.value == pytest.approx(brute_force_max(name, pos, neg), abs=TOL)


# --------------------------------------------------------------------------
# Bad input


class _PythonAP(APLoss):
    """AP on the Python path (no compiled form)."""

    name = "ap_python_test"

    def compiled_form(self, n_pos, n_neg):
        return None


class _RaisingLoss(_PythonAP):
    """delta_diff raises, at every size (``at`` None) or only when |P| == at."""

    name = "raising_test"

    def __init__(self, at=None):
        self.at = at

    def get_params(self, deep=True):
        return {"at": self.at}

    def delta_diff(self, j, i, n_pos, n_neg):
        if self.at is None or n_pos == self.at:
            raise ZeroDivisionError("boom in the plugin")
        return super().delta_diff(j, i, n_pos, n_neg)


class _NaNLoss(_RaisingLoss):
    name = "nan_test"

    def delta_diff(self, j, i, n_pos, n_neg):
        if self.at is None or n_pos == self.at:
            return np.full(np.broadcast_shapes(np.shape(j), np.shape(i)), np.nan)
        return APLoss.delta_diff(self, j, i, n_pos, n_neg)


class _WrongShapeLoss(_RaisingLoss):
    name = "wrong_shape_test"

    def delta_diff(self, j, i, n_pos, n_neg):
        if self.at is None or n_pos == self.at:
            return np.zeros(np.size(i) + 1)
        return APLoss.delta_diff(self, j, i, n_pos, n_neg)


BROKEN = [
    (_RaisingLoss, r"raising_test.*raised in delta_diff.*boom in the plugin"),
    (_NaNLoss, r"nan_test.*non-finite"),
    (_WrongShapeLoss, r"wrong_shape_test.*shape"),
]


@pytest.mark.parametrize("cls,fragment", BROKEN)
def test_broken_delta_diff_is_named(cls, fragment):
    # Broken everywhere: refused up front (method check) or at run time; either way
    # the error names the loss and the problem.
    loss = cls()
    assert isinstance(loss, RankLoss)
    with pytest.raises((ValueError, RuntimeError), match=fragment):
        _greedy(loss, [0.3, 0.1], [0.2, 0.0])


@pytest.mark.parametrize("cls,fragment", BROKEN)
def test_delta_diff_broken_only_at_run_time_is_caught(cls, fragment):
    # Fine on small sizes, broken at |P| = 20: the Python path's run-time guard fires.
    loss = cls(at=20)
    pos, neg = np.linspace(0, 1, 20), np.linspace(0.05, 0.95, 5)
    with pytest.raises(RuntimeError, match=fragment):
        _greedy(loss, pos, neg)
    # and sizes where the loss behaves work
    good = _greedy(loss, pos[:4], neg[:4])
    assert good.value == pytest.approx(brute_force_max("ap", pos[:4], neg[:4]), abs=TOL)


@pytest.mark.parametrize(
    "pos,neg,fragment",
    [
        ([0.1, np.nan], [0.0], "finite"),
        ([0.1], [np.inf, 0.0], "finite"),
        ([0.1], [-np.inf], "finite"),
        ([], [0.0], "at least one positive"),
        ([0.1], [], "at least one negative"),
        ([[0.1, 0.2]], [0.0], "1-D"),
        ([0.1], np.zeros((2, 2)), "1-D"),
        (0.5, [0.0], "1-D"),
        (["a", "b"], [0.0], "real numbers"),
        ([True, False], [0.0], "real numbers"),
        ([1 + 2j], [0.0], "real numbers"),
    ],
)
def test_bad_scores_raise(pos, neg, fragment):
    with pytest.raises(ValueError, match=fragment):
        _greedy("ap", pos, neg)


def test_bad_loss_and_method_raise():
    pos, neg = [0.2, 0.1], [0.0]
    with pytest.raises(ValueError, match=r"unknown loss 'no_such_loss'"):
        _greedy("no_such_loss", pos, neg)
    with pytest.raises(ValueError, match=r"expected loss to be a loss name or a Loss instance"):
        _greedy(42, pos, neg)
    with pytest.raises(ValueError, match=r"unknown inference method 'no_such_method'"):
        rankopt.most_violated_ranking("ap", pos, neg, inference="no_such_method")
    with pytest.raises(ValueError, match=r"expected loss to be a rank loss.*labeling.*zero_one"):
        _greedy("zero_one", pos, neg)
    with pytest.raises(ValueError, match=r"expected loss to be a rank loss"):
        _greedy(rankopt.get_loss("zero_one", J=2.0), pos, neg)
