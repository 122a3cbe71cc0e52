# cython: language_level=3
"""Quicksort-flavoured loss-augmented inference (Mohapatra et al. (2018) Algorithms 1–2).

Only the positives are sorted.  The negatives are selected, not sorted:
``OptRanks`` takes the median of a block of negatives with
``std::nth_element``, finds that negative's optimal interleaving rank inside
the rank interval [ℓ⁺, r⁺] the block is known to map into, and recurses on
the two halves with the interval split at that rank (Observation 4).  Blocks
whose interval has shrunk to one rank are assigned without further work, so
the total cost is O(|N| log |P| + |P| log |N|) (Theorem 2).

The negatives are held as pairs (−score, input index): the lexicographic
order of such pairs is exactly rankopt's order "descending score, equal
scores by increasing index", so ``std::nth_element`` needs no custom
comparator, and after a split the pair at position m of a block is the
negative whose 1-based position j = m + 1 in the full descending order is
known.  MEDIAN and SELECT use ``nth_element`` (exact median) for small
blocks; large blocks are split at the median of a sample with one
branch-free partition pass, about twice as fast overall on 10⁶ negatives
(introselect's comparisons are unpredictable branches).  Any split point is
exact — only the balance, hence the speed, depends on the pivot.

On large inputs (2¹⁴ negatives and more) the first level of the recursion
is a many-way split by value instead of one median — see "level 0" below: it
settles most negatives in two streaming passes, and only the buckets whose
rank interval stays open go through the median recursion.  On small inputs
(fewer than 2¹⁴ negatives, every query of a usual learning-to-rank set) the
negatives are sorted once and swept instead — see "small inputs" below.
The selection recursion on its own remains as an exact strategy the tests
compare (``n_buckets=0``, ``exact_median``).

For AP the median's best rank is found with the unimodal search of §5
(Algorithm 3): f_j is concave on the ranks 1…min(|P|, j) + 1 — the AP term
−i/((i+j−1)(i+j)) of its discrete derivative is non-increasing in i for
i ≤ j and the score term is non-increasing since s⁺ is sorted — so a binary
search on the sign of the derivative finds the highest maximiser there; the
remaining ranks are scanned linearly and the two candidates compared.
"""
from cython cimport floating
from libc.math cimport INFINITY, fabs, isfinite, nextafter
from libc.stdint cimport INT32_MAX, int32_t, int64_t
from libc.stdlib cimport calloc, free, malloc
from libcpp.algorithm cimport nth_element
from libcpp.utility cimport pair

from rankopt.inference._buckets cimport (
    BUCKET_BLOCK,
    MAX_RANK_BUCKETS,
    NEGATIVES_PER_BUCKET,
    BucketMap,
    bucket_of,
    buckets_of_block,
    sampled_bucket_map,
    upper_edge,
)
from rankopt.inference._loss cimport LOSS_AP, LOSS_AUC, LOSS_POSITION_DISCOUNT, delta_diff
from rankopt.inference._scan cimport SCAN_OK, ScoreScan, scan_all, scan_block, scan_start, scan_verdict
from rankopt.inference._terms cimport count_ranks, output_terms
from rankopt.inference._sorting cimport SORT_BUCKETS_PER_SCORE, Keyed, descending_keyed

import numpy as np

cdef extern from *:
    """
    /* A hint only: a no-op where the compiler has no prefetch builtin. */
    #if defined(__GNUC__) || defined(__clang__)
    #define RANKOPT_PREFETCH_WRITE(p) __builtin_prefetch((p), 1)
    #else
    #define RANKOPT_PREFETCH_WRITE(p) ((void)0)
    #endif
    """
    void RANKOPT_PREFETCH_WRITE(const void* p) noexcept nogil

KERNEL_CODES = {"AP": LOSS_AP, "AUC": LOSS_AUC, "POSITION_DISCOUNT": LOSS_POSITION_DISCOUNT}
#: :func:`qs_inference`'s verdicts on the negatives' scores (``_scan.pxd``).
SCAN_NOT_FINITE = 1
SCAN_OVERFLOW = 2

# Of two sibling blocks the smaller is handled first (the larger is pushed
# first), so every frame left on the depth-first stack is at most half of the
# one below it: log2(2**63) + 1 frames suffice whatever the splits.
cdef enum:
    STACK_SIZE = 128
    # Pivots of blocks of at least SAMPLE_MIN_BLOCK negatives are the median
    # of SAMPLE_SIZE of them (an odd number); smaller blocks use nth_element.
    SAMPLE_SIZE = 127
    SMALL_SAMPLE_SIZE = 31
    SAMPLE_MIN_BLOCK = 256
    # Partitions _select_small tries before handing a block to nth_element.
    SMALL_SELECT_ROUNDS = 24


cdef struct Frame:
    Py_ssize_t lo, hi   # the block: sorted positions lo … hi − 1 (0-based, half-open)
    Py_ssize_t lp, rp   # its optimal ranks lie in lp … rp (inclusive)


cdef inline double _step(const floating* pos_desc, double s_neg, Py_ssize_t j, Py_ssize_t i,
                         int code, Py_ssize_t n_pos, Py_ssize_t n_neg, const double* table,
                         double scale) noexcept nogil:
    # f_j(i + 1) − f_j(i), Observation 3 in the corrected form of docs/maths.md.
    return delta_diff(code, j, i, n_pos, n_neg, table) + scale * (<double>pos_desc[i - 1] - s_neg)


#: Relative margins of the walk's division-free test of an AP step (``_step_nonnegative``): far above the
#: rounding of the products it compares (a few units in 2⁻⁵³), far below any gap that matters.
cdef double AP_TEST_ABOVE = 1.0 + 2.0 ** -50
cdef double AP_TEST_BELOW = 1.0 - 2.0 ** -50


cdef inline bint _step_nonnegative(const floating* pos_desc, double s_neg, Py_ssize_t j, Py_ssize_t i,
                                   int code, Py_ssize_t n_pos, Py_ssize_t n_neg, const double* table,
                                   double scale) noexcept nogil:
    """``_step(…) >= 0.0``, the same verdict, without AP's division where the answer is clear.

    AP's step is fl(−i / D + t) with D = |P|(i + j − 1)(i + j) and t the score term: its sign is that of
    t − fl(i / D) (a sum of two doubles rounds to 0 only when it is 0), so it is ≥ 0 when t · D exceeds i
    by a relative margin far above the rounding of fl(t · D), and < 0 when it falls short of i by as much
    (then i / D lies more than an ulp above t).  Only a step within the margins divides.
    """
    cdef double t, reach, bound
    if code != LOSS_AP:
        return _step(pos_desc, s_neg, j, i, code, n_pos, n_neg, table, scale) >= 0.0
    t = scale * (<double>pos_desc[i - 1] - s_neg)
    reach = t * (n_pos * (<double>(i + j - 1)) * (<double>(i + j)))
    bound = <double>i
    if reach >= bound * AP_TEST_ABOVE:
        return True
    if reach <= bound * AP_TEST_BELOW:
        return False
    return _step(pos_desc, s_neg, j, i, code, n_pos, n_neg, table, scale) >= 0.0


cdef Py_ssize_t _best_rank_linear(const floating* pos_desc, double s_neg, Py_ssize_t j,
                                  Py_ssize_t lp, Py_ssize_t rp, int code, Py_ssize_t n_pos,
                                  Py_ssize_t n_neg, const double* table, double scale) noexcept nogil:
    """Highest maximiser of f_j on lp … rp, by a scan (Algorithm 2, line 7).

    f_j is summed from the best rank so far, not from lp: a running f_j would carry a huge step (a score
    span of 10¹⁷) and absorb the small steps after it, tying ranks that differ (issue 38).
    """
    cdef double above_best = 0.0
    cdef Py_ssize_t i, best_rank = lp
    cdef bint better
    for i in range(lp, rp):
        above_best += _step(pos_desc, s_neg, j, i, code, n_pos, n_neg, table, scale)
        # Conditional moves, not a branch: whether a rank beats the best so far is the data's coin toss.
        better = above_best >= 0.0
        above_best = 0.0 if better else above_best
        best_rank = i + 1 if better else best_rank
    return best_rank


