"""Gains and pair weights near 1e308 (issue 38, point 6): refused with the bound, never NaN."""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt.exceptions import PluginContractError
from rankopt.losses import GradedPositionLoss
from rankopt.losses.pairwise import GradedPairwiseLoss
from rankopt.testing import check_plugin


class HugeWeights(GradedPairwiseLoss):
    name = "huge_weights"

    def __init__(self, weight=1.0):
        self.weight = weight

    def pair_weight(self, higher, lower):
        return np.full(np.shape(higher), self.weight)


class HugeGains(GradedPositionLoss):
    name = "huge_gains"
    k = None

    def __init__(self, top=1.0):
        self.top = top

    def gain(self, grades):
        return np.asarray(grades, dtype=np.float64) * self.top

    def position_discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)


@pytest.mark.parametrize(
    ("loss", "message"),
    [(HugeWeights(weight=1e308), "pair weights w whose sum"), (HugeGains(top=6e307), "gains G whose sum")],
    ids=["weights", "gains"],
)
def test_the_hinge_refuses_sums_that_overflow_with_the_bound(loss, message):
    with pytest.raises(ValueError, match=f"expected {message}.*2\\*\\*1000"):
        rankopt.structured_hinge([0.3, -0.2, 0.1], [2, 1, 0], loss=loss)


@pytest.mark.parametrize("loss", [HugeWeights(weight=1e308), HugeGains(top=6e307)], ids=["weights", "gains"])
def test_a_fit_refuses_them_too(loss):
    with pytest.raises(ValueError, match="stays finite"):
        rankopt.RankSVM(loss=loss).fit(np.eye(3), [2, 1, 0], qid=[0, 0, 0])


@pytest.mark.parametrize("loss", [HugeWeights(weight=1e290), HugeGains(top=1e290)], ids=["weights", "gains"])
def test_large_but_safe_weights_give_the_values_of_unit_ones(loss):
    """Δ and the hinge are ratios of the weights: a common factor far from 1 changes nothing."""
    unit = HugeWeights() if isinstance(loss, HugeWeights) else HugeGains()
    value, grad = rankopt.structured_hinge([0.3, -0.2, 0.1], [2, 1, 0], loss=loss)
    unit_value, unit_grad = rankopt.structured_hinge([0.3, -0.2, 0.1], [2, 1, 0], loss=unit)
    assert np.isfinite(value) and value == pytest.approx(unit_value, rel=1e-12)
    np.testing.assert_allclose(grad, unit_grad, rtol=1e-12)


def test_registration_refuses_a_default_that_overflows():
    class Overflowing(GradedPairwiseLoss):
        name = "overflowing"

        def pair_weight(self, higher, lower):
            return np.full(np.shape(higher), 1e307)

    class Plugin:
        @rankopt.hookimpl
        def rankopt_losses(self):
            return [Overflowing]

    with pytest.raises(PluginContractError, match="overflowing.*2\\*\\*1000"):
        check_plugin(Plugin())
