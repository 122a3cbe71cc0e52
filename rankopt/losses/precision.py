"""Precision at k as a training loss: Δ = 1 − (positives in the top k) / min(k, |P|).

Normalised so that the ground truth (every positive first) has Δ = 0, precision
at k and recall at k give the same loss.  It is the position-discount loss
with D(i) = 1 for i ≤ k and 0 beyond (Mohapatra et al. (2018) Prop. 7), whose
table is concave at k: condition C3 fails, so the greedy and quicksort-flavoured
methods do not apply and the general ``dp`` costs O(|P||N|).  The loss declares
a :class:`~rankopt.losses.structure.TopKCountStructure` instead — Δ depends only
on how many positives stand in the top k — and ``method="auto"`` runs the
``topk`` method, exact in O(n log n) (``docs/maths.md``, "Top-k losses").
"""

from __future__ import annotations

import numbers

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.discount import PositionDiscountLoss
from rankopt.losses.structure import TopKCountStructure

__all__ = ["PrecisionAtKLoss"]


class PrecisionAtKLoss(PositionDiscountLoss):
    """1 − P@k / ideal P@k: the fraction of the top k places positives could take that negatives hold.

    Parameters
    ----------
    k : int, default 10
        The cutoff.
    """

    name = "precision_at_k"

    def __init__(self, k=10):
        self.k = k

    def checked_k(self) -> int:
        k = self.k
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"expected k to be an integer >= 1 (the cutoff), got {k!r} instead")
        return int(k)

    def discount(self, positions):
        return (np.asarray(positions, dtype=np.float64) <= self.checked_k()).astype(np.float64)

    def loss_of_count(self, m, n_pos: int, n_neg: int) -> np.ndarray:
        """Δ of a ranking with m positives among its top k."""
        return 1.0 - np.asarray(m, dtype=np.float64) / min(self.checked_k(), n_pos)

    def structure(self) -> TopKCountStructure | None:
        """Declared for this class only: a subclass may change Δ elsewhere than in the cutoff."""
        if type(self) is not PrecisionAtKLoss:
            return None
        return TopKCountStructure(k=self.checked_k(), loss_of_count=self.loss_of_count)


@hookimpl
def rankopt_losses():
    return [PrecisionAtKLoss]
