# cython: language_level=3
"""Observation 2 as one kernel call, for :func:`rankopt.inference.base.ranking_from_ranks`.

From the negatives' interleaving ranks alone: how many negatives sit at each
rank (which places the positives), each row's coefficient in Ψ — it depends
on the rank only — and the coefficients' product with the scores.
One kernel call instead of a dozen NumPy ones (range check, bincount, gather,
cumulative sum, scatter, dot): on 10⁶ negatives the passes are a sizeable part
of a fast method's whole call, on a few hundred the calls' overhead is.
The terms themselves, and the order Σ coef·score is summed in, are
``_terms.pxd``'s, shared with the fused qs kernel.
"""
from cython cimport floating
from libc.stdint cimport int64_t

from rankopt.inference._terms cimport count_ranks, output_terms, rank_t

import numpy as np


def observation_terms(const rank_t[::1] neg_ranks, const floating[::1] neg_scores,
                      const floating[::1] pos_scores, const Py_ssize_t[::1] pos_order,
                      double[::1] neg_coef, double[::1] pos_coef, int64_t[::1] pos_ranks,
                      int64_t[::1] positions):
    """Observation 2 in one pass each way: Ψ's coefficients, the positives' ranks and positions.

    Fills ``neg_coef`` (one per negative), ``pos_coef`` and ``pos_ranks``
    (one per positive, input order) and ``positions`` (increasing, for the
    loss's ``value_at_positions``); ``pos_order[k − 1]`` is the input index
    of the k-th highest positive.  Returns ``(Σ coef·score over all rows,
    bad)``: ``bad`` is the index of the first rank outside 1…|P|+1 (nothing
    is filled then) or −1.
    """
    cdef Py_ssize_t n_neg = neg_ranks.shape[0], n_pos = pos_scores.shape[0], k, bad = -1, bad_order = -1
    cdef double dot = 0.0
    if (neg_scores.shape[0] != n_neg or neg_coef.shape[0] != n_neg or pos_order.shape[0] != n_pos
            or pos_coef.shape[0] != n_pos or pos_ranks.shape[0] != n_pos or positions.shape[0] != n_pos):
        raise ValueError(
            f"expected ranks, scores and coefficients of the negatives ({n_neg}) and order, coefficients, "
            f"ranks and positions of the positives ({n_pos}) to match, got {neg_scores.shape[0]}, "
            f"{neg_coef.shape[0]}, {pos_order.shape[0]}, {pos_coef.shape[0]}, {pos_ranks.shape[0]} and "
            f"{positions.shape[0]} instead"
        )
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"expected at least one positive and one negative, got {n_pos} and {n_neg} instead")
    cdef int64_t[::1] counts = np.zeros(n_pos + 2, dtype=np.int64)
    with nogil:
        # The range check rides on the count: an out-of-range rank is counted in counts[0].
        count_ranks(&neg_ranks[0], n_neg, n_pos, &counts[0])
        if counts[0] > 0:
            for k in range(n_neg):
                if neg_ranks[k] < 1 or neg_ranks[k] > n_pos + 1:
                    bad = k
                    break
        else:
            bad_order = output_terms(&neg_ranks[0], &neg_scores[0], &counts[0], &pos_scores[0], &pos_order[0],
                                     n_pos, n_neg, &neg_coef[0], &pos_coef[0], &pos_ranks[0], &positions[0], &dot)
    if bad >= 0:
        return 0.0, bad
    if bad_order >= 0:
        raise ValueError(f"expected pos_order to be a permutation of 0..{n_pos - 1}, got {pos_order[bad_order]} instead")
    return dot, bad
