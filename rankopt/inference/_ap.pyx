# cython: language_level=3
"""AP-specific exact loss-augmented inference: efficient search and selective ranking.

Mohapatra et al., "Efficient optimization for average precision SVM"
(``efficient-ap-svm``), §3.1 (Algorithm 2) and §3.2 (Algorithm 3, with the
correction of ``papers/NOTES.md``).  Both kernels return exactly the ranks of
the greedy kernel (``_greedy.pyx``), ties included.

Notation: positives sorted descending s⁺_1 ≥ … ≥ s⁺_P, s*_j the j-th highest
negative (ties by lower input index), c = 2/(|P||N|), and the discrete
derivative of Observation 3 with AP's δ_j,

    e_j(i) = f_j(i + 1) − f_j(i) = −i / (|P| (i+j−1)(i+j)) + c (s⁺_i − s*_j).

Why a sign search is exact.  With h(i) = i/((i+j−1)(i+j)),
h(i+1) − h(i) = (j−1−i)/((i+j−1)(i+j)(i+j+1)), so h is strictly increasing
for i < j − 1; s⁺ is non-increasing; hence e_j is *strictly* decreasing on
i = 1 … min(|P|, j − 1) and f_j is strictly concave on the ranks
1 … min(|P|, j − 1) + 1 (Prop. 5 of ``qs-rank-losses``, sharpened).  For
j > |P| that covers every rank 1 … |P|+1, and e_j has the sign pattern
+ … + [one exact 0] − … −: the highest maximiser of f_j is the first i with
e_j(i) < 0 (|P|+1 if none).  A plateau of f_j is at most one step long (an
exact zero of e_j) and "e ≥ 0 moves up" lands on its upper end, which is the
greedy's tie rule (``f >= best``).  For j ≤ |P|, f_j is not unimodal beyond
rank j and the paper's Algorithm 2 scans ranks j+1 … |P| linearly anyway;
here those negatives replay the greedy scan from opt_{j−1} (Observation 4),
which costs no more than that scan in the worst case and sums f in the
greedy's exact floating-point order, so equal local maxima (exact ties of f
on integer grids) are resolved the same way.  The replay stops at the rank
from which every step is surely negative (:func:`_greedy_rank`), found by
binary search, so a negative far below the positives costs O(log |P|).

Costs, after sorting: search O(|P|·min(|P|, |N|) + |N| log |P|) in the worst
case (the paper's O(|P|² + (|N| − |P|) log |P|)); select adds O(|N|)
expected for the selections and sorts only the m negatives that need an
explicit rank (see :func:`select_ranks`).

Floating point.  Every e_j(i) is computed with the greedy's expression, so
both kernels see identical values.  The binary search is trusted only when
its verdict cannot depend on rounding: the two derivatives at the boundary
must be farther from 0 than a bound on their rounding error, and the step
e_j(K) < 0 after the maximum must not be absorbed by the greedy's running
sum f (|e| ≤ ulp(f)/2).  Otherwise — in practice only for exact ties of
e_j(i) with 0 — that negative replays the greedy scan.  The proof that the
sign pattern of the computed e_j is then monotone is in the docstring of
:func:`_search_rank`.
"""
from cython cimport floating
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.float cimport DBL_EPSILON
from libc.math cimport fabs
from libcpp.algorithm cimport nth_element, sort
from libcpp.utility cimport pair

from rankopt.inference._loss cimport LOSS_AP, delta_diff

# A negative as (−score, input index): the lexicographic order of these pairs
# is rankopt's order "descending score, equal scores by increasing index".
ctypedef pair[double, Py_ssize_t] Candidate

# Rounding-error bound of e_j(i), relative to |loss term| + |score term|.
# The computation has ≤ 5 roundings, each ≤ DBL_EPSILON/2 relative; the
# factor 32 leaves the margin the proof of _search_rank uses.
cdef double NOISE = 32.0 * DBL_EPSILON