cdef Py_ssize_t _best_rank_unimodal(const floating* pos_desc, double s_neg, Py_ssize_t j,
                                    Py_ssize_t lp, Py_ssize_t rp, int code, Py_ssize_t n_pos,
                                    Py_ssize_t n_neg, const double* table, double scale,
                                    Py_ssize_t scan_end=-1) noexcept nogil:
    """Highest maximiser of f_j on lp … rp for a loss whose f_j is concave up to min(|P|, j) + 1.

    ``scan_end`` (−1: rp) bounds the scan past the concave part where the caller knows f_j to fall from
    there to rp (:func:`_falling_from`); the concave part's search and the comparison of its best with the
    scan's are those of the whole interval, so the rank is the same to the bit."""
    # Clamped to lp: an interval above the concave part is scanned from lp, not
    # from min(|P|, j) + 1 (which would rescan ranks outside it, O(|P|) per median).
    cdef Py_ssize_t concave_end = max(lp, min(rp, min(n_pos, j) + 1))
    cdef Py_ssize_t low = lp, high = concave_end, mid, i1
    # Steps are non-increasing on lp … concave_end − 1: find the first negative one.
    while low < high:
        mid = low + (high - low) // 2
        if _step(pos_desc, s_neg, j, mid, code, n_pos, n_neg, table, scale) >= 0.0:
            low = mid + 1
        else:
            high = mid
    i1 = low
    if concave_end >= rp:
        return i1
    return _past_the_concave_part(pos_desc, s_neg, j, i1, concave_end, rp if scan_end < 0 else scan_end, code,
                                  n_pos, n_neg, table, scale, False)


cdef inline Py_ssize_t _past_the_concave_part(const floating* pos_desc, double s_neg, Py_ssize_t j, Py_ssize_t i1,
                                              Py_ssize_t concave_end, Py_ssize_t rp, int code, Py_ssize_t n_pos,
                                              Py_ssize_t n_neg, const double* table, double scale,
                                              bint falls_after_i1) noexcept nogil:
    """Algorithm 3, lines 3–4: the ranks concave_end … rp by a scan, measured from concave_end (best_g = f_j(i2)
    − f_j(concave_end), the steps summed from the best rank so far as in _best_rank_linear), and the best of
    them compared with i1, the concave part's: f_j(i2) − f_j(i1) = Σ_{t=i1}^{concave_end−1} step(t) + best_g.
    ``falls_after_i1``: every computed step from i1 to concave_end is negative, so a scan that finds nothing
    past concave_end leaves i1 without the sum."""
    cdef Py_ssize_t i2 = concave_end, i, t
    cdef double above_best = 0.0, best_g = 0.0, drop = 0.0
    for i in range(concave_end, rp):
        above_best += _step(pos_desc, s_neg, j, i, code, n_pos, n_neg, table, scale)
        if above_best >= 0.0:
            best_g += above_best
            above_best = 0.0
            i2 = i + 1
    if falls_after_i1 and i2 == concave_end:
        return i1
    for t in range(i1, concave_end):
        drop += _step(pos_desc, s_neg, j, t, code, n_pos, n_neg, table, scale)
    return i2 if drop + best_g >= 0.0 else i1


cdef inline Py_ssize_t _best_rank(const floating* pos_desc, double s_neg, Py_ssize_t j,
                                  Py_ssize_t lp, Py_ssize_t rp, int code, Py_ssize_t n_pos,
                                  Py_ssize_t n_neg, const double* table, double scale,
                                  bint unimodal) noexcept nogil:
    if lp == rp:
        return lp
    if unimodal:
        return _best_rank_unimodal(pos_desc, s_neg, j, lp, rp, code, n_pos, n_neg, table, scale)
    return _best_rank_linear(pos_desc, s_neg, j, lp, rp, code, n_pos, n_neg, table, scale)


cdef inline Py_ssize_t _push_split(Frame* stack, Py_ssize_t top, Frame fr, Py_ssize_t m,
                                   Py_ssize_t opt) noexcept nogil:
    """Push the two sides of block ``fr`` split at m (rank opt); return the new stack top.

    The larger side is pushed first, so every frame on the stack is at most
    half of the one below it: log2(block size) + 1 frames suffice.
    """
    cdef Frame left = Frame(fr.lo, m, fr.lp, opt)
    cdef Frame right = Frame(m + 1, fr.hi, opt, fr.rp)
    if left.hi - left.lo < right.hi - right.lo:
        left, right = right, left
    if left.lo < left.hi:
        stack[top] = left
        top += 1
    if right.lo < right.hi:
        stack[top] = right
        top += 1
    return top


cdef inline bint _before(const pair[floating, Py_ssize_t]& a,
                         const pair[floating, Py_ssize_t]& b) noexcept nogil:
    # rankopt's order (pairs hold −score): bitwise, so that it compiles without branches.
    return (a.first < b.first) | ((a.first == b.first) & (a.second < b.second))


cdef inline void _select_small(pair[floating, Py_ssize_t]* items, Py_ssize_t lo, Py_ssize_t hi,
                               Py_ssize_t k, pair[floating, Py_ssize_t]* scratch) noexcept nogil:
    """``nth_element(items + lo, items + k, items + hi)`` for blocks under SAMPLE_MIN_BLOCK, branch-free.

    Quickselect with a median-of-three pivot: the same result as
    ``nth_element`` (the order is total, so position k gets the same
    negative, with the same ones on each side), faster on the blocks of a
    few dozen negatives small queries are made of, where introselect's
    comparisons mispredict.  Each pass writes every negative both to the
    next slot before the pivot (in place) and to the next slot of
    ``scratch`` (SAMPLE_MIN_BLOCK entries), advancing one of the two by the
    comparison: no branch, and no load depends on an earlier comparison.
    After SMALL_SELECT_ROUNDS passes (unlucky pivots) ``nth_element`` finishes.
    """
    cdef Py_ssize_t t, n_before, n_after, a, b, c, rounds = 0
    cdef pair[floating, Py_ssize_t] pivot, x
    cdef bint before
    while hi - lo > 2:
        if rounds == SMALL_SELECT_ROUNDS:
            nth_element(items + lo, items + k, items + hi)
            return
        rounds += 1
        a, b, c = lo, lo + (hi - lo) // 2, hi - 1
        # The median of items[a], items[b], items[c] is the pivot; hi − 1 gets its place.
        if _before(items[b], items[a]):
            a, b = b, a
        if _before(items[c], items[b]):
            b = c if _before(items[a], items[c]) else a
        pivot = items[b]
        items[b] = items[hi - 1]
        n_before = 0
        n_after = 0
        for t in range(lo, hi - 1):
            x = items[t]
            before = _before(x, pivot)
            items[lo + n_before] = x
            scratch[n_after] = x
            n_before += before
            n_after += 1 - before
        t = lo + n_before
        items[t] = pivot
        for c in range(n_after):
            items[t + 1 + c] = scratch[c]
        if t == k:
            return
        if k < t:
            hi = t
        else:
            lo = t + 1
    if hi - lo == 2 and _before(items[lo + 1], items[lo]):
        x = items[lo]
        items[lo] = items[lo + 1]
        items[lo + 1] = x


