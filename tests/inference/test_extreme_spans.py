"""Exact ranks at extreme score spans (issue 38, point 4).

``most_violated_ranking("auc", [-1.0, 1e17], [0.0])`` gave negative rank 2 with qs and 3 with greedy:
greedy summed f_j from the first rank on, and a first step of 10¹⁷ absorbed the −1.5 after it, tying
ranks 2 and 3.  Greedy now sums from the best rank so far, as qs compares the steps themselves.  Both
are checked here against the maximum over every ranking in exact rational arithmetic.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from oracles.brute_force import exact_maximum, exact_objective

import rankopt
from rankopt.losses import NDCGLoss


class UncompiledNDCG(NDCGLoss):
    """NDCG without a compiled form: greedy's NumPy path."""

    name = "ndcg_uncompiled"

    def compiled_form(self, n_pos, n_neg):
        return None


SPAN_VALUES = [1e17, -1e17, 3e16, -2e16, 1e15, 0.0, -1.0, 1.0, 0.5, -0.25, 2.0]


@pytest.mark.parametrize("method", ["qs", "greedy"])
def test_the_issues_instance(method):
    result = rankopt.most_violated_ranking("auc", [-1.0, 1e17], [0.0], inference=method)
    assert result.neg_ranks.tolist() == [2] and result.loss == 0.5


@pytest.mark.parametrize("loss", ["auc", "ap", "ndcg", UncompiledNDCG()], ids=["auc", "ap", "ndcg", "ndcg-numpy"])
@pytest.mark.parametrize("method", ["qs", "greedy"])
def test_ranks_maximise_exactly_at_extreme_spans(loss, method):
    rng = np.random.default_rng(38)
    loss = rankopt.get_loss(loss) if isinstance(loss, str) else loss
    for _ in range(150):
        n_pos, n_neg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pos = [float(v) for v in rng.choice(SPAN_VALUES, n_pos)]
        neg = [float(v) for v in rng.choice(SPAN_VALUES, n_neg)]
        result = rankopt.most_violated_ranking(loss, pos, neg, inference=method)
        achieved = exact_objective(loss, pos, neg, result.neg_ranks.tolist())
        # Exact up to Δ's own rounding (the kernels' Δ tables and value() agree to a few ulps of 1), not
        # up to the scores' 10¹⁷: the issue's error was 0.75.
        assert exact_maximum(loss, pos, neg) - achieved <= Fraction(1, 10**9), (pos, neg, result.neg_ranks)
