"""rankopt.testing: the checker plugin authors run on their plugins."""

import types

import numpy as np
import pytest
from oracles.losses import PrecisionAtKLoss

from rankopt import hookimpl
from rankopt.losses import APLoss, AUCLoss, NDCGLoss, PositionDiscountLoss, ZeroOneLoss
from rankopt.plugins import DuplicatePluginError
from rankopt.testing import brute_force_most_violated, check_loss, check_plugin


@pytest.mark.parametrize("loss", [APLoss(), NDCGLoss(), AUCLoss(), ZeroOneLoss()], ids=repr)
def test_builtin_losses_pass(loss):
    check_loss(loss, n_instances=10)


def test_loss_failing_c3_passes_through_the_general_method():
    check_loss(PrecisionAtKLoss(2), n_instances=10)


class _BrokenDecomposition(APLoss):
    name = "broken_decomposition"

    def delta(self, j, i, n_pos, n_neg):
        return super().delta(j, i, n_pos, n_neg) * 1.5


def test_broken_decomposition_is_reported():
    with pytest.raises(AssertionError, match="breaks its contract.*C2|C2"):
        check_loss(_BrokenDecomposition())


class _WrongCompiledLoss(NDCGLoss):
    """A compiled form that disagrees with the Python maths: inference would be wrong."""

    name = "wrong_compiled"

    def compiled_form(self, n_pos, n_neg):
        return APLoss().compiled_form(n_pos, n_neg)


def test_compiled_form_disagreeing_with_the_maths_is_reported():
    with pytest.raises(AssertionError):
        check_loss(_WrongCompiledLoss())


class _PositionsDisagreeingWithPattern(APLoss):
    """Inference reads value_at_positions; an override that disagrees with value is a broken contract."""

    name = "positions_disagree"

    def value(self, pattern):  # 1 − AP straight from the pattern, as C1 states it
        positions = np.flatnonzero(pattern) + 1
        return float(1.0 - np.mean(np.arange(1, positions.size + 1) / positions))

    def value_at_positions(self, positions, n_neg):
        return APLoss.value_at_positions(self, positions, n_neg) + 0.01


def test_value_at_positions_disagreeing_with_value_is_reported():
    with pytest.raises(AssertionError, match="value_at_positions"):
        check_loss(_PositionsDisagreeingWithPattern())


def test_brute_force_matches_a_hand_computed_case():
    # One positive above one negative: R = +1, w·Ψ = s⁺ − s⁻, Δ = 0; swapped: −(s⁺ − s⁻) + 1.
    assert brute_force_most_violated(APLoss(), [1.0], [0.0]) == pytest.approx(1.0)
    assert brute_force_most_violated(APLoss(), [2.0], [0.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at most 9"):
        brute_force_most_violated(APLoss(), np.zeros(5), np.zeros(5))


class ReciprocalLoss(PositionDiscountLoss):
    name = "reciprocal_checker_test"

    def discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=float)


def test_check_plugin_registers_and_checks_its_losses():
    plugin = types.SimpleNamespace(rankopt_losses=hookimpl(lambda: [ReciprocalLoss]))
    check_plugin(plugin, name="reciprocal-plugin")


def test_check_plugin_refuses_a_duplicate_name():
    class Clash(ReciprocalLoss):
        name = "ap"

    plugin = types.SimpleNamespace(rankopt_losses=hookimpl(lambda: [Clash]))
    with pytest.raises(DuplicatePluginError, match="rankopt.losses.ap"):
        check_plugin(plugin, name="clash")


# --------------------------------------------------------------------------
# Identity (issue 14): parameters, clone, keys; a loss declaring AP's form


class _Geometric(PositionDiscountLoss):
    name = "geometric_testing"

    def __init__(self, p=0.5):
        self.p = p

    def discount(self, positions):
        return self.p ** (np.asarray(positions, dtype=float) - 1.0)


def test_parameterised_loss_passes():
    check_loss(_Geometric(0.3), n_instances=10)


def test_parameter_stored_changed_is_reported():
    class Rounding(_Geometric):
        name = "rounding_testing"

        def __init__(self, p=0.5):
            self.p = [p]  # not the value passed: clone cannot rebuild an equal loss

        def discount(self, positions):
            return self.p[0] ** (np.asarray(positions, dtype=float) - 1.0)

    with pytest.raises(AssertionError, match=r"\(\*\*get_params\(\)\) is not equal"):
        check_loss(Rounding(0.5), n_instances=2)


def test_unkeyable_loss_is_reported_with_a_warning():
    class Box:
        p = 0.5

    class Boxed(_Geometric):
        name = "boxed_testing"

        def __init__(self, box=None):
            self.box = box

        def discount(self, positions):
            return self.box.p ** (np.asarray(positions, dtype=float) - 1.0)

    with pytest.warns(UserWarning, match="cannot be keyed"):
        check_loss(Boxed(Box()), n_instances=2)


def test_a_loss_declaring_aps_form_is_checked_on_the_ap_kernels_too():
    from rankopt.losses import CompiledForm, KernelCode, RankLoss

    class APByValue(RankLoss):
        name = "ap_by_value_testing"

        def value(self, pattern):
            return APLoss().value(pattern)

        def delta(self, j, i, n_pos, n_neg):
            return APLoss().delta(j, i, n_pos, n_neg)

        def delta_diff(self, j, i, n_pos, n_neg):
            return APLoss().delta_diff(j, i, n_pos, n_neg)

        def compiled_form(self, n_pos, n_neg):
            return CompiledForm(KernelCode.AP)

    from rankopt.plugins import PluginKind, default_registry

    exact = [
        info.name
        for info in default_registry().list(PluginKind.INFERENCE_METHOD)
        if info.cls().unsupported_reason(APByValue()) is None
    ]
    assert {"select", "search", "qs"} <= set(exact)
    check_loss(APByValue(), n_instances=10)


def test_check_plugin_takes_a_module_name_as_the_example_package_documents_it():
    """Issue 38, point 15: ``check_plugin("rankopt_graded")`` (its README) failed with "got a builtins.str"."""
    from rankopt.testing import check_plugin

    pytest.importorskip("rankopt_graded")
    check_plugin("rankopt_graded")
    with pytest.raises(ValueError, match="importable plugin module, got 'no_such_plugin_module'"):
        check_plugin("no_such_plugin_module")
