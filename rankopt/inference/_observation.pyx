# cython: language_level=3
"""Observation 2 as one kernel call, for :func:`rankopt.inference.base.ranking_from_ranks`.

From the negatives' interleaving ranks alone: how many negatives sit at each
rank (which places the positives), each row's coefficient in Ψ — it depends
on the rank only — and the coefficients' product with the scores.
One kernel call instead of a dozen NumPy ones (range check, bincount, gather,
cumulative sum, scatter, dot): on 10⁶ negatives the passes are a sizeable part
of a fast method's whole call, on a few hundred the calls' overhead is.
"""
from cython cimport floating
from libc.stdint cimport int32_t, int64_t

import numpy as np

ctypedef fused rank_t:
    int32_t
    int64_t


def observation_terms(const rank_t[::1] neg_ranks, const floating[::1] neg_scores,
                      const floating[::1] pos_scores, const Py_ssize_t[::1] pos_order,
                      double[::1] neg_coef, double[::1] pos_coef, int64_t[::1] pos_ranks,
                      int64_t[::1] positions):
    """Observation 2 in one pass each way: Ψ's coefficients, the positives' ranks and positions.

    A negative at interleaving rank r (1…|P|+1) gets coefficient
    (|P| + 2 − 2r)/(|P||N|); the k-th highest positive (``pos_order[k − 1]``)
    has every negative of rank ≤ k above it, so its rank among the negatives
    is that count + 1, its position in the ranking k + that count, and its
    coefficient (|N| + 2 − 2·rank)/(|P||N|).  Fills ``neg_coef`` (one per
    negative), ``pos_coef`` and ``pos_ranks`` (one per positive, input order)
    and ``positions`` (increasing, for the loss's ``value_at_positions``).
    Returns ``(Σ coef·score over all rows, bad)``: ``bad`` is the index of
    the first rank outside 1…|P|+1 (nothing is filled then) or −1.
    """
    cdef Py_ssize_t n_neg = neg_ranks.shape[0], n_pos = pos_scores.shape[0], k, bad = -1, bad_order = -1
    cdef int64_t r, above = 0
    cdef double scale, c, dot = 0.0
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
    cdef int64_t[::1] counts = np.zeros(n_pos + 2, dtype=np.int64)  # counts[r]: negatives at rank r
    scale = 1.0 / (<double>n_pos * <double>n_neg)
    with nogil:
        for k in range(n_neg):
            r = neg_ranks[k]
            if r < 1 or r > n_pos + 1:
                bad = k
                break
            counts[r] += 1
        if bad < 0:
            for k in range(n_neg):
                c = (n_pos + 2.0 - 2.0 * neg_ranks[k]) * scale
                neg_coef[k] = c
                dot += c * neg_scores[k]
            for k in range(n_pos):
                above += counts[k + 1]
                r = pos_order[k]
                if r < 0 or r >= n_pos:
                    bad_order = k
                    break
                pos_ranks[r] = above + 1
                positions[k] = k + 1 + above
                c = (n_neg + 2.0 - 2.0 * (above + 1)) * scale
                pos_coef[r] = c
                dot += c * pos_scores[r]
    if bad_order >= 0:
        raise ValueError(f"expected pos_order to be a permutation of 0..{n_pos - 1}, got {pos_order[bad_order]} instead")
    return dot, bad
