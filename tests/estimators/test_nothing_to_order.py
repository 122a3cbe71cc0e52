"""Queries a graded loss cannot order although they hold two grades (issue 38, point 2).

``fit`` counted queries by grade while inference counts them by gain or pair weight: two grades that
share a gain, pairs of weight 0 or grades all at ``max_grade`` left a query the kernel found nothing to
order in, and the fit crashed.  Such queries are now left out and counted, as single-grade ones are.
"""

from __future__ import annotations

import numpy as np
import pytest

import rankopt
from rankopt.losses import GradedPositionLoss
from rankopt.losses.pairwise import GradedPairwiseLoss


class Capped(GradedPositionLoss):
    name = "capped"
    k = None

    def gain(self, grades):
        return np.minimum(np.asarray(grades, dtype=np.float64), 1.0)

    def position_discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)


class OnlyFromTheTop(GradedPairwiseLoss):
    """Only pairs whose higher grade is 2 or more count: a query of grades {0, 1} has none."""

    name = "only_from_the_top"

    def pair_weight(self, higher, lower):
        return np.where(np.asarray(higher) >= 2, 1.0, 0.0)


CASES = [
    (Capped(), [1, 2, 0, 1], [0, 0, 1, 1]),  # query 0: grades 1 and 2 share gain 1
    (OnlyFromTheTop(), [0, 1, 2, 0], [0, 0, 1, 1]),  # query 0: its one pair weighs 0
    ("rbp_graded", [5, 4, 0, 1], [0, 0, 1, 1]),  # query 0: both grades at or above max_grade=4
]


@pytest.mark.parametrize(("loss", "grades", "qid"), CASES, ids=["shared gain", "zero-weight pairs", "max_grade"])
def test_a_query_the_loss_cannot_order_is_left_out_and_counted(loss, grades, qid):
    model = rankopt.RankSVM(loss=loss, C=1.0).fit(np.eye(4), grades, qid=qid)
    assert model.converged_
    assert model.n_queries_ == 2 and model.n_queries_used_ == 1
    np.testing.assert_array_equal(model.coef_[:2], 0.0)  # the left-out query's rows play no part


@pytest.mark.parametrize(("loss", "grades", "qid"), CASES, ids=["shared gain", "zero-weight pairs", "max_grade"])
def test_the_fit_equals_the_fit_without_the_left_out_query(loss, grades, qid):
    X = np.random.default_rng(0).normal(size=(4, 3))
    full = rankopt.RankSVM(loss=loss, C=1.0).fit(X, grades, qid=qid)
    alone = rankopt.RankSVM(loss=loss, C=1.0).fit(X[2:], grades[2:], qid=qid[2:])
    np.testing.assert_allclose(full.coef_, alone.coef_, rtol=1e-9, atol=1e-12)


def test_no_query_the_loss_can_order_is_refused_naming_the_loss():
    with pytest.raises(ValueError, match="loss 'capped' orders apart.*none of the 2 queries"):
        rankopt.RankSVM(loss=Capped()).fit(np.eye(4), [1, 2, 2, 1], qid=[0, 0, 1, 1])