cdef Py_ssize_t _split(pair[floating, Py_ssize_t]* items, pair[floating, Py_ssize_t]* sample,
                       pair[floating, Py_ssize_t]* scratch, Py_ssize_t lo, Py_ssize_t hi,
                       bint exact) except -1 nogil:
    """MEDIAN and SELECT of Algorithm 2: put a negative at its sorted position m; return m.

    With ``exact`` the block's median, by ``std::nth_element``.  Otherwise
    the median of an evenly spaced sample is the pivot and one branch-free
    Lomuto pass places it — several times cheaper than introselect, whose
    comparisons are unpredictable branches; a lopsided result (a side under
    n/8) is repaired with ``nth_element`` on the larger side, so blocks
    shrink geometrically on any input.
    """
    cdef Py_ssize_t n = hi - lo, mid = lo + (hi - lo) // 2
    cdef Py_ssize_t n_sample, t, k, i
    cdef pair[floating, Py_ssize_t] pivot, x
    if n < SAMPLE_MIN_BLOCK:
        _select_small(items, lo, hi, mid, scratch)
        return mid
    if exact:
        nth_element(items + lo, items + mid, items + hi)
        return mid
    n_sample = SAMPLE_SIZE if n >= 16 * SAMPLE_SIZE else SMALL_SAMPLE_SIZE
    for t in range(n_sample):  # evenly spaced positions: distinct items
        sample[t] = items[lo + (t * n) // n_sample]
    nth_element(sample, sample + n_sample // 2, sample + n_sample)
    pivot = sample[n_sample // 2]
    for t in range(n_sample):  # park the pivot at the end of the block
        k = lo + (t * n) // n_sample
        if items[k].second == pivot.second:
            items[k] = items[hi - 1]
            items[hi - 1] = pivot
            break
    i = lo
    for k in range(lo, hi - 1):  # branch-free Lomuto partition
        x = items[k]
        items[k] = items[i]
        items[i] = x
        i += _before(x, pivot)
    items[hi - 1] = items[i]
    items[i] = pivot
    if 8 * min(i - lo, hi - 1 - i) >= n:
        return i
    if i < mid:
        nth_element(items + i + 1, items + mid, items + hi)
    else:
        nth_element(items + lo, items + mid, items + i)
    return mid


cdef int _opt_ranks(const floating* pos_desc, pair[floating, Py_ssize_t]* items, Frame block,
                    Py_ssize_t j_shift, Py_ssize_t n_pos, Py_ssize_t n_neg, int code,
                    const double* table, bint unimodal, int* ranks,
                    pair[floating, Py_ssize_t]* sample, bint exact_median) except -1 nogil:
    """Algorithm 2 on one block with an explicit stack; ``ranks`` is written in input order.

    ``items[block.lo:block.hi]`` are the negatives of sorted positions
    block.lo + j_shift … block.hi − 1 + j_shift (0-based) of the full order,
    in any order; their ranks lie in block.lp … block.rp.
    """
    cdef Frame stack[STACK_SIZE]
    cdef pair[floating, Py_ssize_t] scratch[SAMPLE_MIN_BLOCK]
    cdef Frame fr
    cdef Py_ssize_t top = 0, k, m, j, opt
    cdef double s_neg
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    stack[0] = block
    top = 1
    while top > 0:
        top -= 1
        fr = stack[top]
        if fr.lp == fr.rp:  # Algorithm 2, lines 2–3
            for k in range(fr.lo, fr.hi):
                ranks[items[k].second] = <int>fr.lp
            continue
        m = _split(items, sample, scratch, fr.lo, fr.hi, exact_median)
        s_neg = -(<double>items[m].first)
        j = m + 1 + j_shift  # the 1-based position of this negative in the full descending order
        opt = _best_rank(pos_desc, s_neg, j, fr.lp, fr.rp, code, n_pos, n_neg, table, scale, unimodal)
        ranks[items[m].second] = <int>opt
        top = _push_split(stack, top, fr, m, opt)
    return 0


# ---------------------------------------------------------------- level 0: distribution by value
#
# On large inputs the first level of the recursion splits the negatives into
# many blocks at once, by value rather than around one median: a monotone
# bucket function of the score — an affine map of the score, clamped — sends
# every negative to one of n_buckets buckets, so each bucket is a contiguous
# run of the full descending order whose positions follow from the bucket
# counts alone.  Observation 4 bounds the ranks of a bucket's negatives by the
# optimal ranks of two points (j, s): its first position with the largest
# score the bucket can hold, and its last position with the smallest.  The
# best rank of a point is non-decreasing in j at a fixed score (Observation 4,
# whose proof needs only j < k and s_j ≥ s_k, not that the two negatives
# exist) and non-increasing in s at a fixed j (f_j(i) gains c·(s − s')·(i − 1)
# when the score drops from s to s', increasing in i), so these bounds hold,
# and they form one chain ordered like negatives, solved by the same
# recursion.  Buckets whose bound collapses to one rank — nearly all when
# there are many more buckets than positives — are assigned in the same pass
# that reads the scores; only the rest are copied out and go through
# Algorithm 2, whose medians there are found in cache-sized blocks.  Exact for
# any bucket function; the affine one only makes it fast, and on skewed input
# (one bucket holding most negatives) the cost falls back to Algorithm 2's.

cdef enum:
    # Inputs with fewer negatives go straight to Algorithm 2.
    DISTRIBUTE_MIN = 1 << 14


cdef inline double _chain_score(Py_ssize_t point, const int32_t* nonempty, BucketMap bm,
                                double s_max, double s_min) noexcept nogil:
    """The score of chain point ``point``: 2t is bucket nonempty[t]'s first negative, 2t + 1 its last.

    The first scores at most the bucket's upper edge, the last more than the
    next bucket's upper edge; the end buckets, unbounded on one side, use
    their extreme score there (``s_max``: the highest score of bucket 0,
    ``s_min``: the lowest of the last bucket).  Computed only for the points
    the recursion evaluates, since finding an edge costs a few bucket
    evaluations.
    """
    cdef Py_ssize_t b = nonempty[point // 2]
    if point % 2 == 0:
        return s_max if b == 0 else upper_edge(b, bm)
    return s_min if b == bm.size - 1 else upper_edge(b + 1, bm)


cdef int _chain_ranks(const floating* pos_desc, const int32_t* chain_j, const int32_t* nonempty,
                      BucketMap bm, double s_max, double s_min, Py_ssize_t n_points, Py_ssize_t n_pos,
                      Py_ssize_t n_neg, int code, const double* table, bint unimodal,
                      int32_t* chain_rank) except -1 nogil:
    """Best ranks of the chain's points (j non-decreasing, s non-increasing along it)."""
    cdef Frame stack[STACK_SIZE]
    cdef Frame fr
    cdef Py_ssize_t top = 1, k, m, opt
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    stack[0] = Frame(0, n_points, 1, n_pos + 1)
    while top > 0:
        top -= 1
        fr = stack[top]
        if fr.lp == fr.rp:
            for k in range(fr.lo, fr.hi):
                chain_rank[k] = <int32_t>fr.lp
            continue
        m = fr.lo + (fr.hi - fr.lo) // 2
        opt = _best_rank(pos_desc, _chain_score(m, nonempty, bm, s_max, s_min), chain_j[m], fr.lp,
                         fr.rp, code, n_pos, n_neg, table, scale, unimodal)
        chain_rank[m] = <int32_t>opt
        top = _push_split(stack, top, fr, m, opt)
    return 0


cdef inline void _count_buckets(const floating* neg, Py_ssize_t n_neg, BucketMap bm, ScoreScan* scan,
                                int32_t* count, double* s_max, double* s_min) noexcept nogil:
    """Level 0's first pass: each bucket's count, and the extreme scores of the two end buckets (which have no
    edge on their open side); with ``scan``, the scores checked on the way."""
    cdef Py_ssize_t nb = bm.size, k, k0 = 0, n_block, b
    cdef int32_t ids[BUCKET_BLOCK]
    cdef double s
    if scan != NULL:
        scan_start(scan, neg)
    while k0 < n_neg:
        n_block = buckets_of_block(neg + k0, n_neg - k0, bm, ids)
        if scan != NULL:  # the block was just read: checking it costs no pass of its own
            scan_block(scan, neg + k0, n_block)
        for k in range(n_block):
            b = ids[k]
            count[b] += 1
            if <size_t>(b - 1) >= <size_t>(nb - 2):  # an end bucket: rare, and predicted so
                s = neg[k0 + k]
                if b == 0:
                    s_max[0] = s if s > s_max[0] else s_max[0]
                else:
                    s_min[0] = s if s < s_min[0] else s_min[0]
        k0 += n_block


cdef inline Py_ssize_t _settle_or_open(const int32_t* chain_j, const int32_t* chain_rank, const int32_t* nonempty,
                                       Py_ssize_t n_nonempty, int32_t* dest, Frame* open_blocks,
                                       Py_ssize_t* open_shift, Py_ssize_t* n_open, int64_t* counts) noexcept nogil:
    """Each non-empty bucket settled (its ranks collapsed: ``dest`` = −rank) or opened (a block of the work
    array for Algorithm 2); the slots of the work array handed out."""
    cdef Py_ssize_t t, b, first, k, d = 0
    for t in range(n_nonempty):
        b = nonempty[t]
        if chain_rank[2 * t] == chain_rank[2 * t + 1]:
            dest[b] = -chain_rank[2 * t]
            if counts != NULL:
                counts[chain_rank[2 * t]] += chain_j[2 * t + 1] - chain_j[2 * t] + 1
        else:
            first = chain_j[2 * t] - 1
            k = chain_j[2 * t + 1] - first  # the bucket's count
            dest[b] = <int32_t>d
            open_blocks[n_open[0]] = Frame(d, d + k, chain_rank[2 * t], chain_rank[2 * t + 1])
            open_shift[n_open[0]] = first - d
            n_open[0] += 1
            d += k
    return d


cdef inline void _place_negatives(const floating* neg, Py_ssize_t n_neg, BucketMap bm, int32_t* dest,
                                  pair[floating, Py_ssize_t]* items, int* ranks) noexcept nogil:
    """The second pass: a settled bucket's negatives get its rank, an open one's go to its block of ``items``."""
    cdef Py_ssize_t k, k0 = 0, n_block, b, t
    cdef int32_t ids[BUCKET_BLOCK]
    cdef pair[floating, Py_ssize_t] item
    while k0 < n_neg:
        n_block = buckets_of_block(neg + k0, n_neg - k0, bm, ids)
        for k in range(n_block):
            b = ids[k]
            t = dest[b]
            if t < 0:
                ranks[k0 + k] = -t
            else:
                item.first = -neg[k0 + k]
                item.second = k0 + k
                items[t] = item
                dest[b] = t + 1
        k0 += n_block


cdef inline int _solve_open_buckets(const floating* pos_desc, pair[floating, Py_ssize_t]* items,
                                    const Frame* open_blocks, const Py_ssize_t* open_shift, Py_ssize_t n_open,
                                    Py_ssize_t n_pos, Py_ssize_t n_neg, int code, const double* table,
                                    bint unimodal, int* ranks, pair[floating, Py_ssize_t]* sample,
                                    int64_t* counts) except -1 nogil:
    """Algorithm 2 inside each open bucket.  Each open negative's rank lands at a random place of ranks, long
    evicted from the cache: the lines of the next block are fetched while this one is solved (a few per cent
    of the call at 10⁶)."""
    cdef Py_ssize_t t, k
    if n_open > 0:
        for k in range(open_blocks[0].lo, open_blocks[0].hi):
            RANKOPT_PREFETCH_WRITE(&ranks[items[k].second])
    for t in range(n_open):
        if t + 1 < n_open:
            for k in range(open_blocks[t + 1].lo, open_blocks[t + 1].hi):
                RANKOPT_PREFETCH_WRITE(&ranks[items[k].second])
        _opt_ranks(pos_desc, items, open_blocks[t], open_shift[t], n_pos, n_neg, code, table,
                   unimodal, ranks, sample, False)
        if counts != NULL:
            for k in range(open_blocks[t].lo, open_blocks[t].hi):
                counts[ranks[items[k].second]] += 1
    return 0


cdef int _distributed_ranks(const floating* pos_desc, const floating* neg, Py_ssize_t n_pos,
                            Py_ssize_t n_neg, int code, const double* table, bint unimodal,
                            BucketMap bm, int* ranks,
                            pair[floating, Py_ssize_t]* sample, ScoreScan* scan, int64_t* counts) except -1 nogil:
    """Level 0 by distribution (see above), then Algorithm 2 inside the open buckets.

    Work tables are sized by what they hold (non-empty buckets, at most |P|
    open ones), not by the number of buckets: freshly mapped memory costs
    page faults on every call.  With ``scan`` the first pass also checks the
    scores (``_scan.pxd``), and a refusal returns before ``ranks`` is written.
    With ``counts`` the ranks' counts are added to it: a settled bucket's at
    once, from its size.
    """
    cdef Py_ssize_t nb = bm.size, b, t, n_points, n_nonempty = 0, n_open = 0, d, first
    # The extreme scores of the two end buckets, which have no edge on their open side.
    cdef double s_max = -INFINITY, s_min = INFINITY
    # count[b] during the first pass; then dest[b]: −(rank) for a bucket whose
    # ranks collapsed, else its next slot in items.  32-bit (the caller
    # ensures |N|, |P| < 2³¹ − 1): half the cache footprint of the table.
    cdef int32_t* count = <int32_t*>calloc(nb, sizeof(int32_t))
    cdef int32_t* dest = count
    # The chain's tables, 32-bit like the counts: a third of the memory
    # (about 1 MB at 2¹⁶ buckets) that each call would otherwise pull through the cache.
    cdef int32_t* chain_j = NULL
    cdef int32_t* nonempty = NULL
    cdef int32_t* chain_rank = NULL
    cdef Frame* open_blocks = NULL
    cdef Py_ssize_t* open_shift = NULL
    cdef pair[floating, Py_ssize_t]* items = NULL
    try:
        if count == NULL:
            with gil:
                raise MemoryError(f"cannot allocate the bucket table for {nb} buckets")
        _count_buckets(neg, n_neg, bm, scan, count, &s_max, &s_min)
        if scan != NULL and scan_verdict(scan) != SCAN_OK:
            return 0
        for b in range(nb):
            n_nonempty += count[b] > 0
        n_points = 2 * n_nonempty
        chain_j = <int32_t*>malloc(n_points * sizeof(int32_t))
        chain_rank = <int32_t*>malloc(n_points * sizeof(int32_t))
        nonempty = <int32_t*>malloc(n_nonempty * sizeof(int32_t))
        # Ranks along the chain never decrease, and an open bucket is a rise: at most |P| of them.
        open_blocks = <Frame*>malloc(min(n_nonempty, n_pos) * sizeof(Frame))
        open_shift = <Py_ssize_t*>malloc(min(n_nonempty, n_pos) * sizeof(Py_ssize_t))
        if chain_j == NULL or chain_rank == NULL or nonempty == NULL or open_blocks == NULL or open_shift == NULL:
            with gil:
                raise MemoryError(f"cannot allocate the chain tables for {n_nonempty} buckets")
        # Non-empty bucket t holds sorted positions chain_j[2t] − 1 … chain_j[2t + 1] − 1 (0-based).
        first = 0
        t = 0
        for b in range(nb):
            if count[b] > 0:
                nonempty[t] = <int32_t>b
                chain_j[2 * t] = <int32_t>(first + 1)
                chain_j[2 * t + 1] = <int32_t>(first + count[b])
                first += count[b]
                t += 1
        _chain_ranks(pos_desc, chain_j, nonempty, bm, s_max, s_min, n_points, n_pos, n_neg, code, table,
                     unimodal, chain_rank)
        d = _settle_or_open(chain_j, chain_rank, nonempty, n_nonempty, dest, open_blocks, open_shift, &n_open, counts)
        if d > 0:
            items = <pair[floating, Py_ssize_t]*>malloc(d * sizeof(pair[floating, Py_ssize_t]))
            if items == NULL:
                with gil:
                    raise MemoryError(f"cannot allocate the work array for {d} negatives")
        _place_negatives(neg, n_neg, bm, dest, items, ranks)
        _solve_open_buckets(pos_desc, items, open_blocks, open_shift, n_open, n_pos, n_neg, code, table, unimodal,
                            ranks, sample, counts)
    finally:
        free(count)
        free(chain_j)
        free(nonempty)
        free(chain_rank)
        free(open_blocks)
        free(open_shift)
        free(items)
    return 0


# ---------------------------------------------------------------- small inputs: sort, then sweep
#
# Below DISTRIBUTE_MIN negatives the selection recursion spends most of its
# time partitioning small blocks again and again, and queries of a few dozen
# to a few thousand documents — learning to rank's usual case — are all
# small.  There the negatives are sorted once, by distribution (an affine
# map of the score into 4 buckets per negative, then each bucket's few
# negatives by insertion, ``_sorting.pxd``), which costs about one partition pass, and the
# optimal ranks are read off in one sweep down the sorted order:
#
# * where f_j is concave on all ranks 1 … |P| + 1 — AUC, whose steps differ
#   only by the score term; AP from j = |P| on (§5); a position discount from
#   the j its bends and the positives' gaps give (:func:`_discount_walk_start`)
#   — the highest maximiser is where the steps turn negative, and by
#   Observation 4 it is searched from the previous negative's rank up:
#   O(|N| + |P|) steps in all;
# * the negatives before (and every negative of a loss without that
#   concavity) take, in order, the highest maximiser of f_j between the rank
#   of the negative before and that of the first walked one, which bound it
#   by Observation 4 (Algorithm 2's scan, ``_best_rank``, on that interval:
#   the greedy method's search, stopped at the bound).  Algorithm 2's
#   recursion over the block visits fewer ranks, but its stack and its
#   mispredicted scans cost more on the ~15 negatives of a query of 100;
#   past SCANNED_BLOCK_MAX steps the recursion takes the block.
#
# Same steps (``_step``), same tie rule, so the same ranks as the recursion.

cdef enum:
    # Work arrays of inputs up to this many negatives live on the stack.
    SWEEP_STACK = 256
    # Negatives × ranks up to which the block above the walk is scanned negative by negative (at most this
    # many steps); larger blocks go through Algorithm 2's recursion, O(|block| log) instead of O(|block| |P|).
    SCANNED_BLOCK_MAX = 4096

#: How far, relative to the size of its terms, a position-discount step must fall below the one before for
#: the walk to take f_j as concave there: far above the few ulps by which the computed steps can be off.
cdef double WALK_MARGIN = 1e-12


cdef void fill_discount_bends(const double* table, Py_ssize_t n, double* bends) noexcept nogil:
    """``bends[k]`` (k = 0 … n) = the largest T(k′+1) − 2T(k′) + T(k′−1) over max(k, 2) ≤ k′ ≤ n − 1, of the
    n-entry discount table T (1-based: T(k) = table[k − 1]); +inf where there is no such k′."""
    cdef Py_ssize_t k
    cdef double largest = -INFINITY
    for k in range(n, -1, -1):
        if 2 <= k <= n - 1:
            largest = max(largest, table[k] - 2.0 * table[k - 1] + table[k - 2])
        bends[k] = largest if (k <= n - 1 and n >= 3) else INFINITY


cdef inline Py_ssize_t _discount_walk_start(const floating* pos_desc, Py_ssize_t n_pos, Py_ssize_t n_neg,
                                            const double* bends, double bend_z, double scale,
                                            double margin) noexcept nogil:
    """The first j from which every f_j of a position discount is concave on ranks 1 … |P| + 1 (|N| + 1: none).

    f_j(i + 2) − 2 f_j(i + 1) + f_j(i) = D2(i + j) − scale · (p_i − p_{i+1}), with D2 the discount's second
    difference: concave from j on when every bend from i + j on (``bends``, of the table T · ``bend_z``) is at
    most the positives' gap there, with ``margin`` to spare.  Tied positives (no gap) leave no walk.  One
    pointer over j for all the gaps: O(|P| + j).
    """
    cdef Py_ssize_t i, j = 1
    cdef double need
    for i in range(1, n_pos):
        need = (scale * (<double>pos_desc[i - 1] - <double>pos_desc[i]) - margin) * bend_z
        while j <= n_neg and bends[i + j] > need:
            j += 1
    return j


cdef inline Py_ssize_t _falls_to(int code, const double* table, Py_ssize_t n_pos, Py_ssize_t n_neg,
                                 Py_ssize_t limit) noexcept nogil:
    """The first k (up to ``limit``) from which δ_j(i) = step's δ part may be ≥ 0 at i + j − 1 = k: for AP's and
    AUC's never (|P| + |N|); for a position discount the table's first rise or flat step (δ_j(i) = T(i + j) −
    T(i + j − 1) < 0 while i + j − 1 < it), its only δ that does not always fall (NDCG@k's flat tail)."""
    cdef Py_ssize_t falls_to = 1
    if code != LOSS_POSITION_DISCOUNT:
        return n_pos + n_neg
    while falls_to < limit and table[falls_to] < table[falls_to - 1]:
        falls_to += 1
    return falls_to


cdef inline Py_ssize_t _falling_from(const floating* pos_desc, double s_neg, Py_ssize_t lp,
                                     Py_ssize_t rp) noexcept nogil:
    """The first rank i in lp … rp whose positive is not above s_neg (rp when every one is), by bisection.

    Where δ falls (:func:`_falls_to`), every step from there on is a negative δ plus a score term ≤ 0, so
    negative, and every sum of them too: a scan for the highest maximiser finds nothing past it, and may stop
    there with the same rank, to the bit.  That takes the |P| per median out of Algorithm 2's scans when most
    documents are relevant (the scans past AP's concave part, a discount's whole interval)."""
    cdef Py_ssize_t low = lp, high = rp, mid
    while low < high:
        mid = low + (high - low) // 2
        if <double>pos_desc[mid - 1] > s_neg:
            low = mid + 1
        else:
            high = mid
    return low


cdef void _sorted_block_ranks(const floating* pos_desc, const Keyed* items, double tied_score, Py_ssize_t n,
                              Py_ssize_t lp, Py_ssize_t rp, Py_ssize_t n_pos, Py_ssize_t n_neg, int code,
                              const double* table, bint unimodal, int* ranks, int64_t* counts) noexcept nogil:
    """Algorithm 2 on the n highest negatives, their ranks known to lie in lp … rp.

    ``items`` holds them in order; NULL means that every negative scores
    ``tied_score``, so that the order is the input order.  With ``counts``
    the ranks' counts are added to it (a block settled at one rank at once).
    """
    cdef Frame stack[STACK_SIZE]
    cdef Frame fr
    cdef Py_ssize_t top = 1, k, m, opt, scan_end
    cdef Py_ssize_t falls_to = _falls_to(code, table, n_pos, n_neg, min(n_pos + n_neg, rp + n))
    cdef double s, scale = 2.0 / ((<double>n_pos) * n_neg)
    stack[0] = Frame(0, n, lp, rp)
    while top > 0:
        top -= 1
        fr = stack[top]
        if fr.lp == fr.rp:
            for k in range(fr.lo, fr.hi):
                ranks[items[k].idx if items != NULL else k] = <int>fr.lp
            if counts != NULL:
                counts[fr.lp] += fr.hi - fr.lo
            continue
        m = fr.lo + (fr.hi - fr.lo) // 2
        s = -items[m].key if items != NULL else tied_score
        scan_end = fr.rp
        if fr.rp + m - 1 < falls_to:  # f_m+1 falls from the first positive not above the negative on
            scan_end = _falling_from(pos_desc, s, fr.lp, fr.rp)
        if unimodal:
            opt = _best_rank_unimodal(pos_desc, s, m + 1, fr.lp, fr.rp, code, n_pos, n_neg, table, scale, scan_end)
        else:
            opt = _best_rank_linear(pos_desc, s, m + 1, fr.lp, scan_end, code, n_pos, n_neg, table, scale)
        ranks[items[m].idx if items != NULL else m] = <int>opt
        if counts != NULL:
            counts[opt] += 1
        top = _push_split(stack, top, fr, m, opt)


cdef inline Py_ssize_t _walk_start(int code, bint unimodal, Py_ssize_t n_pos, Py_ssize_t n_neg) noexcept nogil:
    """The first position j from which f_j is concave on all ranks 1 … |P| + 1 (|N| + 1: none)."""
    if code == LOSS_AUC:
        return 1
    if unimodal and n_pos <= n_neg:
        return n_pos
    return n_neg + 1


cdef void _swept_ranks(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg, Py_ssize_t n_neg,
                       int code, const double* table, bint unimodal, const double* bends, double bend_z,
                       int* ranks, Keyed* items, int32_t* ids, int32_t* ends) noexcept nogil:
    """The small-input strategy (see above), on work arrays sized for n_neg; ``bends`` (NULL: none) as for
    :func:`_discount_walk_start`."""
    descending_keyed(neg, n_neg, items, ids, ends)
    _sweep_sorted(pos_desc, n_pos, items, n_neg, code, table, unimodal, bends, bend_z, ranks)


cdef void _sweep_sorted(const floating* pos_desc, Py_ssize_t n_pos, const Keyed* items, Py_ssize_t n_neg, int code,
                        const double* table, bint unimodal, const double* bends, double bend_z,
                        int* ranks) noexcept nogil:
    """The sweep on negatives in rankopt's order already (``items``: their keys −score and where each rank
    goes): the walk where f_j is concave, the block above it scanned or split by Algorithm 2."""
    cdef Py_ssize_t j, j_walk = _walk_start(code, unimodal, n_pos, n_neg), i = 1, p1 = n_pos + 1, rp, n_block
    cdef double s, scale = 2.0 / ((<double>n_pos) * n_neg), largest
    if code == LOSS_POSITION_DISCOUNT and bends != NULL:
        largest = max(max(fabs(<double>pos_desc[0]), fabs(<double>pos_desc[n_pos - 1])),
                      max(fabs(items[0].key), fabs(items[n_neg - 1].key)))
        j_walk = _discount_walk_start(
            pos_desc, n_pos, n_neg, bends, bend_z, scale,
            WALK_MARGIN * (fabs(table[0]) + fabs(table[n_pos + n_neg - 1]) + scale * largest))
    if code == LOSS_AUC:
        _auc_walk(pos_desc, n_pos, items, n_neg, scale, ranks)
        return
    for j in range(j_walk, n_neg + 1):
        s = -items[j - 1].key
        while i < p1 and _step_nonnegative(pos_desc, s, j, i, code, n_pos, n_neg, table, scale):
            i += 1
        ranks[items[j - 1].idx] = <int>i
    if j_walk > 1:
        n_block = min(j_walk - 1, n_neg)
        rp = ranks[items[j_walk - 1].idx] if j_walk <= n_neg else p1
        if n_block * (rp - 1) > SCANNED_BLOCK_MAX:  # O(|block| log) by the recursion
            _sorted_block_ranks(pos_desc, items, 0.0, n_block, 1, rp, n_pos, n_neg, code, table, unimodal,
                                ranks, NULL)
            return
        _scanned_block_ranks(pos_desc, items, n_block, rp, n_pos, n_neg, code, table, unimodal, ranks)


cdef inline void _auc_walk(const floating* pos_desc, Py_ssize_t n_pos, const Keyed* items, Py_ssize_t n_neg,
                           double scale, int* ranks) noexcept nogil:
    """The walk for AUC, whose f_j is concave everywhere (the walk starts at j = 1): the same steps as
    ``_step``'s, δ = −1/(|P||N|) (``_loss.pxd``) computed once, not divided again at every step."""
    cdef Py_ssize_t j, i = 1, p1 = n_pos + 1
    cdef double s, delta = -1.0 / ((<double>n_pos) * n_neg)
    for j in range(1, n_neg + 1):
        s = -items[j - 1].key
        while i < p1 and delta + scale * (<double>pos_desc[i - 1] - s) >= 0.0:
            i += 1
        ranks[items[j - 1].idx] = <int>i


cdef inline void _scanned_block_ranks(const floating* pos_desc, const Keyed* items, Py_ssize_t n_block, Py_ssize_t rp,
                                      Py_ssize_t n_pos, Py_ssize_t n_neg, int code, const double* table,
                                      bint unimodal, int* ranks) noexcept nogil:
    """The sweep's block above the walk, negative by negative: each one's best rank from the one before's up.

    The scan stops at the first positive not above the negative where every δ-difference from there to ``rp``
    is negative (AP's and AUC's always; a position discount's while its table strictly falls): there a step is
    a negative δ-difference plus a score term ≤ 0, so negative, and f_j only falls — the highest maximiser found
    is the same, to the bit, as a scan to ``rp``.  That bound takes the |P|·|N| term out of a query with many
    relevant documents, whose scan ran to ``rp`` for every negative."""
    cdef Py_ssize_t j, i = 1, above = 0, stop
    cdef Py_ssize_t falls_to = _falls_to(code, table, n_pos, n_neg, min(n_pos + n_neg, rp + n_block))
    cdef double s, scale = 2.0 / ((<double>n_pos) * n_neg)
    # AP's steps fall monotonically on the concave part while their denominators are exact integers.
    cdef bint walked = (code == LOSS_AP and unimodal
                        and (<double>n_pos) * (<double>(n_pos + n_neg)) * (<double>(n_pos + n_neg)) < 2.0 ** 52)
    for j in range(1, n_block + 1):
        s = -items[j - 1].key
        while above < n_pos and <double>pos_desc[above] > s:
            above += 1
        stop = min(rp, above + 1) if rp + j - 2 < falls_to else rp
        if walked:
            i = _best_rank_walked(pos_desc, s, j, i, stop, n_pos, n_neg, scale)
        else:
            i = _best_rank(pos_desc, s, j, i, stop, code, n_pos, n_neg, table, scale, unimodal)
        ranks[items[j - 1].idx] = <int>i


cdef inline Py_ssize_t _best_rank_walked(const floating* pos_desc, double s_neg, Py_ssize_t j, Py_ssize_t lp,
                                         Py_ssize_t rp, Py_ssize_t n_pos, Py_ssize_t n_neg,
                                         double scale) noexcept nogil:
    """:func:`_best_rank_unimodal` for AP where its steps are computed exactly enough to fall monotonically: the
    first negative step on the concave part walked to from ``lp`` (the ranks rise with j, so the walks of a
    block add up to O(|P|)), where the search bisected at a division and a mispredicted branch per halving.

    The same rank to the bit: |P|(i + j − 1)(i + j) < 2⁵³ is computed exactly (the caller's check), so the
    computed step, a correctly rounded sum of two correctly rounded non-increasing terms, is non-increasing on
    the concave part; the first negative one is the search's, and every step after it is negative, so when
    the scan past the concave part finds nothing, f_j(concave end) < f_j(i1) needs no sum."""
    cdef Py_ssize_t concave_end = max(lp, min(rp, min(n_pos, j) + 1)), i1 = lp
    while i1 < concave_end and _step_nonnegative(pos_desc, s_neg, j, i1, LOSS_AP, n_pos, n_neg, NULL, scale):
        i1 += 1
    if concave_end >= rp:
        return i1
    return _past_the_concave_part(pos_desc, s_neg, j, i1, concave_end, rp, LOSS_AP, n_pos, n_neg, NULL, scale, True)


cdef int _tied_ranks(const floating* pos_desc, Py_ssize_t n_pos, double tied_score, Py_ssize_t n_neg, int code,
                     const double* table, bint unimodal, int* ranks, int64_t* counts) except -1 nogil:
    """:func:`_swept_ranks` when every negative scores ``tied_score``: the order is the input order.

    Nothing is sorted, and the walk stops as soon as its rank i can move no
    more.  For AP and AUC, whose δ-differences are negative doubles, once
    the score term of step i is ≤ 0 every later step at i is the sum of a
    negative and a non-positive double, which is negative, so every later
    negative stops at i too.  At w = 0, where a fit starts, that happens at
    the first walked negative.  With ``counts`` the ranks' counts are added
    to it (the final run's at once).
    """
    cdef Py_ssize_t j, k, j_walk = _walk_start(code, unimodal, n_pos, n_neg), i = 1, p1 = n_pos + 1
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    j = j_walk
    while j <= n_neg:
        while i < p1 and _step(pos_desc, tied_score, j, i, code, n_pos, n_neg, table, scale) >= 0.0:
            i += 1
        ranks[j - 1] = <int>i
        j += 1
        if i == p1 or (code != LOSS_POSITION_DISCOUNT and scale * (<double>pos_desc[i - 1] - tied_score) <= 0.0):
            break
    for k in range(j - 1, n_neg):
        ranks[k] = <int>i
    if j_walk > 1:
        _sorted_block_ranks(pos_desc, NULL, tied_score, min(j_walk - 1, n_neg), 1,
                            ranks[j_walk - 1] if j_walk <= n_neg else p1, n_pos, n_neg, code, table, unimodal,
                            ranks, counts)
    if counts != NULL and j_walk <= n_neg:  # the walked negatives, then the final run
        count_ranks(<int32_t*>ranks + j_walk - 1, j - j_walk, n_pos, counts)
        counts[i] += n_neg - (j - 1)
    return 0


cdef int _small_ranks(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg, Py_ssize_t n_neg,
                      int code, const double* table, bint unimodal, const double* bends, double bend_z,
                      int* ranks) except -1 nogil:
    """:func:`_swept_ranks` with its work arrays: on the stack up to SWEEP_STACK negatives."""
    cdef Keyed items_stack[SWEEP_STACK]
    cdef int32_t ids_stack[SWEEP_STACK]
    cdef int32_t ends_stack[SORT_BUCKETS_PER_SCORE * SWEEP_STACK + 1]
    cdef Keyed* items
    cdef int32_t* ids
    cdef int32_t* ends
    if n_neg <= SWEEP_STACK:
        _swept_ranks(pos_desc, n_pos, neg, n_neg, code, table, unimodal, bends, bend_z, ranks, items_stack,
                     ids_stack, ends_stack)
        return 0
    items = <Keyed*>malloc(n_neg * sizeof(Keyed))
    ids = <int32_t*>malloc(n_neg * sizeof(int32_t))
    ends = <int32_t*>malloc((SORT_BUCKETS_PER_SCORE * n_neg + 1) * sizeof(int32_t))
    try:
        if items == NULL or ids == NULL or ends == NULL:
            with gil:
                raise MemoryError(f"cannot allocate the work arrays for {n_neg} negatives")
        _swept_ranks(pos_desc, n_pos, neg, n_neg, code, table, unimodal, bends, bend_z, ranks, items, ids, ends)
    finally:
        free(items)
        free(ids)
        free(ends)
    return 0


cdef int _checked_or_tied(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg_scores, Py_ssize_t n_neg,
                          int code, const double* table, bint unimodal, int* ranks, ScoreScan* scan,
                          int64_t* counts) except -1 nogil:
    """Scan the negatives in one pass; 1 when that settles the call (refused, or all tied, ranked and counted)."""
    if scan_all(scan, neg_scores, n_neg) != SCAN_OK:
        return 1
    if scan.lo == scan.hi:
        _tied_ranks(pos_desc, n_pos, scan.lo, n_neg, code, table, unimodal, ranks, counts)
        return 1
    return 0


cdef inline bint _sweeps(Py_ssize_t n_neg, bint exact_median, Py_ssize_t n_buckets) noexcept nogil:
    """Whether :func:`_qs_into` sorts and sweeps the negatives (the automatic strategy below DISTRIBUTE_MIN
    negatives), the one strategy that reads a discount's bends."""
    return n_buckets == -1 and not exact_median and n_neg < DISTRIBUTE_MIN


cdef int _qs_into(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg_scores, Py_ssize_t n_neg,
                  int code, const double* table, bint unimodal, const double* bends, double bend_z, int* ranks,
                  bint exact_median, Py_ssize_t n_buckets, ScoreScan* scan, int64_t* counts) except -1 nogil:
    """:func:`qs_ranks` on raw pointers, ``n_buckets`` already validated (−1, 0 or 3 … 2³¹ − 1); ``bends``
    (NULL: none) the discount's bends for the sweep, of the table T · ``bend_z`` (:func:`fill_discount_bends`).

    With ``scan`` (not NULL) the negatives are checked by the first pass that
    reads them, and ``ranks`` is not written when ``scan.status`` refuses
    them; the automatic strategy then also ranks all-tied negatives without
    sorting or selecting (:func:`_tied_ranks`).  With ``counts`` (|P| + 2
    zeros) how many negatives sit at each rank is added to it.
    """
    cdef bint automatic = n_buckets == -1 and not exact_median
    if _sweeps(n_neg, exact_median, n_buckets):
        if scan != NULL and _checked_or_tied(pos_desc, n_pos, neg_scores, n_neg, code, table, unimodal, ranks,
                                             scan, counts):
            return 0
        _small_ranks(pos_desc, n_pos, neg_scores, n_neg, code, table, unimodal, bends, bend_z, ranks)
    else:
        if scan != NULL and not automatic:  # a strategy the tests name runs as named, after the check
            if scan_all(scan, neg_scores, n_neg) != SCAN_OK:
                return 0
            scan = NULL
        if _selected_ranks(pos_desc, n_pos, neg_scores, n_neg, code, table, unimodal, ranks, exact_median,
                           n_buckets, scan, counts):
            return 0
    if counts != NULL:
        count_ranks(<int32_t*>ranks, n_neg, n_pos, counts)
    return 0


cdef int _selected_ranks(const floating* pos_desc, Py_ssize_t n_pos, const floating* neg_scores,
                         Py_ssize_t n_neg, int code, const double* table, bint unimodal, int* ranks,
                         bint exact_median, Py_ssize_t n_buckets, ScoreScan* scan,
                         int64_t* counts) except -1 nogil:
    """Algorithm 2 by selection, after the distribution level when ``n_buckets`` asks for it.

    ``scan`` as in :func:`_qs_into`: the distribution level checks in its
    first pass; negatives it cannot spread are checked first (and, all tied,
    ranked by :func:`_tied_ranks`).  Returns 1 when the call is settled
    (refused, or ranked with ``counts`` filled), 0 when ``counts`` is left
    to the caller.
    """
    cdef Py_ssize_t k
    cdef BucketMap bm
    cdef pair[floating, Py_ssize_t] sample[SAMPLE_SIZE]
    cdef pair[floating, Py_ssize_t]* items
    if n_buckets == -1:
        n_buckets = 0
        if n_neg >= DISTRIBUTE_MIN and not exact_median:
            n_buckets = min(<Py_ssize_t>MAX_RANK_BUCKETS, n_neg // NEGATIVES_PER_BUCKET)
    # The level's tables hold positions and ranks in 32 bits.
    if (n_buckets > 0 and n_neg < INT32_MAX and n_pos < INT32_MAX
            and sampled_bucket_map(neg_scores, n_neg, n_buckets, &bm)):
        _distributed_ranks(pos_desc, neg_scores, n_pos, n_neg, code, table, unimodal, bm, ranks, sample, scan,
                           counts)
        return 1
    if scan != NULL and _checked_or_tied(pos_desc, n_pos, neg_scores, n_neg, code, table, unimodal, ranks, scan,
                                         counts):
        return 1
    items = <pair[floating, Py_ssize_t]*>malloc(n_neg * sizeof(pair[floating, Py_ssize_t]))
    if items == NULL:
        with gil:
            raise MemoryError(f"cannot allocate the work array for {n_neg} negatives")
    try:
        for k in range(n_neg):
            items[k].first = -neg_scores[k]
            items[k].second = k
        _opt_ranks(pos_desc, items, Frame(0, n_neg, 1, n_pos + 1), 0, n_pos, n_neg, code,
                   table, unimodal, ranks, sample, exact_median)
    finally:
        free(items)
    return 0


cdef void qs_sorted_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const Keyed* items, Py_ssize_t n_neg,
                              int code, const double* table, bint unimodal, const double* bends, double bend_z,
                              int* ranks) noexcept nogil:
    _sweep_sorted(pos_desc, n_pos, items, n_neg, code, table, unimodal, bends, bend_z, ranks)


cdef void qs_sorted_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const Keyed* items, Py_ssize_t n_neg,
                              int code, const double* table, bint unimodal, const double* bends, double bend_z,
                              int* ranks) noexcept nogil:
    _sweep_sorted(pos_desc, n_pos, items, n_neg, code, table, unimodal, bends, bend_z, ranks)


cdef int qs_ranks_f64(const double* pos_desc, Py_ssize_t n_pos, const double* neg_scores, Py_ssize_t n_neg,
                      int code, const double* table, bint unimodal, const double* bends, double bend_z,
                      int* ranks) except -1 nogil:
    return _qs_into(pos_desc, n_pos, neg_scores, n_neg, code, table, unimodal, bends, bend_z, ranks, False, -1,
                    NULL, NULL)


cdef int qs_ranks_f32(const float* pos_desc, Py_ssize_t n_pos, const float* neg_scores, Py_ssize_t n_neg,
                      int code, const double* table, bint unimodal, const double* bends, double bend_z,
                      int* ranks) except -1 nogil:
    return _qs_into(pos_desc, n_pos, neg_scores, n_neg, code, table, unimodal, bends, bend_z, ranks, False, -1,
                    NULL, NULL)


cdef double[::1] _bends_of(int code, const double[::1] table, Py_ssize_t n_pos, Py_ssize_t n_neg,
                           bint exact_median, Py_ssize_t n_buckets):
    """The bends of a position-discount table's first |P| + |N| entries (:func:`fill_discount_bends`) when the
    call sweeps (:func:`_sweeps`), else None: the distribution level never reads them, and on a long query
    they would cost a pass over |P| + |N| entries and their allocation at every call."""
    cdef Py_ssize_t n = n_pos + n_neg
    if code != LOSS_POSITION_DISCOUNT or table.shape[0] < n or not _sweeps(n_neg, exact_median, n_buckets):
        return None
    cdef double[::1] bends = np.empty(n + 1, dtype=np.float64)
    fill_discount_bends(&table[0], n, &bends[0])
    return bends


def qs_ranks(const floating[::1] pos_desc, const floating[::1] neg_scores, int code,
             const double[::1] table, bint unimodal, int[::1] ranks, bint exact_median=False,
             Py_ssize_t n_buckets=-1):
    """Fill ``ranks[k]`` with the optimal interleaving rank of negative k (input order).

    The caller (``rankopt.inference.qs``) validates everything: ``pos_desc``
    sorted descending (ties by index), both score arrays non-empty and
    finite, ``code`` one of :data:`KERNEL_CODES`, ``table`` holding
    D(1…|P|+|N|)/Z for the position-discount code (any non-empty array
    otherwise), ``ranks`` (C int) of length |N|.  ``unimodal`` selects the search of
    §5, which is exact only when f_j is concave on 1…min(|P|, j) + 1 (AP).

    The other two arguments choose among exact strategies (the tests compare
    them): ``exact_median`` runs the selection recursion with every block
    split at its exact median by ``nth_element`` (slower); ``n_buckets`` is
    the number of buckets of the distribution level — −1 chooses (below 2¹⁴
    negatives: no level, the negatives sorted and swept), 0 runs the
    selection recursion without the level, any other value must lie in
    3 … 2³¹ − 1 (the level is skipped from 2³¹ − 1 positives or negatives on,
    whatever the value).

    The batched kernels (``_batched.pyx``) call the same code per query
    through :func:`qs_ranks_f64` / :func:`qs_ranks_f32` (``_qs.pxd``).
    """
    if n_buckets != -1 and n_buckets != 0 and not 3 <= n_buckets <= INT32_MAX:
        raise ValueError(f"expected n_buckets -1, 0 or in 3…{INT32_MAX}, got {n_buckets} instead")
    cdef double[::1] bends = _bends_of(code, table, pos_desc.shape[0], neg_scores.shape[0], exact_median,
                                       n_buckets)
    with nogil:
        _qs_into(&pos_desc[0], pos_desc.shape[0], &neg_scores[0], neg_scores.shape[0], code, &table[0],
                 unimodal, &bends[0] if bends is not None else NULL, 1.0, &ranks[0], exact_median, n_buckets,
                 NULL, NULL)


def qs_inference(const floating[::1] pos_scores, const Py_ssize_t[::1] pos_order, const floating[::1] pos_desc,
                 const floating[::1] neg_scores, int code, const double[::1] table, bint unimodal,
                 double largest_pos, double sum_bound, int32_t[::1] neg_ranks, double[::1] neg_coef,
                 double[::1] pos_coef, int64_t[::1] pos_ranks, int64_t[::1] positions, bint exact_median=False,
                 Py_ssize_t n_buckets=-1):
    """Loss-augmented inference of a compiled loss in one call: the check, the ranks and Observation 2.

    The negatives are read by the kernel's own passes only: the first one
    that reads them checks them too (``_scan.pxd``) — finite, and
    max |score| × (|P| + |N|) ≤ ``sum_bound`` with ``largest_pos`` the
    positives' largest |score| (``rankopt._validation.check_score_sums``) —
    and a refused call writes nothing.  Then the ranks (as :func:`qs_ranks`,
    all-tied negatives without sorting) and the terms of Observation 2
    (``_terms.pxd``: the same as ``_observation.observation_terms``).

    The caller validates the rest: ``pos_scores`` finite (input order),
    ``pos_order`` their descending order (ties by index) and ``pos_desc``
    the scores in it, ``code`` and ``table`` as for :func:`qs_ranks`, outputs
    of |N| (ranks, coefficients) and |P| (coefficients, ranks, positions).
    Returns ``(status, largest, dot)``: ``status`` 0 (done), 1 (a negative
    score is NaN or infinite) or 2 (sums could overflow; ``largest`` is the
    largest |score| of both classes), and Σ coef·score when done.
    """
    cdef Py_ssize_t n_pos = pos_scores.shape[0], n_neg = neg_scores.shape[0], bad = -1
    cdef ScoreScan scan
    cdef double dot = 0.0
    if n_buckets != -1 and n_buckets != 0 and not 3 <= n_buckets <= INT32_MAX:
        raise ValueError(f"expected n_buckets -1, 0 or in 3…{INT32_MAX}, got {n_buckets} instead")
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"expected at least one positive and one negative, got {n_pos} and {n_neg} instead")
    if (pos_order.shape[0] != n_pos or pos_desc.shape[0] != n_pos or neg_ranks.shape[0] != n_neg
            or neg_coef.shape[0] != n_neg or pos_coef.shape[0] != n_pos or pos_ranks.shape[0] != n_pos
            or positions.shape[0] != n_pos):
        raise ValueError(
            f"expected the positives' order, sorted scores, coefficients, ranks and positions ({n_pos}) and the "
            f"negatives' ranks and coefficients ({n_neg}) to match, got {pos_order.shape[0]}, "
            f"{pos_desc.shape[0]}, {pos_coef.shape[0]}, {pos_ranks.shape[0]}, {positions.shape[0]}, "
            f"{neg_ranks.shape[0]} and {neg_coef.shape[0]} instead"
        )
    scan.largest_other = largest_pos
    scan.n_documents = <double>(n_pos + n_neg)
    scan.sum_bound = sum_bound
    scan.status = SCAN_OK
    cdef int64_t[::1] counts = np.zeros(n_pos + 2, dtype=np.int64)
    cdef double[::1] bends = _bends_of(code, table, n_pos, n_neg, exact_median, n_buckets)
    with nogil:
        _qs_into(&pos_desc[0], n_pos, &neg_scores[0], n_neg, code, &table[0], unimodal,
                 &bends[0] if bends is not None else NULL, 1.0, <int*>&neg_ranks[0], exact_median, n_buckets,
                 &scan, &counts[0])
        if scan.status == SCAN_OK:
            bad = output_terms(&neg_ranks[0], &neg_scores[0], &counts[0], &pos_scores[0], &pos_order[0], n_pos,
                               n_neg, &neg_coef[0], &pos_coef[0], &pos_ranks[0], &positions[0], &dot)
    if bad >= 0:
        raise ValueError(f"expected pos_order to be a permutation of 0..{n_pos - 1}, got {pos_order[bad]} instead")
    return scan.status, scan.largest, dot


def compiled_delta_diff(int code, j, i, Py_ssize_t n_pos, Py_ssize_t n_neg, table):
    """The kernels' δ_j(i+1) − δ_j(i) (``_loss.pxd``) at arrays of (j, i), for checking.

    ``rankopt.check_qs_suitable`` compares it with the loss's ``delta_diff``;
    bounds are validated here because the kernels do not check them.
    """
    if code not in KERNEL_CODES.values():
        raise ValueError(f"expected a kernel code in {sorted(KERNEL_CODES.values())}, got {code} instead")
    j_arr, i_arr = np.broadcast_arrays(np.asarray(j, dtype=np.intp), np.asarray(i, dtype=np.intp))
    j_flat = np.ascontiguousarray(j_arr.ravel())
    i_flat = np.ascontiguousarray(i_arr.ravel())
    if j_flat.size and (j_flat.min() < 1 or j_flat.max() > n_neg or i_flat.min() < 1 or i_flat.max() > n_pos):
        raise ValueError(f"expected 1 <= j <= {n_neg} and 1 <= i <= {n_pos}, got j or i out of range instead")
    cdef const double[::1] tab = np.ascontiguousarray(table if table is not None else np.zeros(1), dtype=np.float64)
    if code == LOSS_POSITION_DISCOUNT and tab.shape[0] < n_pos + n_neg:
        raise ValueError(f"expected a table of {n_pos + n_neg} values, got {tab.shape[0]} instead")
    out = np.empty(j_flat.size, dtype=np.float64)
    cdef double[::1] out_view = out
    cdef const Py_ssize_t[::1] jv = j_flat
    cdef const Py_ssize_t[::1] iv = i_flat
    cdef Py_ssize_t k
    for k in range(j_flat.size):
        out_view[k] = delta_diff(code, jv[k], iv[k], n_pos, n_neg, &tab[0])
    return out.reshape(j_arr.shape)



def bucket_upper_edge(double top, double scale, Py_ssize_t size, Py_ssize_t b):
    """``upper_edge`` of the bucket map (top, scale, size), for the tests.

    Returns (edge, its bucket, the bucket of the next double up).
    """
    if not (3 <= size <= INT32_MAX and 1 <= b < size and scale > 0.0 and isfinite(scale) and isfinite(top)):
        raise ValueError(f"expected 3 <= size <= {INT32_MAX}, 1 <= b < size, finite top and scale > 0, got "
                         f"top={top}, scale={scale}, size={size}, b={b} instead")
    cdef BucketMap bm = BucketMap(top, scale, size)
    cdef double edge = upper_edge(b, bm)
    return edge, bucket_of(edge, bm), bucket_of(nextafter(edge, INFINITY), bm)


def bucket_ids(const floating[::1] scores, double top, double scale, Py_ssize_t size):
    """Bucket ids of ``scores`` under the map (top, scale, size), for the tests.

    Returns (ids from buckets_of_block, ids from bucket_of one score at a
    time): the kernels rely on the two agreeing exactly.
    """
    if not (3 <= size <= INT32_MAX and scale > 0.0 and isfinite(scale) and isfinite(top)):
        raise ValueError(f"expected 3 <= size <= {INT32_MAX}, finite top and scale > 0, got "
                         f"top={top}, scale={scale}, size={size} instead")
    cdef BucketMap bm = BucketMap(top, scale, size)
    cdef Py_ssize_t n = scores.shape[0], k, k0 = 0
    block = np.empty(n, dtype=np.int32)
    single = np.empty(n, dtype=np.int64)
    cdef int32_t[::1] block_view = block
    cdef int64_t[::1] single_view = single
    while k0 < n:  # block by block, as the kernels call it
        k0 += buckets_of_block(&scores[k0], n - k0, bm, &block_view[k0])
    for k in range(n):
        single_view[k] = bucket_of(scores[k], bm)
    return block, single


def walk_step_verdicts(const double[::1] pos_desc, const double[::1] s_neg, const int64_t[::1] j,
                       const int64_t[::1] i, int code, Py_ssize_t n_pos, Py_ssize_t n_neg, const double[::1] table):
    """The walk's test of each step (j[k], i[k]) at negative score s_neg[k], for the tests.

    Returns (``_step_nonnegative``'s verdicts, ``_step(…) >= 0.0``'s): the walk relies on the two agreeing
    exactly.  The caller keeps 1 ≤ i ≤ |P|, 1 ≤ j ≤ |N| and a table of |P| + |N| entries.
    """
    cdef Py_ssize_t n = s_neg.shape[0], k
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    if not (j.shape[0] == n and i.shape[0] == n and pos_desc.shape[0] == n_pos and n_pos >= 1 and n_neg >= 1
            and table.shape[0] >= n_pos + n_neg):
        raise ValueError("expected one (j, i) per score, |P| positives and a table of |P| + |N| entries")
    for k in range(n):
        if not (1 <= i[k] <= n_pos and 1 <= j[k] <= n_neg):
            raise ValueError(f"expected 1 <= i <= {n_pos} and 1 <= j <= {n_neg}, got i={i[k]}, j={j[k]} instead")
    fast = np.empty(n, dtype=np.bool_)
    exact = np.empty(n, dtype=np.bool_)
    for k in range(n):
        fast[k] = _step_nonnegative(&pos_desc[0], s_neg[k], j[k], i[k], code, n_pos, n_neg, &table[0], scale)
        exact[k] = _step(&pos_desc[0], s_neg[k], j[k], i[k], code, n_pos, n_neg, &table[0], scale) >= 0.0
    return fast, exact
