"""A throwaway rankopt plugin: the ROC-area loss again, under the name ``throwaway_auc``.

It deliberately has no compiled form, so rankopt runs it on the Python
inference path; training with it must give the same w as the built-in
``auc`` loss.
"""

import numpy as np

from rankopt import hookimpl
from rankopt.losses import RankLoss


class ThrowawayAUCLoss(RankLoss):
    """1 − ROC area: the fraction of positive–negative pairs ranked negative-first."""

    name = "throwaway_auc"

    def value(self, pattern):
        pattern = np.asarray(pattern, dtype=bool)
        negatives_above = np.cumsum(~pattern)[pattern]
        return float(negatives_above.sum() / (pattern.sum() * (~pattern).sum()))

    def delta(self, j, i, n_pos, n_neg):
        j, i = np.broadcast_arrays(np.asarray(j, dtype=np.float64), np.asarray(i, dtype=np.float64))
        return (n_pos + 1.0 - i) / (n_pos * n_neg)


@hookimpl
def rankopt_losses():
    return [ThrowawayAUCLoss]
