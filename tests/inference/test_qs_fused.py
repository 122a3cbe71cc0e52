"""qs in one kernel call (``_qs.qs_inference``): the check, the ranks and Observation 2 fused.

The fused call must give what the two-step path gives — the kernel's ranks
(``qs_ranks``) turned into the output by ``ranking_from_ranks`` — bit for
bit, value included (both sum Σ coef·score in ``_terms.pxd``'s order); it must
refuse the scores ``check_scores`` refuses, with the same messages, before it
writes any output; and its all-tied strategy must give the ranks of the
selection strategies.
"""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt._validation import check_negative_scores, check_scores, largest_magnitude, score_sum_bound
from rankopt.inference import _qs
from rankopt.inference.base import descending_order, kernel_arguments, ranking_from_ranks
from rankopt.inference.qs import QSMethod
from rankopt.losses import APLoss, AUCLoss, NDCGLoss, PositionDiscountLoss, PrecisionAtKLoss

#: Distribution level from this many negatives on (``_qs.pyx``'s DISTRIBUTE_MIN).
DISTRIBUTE_MIN = 1 << 14


class LinearToZeroLoss(PositionDiscountLoss):
    """A convex discount that reaches 0 at position 6 and stays there: flat δ-differences."""

    name = "linear_to_zero"

    def discount(self, positions):
        return np.maximum(0.0, 6.0 - np.asarray(positions, dtype=np.float64)) / 5.0


#: The compiled forms, with losses qs is exact for (P@k fails C3: its strategies may disagree on ties).
COMPILED_LOSSES = [APLoss(), NDCGLoss(), AUCLoss(), LinearToZeroLoss()]


def test_the_compiled_losses_are_ones_qs_is_exact_for():
    for loss in COMPILED_LOSSES:
        assert QSMethod().unsupported_reason(loss) is None, loss.name
    assert QSMethod().unsupported_reason(PrecisionAtKLoss(3)) is not None


def _two_step(loss, pos, neg, **strategy):
    """The kernel's ranks (``qs_ranks``, any strategy), then Observation 2 in its own pass."""
    pos_desc = np.ascontiguousarray(pos[descending_order(pos)])
    code, table = kernel_arguments(loss, loss.compiled_form(pos.size, neg.size), pos.size, neg.size)
    ranks = np.empty(neg.size, dtype=np.intc)
    unimodal = code == _qs.KERNEL_CODES["AP"]
    _qs.qs_ranks(pos_desc, neg, int(code), table, unimodal, ranks, **strategy)
    return ranking_from_ranks(loss, pos, neg, ranks)


def _fused(loss, pos, neg, outputs=None, **strategy):
    """``qs_inference`` called directly: (status, largest, dot, outputs)."""
    pos_order = descending_order(pos)
    code, table = kernel_arguments(loss, loss.compiled_form(pos.size, neg.size), pos.size, neg.size)
    if outputs is None:
        outputs = _outputs(pos.size, neg.size)
    unimodal = code == _qs.KERNEL_CODES["AP"]
    status, largest, dot = _qs.qs_inference(
        pos, pos_order, np.ascontiguousarray(pos[pos_order]), neg, int(code), table, unimodal,
        largest_magnitude(pos), score_sum_bound(pos.dtype), *outputs, **strategy,
    )  # fmt: skip
    return status, largest, dot, outputs


def _outputs(n_pos, n_neg, fill=7):
    return (
        np.full(n_neg, fill, dtype=np.int32),
        np.full(n_neg, float(fill)),
        np.full(n_pos, float(fill)),
        np.full(n_pos, fill, dtype=np.int64),
        np.full(n_pos, fill, dtype=np.int64),
    )


def _assert_same(got, expected, context=""):
    np.testing.assert_array_equal(got.neg_ranks, expected.neg_ranks, err_msg=context)
    np.testing.assert_array_equal(got.neg_coef, expected.neg_coef, err_msg=context)
    np.testing.assert_array_equal(got.pos_coef, expected.pos_coef, err_msg=context)
    np.testing.assert_array_equal(got.pos_ranks, expected.pos_ranks, err_msg=context)
    assert got.loss == expected.loss, context
    assert got.value == expected.value, context


