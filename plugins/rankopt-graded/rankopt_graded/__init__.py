"""rankopt-graded: two graded rank losses for rankopt, each a gain and a discount, nothing compiled.

Both subclass :class:`rankopt.losses.GradedPositionLoss`, so that

    Δ(π) = 1 − Σ_{π(i) ≤ k'} G(g_i) D(π(i)) / IDCG,   Ψ(X, π) = Σ_{π(i) ≤ k'} A(π(i)) x_i,

with A = D / Σ_{j ≤ k'} D(j); rankopt runs the compiled, threaded partial-sort
inference of that structure over every query (``docs/maths.md``), exactly as
for its own ``ndcg_graded``.

* ``"rbp_graded"`` — graded rank-biased precision (Moffat & Zobel, "Rank-biased
  precision for measurement of retrieval effectiveness", 2008): a user reads
  down the ranking, moving on from position j with probability p, and gains
  g / g_max at a document of grade g; D(j) = p^(j−1), G(g) = min(g, g_max) / g_max,
  normalised by the ideal ranking's RBP.
* ``"dcg_zipf"`` — DCG@k with the Zipfian discount D(j) = 1/j and a gain per
  grade from a table (LETOR's 0–4 by default), grades beyond the table taking
  its last gain.
"""

from __future__ import annotations

import numbers

import numpy as np

from rankopt import hookimpl
from rankopt.losses import GradedPositionLoss

__version__ = "0.1.0"

__all__ = ["GradedRBPLoss", "ZipfDCGLoss"]


class GradedRBPLoss(GradedPositionLoss):
    """1 − graded RBP / ideal graded RBP.

    Parameters
    ----------
    persistence : float, default 0.8
        p in (0, 1): the probability of looking past a position.
    max_grade : int, default 4
        g_max: grades at or above it gain 1, grade g below it g / g_max.
    k : int or None, default None
        Positions beyond k carry no gain (None: every position).
    """

    name = "rbp_graded"

    def __init__(self, persistence=0.8, max_grade=4, k=None):
        self.persistence = persistence
        self.max_grade = max_grade
        self.k = k

    def gain(self, grades):
        max_grade = self.max_grade
        if isinstance(max_grade, bool) or not isinstance(max_grade, numbers.Integral) or max_grade < 1:
            raise ValueError(f"expected max_grade to be an integer >= 1, got {max_grade!r} instead")
        return np.minimum(np.asarray(grades, dtype=np.float64), max_grade) / max_grade

    def position_discount(self, positions):
        p = self.persistence
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 < p < 1.0:
            raise ValueError(f"expected persistence to be a number strictly between 0 and 1, got {p!r} instead")
        return np.power(float(p), np.asarray(positions, dtype=np.float64) - 1.0)


class ZipfDCGLoss(GradedPositionLoss):
    """1 − DCG@k / IDCG@k with the discount 1/j and gains from a table.

    Parameters
    ----------
    k : int, default 10
    gains : sequence of float, default (0, 1, 3, 7, 15)
        The gain of grade 0, 1, …; non-negative and non-decreasing.  Grades
        beyond the table take its last entry.
    """

    name = "dcg_zipf"

    def __init__(self, k=10, gains=(0.0, 1.0, 3.0, 7.0, 15.0)):
        self.k = k
        self.gains = gains

    def gain(self, grades):
        table = np.asarray(self.gains, dtype=np.float64)
        if table.ndim != 1 or table.size == 0:
            raise ValueError(f"expected gains to be a non-empty sequence of numbers, got {self.gains!r} instead")
        return table[np.minimum(np.asarray(grades, dtype=np.int64), table.size - 1)]

    def position_discount(self, positions):
        return 1.0 / np.asarray(positions, dtype=np.float64)


@hookimpl
def rankopt_losses():
    return [GradedRBPLoss, ZipfDCGLoss]
