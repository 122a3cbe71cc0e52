"""rankopt.check_qs_suitable: C1–C4 of Mohapatra et al. (2018) §4.1, first failure with a counterexample."""

import numpy as np
import pytest
from oracles.losses import ChakrabartiLoss, PrecisionAtKLoss

import rankopt
from rankopt.inference.qs_check import (
    CONDITIONS,
    DEFAULT_N_NEG_GRID,
    DEFAULT_N_POS_GRID,
    QSReport,
    QSSuitabilityError,
    unsupported_reason,
)
from rankopt.losses import APLoss, AUCLoss, NDCGLoss, ZeroOneLoss


class _PythonAP(APLoss):
    """AP without its compiled form: C4 is established by timing delta_diff."""

    name = "ap_python_test"

    def compiled_form(self, n_pos, n_neg):
        return None


class _TableBuildingAP(_PythonAP):
    """AP whose derivative rebuilds an O(|P| + |N|) harmonic table on every call."""

    name = "ap_tables_test"

    def delta_diff(self, j, i, n_pos, n_neg):
        i = np.asarray(i)
        return self.delta(j, i + 1, n_pos, n_neg) - self.delta(j, i, n_pos, n_neg)


class _BrokenC2AP(APLoss):
    """value() is 10% off the decomposition δ: C2 fails (the ground truth is still 0)."""

    name = "ap_broken_c2_test"

    def value(self, pattern):
        return 1.1 * super().value(pattern)


class _OffsetAP(APLoss):
    """Not 0 at the ground truth: C1 fails."""

    name = "ap_offset_test"

    def value(self, pattern):
        return super().value(pattern) + 0.25


class _LayoutDependentAP(APLoss):
    """Depends on the memory layout of its argument, not only on the ±-pattern: C1 fails."""

    name = "ap_layout_test"

    def value(self, pattern):
        bonus = 0.0 if pattern.flags.c_contiguous else 0.5
        return super().value(pattern) + bonus


class _NaNDerivativeAP(APLoss):
    name = "ap_nan_test"

    def delta_diff(self, j, i, n_pos, n_neg):
        return np.full(np.broadcast_shapes(np.shape(j), np.shape(i)), np.nan)


class _WrongCompiledFormNDCG(NDCGLoss):
    """Its compiled table is the raw discount, not divided by the normaliser."""

    name = "ndcg_wrong_table_test"

    def compiled_form(self, n_pos, n_neg):
        form = super().compiled_form(n_pos, n_neg)
        return type(form)(form.code, self.discount_table(n_pos + n_neg))


# --------------------------------------------------------------------------
# The built-ins pass


@pytest.mark.parametrize("name", ["ap", "ndcg", "auc"])
def test_builtin_losses_are_qs_suitable(name):
    report = rankopt.check_qs_suitable(name, random_state=0)
    assert isinstance(report, QSReport)
    assert report.suitable and bool(report)
    assert report.passed == CONDITIONS
    assert report.violation is None and report.failed_condition is None
    report.raise_if_unsuitable()  # no-op
    assert any("compiled form" in note for note in report.notes)


def test_instances_and_names_agree():
    assert rankopt.check_qs_suitable(NDCGLoss(), random_state=1).passed == CONDITIONS


def test_default_grids_cover_the_corner_cases():
    assert 1 in DEFAULT_N_POS_GRID and 1 in DEFAULT_N_NEG_GRID
    assert max(DEFAULT_N_POS_GRID) > min(DEFAULT_N_NEG_GRID)  # P > N happens


def test_python_path_loss_passes_c4_by_timing():
    report = rankopt.check_qs_suitable(_PythonAP(), random_state=0)
    assert report.suitable, report.message
    assert any("Python path" in note for note in report.notes)


# --------------------------------------------------------------------------
# C3: precision@k


