"""The plugin module the ``rankopt`` entry point names: one loss and its hook.

Rank-biased precision (Moffat & Zobel 2008) models a user who reads the
ranking from the top and moves on from position i to i + 1 with probability
p, the *persistence*: RBP = (1 − p) Σ_i rel_i p^(i−1).  Divided by the RBP
of the ideal ranking (every positive first), (1 − p)(1 + p + … + p^(|P|−1)),
it lies in [0, 1], and the loss is

    Δ_RBP = 1 − Σ_{x∈P} p^(ind(x)−1) / Σ_{i≤|P|} p^(i−1).

That is the position-discount family of Mohapatra et al. (2018) (Prop. 7) with
D(i) = p^(i−1).  For 0 < p < 1 this discount is positive, decreasing and
convex (D(i) − 2D(i+1) + D(i+2) = p^(i−1)(1 − p)² > 0), so condition C3
holds and every exact inference method (greedy, quicksort-flavoured, …)
applies.  Subclassing :class:`~rankopt.losses.PositionDiscountLoss` means the
plugin states only the discount: rankopt derives δ_j(i) and its difference
from it, and the compiled kernels read the table D(1…|P|+|N|) without
calling back into Python.
"""

from __future__ import annotations

import numbers

import numpy as np

from rankopt import hookimpl
from rankopt.losses import PositionDiscountLoss


class RBPLoss(PositionDiscountLoss):
    """1 − RBP / ideal RBP, with the geometric discount p^(i−1).

    Parameters
    ----------
    persistence : float, default 0.8
        The probability p, in (0, 1), that the user looks past a position.
        Small p weighs the top of the ranking almost exclusively; p close
        to 1 spreads the weight over many positions.  (p = 1 would make
        every ranking score the same, so it is excluded.)
    """

    name = "rbp"

    def __init__(self, persistence: float = 0.8):
        if (
            isinstance(persistence, bool)
            or not isinstance(persistence, numbers.Real)
            or not np.isfinite(persistence)
            or not 0.0 < persistence < 1.0
        ):
            raise ValueError(
                f"expected persistence to be a number strictly between 0 and 1, got {persistence!r} instead"
            )
        # Stored unchanged under the parameter's own name (scikit-learn's
        # convention): rankopt derives get_params, equality and the keys of its
        # cached tables from it, and sklearn.base.clone rebuilds the loss from it.
        self.persistence = persistence

    def discount(self, positions):
        # Far down a long ranking p^(i−1) underflows to 0.0: still finite, and
        # still convex and non-increasing, which is all the kernels rely on.
        return float(self.persistence) ** (np.asarray(positions, dtype=np.float64) - 1.0)


@hookimpl
def rankopt_losses():
    return [RBPLoss]
