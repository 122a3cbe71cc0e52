# cython: language_level=3
"""AP-specific exact loss-augmented inference: efficient search and selective ranking.

Mohapatra et al., "Efficient optimization for average precision SVM"
(NIPS 2014), §3.1 (Algorithm 2) and §3.2 (Algorithm 3, with the correction
listed in docs/maths.md).  Both kernels return exactly the ranks of
the greedy kernel (``_greedy.pyx``), ties included.

Notation: positives sorted descending s⁺_1 ≥ … ≥ s⁺_P, s*_j the j-th highest
negative (ties by lower input index), c = 2/(|P||N|), and the discrete
derivative of Observation 3 with AP's δ_j,

    e_j(i) = f_j(i + 1) − f_j(i) = −i / (|P| (i+j−1)(i+j)) + c (s⁺_i − s*_j).

Why a sign search is exact.  With h(i) = i/((i+j−1)(i+j)),
h(i+1) − h(i) = (j−1−i)/((i+j−1)(i+j)(i+j+1)), so h is strictly increasing
for i < j − 1; s⁺ is non-increasing; hence e_j is *strictly* decreasing on
i = 1 … min(|P|, j − 1) and f_j is strictly concave on the ranks
1 … min(|P|, j − 1) + 1 (Prop. 5 of Mohapatra et al. (2018), sharpened).  For
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
from libc.float cimport DBL_EPSILON
from libc.limits cimport INT_MAX
from libc.math cimport INFINITY, fabs
from libc.stdlib cimport calloc, free, malloc
from libcpp.algorithm cimport nth_element, sort
from libcpp.utility cimport pair

from libc.stdint cimport int32_t

from rankopt.inference._buckets cimport (
    BUCKET_BLOCK,
    MAX_RANK_BUCKETS,
    NEGATIVES_PER_BUCKET,
    BucketMap,
    buckets_of_block,
    sampled_bucket_map,
    upper_edge,
)
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


cdef enum:
    # Inputs with fewer negatives select by nth_element (_select_explicit).
    SELECT_BY_VALUE_MIN = 1 << 12


cdef inline bint _surely_last_below(const floating* pos_desc, double s_edge, Py_ssize_t j_first,
                                    Py_ssize_t n_pos, Py_ssize_t n_neg, double scale) noexcept nogil:
    """Whether every negative at a position j ≥ j_first > |P| scoring ≤ s_edge passes _surely_last.

    The point (s_edge, j_first) need not be a negative.  Exact e_j(|P|) grows as the
    score falls (by the score term's change) and with j (h(|P|) = |P|/((|P|+j−1)(|P|+j))
    falls); its rounding bound ε = NOISE·(|loss term| + |score term|) grows by at most
    NOISE times the score term's change.  So a computed e > 3ε at the point gives exact
    e > 2ε there, exact e − 2ε no smaller at every such negative, and its computed
    e > ε: the test of _surely_last.
    """
    cdef double slack
    if j_first <= n_pos:
        return False
    return _step(pos_desc, s_edge, j_first, n_pos, n_pos, n_neg, scale, &slack) > 3.0 * slack


cdef Py_ssize_t _candidates_by_value(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg,
                                     Py_ssize_t n_neg, double scale, BucketMap bm,
                                     Candidate** out) except -1 nogil:
    """The negatives that may rank above some positive, found without selection; returns m.

    One pass counts the negatives per bucket of a monotone value map (the
    map of qs's level 0, ``_buckets.pxd``); bucket b then holds sorted
    positions above(b) + 1 … and scores ≤ upper_edge(b).  The first bucket
    whose bound (upper edge, first position) passes
    :func:`_surely_last_below` — a binary search, the bound being monotone in
    b — is where rank |P|+1 is certain for good, so the m negatives of the
    buckets above it are all that need an explicit rank.  They are copied to
    ``out[0][0:m]`` (unordered) by a second pass.  m ≥ min(|P|, |N|).
    """
    cdef Py_ssize_t nb = bm.size, k, k0, n_block, b, lo, hi, mid, m, t
    cdef double s, s_max = -INFINITY, edge
    cdef int32_t ids[BUCKET_BLOCK]
    cdef Py_ssize_t* below = <Py_ssize_t*>calloc(nb + 1, sizeof(Py_ssize_t))
    cdef Candidate* items = NULL
    if below == NULL:
        with gil:
            raise MemoryError(f"cannot allocate the bucket table for {nb} buckets")
    try:
        # below[b + 1] counts bucket b, then becomes the number of negatives in buckets < b + 1.
        k0 = 0
        while k0 < n_neg:
            n_block = buckets_of_block(neg + k0, n_neg - k0, bm, ids)
            for k in range(n_block):
                below[ids[k] + 1] += 1
                s = neg[k0 + k]
                s_max = s if s > s_max else s_max
            k0 += n_block
        for b in range(nb):
            below[b + 1] += below[b]
        # Smallest b in 1 … nb whose bound holds (nb: none; bucket 0's edge is s_max, and its
        # first position 1 ≤ |P| never passes).
        lo, hi = 1, nb
        while lo < hi:
            mid = lo + (hi - lo) // 2
            edge = upper_edge(mid, bm)
            if _surely_last_below(pos_desc, edge if edge < s_max else s_max, below[mid] + 1, n_pos, n_neg,
                                  scale):
                hi = mid
            else:
                lo = mid + 1
        m = below[lo]
        items = <Candidate*>malloc(max(m, 1) * sizeof(Candidate))
        if items == NULL:
            with gil:
                raise MemoryError(f"cannot allocate the work array for {m} negatives")
        t = 0
        k0 = 0
        while k0 < n_neg:
            n_block = buckets_of_block(neg + k0, n_neg - k0, bm, ids)
            for k in range(n_block):
                if ids[k] < lo:
                    items[t].first = -(<double>neg[k0 + k])
                    items[t].second = k0 + k
                    t += 1
            k0 += n_block
    finally:
        free(below)
    out[0] = items
    return m


cdef int _select_into(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg_scores,
                      Py_ssize_t n_neg, int* ranks, Py_ssize_t n_buckets) except -1 nogil:
    """:func:`select_ranks` on raw pointers, ``n_buckets`` already validated (−1, 0 or 3 … INT_MAX)."""
    cdef Py_ssize_t k, m
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    cdef Candidate* items = NULL
    cdef double* top = NULL
    cdef int* top_ranks = NULL
    cdef BucketMap bm
    if n_buckets == -1:
        n_buckets = 0
        if n_neg >= SELECT_BY_VALUE_MIN:
            n_buckets = min(<Py_ssize_t>MAX_RANK_BUCKETS, n_neg // NEGATIVES_PER_BUCKET)
    try:
        if n_buckets > 0 and n_neg > n_pos and sampled_bucket_map(neg_scores, n_neg, n_buckets, &bm):
            m = _candidates_by_value(pos_desc, n_pos, neg_scores, n_neg, scale, bm, &items)
        else:
            items = <Candidate*>malloc(n_neg * sizeof(Candidate))
            if items == NULL:
                with gil:
                    raise MemoryError(f"cannot allocate the work array for {n_neg} negatives")
            for k in range(n_neg):
                items[k].first = -(<double>neg_scores[k])
                items[k].second = k
            m = _select_explicit(pos_desc, n_pos, items, n_neg, scale)
        top = <double*>malloc(max(m, 1) * sizeof(double))
        top_ranks = <int*>malloc(max(m, 1) * sizeof(int))
        if top == NULL or top_ranks == NULL:
            with gil:
                raise MemoryError(f"cannot allocate the work arrays for {m} negatives")
        sort(items, items + m)
        for k in range(m):
            top[k] = -items[k].first
        _search_sorted(pos_desc, n_pos, top, m, n_neg, top_ranks)
        for k in range(n_neg):
            ranks[k] = <int>(n_pos + 1)
        for k in range(m):
            ranks[items[k].second] = top_ranks[k]
    finally:
        free(items)
        free(top)
        free(top_ranks)
    return 0


cdef int select_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_scores,
                          Py_ssize_t n_neg, int* ranks) except -1 nogil:
    return _select_into(pos_desc, n_pos, neg_scores, n_neg, ranks, -1)


cdef int select_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const float* neg_scores,
                          Py_ssize_t n_neg, int* ranks) except -1 nogil:
    return _select_into(pos_desc, n_pos, neg_scores, n_neg, ranks, -1)


cdef void search_sorted_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                            Py_ssize_t n_neg, int* ranks) noexcept nogil:
    _search_sorted(pos_desc, n_pos, neg_desc, n_neg, n_neg, ranks)


cdef void search_sorted_f32(const float* pos_desc, Py_ssize_t n_pos, const double* neg_desc,
                            Py_ssize_t n_neg, int* ranks) noexcept nogil:
    _search_sorted(pos_desc, n_pos, neg_desc, n_neg, n_neg, ranks)


def select_ranks(const floating[::1] pos_desc, const floating[::1] neg_scores, int[::1] ranks,
                 Py_ssize_t n_buckets=-1):
    """Fill ``ranks`` (input order) with the negatives' optimal interleaving ranks, sorting few.

    Algorithm 3 of Mohapatra et al. (2014) with the correction in docs/maths.md: the
    negatives that need an explicit rank are the m highest; they are found,
    sorted, and ranked by the search kernel; the other |N| − m get |P|+1.

    From 2¹² negatives up they are found by value
    (:func:`_candidates_by_value`: two streaming passes, no selection),
    below that by the paper's selection (:func:`_select_explicit`: a binary
    search with one ``nth_element`` per probe).  The first may keep a few
    negatives more than needed (its bounds are per bucket); those come out
    of the search with rank |P|+1 like the rest.  Expected cost after
    sorting the positives: O(|N| + m log m + |P|·min(|P|, m) + m log |P|).

    ``n_buckets`` chooses the strategy (the tests compare them): −1
    automatic, 0 selection, any other value (3 … INT_MAX) the number of
    buckets.  The caller validates: ``pos_desc`` sorted descending, both
    arrays non-empty and finite, ``ranks`` of length |N|.  The batched
    kernels call the same code per query (``_ap.pxd``).
    """
    if n_buckets != -1 and n_buckets != 0 and not 3 <= n_buckets <= INT_MAX:
        raise ValueError(f"expected n_buckets -1, 0 or in 3…{INT_MAX}, got {n_buckets} instead")
    with nogil:
        _select_into(&pos_desc[0], pos_desc.shape[0], &neg_scores[0], neg_scores.shape[0], &ranks[0], n_buckets)
