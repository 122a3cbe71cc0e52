"""Graded NDCG@k as a training loss, with the position-based joint feature map.

For one query with grades g, gains G_i (2^g_i − 1, or g_i) and the discount
D(j) = 1/log2(1 + j) on the top k' = min(k, n) positions (0 below), the
output is a ranking π (π(i) the position of document i) and, after
Chakrabarti, Khanna, Sawant & Bhattacharyya, "Structured learning for
non-smooth ranking losses" (KDD 2008) and Le & Smola, "Direct optimization of
ranking measures" (2007),

    Ψ(X, π) = Σ_i A(π(i)) x_i,      A(j) = D(j) / Σ_{j' ≤ k'} D(j'),
    Δ(π) = 1 − DCG@k(π) / IDCG@k,    DCG@k(π) = Σ_{i : π(i) ≤ k'} G_i D(π(i)).

Ψ is the linear feature map's ``Xᵀc`` with c_i = A(π(i)): the position
weights come from inference, not from a separate feature map.  Prediction
sorts by w·x (A decreasing: the rearrangement inequality).  Loss-augmented
inference maximises Σ_{π(i) ≤ k'} D(π(i)) (s_i / S − G_i / IDCG) + 1 with
S = Σ_{j ≤ k'} D(j): an n × k' assignment whose weight matrix is the product
of u_i = s_i / S − G_i / IDCG and D(j).  With D positive and decreasing the
assignment is solved by sorting (the k' largest u in decreasing order, at
positions 1…k'), O(n + k' log k') per query instead of an O(n k'²)
assignment; ``docs/maths.md`` has the derivation, and the tests check it
against ``scipy.optimize.linear_sum_assignment`` and against all rankings.

The ground truth's Ψ(X, π*) gives each document the mean of A over the
positions its grade's tie group occupies in the ideal order, so that Ψ* does
not depend on how equal grades are ordered.

As a binary :class:`~rankopt.losses.RankLoss` — the single-query API, whose
relevance is 0/1 — this is the position-discount loss NDCG@k (binary gains,
the truncated discount) over the pairwise Ψ of the other rank losses, as
:class:`~rankopt.losses.PairwiseLoss` is the ROC-area loss there; over
queries (``graded = True``) it is the model above.
"""

from __future__ import annotations

import numbers

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.graded_position import GradedPositionLoss
from rankopt.losses.structure import GradedPositionStructure

__all__ = ["GAINS", "GradedNDCGLoss", "MAX_EXPONENTIAL_GRADE"]

#: The gain functions: 2^g − 1 (Burges et al.; LETOR's and LightGBM's) or g.
GAINS = ("exponential", "linear")
#: The largest grade whose exponential gain 2^g − 1 stays a finite float64 (2^1024 overflows).
MAX_EXPONENTIAL_GRADE = 1023


class GradedNDCGLoss(GradedPositionLoss):
    """1 − NDCG@k with graded gains, over the position-based joint feature map.

    Parameters
    ----------
    k : int, default 10
        The cutoff: only the top k positions carry gain (a query shorter than
        k is scored over its full list).
    gains : {"exponential", "linear"}, default "exponential"
        2^grade − 1 (LETOR's and LightGBM's convention) or the grade itself.
    """

    name = "ndcg_graded"

    def __init__(self, k=10, gains="exponential"):
        self.k = k
        self.gains = gains

    def checked_k(self) -> int:
        """``k`` as an int ≥ 1, or a ValueError naming the parameter."""
        k = self.k
        if k is None or isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"expected k to be an integer >= 1 (the NDCG cutoff), got {k!r} instead")
        return int(k)

    def checked_gains(self) -> str:
        if self.gains not in GAINS:
            raise ValueError(f"expected gains to be one of {list(GAINS)}, got {self.gains!r} instead")
        return str(self.gains)

    def check_grades(self, grades: np.ndarray) -> None:
        """Refuse grades whose gain overflows float64 (above 1023 with exponential gains)."""
        if self.checked_gains() == "exponential":
            top = int(np.asarray(grades).max(initial=0))
            if top > MAX_EXPONENTIAL_GRADE:
                raise ValueError(
                    f"expected grades <= {MAX_EXPONENTIAL_GRADE} with gains='exponential' (2**grade - 1 overflows "
                    f"float64 beyond), got {top} instead; use gains='linear'"
                )

    def gain(self, grades):
        """2^g − 1 or g; grades whose gain overflows are refused."""
        grades = np.asarray(grades)
        self.check_grades(grades)
        if self.checked_gains() == "linear":
            return grades.astype(np.float64)
        return np.exp2(grades.astype(np.float64)) - 1.0

    def position_discount(self, positions):
        return 1.0 / np.log2(1.0 + np.asarray(positions, dtype=np.float64))

    def structure(self) -> GradedPositionStructure | None:
        """Declared for this class only, as the built-in losses' compiled forms are: a subclass may change Δ
        elsewhere than in its gain and discount (subclass :class:`GradedPositionLoss` instead)."""
        return super().structure() if type(self) is GradedNDCGLoss else None


@hookimpl
def rankopt_losses():
    return [GradedNDCGLoss]