cdef inline double _step(const floating* pos_desc, double s_neg, Py_ssize_t j, Py_ssize_t i,
                         Py_ssize_t n_pos, Py_ssize_t n_neg, double scale,
                         double* slack) noexcept nogil:
    """e_j(i), rounded exactly like the greedy kernel's step; ``slack`` gets its error bound."""
    cdef double loss_term = delta_diff(LOSS_AP, j, i, n_pos, n_neg, NULL)
    cdef double score_term = scale * (pos_desc[i - 1] - s_neg)
    slack[0] = NOISE * (fabs(loss_term) + fabs(score_term))
    return loss_term + score_term


cdef inline bint _surely_falling(const floating* pos_desc, double s_neg, Py_ssize_t j,
                                 Py_ssize_t i, double loss_last, Py_ssize_t n_pos,
                                 Py_ssize_t n_neg, double scale) noexcept nogil:
    """Whether every computed step e_j(t), t = i … |P|, is surely negative.

    For t ≥ i, s⁺_t ≤ s⁺_i and, h being unimodal in t, h(t) ≥ min(h(i), h(|P|)),
    so e_j(t) ≤ U_i = c(s⁺_i − s*_j) − min(h(i), h(|P|))/|P|.  A computed
    e_j(t) ≥ 0 with exact e_j(t) ≤ U_i < 0 needs |e_j(t)| ≤ 8ε·h(t)/|P| ≤ 4ε/|P|;
    the test also covers the rounding of U_i itself.  U_i is non-increasing
    in i.  (``loss_last`` = −h(|P|)/|P|.)
    """
    cdef double loss_term = delta_diff(LOSS_AP, j, i, n_pos, n_neg, NULL)
    cdef double score_term = scale * (pos_desc[i - 1] - s_neg)
    if loss_last > loss_term:
        loss_term = loss_last
    return score_term + loss_term + NOISE * (fabs(score_term) + fabs(loss_term) + 1.0 / n_pos) < 0.0


cdef Py_ssize_t _greedy_rank(const floating* pos_desc, double s_neg, Py_ssize_t j,
                             Py_ssize_t start, Py_ssize_t n_pos, Py_ssize_t n_neg,
                             double scale) noexcept nogil:
    """Highest maximiser of f_j on start … |P|+1, exactly as the greedy kernel's scan finds it.

    The scan adds the steps in the greedy's order, so it rounds identically;
    it only stops early, at the first rank ``tail`` (found by binary search)
    from which every step is surely negative, once f has fallen below its
    best: from there f cannot climb back (rounding is monotone).  Cost
    O(log |P| + tail − start) — O(log |P|) when the negative scores far below
    the positives it could still pass, the common case late in training.
    """
    cdef double loss_last = delta_diff(LOSS_AP, j, n_pos, n_pos, n_neg, NULL)
    cdef Py_ssize_t lo = start, hi = n_pos + 1, mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _surely_falling(pos_desc, s_neg, j, mid, loss_last, n_pos, n_neg, scale):
            hi = mid
        else:
            lo = mid + 1
    cdef Py_ssize_t tail = lo
    cdef double f = 0.0, best = 0.0
    cdef Py_ssize_t i, best_rank = start
    for i in range(start, n_pos + 1):
        if i >= tail and f < best:
            break
        f += delta_diff(LOSS_AP, j, i, n_pos, n_neg, NULL) + scale * (pos_desc[i - 1] - s_neg)
        if f >= best:
            best = f
            best_rank = i + 1
    return best_rank


