"""Methods are chosen by what a loss can be shown to satisfy, not by its class (issue 14).

* A kernel written for AP (select, search, qs's unimodal search) runs only
  for a loss whose compiled form is AP's: ``APLoss`` itself, or a loss that
  declares that form, which the C1–C4 check verifies against its own
  ``delta_diff``.  A subclass of a built-in that changes the maths runs on a
  general exact method (case 2).
* Conditions are checked on the loss once and on each call's size where the
  compiled form shows more: a discount table that bends down beyond the
  checker's grid makes greedy/qs refuse that call, and "auto" runs an exact
  general method.
* The discount contract (finite, non-negative, non-increasing) is checked on
  the positions each call uses (cases 4 and 8), with short messages.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles.brute_force import LOSSES, brute_force_max, ndcg_loss

from rankopt import check_qs_suitable, most_violated_ranking
from rankopt.losses import APLoss, AUCLoss, CompiledForm, KernelCode, NDCGLoss, PositionDiscountLoss, RankLoss
from rankopt.losses.base import checked_delta_diff
from rankopt.plugins import default_registry


class HalfAP(APLoss):
    """The issue's case 2: a subclass of the built-in with Δ = 0.5 · (1 − AP)."""

    name = "halfap"

    def value_at_positions(self, positions, n_neg):
        return 0.5 * super().value_at_positions(positions, n_neg)

    def delta(self, *args):
        return 0.5 * super().delta(*args)

    def delta_diff(self, *args):
        return 0.5 * super().delta_diff(*args)


def half_ap(pattern):
    return 0.5 * LOSSES["ap"](pattern)


class DeclaredAP(RankLoss):
    """Not a subclass of APLoss, but AP by value, and it says so through its compiled form."""

    name = "declared_ap_test"

    def value(self, pattern):
        return APLoss().value(pattern)

    def delta(self, j, i, n_pos, n_neg):
        return APLoss().delta(j, i, n_pos, n_neg)

    def delta_diff(self, j, i, n_pos, n_neg):
        return APLoss().delta_diff(j, i, n_pos, n_neg)

    def compiled_form(self, n_pos, n_neg):
        return CompiledForm(KernelCode.AP)


class FalseAP(AUCLoss):
    """ROC-area maths claiming AP's compiled form: the check must catch the lie."""

    name = "false_ap_test"

    def compiled_form(self, n_pos, n_neg):
        return CompiledForm(KernelCode.AP)


def test_case2_subclass_of_ap_gets_a_general_exact_method():
    pos, neg = [-0.04, 0.19, 0.03], [-0.16, 0.11, 0.39]
    got = most_violated_ranking(HalfAP(), pos, neg)
    assert got.value == pytest.approx(brute_force_max(half_ap, pos, neg), abs=1e-12)
    assert got.value == pytest.approx(0.4611, abs=1e-4)  # select gave 0.4511
    assert HalfAP().compiled_form(3, 3) is None
    for method in ("select", "search"):
        with pytest.raises(ValueError, match="exact only for the average-precision loss"):
            most_violated_ranking(HalfAP(), pos, neg, method)


def test_case2_subclass_matches_brute_force_on_many_instances(rng):
    for _ in range(60):
        n_pos, n_neg = rng.integers(1, 4, size=2)
        pos, neg = rng.integers(-2, 3, n_pos) / 2.0, rng.integers(-2, 3, n_neg) / 2.0
        got = most_violated_ranking(HalfAP(), pos, neg)
        assert got.value == pytest.approx(brute_force_max(half_ap, pos, neg), abs=1e-12)


def test_a_loss_declaring_aps_form_gets_the_ap_kernels(rng):
    for method in ("select", "search", "qs"):
        for _ in range(10):
            pos, neg = rng.normal(size=3), rng.normal(size=3)
            got = most_violated_ranking(DeclaredAP(), pos, neg, method)
            assert got.value == pytest.approx(brute_force_max("ap", pos, neg), abs=1e-12)


