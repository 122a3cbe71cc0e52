"""check_loss on every declared structure (issue 39, point 2): each catches, on tiny queries, an inexact
inference or numbers that contradict ``value()``."""

from __future__ import annotations

import numpy as np
import pytest
from losses.test_topk_declarations import Lie as TopKLie

from rankopt.losses import APLoss, GradedPositionLoss
from rankopt.losses.pairwise import GradedPairwiseLoss
from rankopt.testing import check_loss


class BinaryValueLie(APLoss):
    """No declared structure; value() is not the AP its compiled form and delta_diff compute."""

    name = "binary_value_lie"

    def value(self, pattern):
        return 0.5 * super().value(pattern)


class PositionValueLie(GradedPositionLoss):
    """A position structure whose binary view, value(), is not what its gains and discount say."""

    name = "position_value_lie"
    k = None

    def gain(self, grades):
        return np.asarray(grades, dtype=np.float64)

    def position_discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)

    def value(self, pattern):
        return 0.0


class PairValueLie(GradedPairwiseLoss):
    """A pair structure whose binary view, value(), is not the ROC area its pairs give."""

    name = "pair_value_lie"

    def pair_weight(self, higher, lower):
        return np.ones(np.shape(higher))

    def value(self, pattern):
        return 1.0 - super().value(pattern)


@pytest.mark.parametrize(
    "loss",
    [BinaryValueLie(), TopKLie(k=2), PositionValueLie(), PairValueLie()],
    ids=["no structure", "top-k count", "graded position", "graded pairs"],
)
def test_check_loss_catches_numbers_that_contradict_value(loss):
    with pytest.raises(AssertionError, match=loss.name):
        check_loss(loss, n_instances=10)


def test_check_loss_catches_an_inexact_own_inference():
    """The own-inference structure: see tests/losses/test_graded_reference.py (an ERR loss whose inference
    returns the order by score is caught; the exact one passes)."""
    from losses.test_graded_reference import ERRLoss, _ScoreOrderERR

    check_loss(ERRLoss())
    with pytest.raises(AssertionError, match="not exact"):
        check_loss(_ScoreOrderERR())