@pytest.mark.parametrize("k", [2, 3, 5])
def test_precision_at_k_fails_c3_with_a_true_counterexample(k):
    loss = PrecisionAtKLoss(k)
    report = rankopt.check_qs_suitable(loss, random_state=0)
    assert not report.suitable
    assert report.failed_condition == "C3"
    assert report.passed == ("C1", "C2")  # checking stopped at the first failure
    ce = report.violation.counterexample
    n_pos, n_neg, j, i = ce["n_pos"], ce["n_neg"], ce["j"], ce["i"]
    assert 1 <= j < n_neg and 1 <= i <= n_pos
    # the two sides, recomputed from δ itself
    lhs = float(loss.delta(j + 1, i + 1, n_pos, n_neg) - loss.delta(j + 1, i, n_pos, n_neg))
    rhs = float(loss.delta(j, i + 1, n_pos, n_neg) - loss.delta(j, i, n_pos, n_neg))
    assert lhs == pytest.approx(ce["lhs"]) and rhs == pytest.approx(ce["rhs"])
    assert lhs < rhs
    # the crossing of position k: i + j = k
    assert i + j == k
    for text in ("C3", f"j={j}", f"i={i}", repr(ce["lhs"]), repr(ce["rhs"])):
        assert text in report.message
    with pytest.raises(QSSuitabilityError, match="C3 fails") as info:
        report.raise_if_unsuitable()
    assert isinstance(info.value, ValueError)


def test_precision_at_1_is_qs_suitable():
    # D = [t ≤ 1] is convex on the integers: C3 holds.
    assert rankopt.check_qs_suitable(PrecisionAtKLoss(1), random_state=0).suitable


def test_chakrabarti_discount_fails_c3():
    # Mohapatra et al. (2018) Remark 1: D = 1 on {1, 2}, then 1/log2(i).

    report = rankopt.check_qs_suitable(ChakrabartiLoss(), random_state=0)
    assert report.failed_condition == "C3"


# --------------------------------------------------------------------------
# C1, C2, C4 failures


def test_broken_decomposition_fails_c2_with_a_counterexample():
    loss = _BrokenC2AP()
    report = rankopt.check_qs_suitable(loss, random_state=0)
    assert report.failed_condition == "C2" and report.passed == ("C1",)
    ce = report.violation.counterexample
    pattern = np.array([c == "+" for c in ce["pattern"]])
    assert pattern.sum() == ce["n_pos"] and (~pattern).sum() == ce["n_neg"]
    ranks = np.cumsum(pattern)[~pattern] + 1
    assert ranks.tolist() == ce["ranks"]
    total = float(np.sum(loss.delta(np.arange(1, ce["n_neg"] + 1), ranks, ce["n_pos"], ce["n_neg"])))
    assert total == pytest.approx(ce["sum_delta"])
    assert loss.value(pattern) == pytest.approx(ce["value"])
    assert total != pytest.approx(ce["value"])
    assert "C2 fails" in report.message


def test_offset_at_ground_truth_fails_c1():
    report = rankopt.check_qs_suitable(_OffsetAP(), random_state=0)
    assert report.failed_condition == "C1" and report.passed == ()
    assert "ground truth" in report.message and report.violation.counterexample["value"] == pytest.approx(0.25)


def test_layout_dependent_value_fails_c1():
    report = rankopt.check_qs_suitable(_LayoutDependentAP(), random_state=0)
    assert report.failed_condition == "C1"
    assert "strided view" in report.message


def test_mutating_value_fails_c1():
    class Mutating(APLoss):
        name = "ap_mutating_test"

        def value(self, pattern):
            result = super().value(pattern)
            pattern[:] = False
            return result

    report = rankopt.check_qs_suitable(Mutating(), random_state=0)
    assert report.failed_condition == "C1" and "modified" in report.message


def test_nan_derivative_is_reported_not_raised():
    report = rankopt.check_qs_suitable(_NaNDerivativeAP(), random_state=0)
    assert report.failed_condition == "C2"
    assert "non-finite" in report.message


def test_compiled_form_disagreeing_with_delta_diff_fails_c2():
    report = rankopt.check_qs_suitable(_WrongCompiledFormNDCG(), random_state=0)
    assert report.failed_condition == "C2"
    assert "compiled form" in report.message
    ce = report.violation.counterexample
    assert ce["got"] != pytest.approx(ce["expected"])


def test_table_rebuilding_derivative_fails_c4():
    report = rankopt.check_qs_suitable(_TableBuildingAP(), random_state=0)
    assert report.failed_condition == "C4", report.message
    assert report.passed == ("C1", "C2", "C3")
    ce = report.violation.counterexample
    assert ce["ratio"] > 10 and ce["n_large"] > ce["n_small"]