def test_a_false_claim_of_aps_form_is_refused_by_every_method():
    report = check_qs_suitable(FalseAP())
    assert report.failed_condition == "C2" and "compiled form" in report.message
    with pytest.raises(ValueError, match="cannot be used with loss 'false_ap_test'"):
        most_violated_ranking(FalseAP(), [0.0, 1.0], [0.5], "select")
    with pytest.raises(ValueError, match="no registered inference method is exact"):
        most_violated_ranking(FalseAP(), [0.0, 1.0], [0.5])


def test_subclass_of_ndcg_with_its_own_discount_uses_its_own_table(rng):
    class Steeper(NDCGLoss):
        name = "steeper_test"

        def discount(self, positions):
            return 1.0 / np.asarray(positions, dtype=float) ** 2

    for _ in range(20):
        pos, neg = rng.normal(size=3), rng.normal(size=3)
        got = most_violated_ranking(Steeper(), pos, neg)
        oracle = lambda pattern: ndcg_loss(pattern, lambda i: 1.0 / i**2)  # noqa: E731
        assert got.value == pytest.approx(brute_force_max(oracle, pos, neg), abs=1e-12)


# --------------------------------------------------------------------------
# Conditions at the call's size


class LateBend(PositionDiscountLoss):
    """1/p up to position 30, then bending down (concave): C3 holds on the checker's grid only."""

    name = "late_bend_test"

    def discount(self, positions):
        p = np.asarray(positions, dtype=float)
        return np.where(p <= 30, 1.0 / p, np.maximum(0.0, 1.0 / 30 - 1e-6 * (p - 30) ** 2))


def test_convexity_is_checked_on_the_positions_a_call_uses(rng):
    assert check_qs_suitable(LateBend()).suitable  # the grid stops at position 26
    pos, neg = rng.normal(size=10), rng.normal(size=40)
    for method in ("qs", "greedy"):
        with pytest.raises(ValueError, match=r"C3 fails for loss 'late_bend_test' at n_pos=10, n_neg=40.*position 31"):
            most_violated_ranking(LateBend(), pos, neg, method)
    registry = default_registry()
    assert registry.resolve_method("auto", LateBend(), 10, 40).name == "dp"
    assert registry.resolve_method("auto", LateBend(), 5, 5).name == "qs"
    auto = most_violated_ranking(LateBend(), pos, neg)
    dp = most_violated_ranking(LateBend(), pos, neg, "dp")
    assert auto.value == dp.value
    small_pos, small_neg = rng.normal(size=3), rng.normal(size=3)
    oracle = lambda pattern: ndcg_loss(pattern, lambda i: 1.0 / i)  # noqa: E731
    assert most_violated_ranking(LateBend(), small_pos, small_neg, "qs").value == pytest.approx(
        brute_force_max(oracle, small_pos, small_neg), abs=1e-12
    )


def test_compiled_forms_report_where_the_table_bends_down():
    assert NDCGLoss().compiled_form(1000, 100_000).first_concave_position is None
    assert LateBend().compiled_form(10, 40).first_concave_position == 31
    assert APLoss().compiled_form(3, 3).first_concave_position is None


# --------------------------------------------------------------------------
# The discount contract, on the positions used (cases 4 and 8)


class FortyMinusP(PositionDiscountLoss):
    """Case 4: positive up to position 39, negative from 41 on."""

    name = "forty_minus_p_test"

    def discount(self, positions):
        return 40.0 - np.asarray(positions, dtype=float)


class NaNFar(PositionDiscountLoss):
    """Case 8: NDCG's discount, NaN beyond position 30 (past the checker's grid)."""

    name = "nan_far_test"

    def discount(self, positions):
        p = np.asarray(positions, dtype=float)
        return np.where(p > 30, np.nan, 1.0 / np.log2(1.0 + p))


