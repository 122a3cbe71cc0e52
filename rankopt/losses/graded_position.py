"""Graded position-based losses: a gain per grade and a discount per position, over the position-based Ψ.

For one query with grades g, gains G_i = G(g_i), a positive non-increasing
discount D and the cutoff k' = min(k, n), the output is a ranking π and

    Ψ(X, π) = Σ_{π(i) ≤ k'} A(π(i)) x_i,      A(j) = D(j) / Σ_{j' ≤ k'} D(j'),
    Δ(π) = 1 − Σ_{π(i) ≤ k'} G_i D(π(i)) / IDCG,

IDCG the same sum over an ideal order (grades high to low).  NDCG@k
(:class:`~rankopt.losses.GradedNDCGLoss`) is the member G = 2^g − 1,
D(j) = 1/log2(1 + j); graded rank-biased precision takes D(j) = p^(j−1).
Every member gets the compiled, threaded inference of its declared
:class:`~rankopt.losses.structure.GradedPositionStructure` (a partial sort per
query, ``docs/maths.md``): a subclass supplies :meth:`gain` and
:meth:`position_discount`, nothing compiled.

As a binary :class:`~rankopt.losses.RankLoss` — the single-query API, whose
relevance is 0/1 — it is the position-discount loss with D truncated at k
over the pairwise Ψ of the other rank losses.
"""

from __future__ import annotations

import abc
import numbers

import numpy as np

from rankopt.losses.discount import PositionDiscountLoss
from rankopt.losses.structure import GradedPositionStructure

__all__ = ["GradedPositionLoss"]


class GradedPositionLoss(PositionDiscountLoss):
    """Base class of graded losses Δ = 1 − DCG@k / IDCG@k with the loss's own gain and discount.

    Subclasses set ``name``, take ``k`` (an integer ≥ 1, or None for no
    cutoff) in ``__init__`` and implement :meth:`gain` and
    :meth:`position_discount`.
    """

    graded = True
    k: int | None = None

    @abc.abstractmethod
    def gain(self, grades: np.ndarray) -> np.ndarray:
        """G of integer grades ≥ 0 (an int64 array): finite floats ≥ 0, non-decreasing in the grade."""

    @abc.abstractmethod
    def position_discount(self, positions: np.ndarray) -> np.ndarray:
        """D of 1-based positions (a float array): positive and non-increasing."""

    def checked_k(self) -> int | None:
        """``k`` as an int ≥ 1 (or None), or a ValueError naming the parameter."""
        k = self.k
        if k is None:
            return None
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"expected k to be an integer >= 1 (the cutoff) or None, got {k!r} instead")
        return int(k)

    def position_structure(self) -> GradedPositionStructure:
        """This loss's gain, discount and cutoff as the structure its inference runs on."""
        return GradedPositionStructure(gain=self.gain, discount=self.position_discount, k=self.checked_k())

    def structure(self) -> GradedPositionStructure | None:
        return self.position_structure()

    def position_weights(self, n: int) -> np.ndarray:
        """D(1), …, D(min(k, n)): the discount of the positions that carry gain."""
        return self.position_structure().position_weights(n)

    def discount(self, positions):
        """The binary view's discount: D up to k, 0 beyond."""
        positions = np.asarray(positions, dtype=np.float64)
        k = self.checked_k()
        if k is None:
            return np.asarray(self.position_discount(positions), dtype=np.float64)
        inside = positions <= k
        table = np.zeros(positions.shape)
        table[inside] = self.position_discount(positions[inside])
        return table

    def graded_value(self, grades, ranking) -> float:
        """Δ of one query's ranking from the definition: ``ranking[j]`` is the document at position j + 1."""
        structure = self.position_structure()
        gains, discount = structure.tables(grades, len(grades))
        ideal = float(np.sort(gains)[::-1][: discount.size] @ discount)
        dcg = float(gains[np.asarray(ranking)[: discount.size]] @ discount)
        return 1.0 - dcg / ideal
