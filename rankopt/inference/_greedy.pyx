# cython: language_level=3
"""Greedy loss-augmented inference (Yue et al. 2007), for any QS-suitable loss.

Negatives are visited in descending score order; the j-th takes the
interleaving rank maximising f_j (Observation 3 of Mohapatra et al. (2018)):

    f_j(i + 1) − f_j(i) = δ_j(i + 1) − δ_j(i) + 2 (s⁺_i − s*_j) / (|P||N|),

ties resolved towards the highest rank.  By Observation 4 the optimal ranks
are non-decreasing in j, so the search for negative j starts at the rank of
negative j − 1; the worst case stays O(|P||N|).
"""
from cython cimport floating

from rankopt.inference._loss cimport LOSS_AP, LOSS_AUC, LOSS_POSITION_DISCOUNT, delta_diff

KERNEL_CODES = {"AP": LOSS_AP, "AUC": LOSS_AUC, "POSITION_DISCOUNT": LOSS_POSITION_DISCOUNT}


cdef void _greedy_ranks(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg_desc,
                        Py_ssize_t n_neg, int code, const double* table, int* ranks) noexcept nogil:
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    cdef Py_ssize_t j, i, start = 1, best_rank
    cdef double above_best, s_neg
    for j in range(1, n_neg + 1):
        s_neg = neg_desc[j - 1]
        # f_j(i + 1) − f_j(best rank so far), summed from the best rank on: a running f_j would carry a
        # huge first step (a score span of 10¹⁷) and absorb the small steps after it, tying ranks
        # that differ (issue 38: greedy then disagreed with qs, which compares the steps themselves).
        above_best = 0.0
        best_rank = start
        for i in range(start, n_pos + 1):
            above_best += delta_diff(code, j, i, n_pos, n_neg, table) + scale * (pos_desc[i - 1] - s_neg)
            if above_best >= 0.0:
                above_best = 0.0
                best_rank = i + 1
        ranks[j - 1] = <int>best_rank
        start = best_rank


cdef void greedy_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                           Py_ssize_t n_neg, int code, const double* table, int* ranks) noexcept nogil:
    _greedy_ranks(pos_desc, n_pos, neg_desc, n_neg, code, table, ranks)


cdef void greedy_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const float* neg_desc,
                           Py_ssize_t n_neg, int code, const double* table, int* ranks) noexcept nogil:
    _greedy_ranks(pos_desc, n_pos, neg_desc, n_neg, code, table, ranks)


def greedy_ranks(const floating[::1] pos_desc, const floating[::1] neg_desc,
                 int code, const double[::1] table, int[::1] ranks):
    """Fill ``ranks[j]`` with the optimal interleaving rank of the j-th highest negative.

    The caller (``rankopt.inference.greedy``) validates everything: both
    score arrays sorted descending, non-empty and finite; ``table`` holding
    D(1…|P|+|N|)/Z for the position-discount code (any array otherwise);
    ``ranks`` of length |N|.  The batched kernels call the same code per
    query (``_greedy.pxd``).
    """
    with nogil:
        _greedy_ranks(&pos_desc[0], pos_desc.shape[0], &neg_desc[0], neg_desc.shape[0], code, &table[0],
                      &ranks[0])
