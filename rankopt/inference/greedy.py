"""The greedy method: exact for every QS-suitable loss, O(|P||N| + |N| log |N|)."""

from __future__ import annotations

import numpy as np

import rankopt.inference._greedy as _greedy
from rankopt.hookspecs import hookimpl
from rankopt.inference.base import InferenceMethod, descending_order, kernel_arguments, steps_to_highest_maximiser
from rankopt.losses.base import RankLoss, checked_delta_diff

__all__ = ["GreedyMethod"]


class GreedyMethod(InferenceMethod):
    """Sort both sides, then give each negative its best rank (Yue et al. 2007).

    Losses with a :meth:`~rankopt.losses.RankLoss.compiled_form` run entirely
    in the Cython kernel; any other rank loss runs the same algorithm with
    its ``delta_diff`` evaluated by NumPy, one negative at a time.
    """

    name = "greedy"
    auto_priority = 100
    #: Greedy is exact only under C1–C3 (Observation 4); C4 only affects speed.
    requires = "C3"

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        pos_desc = np.ascontiguousarray(pos_scores[descending_order(pos_scores)])
        # The baseline as the papers (and the speed targets) define it: NumPy's
        # sort first, not rankopt's faster descending_order; same permutation.
        neg_order = np.argsort(-neg_scores, kind="stable")
        neg_desc = np.ascontiguousarray(neg_scores[neg_order])
        form = loss.compiled_form(pos_desc.size, neg_desc.size)
        if form is None:
            ranks_sorted = _python_greedy(loss, pos_desc, neg_desc)
        else:
            code, table = kernel_arguments(loss, form, pos_desc.size, neg_desc.size)
            ranks_sorted = np.empty(neg_desc.size, dtype=np.intc)
            _greedy.greedy_ranks(pos_desc, neg_desc, int(code), table, ranks_sorted)
        ranks = np.empty(neg_desc.size, dtype=ranks_sorted.dtype)
        ranks[neg_order] = ranks_sorted
        return ranks


def _python_greedy(loss: RankLoss, pos_desc: np.ndarray, neg_desc: np.ndarray) -> np.ndarray:
    n_pos, n_neg = pos_desc.size, neg_desc.size
    scale = 2.0 / (n_pos * n_neg)
    pos64 = pos_desc.astype(np.float64)
    ranks = np.empty(n_neg, dtype=np.int64)
    start = 1
    for j in range(1, n_neg + 1):
        i = np.arange(start, n_pos + 1)
        steps = checked_delta_diff(loss, j, i, n_pos, n_neg) + scale * (pos64[start - 1 :] - neg_desc[j - 1])
        # Highest rank among the maximisers (Observation 4 needs this choice).
        start = start + steps_to_highest_maximiser(steps)
        ranks[j - 1] = start
    return ranks


@hookimpl
def rankopt_inference_methods():
    return [GreedyMethod]
