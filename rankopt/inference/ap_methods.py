"""Exact inference methods specific to the AP loss: "search" and "select".

Both come from Mohapatra et al., "Efficient optimization for average
precision SVM" (NIPS 2014, §3.1–3.2) and return exactly the ranks
of the greedy method; the kernels and the exactness argument are in
``rankopt/inference/_ap.pyx``.

* ``search`` — sort both sides, then find each negative's rank by a binary
  search on the sign of f_j's discrete derivative (Algorithm 2).
  O(|N| log |N| + |P| log |P| + |P|·min(|P|, |N|) + |N| log |P|), against the
  greedy's O(|P||N|) second stage.
* ``select`` — do not sort the negatives: find how many of the highest
  negatives can rank above some positive (Algorithm 3, with the correction
  listed in docs/maths.md); only those m are sorted and searched, the rest get
  rank |P|+1.  From 2¹² negatives up they are found by value, in two
  streaming passes over a bucket histogram (the bucket map of qs's level 0);
  below that by the paper's quickselect.  Expected O(|N| + |P| log |P| +
  m log m + |P|·min(|P|, m) + m log |P|): the method of choice late in
  training, when most negatives score below every positive.
"""

from __future__ import annotations

import numpy as np

import rankopt.inference._ap as _ap
from rankopt.hookspecs import hookimpl
from rankopt.inference.base import InferenceMethod, descending_order
from rankopt.losses.base import KernelCode, RankLoss

__all__ = ["SearchMethod", "SelectMethod"]


def _has_ap_form(loss: RankLoss, n_pos: int, n_neg: int) -> bool:
    form = loss.compiled_form(n_pos, n_neg)
    return form is not None and form.code == KernelCode.AP


class _APOnlyMethod(InferenceMethod):
    """An inference method whose exactness rests on the closed form of Δ_AP.

    These kernels hard-code AP's δ_j and its unimodality (Prop. 5), which the
    generic loss contract (C1–C4) does not imply.  So they run only for a
    loss whose compiled form is AP's — :class:`~rankopt.losses.APLoss`
    itself (not its subclasses: a subclass that changes the maths runs on a
    general method), or a loss that declares itself equal to it by returning
    that form, a claim :func:`rankopt.check_qs_suitable` verifies against
    the loss's own ``delta_diff`` (C2) before these methods accept it.
    """

    requires = "C3"

    def unsupported_reason(self, loss: RankLoss) -> str | None:
        if not _has_ap_form(loss, 1, 1):
            return (
                f"it is exact only for the average-precision loss 'ap' (a loss whose compiled form "
                f"is KernelCode.AP), got {type(loss).__name__} {loss.name!r} instead"
            )
        return super().unsupported_reason(loss)

    def _check_form(self, loss: RankLoss, n_pos: int, n_neg: int) -> None:
        if not _has_ap_form(loss, n_pos, n_neg):
            raise RuntimeError(
                f"loss {loss.name!r} broke its contract: its compiled form is AP's at one size but "
                f"not at n_pos={n_pos}, n_neg={n_neg}, so method {self.name!r} cannot run"
            )

    @staticmethod
    def _sorted_positives(pos_scores: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(pos_scores[descending_order(pos_scores)])


class SearchMethod(_APOnlyMethod):
    """Greedy order with a binary search for each negative's rank (Algorithm 2)."""

    name = "search"
    auto_priority = 50

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        self._check_form(loss, pos_scores.size, neg_scores.size)
        pos_desc = self._sorted_positives(pos_scores)
        neg_order = descending_order(neg_scores)
        neg_desc = np.ascontiguousarray(neg_scores[neg_order], dtype=np.float64)
        ranks_sorted = np.empty(neg_desc.size, dtype=np.intc)
        _ap.search_ranks(pos_desc, neg_desc, ranks_sorted)
        ranks = np.empty(neg_desc.size, dtype=np.intc)
        ranks[neg_order] = ranks_sorted
        return ranks


class SelectMethod(_APOnlyMethod):
    """Selective ranking: sort and search only the negatives that can rank above a positive (Algorithm 3)."""

    name = "select"
    auto_priority = 40

    def interleaving_ranks(self, loss: RankLoss, pos_scores, neg_scores):
        self._check_form(loss, pos_scores.size, neg_scores.size)
        pos_desc = self._sorted_positives(pos_scores)
        ranks = np.empty(neg_scores.size, dtype=np.intc)
        _ap.select_ranks(pos_desc, np.ascontiguousarray(neg_scores), ranks)
        return ranks


@hookimpl
def rankopt_inference_methods():
    return [SearchMethod, SelectMethod]
