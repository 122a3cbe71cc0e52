"""Weighted 0-1 loss of Dokania et al. (2014) eq. (7).

    Δ(Y*, Y) = (J Σ_{i∈P} [y_i = 0] + Σ_{j∈N} [y_j = 1]) / (J|P| + |N|),

with J = |N|/|P| by default, which weighs both classes equally: each
mislabelled positive costs 1/(2|P|), each mislabelled negative 1/(2|N|).
"""

from __future__ import annotations

import numbers

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.base import LabelingLoss

__all__ = ["ZeroOneLoss"]


class ZeroOneLoss(LabelingLoss):
    """Class-weighted 0-1 loss; ``J=None`` means J = |N|/|P|."""

    name = "zero_one"

    def __init__(self, J: float | None = None):
        if J is not None and (isinstance(J, bool) or not isinstance(J, numbers.Real) or not np.isfinite(J) or J <= 0):
            raise ValueError(f"expected J to be a positive finite number or None, got {J!r} instead")
        self.J = J

    def sample_weights(self, y_true):
        y_true = np.asarray(y_true, dtype=bool)
        n_pos = int(np.count_nonzero(y_true))
        n_neg = y_true.size - n_pos
        if self.J is None and (n_pos == 0 or n_neg == 0):
            # J = |N|/|P| is undefined (or 0, making every weight 0/0) with one class only.
            raise ValueError(
                f"expected y_true to contain both a positive and a negative sample for the default "
                f"J = |N|/|P|, got {n_pos} positives and {n_neg} negatives instead"
            )
        J = n_neg / n_pos if self.J is None else float(self.J)
        norm = J * n_pos + n_neg
        return np.where(y_true, J / norm, 1.0 / norm)


@hookimpl
def rankopt_losses():
    return [ZeroOneLoss]
