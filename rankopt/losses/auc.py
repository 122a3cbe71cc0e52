"""ROC-area loss: the fraction of mis-ordered positive–negative pairs.

A negative with interleaving rank i sits above |P| − i + 1 positives, so

    δ_j(i) = (|P| + 1 − i) / (|P||N|),   δ_j(i + 1) − δ_j(i) = −1 / (|P||N|),

independent of j: C3 holds with equality.
"""

from __future__ import annotations

import numpy as np

from rankopt.hookspecs import hookimpl
from rankopt.losses.base import CompiledForm, KernelCode, RankLoss, pattern_counts

__all__ = ["AUCLoss"]


class AUCLoss(RankLoss):
    """1 − ROC area (Joachims 2005's ROC-area loss, normalised to [0, 1])."""

    name = "auc"

    def value(self, pattern):
        return self.value_at_positions(*pattern_counts(pattern))

    def value_at_positions(self, positions, n_neg):
        negatives_above = positions - np.arange(1, positions.size + 1)
        return float(np.sum(negatives_above) / (positions.size * n_neg))

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=np.float64), np.asarray(i, dtype=np.float64))
        return (n_pos + 1.0 - i) / (n_pos * n_neg)

    def delta_diff(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=np.float64), np.asarray(i, dtype=np.float64))
        return np.full(i.shape, -1.0 / (n_pos * n_neg))

    def compiled_form(self, n_pos, n_neg):
        # The AUC kernels evaluate this class's δ and nothing else: a subclass that
        # changes the maths must not inherit them, so it runs on the general path
        # with its own delta_diff — unless it returns this form itself, a claim
        # check_qs_suitable verifies against its delta_diff (C2).
        return CompiledForm(KernelCode.AUC) if type(self) is AUCLoss else None


@hookimpl
def rankopt_losses():
    return [AUCLoss]
