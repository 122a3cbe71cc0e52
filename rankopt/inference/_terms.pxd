# Observation 2 of Mohapatra et al. (2018), in one place for every kernel that writes a ranking's
# output: ``_observation.pyx`` (from any method's ranks) and ``_qs.pyx`` (fused with the ranks).
# Header only.
#
# A negative at interleaving rank r (1 … |P|+1) gets Ψ coefficient (|P| + 2 − 2r)/(|P||N|); the
# k-th highest positive has every negative of rank ≤ k above it, so its rank among the negatives
# is that count + 1, its position in the ranking k + that count, and its coefficient
# (|N| + 2 − 2·rank)/(|P||N|) (Lemma 6, corrected: docs/maths.md).
#
# Σ coef·score is one running sum over the negatives in index order, then the positives from the
# highest down: the order rankopt has always summed in, so that values stay the same to the bit
# (fits reproduce), and every method reports the same value for the same ranking.  Eight running
# sums would save an addition's latency per negative (about 0.5 ms at 10⁶ negatives, measured) at
# the price of the last bits of every value.

from cython cimport floating
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc


ctypedef fused rank_t:
    int32_t
    int64_t


ctypedef fused counted_t:
    uint8_t
    int64_t


cdef enum:
    COUNT_TABLES = 4  # see count_ranks


cdef inline double negative_coefficient(Py_ssize_t n_pos, double scale, int64_t rank) noexcept nogil:
    return (n_pos + 2.0 - 2.0 * rank) * scale


cdef inline void negative_terms(const rank_t* ranks, const floating* scores, Py_ssize_t n_neg,
                                const double* coef_of_rank, double* neg_coef, double* dot) noexcept nogil:
    """Coefficients of the n_neg negatives, their products with the scores added to ``dot`` in index order.

    ``coef_of_rank[r]`` is :func:`negative_coefficient` at r (ranks must lie in 1 … |P| + 1).
    """
    cdef Py_ssize_t k
    cdef double c, total = dot[0]
    for k in range(n_neg):
        c = coef_of_rank[ranks[k]]
        neg_coef[k] = c
        total += c * scores[k]
    dot[0] = total


cdef inline rank_t _counted(rank_t rank, rank_t last) noexcept nogil:
    """The rank, or 0 (a slot no rank uses) when it lies outside 1 … last: branch-free."""
    return rank if (rank >= 1) & (rank <= last) else 0


cdef inline int count_ranks(const rank_t* ranks, Py_ssize_t n_neg, Py_ssize_t n_pos, int64_t* counts) except -1 nogil:
    """Add how many of the n_neg negatives sit at each rank r to counts[r], r = 1 … |P| + 1.

    Ranks outside that range are counted in counts[0], so that a caller that
    has not checked them can (nothing is written out of bounds).  In
    COUNT_TABLES interleaved tables when the negatives outnumber the ranks
    enough: a run of negatives at one rank (most of them, late in training)
    would otherwise chain every increment on the previous one through memory.
    """
    cdef Py_ssize_t k = 0, t, r, stride = n_pos + 2
    cdef rank_t last = <rank_t>(n_pos + 1)
    cdef int64_t* tables
    if COUNT_TABLES * stride > n_neg:
        for k in range(n_neg):
            counts[_counted(ranks[k], last)] += 1
        return 0
    tables = <int64_t*>calloc(COUNT_TABLES * stride, sizeof(int64_t))
    if tables == NULL:
        with gil:
            raise MemoryError(f"cannot allocate the rank count tables for {n_pos} positives")
    while k + COUNT_TABLES <= n_neg:
        for t in range(COUNT_TABLES):
            tables[t * stride + _counted(ranks[k + t], last)] += 1
        k += COUNT_TABLES
    while k < n_neg:
        tables[_counted(ranks[k], last)] += 1
        k += 1
    for t in range(COUNT_TABLES):
        for r in range(stride):
            counts[r] += tables[t * stride + r]
    free(tables)
    return 0


cdef inline void count_values(const counted_t* values, Py_ssize_t n, Py_ssize_t n_values, int64_t* counts) noexcept nogil:
    """counts[v] = #{k : values[k] = v} for v = 0 … n_values − 1; every value must lie there (the caller's
    contract: nothing is checked).  ``counts`` has COUNT_TABLES · n_values entries: the values are counted
    into the tables in turn, as in :func:`count_ranks` (most of a query's documents share one value), and
    the tables summed into the first n_values."""
    cdef Py_ssize_t k = 0, t
    if n < COUNT_TABLES * n_values:  # a short query: one table, without the tables' zeroing and sum
        for t in range(n_values):
            counts[t] = 0
        for k in range(n):
            counts[values[k]] += 1
        return
    for t in range(COUNT_TABLES * n_values):
        counts[t] = 0
    while k + COUNT_TABLES <= n:
        for t in range(COUNT_TABLES):
            counts[t * n_values + values[k + t]] += 1
        k += COUNT_TABLES
    while k < n:
        counts[values[k]] += 1
        k += 1
    for t in range(n_values):
        for k in range(1, COUNT_TABLES):
            counts[t] += counts[k * n_values + t]


cdef inline Py_ssize_t positive_terms(const int64_t* counts, const floating* pos_scores, const Py_ssize_t* pos_order,
                                      Py_ssize_t n_pos, Py_ssize_t n_neg, double scale, double* pos_coef,
                                      int64_t* pos_ranks, int64_t* positions, double* dot) noexcept nogil:
    """The positives' ranks, positions and coefficients from the negatives' rank counts; adds to ``dot``.

    ``pos_scores`` in input order; ``pos_order[k]`` is the input index of the k-th highest.
    Returns −1, or the first k whose ``pos_order[k]`` is outside 0 … |P| − 1 (then the
    outputs are partly written).
    """
    cdef Py_ssize_t k, r
    cdef int64_t above = 0
    cdef double c
    for k in range(n_pos):
        above += counts[k + 1]
        r = pos_order[k]
        if r < 0 or r >= n_pos:
            return k
        pos_ranks[r] = above + 1
        positions[k] = k + 1 + above
        c = (n_neg + 2.0 - 2.0 * (above + 1)) * scale
        pos_coef[r] = c
        dot[0] += c * pos_scores[r]
    return -1


cdef inline Py_ssize_t output_terms(const rank_t* ranks, const floating* neg_scores, const int64_t* counts,
                                    const floating* pos_scores, const Py_ssize_t* pos_order, Py_ssize_t n_pos,
                                    Py_ssize_t n_neg, double* neg_coef, double* pos_coef, int64_t* pos_ranks,
                                    int64_t* positions, double* dot) except -2 nogil:
    """Observation 2 from checked ranks (1 … |P| + 1) and their counts: every output, and Σ coef·score in ``dot``.

    Returns −1, or the first bad k of ``pos_order`` (:func:`positive_terms`).
    """
    cdef Py_ssize_t r
    cdef double scale = 1.0 / (<double>n_pos * <double>n_neg)
    cdef double* coef_of_rank = <double*>malloc((n_pos + 2) * sizeof(double))
    if coef_of_rank == NULL:
        with gil:
            raise MemoryError(f"cannot allocate the coefficient table for {n_pos} positives")
    for r in range(n_pos + 2):
        coef_of_rank[r] = negative_coefficient(n_pos, scale, r)
    dot[0] = 0.0
    negative_terms(ranks, neg_scores, n_neg, coef_of_rank, neg_coef, dot)
    free(coef_of_rank)
    return positive_terms(counts, pos_scores, pos_order, n_pos, n_neg, scale, pos_coef, pos_ranks, positions, dot)