def _instance(rng, kind, n_pos, n_neg):
    if kind == "normal":
        return rng.normal(1, 1, n_pos), rng.normal(0, 1, n_neg)
    if kind == "late":
        return rng.normal(3, 0.5, n_pos), rng.normal(0, 0.5, n_neg)
    if kind == "grid":  # ties within and across the classes
        return rng.integers(0, 4, n_pos) * 0.5, rng.integers(0, 4, n_neg) * 0.5
    if kind == "tied":  # w = 0
        return np.zeros(n_pos), np.zeros(n_neg)
    if kind == "tied_negatives":  # one value for every negative, the positives around it
        value = rng.choice([-1.0, 0.0, 0.3])
        return rng.choice([-1.0, 0.0, 0.3, 2.0], n_pos), np.full(n_neg, value)
    raise AssertionError(kind)


KINDS = ["normal", "late", "grid", "tied", "tied_negatives"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_call_equals_ranks_then_observation_2(dtype):
    """Every loss form, both sides of the distribution level, P = 1, N = 1, P > N, ties and all-tied negatives."""
    rng = np.random.default_rng(33)
    sizes = [(1, 1), (1, 7), (7, 1), (5, 3), (30, 200), (300, 40), (40, DISTRIBUTE_MIN - 1), (60, DISTRIBUTE_MIN + 5)]
    for n_pos, n_neg in sizes:
        for kind in KINDS:
            pos, neg = (a.astype(dtype) for a in _instance(rng, kind, n_pos, n_neg))
            for loss in COMPILED_LOSSES:
                context = f"{loss.name} {kind} P={n_pos} N={n_neg}"
                got = QSMethod().solve(loss, pos, neg)
                _assert_same(got, _two_step(loss, pos, neg), context)


def test_every_method_reports_the_same_value_bit_for_bit():
    """The value is summed in one order (``_terms.pxd``) whichever method found the ranking."""
    rng = np.random.default_rng(5)
    for t in range(40):
        pos, neg = _instance(rng, KINDS[t % len(KINDS)], int(rng.integers(1, 30)), int(rng.integers(1, 300)))
        qs = rankopt.most_violated_ranking("ap", pos, neg, inference="qs")
        for method in ("greedy", "search", "select"):
            other = rankopt.most_violated_ranking("ap", pos, neg, inference=method)
            np.testing.assert_array_equal(other.neg_ranks, qs.neg_ranks)
            assert other.value == qs.value, method


@pytest.mark.parametrize("loss", COMPILED_LOSSES, ids=lambda loss: loss.name)
@pytest.mark.parametrize("n_neg", [200, DISTRIBUTE_MIN + 100])
def test_all_tied_negatives_rank_as_the_exact_median_recursion(loss, n_neg):
    """The tied strategy (no sort, an early stop) against the selection recursion with exact medians."""
    rng = np.random.default_rng(n_neg)
    for value in (0.0, 0.5, -2.0):
        for pos in (np.zeros(50), rng.normal(size=50), np.full(50, value), rng.normal(size=3 * n_neg // 2)):
            neg = np.full(n_neg, value)
            status, _, dot, (ranks, *_rest) = _fused(loss, pos, neg)
            assert status == 0
            expected = _two_step(loss, pos, neg, exact_median=True)
            np.testing.assert_array_equal(ranks, expected.neg_ranks, err_msg=f"{value} {pos.size}")
            assert dot + float(loss.value_at_positions(_rest[3], n_neg)) == expected.value


@pytest.mark.parametrize("n_buckets", [-1, 0, 5])
@pytest.mark.parametrize("exact_median", [False, True])
def test_fused_strategies_agree(n_buckets, exact_median):
    """The strategies the tests can name give the automatic strategy's output through the fused call too."""
    rng = np.random.default_rng(1)
    for kind in KINDS:
        pos, neg = _instance(rng, kind, 40, DISTRIBUTE_MIN + 7)
        for loss in (APLoss(), NDCGLoss()):
            automatic = _fused(loss, pos, neg)
            named = _fused(loss, pos, neg, n_buckets=n_buckets, exact_median=exact_median)
            for a, b in zip(automatic[3], named[3], strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"{kind} {loss.name}")
            assert automatic[:3] == named[:3]


# ------------------------------------------------------------------------------------------------ refusals

#: Where a bad score sits: in the first vector of the scan, in its scalar tail, in the
#: distribution level's sample (evenly spaced), in a later block, the last entry.
BAD_PLACES = [0, 3, 17, 3904, -1]


@pytest.mark.parametrize("n_neg", [10, 1000, DISTRIBUTE_MIN + 3, 100_003])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_non_finite_negatives_are_refused_before_any_output(n_neg, bad, dtype):
    rng = np.random.default_rng(0)
    pos = rng.normal(size=20).astype(dtype)
    for place in BAD_PLACES:
        for spread in (rng.normal(size=n_neg), np.zeros(n_neg)):  # spread out, and otherwise all tied
            neg = spread.astype(dtype)
            neg[place % n_neg] = bad
            status, _, _, outputs = _fused(APLoss(), pos, neg)
            assert status == _qs.SCAN_NOT_FINITE, place
            for array in outputs:
                assert (array == 7).all(), "a refused call wrote output"
            with pytest.raises(ValueError, match="^expected neg_scores to be finite, got NaN or infinity instead$"):
                rankopt.most_violated_ranking("ap", pos, neg, inference="qs")
            with pytest.raises(ValueError, match="^expected neg_scores to be finite, got NaN or infinity instead$"):
                rankopt.most_violated_ranking("ap", pos, neg, inference="greedy" if n_neg <= 1000 else "select")


@pytest.mark.parametrize("n_neg", [3, DISTRIBUTE_MIN + 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_overflow_prone_scores_are_refused_with_check_scores_message(n_neg, dtype):
    big = 1.7e308 if dtype == np.float64 else 3e38
    rng = np.random.default_rng(2)
    pos = rng.normal(size=5).astype(dtype)
    neg = rng.normal(size=n_neg).astype(dtype)
    neg[n_neg // 2] = -big
    with pytest.raises(ValueError) as expected:
        check_scores(pos, neg)
    status, largest, _, outputs = _fused(APLoss(), pos, neg)
    assert status == _qs.SCAN_OVERFLOW and largest == big.__class__(np.asarray(big, dtype=dtype))
    for array in outputs:
        assert (array == 7).all(), "a refused call wrote output"
    with pytest.raises(ValueError) as got:
        rankopt.most_violated_ranking("ap", pos, neg, inference="qs")
    assert str(got.value) == str(expected.value)
    assert "sums over a query stay finite" in str(got.value)


def test_the_largest_positive_counts_in_the_overflow_rule():
    """Finite negatives, a huge positive: the kernel compares max over both classes, as check_scores does."""
    pos, neg = np.array([1.7e308, 0.0]), np.zeros(DISTRIBUTE_MIN + 1)
    status, largest, _, _ = _fused(APLoss(), pos, neg)
    assert status == _qs.SCAN_OVERFLOW and largest == 1.7e308
    with pytest.raises(ValueError, match="sums over a query stay finite"):
        rankopt.most_violated_ranking("ap", pos, neg)


def test_scores_at_the_bound_are_accepted_by_both_checks():
    """The kernel compares the same doubles as check_score_sums: at the bound exactly, both accept."""
    n_pos, n_neg = 1, 3
    largest = score_sum_bound(np.float64) / (n_pos + n_neg)
    pos, neg = np.array([largest]), np.array([0.0, -largest, 1.0])
    check_scores(pos, neg)
    assert _fused(APLoss(), pos, neg)[0] == 0
    neg[1] = np.nextafter(-largest, -np.inf)
    with pytest.raises(ValueError, match="sums over a query stay finite"):
        check_scores(pos, neg)
    assert _fused(APLoss(), pos, neg)[0] == _qs.SCAN_OVERFLOW


def test_check_scores_can_leave_the_negatives_to_the_kernel():
    pos, neg = np.array([1.0, 2.0]), np.array([0.0, np.nan])
    got_pos, got_neg = check_scores(pos, neg, scan_negatives=False)
    assert got_neg is not None and np.isnan(got_neg[1])
    with pytest.raises(ValueError, match="expected neg_scores to be finite"):
        check_negative_scores(got_pos, got_neg)
    with pytest.raises(ValueError, match="expected pos_scores to be finite"):  # the positives are still scanned
        check_scores(neg[::-1], pos, scan_negatives=False)


def test_qs_inference_refuses_mismatched_outputs():
    pos, neg = np.array([1.0, 0.0]), np.array([0.5, 0.2, 0.1])
    outputs = list(_outputs(2, 3))
    outputs[1] = outputs[1][:2]
    with pytest.raises(ValueError, match="to match"):
        _fused(APLoss(), pos, neg, outputs=tuple(outputs))
    with pytest.raises(ValueError, match="n_buckets"):
        _fused(APLoss(), pos, neg, n_buckets=2)