cdef Py_ssize_t _search_rank(const floating* pos_desc, double s_neg, Py_ssize_t j,
                             Py_ssize_t start, Py_ssize_t n_pos, Py_ssize_t n_neg,
                             double scale) noexcept nogil:
    """opt_j for j > |P|, given opt_{j−1} = start: O(log(|P| − start)) unless a tie needs a replay.

    K = first i in start … |P| with e_j(i) < 0 (|P|+1 if none), by binary
    search.  K is the greedy's answer when, with ε(i) the rounding bound of
    e_j(i) (``slack``):

    * e_j(K−1) > ε(K−1) (or K = start) and e_j(K) < −ε(K) (or K = |P|+1).
      Then every computed e_j(i) on start … |P| has its exact sign, so the
      computed signs are monotone and the search was sound: for i < K−1,
      exact e_j(i) > e_j(K−1) > 32ε·h(K−1)/|P| while a wrong sign needs
      |e_j(i)| ≲ 10ε·h(i)/|P| ≤ 10ε·h(K−1)/|P| (h increasing); for i > K,
      exact e_j(i) ≤ e_j(K) − (h(i) − h(K))/|P|, too far below 0 either way.
    * fl(f(K) + e_j(K)) < f(K) in the greedy's running sum, i.e. the first
      negative step is not absorbed.  The greedy's f(K) is a sum of K − start
      non-negative steps, none above e_j(start) + ε(start) + ε(K), and
      absorption needs |e| ≤ ulp(f)/2 ≤ ε·f/2; the test below has a factor 4
      of margin.
    """
    cdef Py_ssize_t lo = start, hi = n_pos + 1, mid
    cdef double e, e_next, e_start, slack, slack_next, slack_start
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _step(pos_desc, s_neg, j, mid, n_pos, n_neg, scale, &slack) >= 0.0:
            lo = mid + 1
        else:
            hi = mid
    if lo > start:
        e = _step(pos_desc, s_neg, j, lo - 1, n_pos, n_neg, scale, &slack)
        if e <= slack:
            return _greedy_rank(pos_desc, s_neg, j, start, n_pos, n_neg, scale)
    if lo <= n_pos:
        e_next = _step(pos_desc, s_neg, j, lo, n_pos, n_neg, scale, &slack_next)
        if -e_next <= slack_next:
            return _greedy_rank(pos_desc, s_neg, j, start, n_pos, n_neg, scale)
        if lo > start:
            e_start = _step(pos_desc, s_neg, j, start, n_pos, n_neg, scale, &slack_start)
            if -e_next <= 2.0 * DBL_EPSILON * (lo - start) * (e_start + slack_start + slack_next):
                return _greedy_rank(pos_desc, s_neg, j, start, n_pos, n_neg, scale)
    return lo


cdef void _search_sorted(const floating* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                         Py_ssize_t n_explicit, Py_ssize_t n_neg, int* ranks) noexcept nogil:
    """Ranks of the n_explicit highest negatives (``neg_desc``, descending) among n_neg in all."""
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)  # the greedy kernel's expression
    cdef Py_ssize_t j, k, start = 1
    for j in range(1, n_explicit + 1):
        if start == n_pos + 1:  # Observation 4: every later negative has rank |P|+1 too
            for k in range(j - 1, n_explicit):
                ranks[k] = <int>start
            return
        if j <= n_pos:
            start = _greedy_rank(pos_desc, neg_desc[j - 1], j, start, n_pos, n_neg, scale)
        else:
            start = _search_rank(pos_desc, neg_desc[j - 1], j, start, n_pos, n_neg, scale)
        ranks[j - 1] = <int>start


def search_ranks(const floating[::1] pos_desc, const double[::1] neg_desc, int[::1] ranks):
    """Fill ``ranks[j]`` with the optimal interleaving rank of the (j+1)-th highest negative.

    The caller (``rankopt.inference.ap_methods``) validates everything: both
    score arrays sorted descending (``neg_desc`` as float64, ties in
    rankopt's order), non-empty and finite; ``ranks`` of length |N|.

    Cost O(|P|·min(|P|, |N|) + (|N| − |P|) log |P|) after sorting.
    """
    with nogil:
        _search_sorted(&pos_desc[0], pos_desc.shape[0], &neg_desc[0], neg_desc.shape[0],
                       neg_desc.shape[0], &ranks[0])