@pytest.mark.parametrize("method", ["auto", "qs", "greedy", "dp"])
def test_case4_negative_discount_is_refused(rng, method):
    with pytest.raises(ValueError, match=r"non-negative.*positions 1\.\.350, got D\(41\) = -1\.0"):
        most_violated_ranking(FortyMinusP(), rng.normal(size=50), rng.normal(size=300), method)
    pos, neg = rng.normal(size=3), rng.normal(size=3)  # positions 1..6: the contract holds there
    if method == "qs":  # qs's C4 check builds tables of 2·10³ positions and more: refused for the loss
        with pytest.raises(ValueError, match=r"D\(41\) = -1\.0"):
            most_violated_ranking(FortyMinusP(), pos, neg, method)
        return
    oracle = lambda pattern: ndcg_loss(pattern, lambda i: 40.0 - i)  # noqa: E731
    assert most_violated_ranking(FortyMinusP(), pos, neg, method).value == pytest.approx(
        brute_force_max(oracle, pos, neg), abs=1e-12
    )


def test_case4_check_qs_suitable_reports_the_negative_discount():
    report = check_qs_suitable(FortyMinusP())
    assert not report.suitable and "D(41) = -1.0" in report.message


def test_increasing_discount_and_zero_normaliser_are_refused():
    class Rising(PositionDiscountLoss):
        name = "rising_test"

        def discount(self, positions):
            return np.asarray(positions, dtype=float)

    class Zero(PositionDiscountLoss):
        name = "zero_test"

        def discount(self, positions):
            return np.zeros(np.shape(positions))

    with pytest.raises(ValueError, match=r"non-increasing.*D\(1\) = 1\.0 < D\(2\) = 2\.0"):
        most_violated_ranking(Rising(), [1.0], [0.0])
    with pytest.raises(ValueError, match="positive at position 1"):
        most_violated_ranking(Zero(), [1.0], [0.0])


@pytest.mark.parametrize("method", ["auto", "qs", "greedy", "dp"])
def test_case8_nan_far_down_the_table_gives_a_short_error(rng, method):
    with pytest.raises(ValueError, match=r"D\(31\) = nan") as info:
        most_violated_ranking(NaNFar(), rng.normal(size=40), rng.normal(size=300), method)
    assert len(str(info.value)) < 300


def test_delta_diff_errors_are_short():
    class Loud(AUCLoss):
        name = "loud_test"

        def delta_diff(self, j, i, n_pos, n_neg):
            raise ValueError("x" * 10_000 + repr(np.arange(10_000)))

    j, i = np.arange(1, 2001)[:, None], np.arange(1, 51)[None, :]
    with pytest.raises(RuntimeError, match=r"j of shape \(2000, 1\), i of shape \(1, 50\)") as info:
        checked_delta_diff(Loud(), j, i, 50, 2000)
    assert len(str(info.value)) < 600

    class Scalar(AUCLoss):
        name = "scalar_test"

        def delta_diff(self, j, i, n_pos, n_neg):
            return np.float64(-1.0 / (n_pos * n_neg))

    with pytest.raises(RuntimeError, match=r"broadcast shape \(2000, 50\) of j and i, got shape \(\)"):
        checked_delta_diff(Scalar(), j, i, 50, 2000)


# --------------------------------------------------------------------------
# Property: random parameterised position-discount losses under "auto"


class Family(PositionDiscountLoss):
    """Parameterised discounts, convex (geometric, power, linear) or not (step, flat-then-power)."""

    name = "family_test"

    def __init__(self, kind="geometric", a=0.5, k=2):
        self.kind = kind
        self.a = a
        self.k = k

    def discount(self, positions):
        p = np.asarray(positions, dtype=float)
        if self.kind == "geometric":
            return self.a ** (p - 1.0)
        if self.kind == "power":
            return p**-self.a
        if self.kind == "linear":
            return np.maximum(0.0, 1.0 - self.a * (p - 1.0))
        if self.kind == "step":  # precision@k
            return (p <= self.k).astype(float)
        return np.minimum(1.0, np.maximum(p - self.k + 1.0, 1.0) ** -self.a)  # "flat": Chakrabarti-like


