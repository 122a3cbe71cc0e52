"""The quicksort-flavoured method "qs": exact for QS-suitable losses, O(|N| log |P|).

Mohapatra et al. (2018) Algorithms 1–2: sort the positives, then find the
negatives' optimal interleaving ranks by recursive median selection, each
median's rank splitting the rank interval of the two halves (Observation 4).
For AP the median's rank is found with the unimodal search of §5
(Algorithm 3) — automatically, there is no separate method name.

Losses with a :meth:`~rankopt.losses.RankLoss.compiled_form` (AP, AUC and
every :class:`~rankopt.losses.PositionDiscountLoss`, through its discount
table) run entirely in the Cython kernel ``_qs.pyx``; any other rank loss
runs the same recursion in Python, calling its ``delta_diff`` once per
median with all candidate ranks at once.  The kernel changes strategy with
the input, never the result: below 2¹⁴ negatives it sorts them once and
sweeps (docs/maths.md, "Small inputs of qs"), from 2¹⁴ on its first level
splits the negatives by value.

The method refuses losses that fail :func:`rankopt.check_qs_suitable`.
"""

from __future__ import annotations

import numpy as np

from rankopt._validation import largest_magnitude, not_finite_error, score_sum_bound, score_sums_error
from rankopt.hookspecs import hookimpl
from rankopt.inference import _qs
from rankopt.inference.base import (
    InferenceMethod,
    RankingInference,
    descending_order,
    kernel_arguments,
    steps_to_highest_maximiser,
)
from rankopt.losses.base import KernelCode, RankLoss, checked_delta_diff

__all__ = ["QSMethod"]


class QSMethod(InferenceMethod):
    """Quicksort-flavoured loss-augmented inference (Mohapatra et al., Algorithms 1–3).

    Time O(|N| log |P| + |P| log |P|), extra memory O(|N| + |P|).  The
    result equals the greedy method's: both take, for every negative, the
    highest rank maximising its f_j.
    """

    name = "qs"
    auto_priority = 10
    #: C3 for exactness (Observation 4), C4 for the O(|N| log |P|) bound.
    requires = "C4"
    #: Use §5's unimodal search for AP's median ranks (False: the linear scan).
    ap_unimodal_search = True

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        pos_desc = np.ascontiguousarray(pos_scores[descending_order(pos_scores)])
        n_pos, n_neg = pos_desc.size, neg_scores.size
        form = loss.compiled_form(n_pos, n_neg)
        if form is None:
            return _python_qs(loss, pos_desc, neg_scores)
        code, table = kernel_arguments(loss, form, n_pos, n_neg)
        # C ints: ranks are at most |P| + 1, and at 10⁶ negatives the output's
        # size shows in the call's time (memory traffic and fresh pages).
        ranks = np.empty(n_neg, dtype=np.intc)
        _qs.qs_ranks(pos_desc, np.ascontiguousarray(neg_scores), int(code), table, self._unimodal(code), ranks)
        return ranks

    def solve(self, loss: RankLoss, pos_scores, neg_scores) -> RankingInference:
        """A compiled loss in one kernel call (``_qs.qs_inference``): check, ranks and Observation 2.

        The kernel checks the negatives in its first pass over them, so the
        call reads them as few times as it can; other losses take the
        default (a NumPy check, then :meth:`interleaving_ranks`).
        """
        n_pos, n_neg = pos_scores.size, neg_scores.size
        form = loss.compiled_form(n_pos, n_neg)
        if form is None:
            return super().solve(loss, pos_scores, neg_scores)
        code, table = kernel_arguments(loss, form, n_pos, n_neg)
        pos_order = descending_order(pos_scores)
        pos_desc = np.ascontiguousarray(pos_scores[pos_order])
        neg_ranks, neg_coef = np.empty(n_neg, dtype=np.int32), np.empty(n_neg)
        pos_coef, pos_ranks, positions = (
            np.empty(n_pos),
            np.empty(n_pos, dtype=np.int64),
            np.empty(n_pos, dtype=np.int64),
        )
        status, largest, dot = _qs.qs_inference(
            pos_scores, pos_order, pos_desc, neg_scores, int(code), table, self._unimodal(code),
            largest_magnitude(pos_scores), score_sum_bound(pos_scores.dtype),
            neg_ranks, neg_coef, pos_coef, pos_ranks, positions,
        )  # fmt: skip
        if status == _qs.SCAN_NOT_FINITE:
            raise not_finite_error("neg_scores")
        if status == _qs.SCAN_OVERFLOW:
            raise score_sums_error(largest, n_pos + n_neg, pos_scores.dtype)
        loss_value = float(loss.value_at_positions(positions, n_neg))
        return RankingInference(loss_value, pos_coef, neg_coef, neg_ranks, pos_ranks, dot + loss_value)

    def _unimodal(self, code: KernelCode) -> bool:
        return self.ap_unimodal_search and code is KernelCode.AP


def _python_qs(loss: RankLoss, pos_desc: np.ndarray, neg_scores: np.ndarray) -> np.ndarray:
    """Algorithm 2 with ``delta_diff`` evaluated by NumPy.

    The negatives are sorted up front rather than selected block by block:
    NumPy's sort in C is faster than medians found from Python, and the
    recursion — which calls the loss once per median whose rank interval
    still holds two or more ranks, O(min(|N|, |P| log |N|)) calls — is
    unchanged.
    """
    n_pos, n_neg = pos_desc.size, neg_scores.size
    order = descending_order(neg_scores)
    neg_desc = neg_scores[order].astype(np.float64)
    pos64 = pos_desc.astype(np.float64)
    scale = 2.0 / (n_pos * n_neg)
    ranks_sorted = np.empty(n_neg, dtype=np.int64)
    stack = [(0, n_neg, 1, n_pos + 1)]  # (block lo, block hi, lowest rank, highest rank)
    while stack:
        lo, hi, low_rank, high_rank = stack.pop()
        if low_rank == high_rank:
            ranks_sorted[lo:hi] = low_rank
            continue
        m = lo + (hi - lo) // 2
        i = np.arange(low_rank, high_rank)
        steps = checked_delta_diff(loss, m + 1, i, n_pos, n_neg) + scale * (
            pos64[low_rank - 1 : high_rank - 1] - neg_desc[m]
        )
        # Highest rank among the maximisers (Observation 4 needs this choice).
        opt = low_rank + steps_to_highest_maximiser(steps)
        ranks_sorted[m] = opt
        if m + 1 < hi:
            stack.append((m + 1, hi, opt, high_rank))
        if lo < m:
            stack.append((lo, m, low_rank, opt))
    ranks = np.empty(n_neg, dtype=np.int64)
    ranks[order] = ranks_sorted
    return ranks


@hookimpl
def rankopt_inference_methods():
    return [QSMethod]
