"""Pairwise ROC-area loss over graded relevance: SVM^rank's objective.

For one query with integer grades g, the pairs are P = {(i, j) : g_i > g_j}.
The output is a labelling y ∈ {−1, +1}^P of those pairs (y_ij = +1: i is put
above j), and

    Ψ(y) = (1/|P|) Σ_{(i,j)∈P} y_ij (ψ(x_i) − ψ(x_j)),
    Δ(y) = (1/|P|) #{(i, j) ∈ P : y_ij = −1},

the structural form of Joachims, "Training linear SVMs in linear time"
(KDD 2006), whose 1-slack constraints range over every labelling of the
pairs.  Loss-augmented inference decouples over pairs — y_ij = +1 exactly
when s_i − s_j ≥ 1/2 — and is solved in O(n log n) per query by sorting and
counting per grade (``rankopt/inference/_pairwise.pxd``); docs/maths.md has
the derivation and why the labellings, not only the rankings, are the output
space.

With two grades the pairs are the positive–negative pairs, every maximiser
is the labelling of a ranking (Joachims 2005), and the loss is exactly
:class:`~rankopt.losses.AUCLoss`: the same Ψ and the same Δ.  So as a
binary :class:`~rankopt.losses.RankLoss` — the single-query API, whose
relevance is 0/1 — it *is* the ROC-area loss and inherits it, kernels
included; with ``graded = True`` the multi-query inference
(:func:`rankopt.inference.batched.most_violated_rankings`) hands it the grades.
"""

from __future__ import annotations

import abc

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.auc import AUCLoss
from rankopt.losses.structure import GradedPairStructure

__all__ = ["GradedPairwiseLoss", "PairwiseLoss"]


class PairwiseLoss(AUCLoss):
    """Fraction of the pairs with different grades that the output swaps (SVM^rank's loss)."""

    name = "pairwise"
    graded = True

    def structure(self) -> GradedPairStructure | None:
        """SVM^rank's pairs, for this class only: a subclass may change Δ, which the kernel would ignore."""
        return GradedPairStructure() if type(self) is PairwiseLoss else None


class GradedPairwiseLoss(AUCLoss):
    """Base class of pairwise losses over grades whose pairs weigh by their two grades.

    Ψ = Σ_{g_i > g_j} w(g_i, g_j) y_ij (x_i − x_j) / W and Δ = Σ_{y_ij = −1} w(g_i, g_j) / W, W the sum
    of the weights: SVM^rank's formulation with the pairs weighted, say by their grades' difference
    (``docs/plugins.md``, "Graded losses").  Subclasses set ``name`` and implement :meth:`pair_weight`;
    they get the compiled, threaded inference of their declared
    :class:`~rankopt.losses.structure.GradedPairStructure`.  With two grades every pair weighs the
    same, so the binary view — the single-query API — is the ROC-area loss.
    """

    graded = True

    @abc.abstractmethod
    def pair_weight(self, higher: np.ndarray, lower: np.ndarray) -> np.ndarray:
        """The weights of pairs of integer grades (int64 arrays, elementwise, higher > lower): finite, ≥ 0."""

    def structure(self) -> GradedPairStructure | None:
        return GradedPairStructure(weight=self.pair_weight)


@hookimpl
def rankopt_losses():
    return [PairwiseLoss]
