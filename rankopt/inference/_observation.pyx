# cython: language_level=3
"""Observation 2's pass over the negatives, for :func:`rankopt.inference.base.ranking_from_ranks`.

From the negatives' interleaving ranks alone: how many negatives sit at each
rank (which places the positives), each negative's coefficient in Ψ — it
depends on the rank only — and the coefficients' product with the scores.
One pass instead of NumPy's four (range check, bincount, gather, dot): on
10⁶ negatives this is a sizeable part of a fast method's whole call.
"""
from cython cimport floating
from libc.stdint cimport int32_t, int64_t

ctypedef fused rank_t:
    int32_t
    int64_t


def negative_terms(const rank_t[::1] ranks, const floating[::1] scores, const double[::1] coef_of_rank,
                   int64_t[::1] counts, double[::1] coef):
    """Fill ``counts[r]`` (negatives at rank r) and ``coef[k] = coef_of_rank[ranks[k]]``; return Σ coef·scores.

    ``coef_of_rank`` and ``counts`` have |P| + 2 entries (index 0 unused),
    ``ranks``, ``scores`` and ``coef`` one per negative; ``counts`` starts at
    zero.  Returns ``(dot, bad)`` where ``bad`` is the index of the first rank
    outside 1…|P|+1 (the pass stops there) or −1.
    """
    cdef Py_ssize_t n = ranks.shape[0], k, bad = -1
    cdef int64_t r, highest = coef_of_rank.shape[0] - 1
    cdef double c, dot = 0.0
    if scores.shape[0] != n or coef.shape[0] != n or counts.shape[0] != coef_of_rank.shape[0]:
        raise ValueError(
            f"expected ranks, scores and coef of one length and counts like coef_of_rank, got "
            f"{n}, {scores.shape[0]}, {coef.shape[0]} and {counts.shape[0]} vs {coef_of_rank.shape[0]} instead"
        )
    with nogil:
        for k in range(n):
            r = ranks[k]
            if r < 1 or r > highest:
                bad = k
                break
            counts[r] += 1
            c = coef_of_rank[r]
            coef[k] = c
            dot += c * scores[k]
    return dot, bad