#: One instance whose parameters every example sets anew: nothing cached for
#: earlier parameters may leak into later ones.
_SHARED = Family()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["geometric", "power", "linear", "step", "flat"]),
    a=st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9]),  # 100 losses in all: verdicts get reused too
    k=st.integers(1, 4),
    scores=st.lists(st.integers(-2, 2), min_size=2, max_size=6),
    n_pos=st.integers(1, 5),
    fresh=st.booleans(),
)
def test_random_parameterised_discounts_match_brute_force_under_auto(kind, a, k, scores, n_pos, fresh):
    n_pos = min(n_pos, len(scores) - 1)
    pos, neg = np.array(scores[:n_pos]) / 2.0, np.array(scores[n_pos:]) / 2.0
    loss = Family(kind, a, k) if fresh else _SHARED.set_params(kind=kind, a=a, k=k)

    def discount(i):
        return float(Family(kind, a, k).discount(np.array([float(i)]))[0])

    expected = brute_force_max(lambda pattern: ndcg_loss(pattern, discount), pos, neg)
    got = most_violated_ranking(loss, pos, neg)
    assert got.value == pytest.approx(expected, abs=1e-12)


def test_rank_svm_resolves_auto_for_its_problem_size():
    import rankopt

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    y = (X[:, 0] > 0.5).astype(int)
    model = rankopt.RankSVM(loss=LateBend(), tol=1e-2).fit(X, y)  # 80 positions: C3 fails from 31 on
    assert model.inference_ == "dp"


def test_batched_inference_resolves_the_method_for_its_longest_query(rng):
    """A batch holding one query past the bend gets a method exact for that query too."""
    from rankopt.api import most_violated_rankings, most_violated_rankings_per_query

    sizes = [6, 50, 4]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    scores = rng.normal(size=offsets[-1])
    relevance = (rng.random(offsets[-1]) < 0.3).astype(int)
    relevance[offsets[:-1]] = 1  # every query has a relevant and a non-relevant document
    relevance[offsets[1:] - 1] = 0
    with pytest.raises(ValueError, match="C3 fails for loss 'late_bend_test'"):
        most_violated_rankings(LateBend(), scores, relevance, offsets, "qs")
    batched = most_violated_rankings(LateBend(), scores, relevance, offsets)
    oracle = most_violated_rankings_per_query(LateBend(), scores, relevance, offsets, "dp")
    np.testing.assert_allclose(batched.losses, oracle.losses, rtol=0, atol=1e-12)
    np.testing.assert_allclose(batched.values, oracle.values, rtol=0, atol=1e-12)


def test_rank_svm_over_queries_resolves_the_method_for_its_longest_query(rng):
    from rankopt import RankSVM

    qid = np.repeat([0, 1], [8, 60])
    X = rng.normal(size=(qid.size, 3))
    y = (rng.random(qid.size) < 0.3).astype(int)
    y[[0, 8]], y[[7, 67]] = 1, 0
    model = RankSVM(loss=LateBend(), max_iter=30).fit(X, y, qid=qid)
    assert model.inference_ == "dp"


def test_refusals_of_a_broken_loss_are_short_and_name_a_remedy_that_works():
    """The auto refusal listed one reason per method (about 900 characters), and select/search told users
    to "use method='qs' or 'auto'", which refuse the loss too."""
    for method in ("select", "search", "qs"):
        with pytest.raises(ValueError) as caught:
            most_violated_ranking(FalseAP(), [0.0, 1.0], [0.5], method)
        message = str(caught.value)
        assert "method='qs'" not in message and "no registered method is exact for this loss" in message
    with pytest.raises(ValueError) as caught:
        most_violated_ranking(FalseAP(), [0.0, 1.0], [0.5])
    message = str(caught.value)
    assert len(message) < 500 and message.count("compiled form") <= 2, message
    with pytest.raises(ValueError, match=r"use method='auto' \(it picks 'qs'\)"):
        most_violated_ranking("ndcg", [0.0, 1.0], [0.5], "select")
