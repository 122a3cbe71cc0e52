"""Losses used as fixtures by several test modules."""

import numpy as np

from rankopt.losses import PositionDiscountLoss


class PrecisionAtKLoss(PositionDiscountLoss):
    """1 − precision@k: the position discount D(t) = [t ≤ k], a step — not convex, so C3 fails.

    δ_j(i+1) − δ_j(i) = −[i + j − 1 = k] / min(k, |P|): only the negative that
    crosses position k changes the loss, and which one that is moves with j.
    """

    name = "precision_at_k_test"

    def __init__(self, k: int = 3):
        self.k = k

    def get_params(self, deep=True):
        return {"k": self.k}

    def discount(self, positions):
        return (np.asarray(positions, dtype=np.float64) <= self.k).astype(np.float64)


class ChakrabartiLoss(PositionDiscountLoss):
    """NDCG with Chakrabarti et al.'s discount: D = 1 on {1, 2}, then 1/log2(i) — not convex.

    Mohapatra et al. (2018) Remark 1: it breaks Observation 4, so C3 fails and greedy/qs are not exact.
    """

    name = "chakrabarti_test"

    def discount(self, positions):
        positions = np.asarray(positions, dtype=np.float64)
        return np.where(positions <= 2, 1.0, 1.0 / np.log2(np.maximum(positions, 2.0)))