# --------------------------------------------------------------------------
# unsupported_reason: what the inference methods call


def test_unsupported_reason_by_condition():
    p_at_3 = PrecisionAtKLoss(3)
    assert unsupported_reason(p_at_3, "C2") is None  # dp is fine
    assert "C3 fails" in unsupported_reason(p_at_3, "C3")  # greedy is not
    assert "C3 fails" in unsupported_reason(p_at_3, "C4")  # nor qs
    assert unsupported_reason(APLoss(), "C4") is None
    assert "expected a rank loss" in unsupported_reason(ZeroOneLoss(), "C4")
    with pytest.raises(ValueError, match="up_to"):
        unsupported_reason(APLoss(), "C5")


def test_unsupported_reason_runs_the_check_once_per_loss(monkeypatch):
    from rankopt.inference import qs_check

    calls = []
    real = qs_check.check_qs_suitable

    def counting(loss, *args, **kwargs):
        calls.append(loss)
        return real(loss, *args, **kwargs)

    monkeypatch.setattr(qs_check, "check_qs_suitable", counting)
    qs_check._REPORTS.clear()
    for _ in range(3):
        assert unsupported_reason(PrecisionAtKLoss(4), "C4") is not None
        assert unsupported_reason(PrecisionAtKLoss(4), "C2") is None  # equal loss: cached
    assert len(calls) == 1
    unsupported_reason(PrecisionAtKLoss(5), "C4")  # different parameters: checked again
    assert len(calls) == 2
    qs_check._REPORTS.clear()


# --------------------------------------------------------------------------
# Arguments


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_pos_grid"):
        rankopt.check_qs_suitable("ap", n_pos_grid=[0, 2])
    with pytest.raises(ValueError, match="n_neg_grid"):
        rankopt.check_qs_suitable("ap", n_neg_grid=[])
    with pytest.raises(ValueError, match="n_neg_grid"):
        rankopt.check_qs_suitable("ap", n_neg_grid=3)
    with pytest.raises(ValueError, match="RankLoss"):
        rankopt.check_qs_suitable(ZeroOneLoss())
    with pytest.raises(ValueError, match="unknown loss"):
        rankopt.check_qs_suitable("no_such_loss")


def test_custom_grids_and_determinism():
    a = rankopt.check_qs_suitable(_BrokenC2AP(), n_pos_grid=[4], n_neg_grid=[6], random_state=3)
    b = rankopt.check_qs_suitable(_BrokenC2AP(), n_pos_grid=[4], n_neg_grid=[6], random_state=3)
    assert a.violation == b.violation
    assert a.violation.counterexample["n_pos"] == 4 and a.violation.counterexample["n_neg"] == 6
    # C3 cannot fail with a single negative: precision@k passes a grid with N = 1 only
    assert rankopt.check_qs_suitable(PrecisionAtKLoss(2), n_neg_grid=[1], random_state=0).passed == CONDITIONS
    assert rankopt.check_qs_suitable(AUCLoss(), n_pos_grid=[1], n_neg_grid=[1]).suitable


def test_a_geometric_discount_whose_tail_underflows_stays_qs_suitable():
    """Issue 38, point 9: RBP(0.8)'s table reaches the subnormal range near position 3,300, where rounding
    leaves second differences of −4.94e-324; C3 holds there to rounding, so qs runs (and equals dp)."""
    import rankopt
    from rankopt.losses.base import first_concave_position
    from rankopt.plugins import default_registry

    loss = rankopt.get_loss("rbp", persistence=0.8)
    assert loss.compiled_form(50, 3350).first_concave_position is None
    assert default_registry().resolve_method("auto", loss, 50, 3350).name == "qs"
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(size=50), rng.normal(size=3350)
    qs = rankopt.most_violated_ranking(loss, pos, neg, inference="qs")
    dp = rankopt.most_violated_ranking(loss, pos, neg, inference="dp")
    np.testing.assert_array_equal(qs.neg_ranks, dp.neg_ranks)
    # A bend far above the subnormal rounding is still caught.
    table = 0.8 ** np.arange(40.0)
    table[20] *= 0.5
    assert first_concave_position(table) is not None
