"""Loss definitions (C1), decompositions (C2), derivatives (C3, C4) and the 0-1 loss."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.brute_force import LOSSES

import rankopt
from rankopt.losses import APLoss, AUCLoss, LabelingLoss, NDCGLoss, OutputKind, RankLoss, ZeroOneLoss

RANK_LOSSES = {"ap": APLoss, "ndcg": NDCGLoss, "auc": AUCLoss}


def _negative_ranks(pattern):
    """Interleaving rank (1 + positives above) of each negative, top to bottom."""
    ranks, positives_above = [], 0
    for is_pos in pattern:
        if is_pos:
            positives_above += 1
        else:
            ranks.append(positives_above + 1)
    return np.array(ranks)


def _random_patterns(rng, count, max_pos=9, max_neg=9):
    for _ in range(count):
        n_pos, n_neg = rng.integers(1, max_pos + 1), rng.integers(1, max_neg + 1)
        pattern = np.zeros(n_pos + n_neg, dtype=bool)
        pattern[rng.choice(n_pos + n_neg, size=n_pos, replace=False)] = True
        yield pattern


# --------------------------------------------------------------------------
# The worked example of Mohapatra et al. (2018) §2.2 (docs/maths.md)

# positives x1..x4, negatives x5..x8, order (x1, x3, x8, x4, x5, x2, x6, x7)
EXAMPLE_ORDER = [1, 3, 8, 4, 5, 2, 6, 7]
EXAMPLE_PATTERN = np.array([x <= 4 for x in EXAMPLE_ORDER])


def test_worked_example_pattern():
    assert EXAMPLE_PATTERN.tolist() == [True, True, False, True, False, True, False, False]


def test_worked_example_ap():
    expected = 1 - (1 / 1 + 2 / 2 + 3 / 4 + 4 / 6) / 4
    assert expected == pytest.approx(0.1458333333)
    assert APLoss().value(EXAMPLE_PATTERN) == pytest.approx(expected, abs=1e-15)
    assert LOSSES["ap"](EXAMPLE_PATTERN.tolist()) == pytest.approx(expected, abs=1e-15)
    assert f"{APLoss().value(EXAMPLE_PATTERN):.4f}" == "0.1458"


def test_worked_example_ndcg():
    inv = lambda n: 1 / math.log2(n)  # noqa: E731
    expected = 1 - (1 + inv(3) + inv(5) + inv(7)) / (1 + inv(3) + inv(4) + inv(5))
    assert NDCGLoss().value(EXAMPLE_PATTERN) == pytest.approx(expected, abs=1e-15)
    assert LOSSES["ndcg"](EXAMPLE_PATTERN.tolist()) == pytest.approx(expected, abs=1e-15)
    assert f"{NDCGLoss().value(EXAMPLE_PATTERN):.4f}" == "0.0561"


def test_worked_example_auc():
    # misordered pairs: x8 above x4 and x2, x5 above x2 -> 3 of 16
    assert AUCLoss().value(EXAMPLE_PATTERN) == pytest.approx(3 / 16, abs=1e-15)


# --------------------------------------------------------------------------
# C1: value against the independent definitions


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
def test_value_matches_definition(name):
    rng = np.random.default_rng(1)
    loss = RANK_LOSSES[name]()
    for pattern in _random_patterns(rng, 200):
        assert loss.value(pattern) == pytest.approx(LOSSES[name](pattern.tolist()), abs=1e-13)


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (1, 4), (4, 1), (3, 5), (7, 2)])
def test_value_extremes(name, n_pos, n_neg):
    loss = RANK_LOSSES[name]()
    perfect = np.array([True] * n_pos + [False] * n_neg)
    worst = perfect[::-1].copy()
    assert loss.value(perfect) == pytest.approx(0.0, abs=1e-15)
    assert loss.value(worst) > 0
    assert loss.value(worst) == pytest.approx(LOSSES[name](worst.tolist()), abs=1e-13)
    assert isinstance(loss.value(perfect), float)


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
def test_value_accepts_int_and_list_patterns(name):
    loss = RANK_LOSSES[name]()
    as_list = EXAMPLE_PATTERN.tolist()
    assert loss.value(as_list) == loss.value(EXAMPLE_PATTERN)
    assert loss.value(EXAMPLE_PATTERN.astype(int)) == loss.value(EXAMPLE_PATTERN)


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
def test_value_rejects_2d_pattern(name):
    with pytest.raises(ValueError, match="1-D"):
        RANK_LOSSES[name]().value(np.ones((2, 3), dtype=bool))


# --------------------------------------------------------------------------
# C2: Σ_j δ_j(rank_j) == Δ


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
def test_decomposition_over_negatives(name):
    rng = np.random.default_rng(2)
    loss = RANK_LOSSES[name]()
    for pattern in _random_patterns(rng, 200, max_pos=12, max_neg=12):
        n_pos = int(pattern.sum())
        n_neg = pattern.size - n_pos
        ranks = _negative_ranks(pattern)
        j = np.arange(1, n_neg + 1)
        total = float(np.sum(loss.delta(j, ranks, n_pos, n_neg)))
        assert total == pytest.approx(loss.value(pattern), abs=1e-12)
        assert total == pytest.approx(LOSSES[name](pattern.tolist()), abs=1e-12)
        # scalar calls agree with the vectorised one
        scalar = sum(float(loss.delta(jj, rr, n_pos, n_neg)) for jj, rr in zip(j, ranks, strict=True))
        assert scalar == pytest.approx(total, abs=1e-12)


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(st.lists(st.booleans(), min_size=2, max_size=16).filter(lambda p: any(p) and not all(p)))
def test_decomposition_property(pattern):
    pattern = np.array(pattern)
    n_pos = int(pattern.sum())
    n_neg = pattern.size - n_pos
    ranks = _negative_ranks(pattern)
    for name, cls in RANK_LOSSES.items():
        total = float(np.sum(cls().delta(np.arange(1, n_neg + 1), ranks, n_pos, n_neg)))
        assert total == pytest.approx(LOSSES[name](pattern.tolist()), abs=1e-12)


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
def test_delta_is_zero_at_the_bottom(name):
    # a negative below every positive costs nothing
    loss = RANK_LOSSES[name]()
    for n_pos, n_neg in [(1, 1), (3, 4), (6, 2)]:
        j = np.arange(1, n_neg + 1)
        np.testing.assert_allclose(loss.delta(j, np.full(n_neg, n_pos + 1), n_pos, n_neg), 0.0, atol=1e-15)


# --------------------------------------------------------------------------
# C4 and C3: the discrete derivative


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (1, 6), (6, 1), (4, 4), (9, 13), (30, 7)])
def test_delta_diff_is_the_difference_of_delta(name, n_pos, n_neg):
    loss = RANK_LOSSES[name]()
    j, i = np.meshgrid(np.arange(1, n_neg + 1), np.arange(1, n_pos + 1), indexing="ij")
    expected = loss.delta(j, i + 1, n_pos, n_neg) - loss.delta(j, i, n_pos, n_neg)
    got = loss.delta_diff(j, i, n_pos, n_neg)
    assert np.shape(got) == j.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-14)
    # and the base-class default (two calls of delta) agrees as well
    np.testing.assert_allclose(RankLoss.delta_diff(loss, j, i, n_pos, n_neg), expected, rtol=1e-12, atol=1e-15)


def test_delta_diff_closed_forms():
    # Mohapatra et al. (2018) Prop. 7 and 8 (with AP's 1/|P|), and AUC's constant step
    n_pos, n_neg = 5, 7
    D = lambda k: 1 / math.log2(1 + k)  # noqa: E731
    Z = sum(D(k) for k in range(1, n_pos + 1))
    for j in range(1, n_neg + 1):
        for i in range(1, n_pos + 1):
            ap = ((j - 1) / (j + i - 1) - j / (j + i)) / n_pos
            assert float(APLoss().delta_diff(j, i, n_pos, n_neg)) == pytest.approx(ap, abs=1e-15)
            nd = (D(i + j) - D(i + j - 1)) / Z
            assert float(NDCGLoss().delta_diff(j, i, n_pos, n_neg)) == pytest.approx(nd, abs=1e-15)
            assert float(AUCLoss().delta_diff(j, i, n_pos, n_neg)) == pytest.approx(-1 / (n_pos * n_neg), abs=1e-15)


@pytest.mark.parametrize("name", sorted(RANK_LOSSES))
def test_c3_monotonicity_on_a_grid(name):
    loss = RANK_LOSSES[name]()
    for n_pos in (1, 2, 3, 5, 8, 20, 50):
        for n_neg in (1, 2, 3, 7, 20, 60):
            j, i = np.meshgrid(np.arange(1, n_neg + 1), np.arange(1, n_pos + 1), indexing="ij")
            diff = loss.delta_diff(j, i, n_pos, n_neg)
            # δ_{j+1}(i+1) − δ_{j+1}(i) ≥ δ_j(i+1) − δ_j(i)
            assert np.all(np.diff(diff, axis=0) >= -1e-15), (n_pos, n_neg)
            # moving a negative down never increases the loss
            assert np.all(diff <= 1e-15)


# --------------------------------------------------------------------------
# Registry and equality


def test_registry_names_and_kinds():
    for name, cls in RANK_LOSSES.items():
        loss = rankopt.get_loss(name)
        assert type(loss) is cls and loss.name == name
        assert loss.output_kind is OutputKind.RANKING and isinstance(loss, RankLoss)
        assert loss == cls() and hash(loss) == hash(cls())
    zo = rankopt.get_loss("zero_one")
    assert isinstance(zo, LabelingLoss) and zo.output_kind is OutputKind.LABELING
    assert APLoss() != NDCGLoss()
    assert repr(ZeroOneLoss(J=2.0)) == "ZeroOneLoss(J=2.0)"


# --------------------------------------------------------------------------
# zero_one


@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (1, 5), (4, 2), (3, 9)])
def test_zero_one_default_weights(n_pos, n_neg):
    y_true = np.array([1] * n_pos + [0] * n_neg)
    weights = ZeroOneLoss().sample_weights(y_true)
    # J = N/P weighs the classes equally: 1/(2P) per positive, 1/(2N) per negative
    np.testing.assert_allclose(weights[:n_pos], 1 / (2 * n_pos))
    np.testing.assert_allclose(weights[n_pos:], 1 / (2 * n_neg))
    assert weights.sum() == pytest.approx(1.0)


def test_zero_one_default_value():
    loss = ZeroOneLoss()
    y_true = np.array([1, 0, 1, 0, 0, 0])  # P = 2, N = 4
    assert loss.value(y_true, y_true) == 0.0
    assert loss.value(y_true, 1 - y_true) == pytest.approx(1.0)
    # one positive missed and one negative flagged: 1/(2·2) + 1/(2·4)
    assert loss.value(y_true, [0, 1, 1, 0, 0, 0]) == pytest.approx(1 / 4 + 1 / 8)
    assert isinstance(loss.value(y_true, y_true), float)


@pytest.mark.parametrize("J", [0.5, 1, 3.0, np.float64(2.5)])
def test_zero_one_custom_J(J):
    loss = ZeroOneLoss(J=J)
    y_true = np.array([1, 1, 0, 0, 0])  # P = 2, N = 3
    norm = J * 2 + 3
    np.testing.assert_allclose(loss.sample_weights(y_true), [J / norm, J / norm, 1 / norm, 1 / norm, 1 / norm])
    # eq. (7): (J · #missed positives + #false positives) / (J|P| + |N|)
    assert loss.value(y_true, [0, 1, 1, 1, 0]) == pytest.approx((J * 1 + 2) / norm)
    assert loss.get_params() == {"J": J}


@pytest.mark.parametrize("J", [0, -1.0, np.nan, np.inf, -np.inf, "2", [1.0], 1 + 1j])
def test_zero_one_bad_J_raises(J):
    with pytest.raises(ValueError, match="expected J to be a positive finite number"):
        ZeroOneLoss(J=J)
    with pytest.raises(ValueError, match="expected J"):
        rankopt.get_loss("zero_one", J=J)


@pytest.mark.parametrize("y_true", [[0, 0, 0], [1, 1]])
def test_zero_one_default_J_needs_both_classes(y_true):
    # J = |N|/|P| is undefined with one class; a crash or 0/0 weights would be wrong
    with pytest.raises(ValueError, match="both a positive and a negative"):
        ZeroOneLoss().sample_weights(np.array(y_true))
    with pytest.raises(ValueError, match="both a positive and a negative"):
        ZeroOneLoss().value(np.array(y_true), np.array(y_true))
    # an explicit J is well defined on one class
    weights = ZeroOneLoss(J=2.0).sample_weights(np.array(y_true))
    assert np.all(np.isfinite(weights)) and weights.sum() == pytest.approx(1.0)


def test_position_discount_compiled_form_is_cached_read_only_and_not_pickled():
    import pickle

    loss = rankopt.get_loss("ndcg")
    form = loss.compiled_form(3, 5)
    assert loss.compiled_form(3, 5) is form  # same sizes: the cached table
    assert not form.table.flags.writeable
    np.testing.assert_allclose(form.table, loss.discount_table(8) / loss.discount_table(3).sum())
    other = loss.compiled_form(4, 5)
    assert other is not form and other.table.shape == (9,)
    clone = pickle.loads(pickle.dumps(loss))
    assert "_compiled_form_cache" not in clone.__dict__ and clone == loss


def test_compiled_form_leaves_the_plugins_discount_array_alone():
    from rankopt.losses import PositionDiscountLoss

    shared = 1.0 / np.arange(1, 9, dtype=np.float64)

    class CachedDiscount(PositionDiscountLoss):
        name = "cached_discount_test"

        def discount(self, positions):
            positions = np.asarray(positions)
            if positions.shape == (8,) and np.array_equal(positions, np.arange(1, 9)):
                return shared  # the plugin hands out its own array
            return 1.0 / positions

    before = shared.copy()
    CachedDiscount().compiled_form(3, 5)
    np.testing.assert_array_equal(shared, before)
    assert shared.flags.writeable


@pytest.mark.parametrize("loss", [APLoss(), NDCGLoss(), AUCLoss()], ids=repr)
def test_value_at_positions_equals_value_of_the_pattern(loss):
    # Inference calls value_at_positions (no |P| + |N| pattern); value is the C1 definition.
    rng = np.random.default_rng(3)
    for n_pos, n_neg in ((1, 1), (1, 7), (7, 1), (4, 4), (30, 200)):
        pattern = np.zeros(n_pos + n_neg, dtype=bool)
        pattern[rng.choice(n_pos + n_neg, size=n_pos, replace=False)] = True
        positions = np.flatnonzero(pattern) + 1
        assert loss.value_at_positions(positions, n_neg) == pytest.approx(loss.value(pattern), rel=1e-12, abs=1e-15)


def test_value_at_positions_defaults_to_value_of_the_pattern():
    seen = []

    class PatternOnly(RankLoss):  # implements value only, as a minimal plugin does
        name = "pattern_only"

        def value(self, pattern):
            seen.append(np.asarray(pattern).copy())
            return float(np.flatnonzero(pattern)[0])

        def delta(self, j, i, n_pos, n_neg):
            return np.zeros(np.broadcast(j, i).shape)

    assert PatternOnly().value_at_positions(np.array([2, 3]), 2) == 1.0
    np.testing.assert_array_equal(seen[0], [False, True, True, False])
