"""The constant-ranker warning at rounding level (issue 38, point 8)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rankopt
from rankopt.exceptions import ConstantRankerWarning


def test_a_numerically_zero_w_is_reported_as_the_constant_ranker():
    """Issue 38, point 8: three rows repeated as negatives; the optimum is w = 0 and the solver left
    ~1e-17 in coef_, which np.any(w) took for a ranker."""
    X = np.array([[1.0, 2.0], [0.5, -1.0], [2.0, 0.3]])
    with pytest.warns(ConstantRankerWarning, match="w = 0 \\(to rounding\\)"):
        model = rankopt.RankSVM(loss=rankopt.get_loss("precision_at_k", k=1)).fit(
            np.vstack([X, X]), np.r_[np.ones(3), np.zeros(3)]
        )
    assert model.converged_ and np.max(np.abs(model.coef_)) < 1e-12


def test_a_small_but_real_w_is_not_called_constant():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3)) * 1e-6  # tiny features: a real optimum with small scores
    y = (X[:, 0] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantRankerWarning)
        model = rankopt.RankSVM(loss="ap", C=1e12).fit(X, y)
    assert model.converged_
