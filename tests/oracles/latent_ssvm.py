"""The latent SSVM's Appendix C greedy as first written: pure Python, one fresh pattern value per step.

This is the reference the compiled greedy (``rankopt.models._latent_ssvm``)
must reproduce decision for decision: it scores every pattern with
:func:`rankopt.models.latent.ssvm_pattern_value` (two
``scipy.optimize.linear_sum_assignment`` calls) and keeps a strictly better one.
"""

import numpy as np

from rankopt.models.latent import ssvm_pattern_value


def greedy_ranks_reference(loss, pos_max, pos_min, neg_max, neg_min):
    """Appendix C's greedy shift of the negative slots, top slot first (sorted ranks 1…|P|+1)."""
    n_pos, n_neg = len(pos_max), len(neg_max)
    ranks = np.full(n_neg, n_pos + 1, dtype=np.int64)
    best = ssvm_pattern_value(loss, ranks, pos_max, pos_min, neg_max, neg_min)[0]
    lowest = 1
    for j in range(n_neg):
        choice = n_pos + 1
        for rank in range(n_pos, lowest - 1, -1):
            ranks[j] = rank
            value = ssvm_pattern_value(loss, ranks, pos_max, pos_min, neg_max, neg_min)[0]
            if value > best:
                best, choice = value, rank
        ranks[j] = choice
        lowest = choice
    return ranks