cdef inline bint _surely_last(const floating* pos_desc, double s_neg, Py_ssize_t j,
                              Py_ssize_t n_pos, Py_ssize_t n_neg, double scale) noexcept nogil:
    """For j > |P|: whether the greedy surely gives the j-th negative rank |P|+1.

    Since e_j is decreasing on 1 … |P|, e_j(P) beyond its rounding bound makes
    every step non-negative whatever opt_{j−1} is.  The test is monotone in j
    (e_j(|P|) grows with j), so the negatives it holds for are a suffix.
    """
    cdef double slack
    return _step(pos_desc, s_neg, j, n_pos, n_pos, n_neg, scale, &slack) > slack


cdef Py_ssize_t _select_explicit(const floating* pos_desc, Py_ssize_t n_pos, Candidate* items,
                                 Py_ssize_t n_neg, double scale) noexcept nogil:
    """How many of the highest negatives need an explicit rank; partitions ``items`` there.

    Returns m: negatives m+1 … |N| surely have rank |P|+1 (m ≥ min(|P|, |N|)),
    and items[0:m] holds the m highest negatives, unordered.  Binary search
    on j ∈ |P|+1 … |N| with one ``nth_element`` per probe, each confined to
    the block of positions the previous probes have not fixed; the blocks
    halve, so the expected cost is O(|N|).  The first probe is j = |P|+1,
    which settles the common case "every negative below the positives' reach"
    with a single selection.
    """
    if n_neg <= n_pos:
        return n_neg
    # Invariant: items[0:left] rank above items[left:], items[right:] below
    # items[:right]; the smallest j whose test holds lies in lo … hi
    # (hi = |N|+1: none yet).
    cdef Py_ssize_t left = 0, right = n_neg, lo = n_pos + 1, hi = n_neg + 1, mid
    mid = lo
    while lo < hi:
        nth_element(items + left, items + (mid - 1), items + right)
        if _surely_last(pos_desc, -items[mid - 1].first, mid, n_pos, n_neg, scale):
            hi = mid
            right = mid - 1
        else:
            lo = mid + 1
            left = mid
        mid = lo + (hi - lo) // 2
    return lo - 1


def select_ranks(const floating[::1] pos_desc, const floating[::1] neg_scores, int[::1] ranks):
    """Fill ``ranks`` (input order) with the negatives' optimal interleaving ranks, sorting few.

    Algorithm 3 of ``efficient-ap-svm`` with NOTES.md's correction: the
    negatives that need an explicit rank are the m highest; they are found
    by :func:`_select_explicit`, sorted, and ranked by the search kernel; the
    other |N| − m get |P|+1.  Expected cost after sorting the positives:
    O(|N| + m log m + |P|·min(|P|, m) + m log |P|).

    The caller validates: ``pos_desc`` sorted descending, both arrays
    non-empty and finite, ``ranks`` of length |N|.
    """
    cdef Py_ssize_t n_pos = pos_desc.shape[0], n_neg = neg_scores.shape[0], k, m
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    cdef Candidate* items = <Candidate*>PyMem_Malloc(n_neg * sizeof(Candidate))
    cdef double* top = NULL
    cdef int* top_ranks = NULL
    if items == NULL:
        raise MemoryError()
    try:
        with nogil:
            for k in range(n_neg):
                items[k].first = -(<double>neg_scores[k])
                items[k].second = k
            m = _select_explicit(&pos_desc[0], n_pos, items, n_neg, scale)
        top = <double*>PyMem_Malloc(max(m, 1) * sizeof(double))
        top_ranks = <int*>PyMem_Malloc(max(m, 1) * sizeof(int))
        if top == NULL or top_ranks == NULL:
            raise MemoryError()
        with nogil:
            sort(items, items + m)
            for k in range(m):
                top[k] = -items[k].first
            _search_sorted(&pos_desc[0], n_pos, top, m, n_neg, top_ranks)
            for k in range(n_neg):
                ranks[k] = <int>(n_pos + 1)
            for k in range(m):
                ranks[items[k].second] = top_ranks[k]
    finally:
        PyMem_Free(items)
        PyMem_Free(top)
        PyMem_Free(top_ranks)
