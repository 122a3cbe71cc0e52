# cython: language_level=3
"""Quicksort-flavoured loss-augmented inference (``qs-rank-losses`` Algorithms 1–2).

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

For AP the median's best rank is found with the unimodal search of §5
(Algorithm 3): f_j is concave on the ranks 1…min(|P|, j) + 1 — the AP term
−i/((i+j−1)(i+j)) of its discrete derivative is non-increasing in i for
i ≤ j and the score term is non-increasing since s⁺ is sorted — so a binary
search on the sign of the derivative finds the highest maximiser there; the
remaining ranks are scanned linearly and the two candidates compared.
"""
from cython cimport floating
from libc.stdlib cimport free, malloc
from libcpp.algorithm cimport nth_element
from libcpp.utility cimport pair

from rankopt.inference._loss cimport LOSS_AP, LOSS_AUC, LOSS_POSITION_DISCOUNT, delta_diff

import numpy as np

KERNEL_CODES = {"AP": LOSS_AP, "AUC": LOSS_AUC, "POSITION_DISCOUNT": LOSS_POSITION_DISCOUNT}

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


cdef struct Frame:
    Py_ssize_t lo, hi   # the block: sorted positions lo … hi − 1 (0-based, half-open)
    Py_ssize_t lp, rp   # its optimal ranks lie in lp … rp (inclusive)


cdef inline double _step(const floating* pos_desc, double s_neg, Py_ssize_t j, Py_ssize_t i,
                         int code, Py_ssize_t n_pos, Py_ssize_t n_neg, const double* table,
                         double scale) noexcept nogil:
    # f_j(i + 1) − f_j(i), Observation 3 with NOTES.md's form.
    return delta_diff(code, j, i, n_pos, n_neg, table) + scale * (<double>pos_desc[i - 1] - s_neg)


cdef Py_ssize_t _best_rank_linear(const floating* pos_desc, double s_neg, Py_ssize_t j,
                                  Py_ssize_t lp, Py_ssize_t rp, int code, Py_ssize_t n_pos,
                                  Py_ssize_t n_neg, const double* table, double scale) noexcept nogil:
    """Highest maximiser of f_j on lp … rp, by a scan (Algorithm 2, line 7)."""
    cdef double f = 0.0, best = 0.0
    cdef Py_ssize_t i, best_rank = lp
    for i in range(lp, rp):
        f += _step(pos_desc, s_neg, j, i, code, n_pos, n_neg, table, scale)
        if f >= best:
            best = f
            best_rank = i + 1
    return best_rank


cdef Py_ssize_t _best_rank_unimodal(const floating* pos_desc, double s_neg, Py_ssize_t j,
                                    Py_ssize_t lp, Py_ssize_t rp, int code, Py_ssize_t n_pos,
                                    Py_ssize_t n_neg, const double* table, double scale) noexcept nogil:
    """Highest maximiser of f_j on lp … rp for a loss whose f_j is concave up to min(|P|, j) + 1."""
    # Clamped to lp: an interval above the concave part is scanned from lp, not
    # from min(|P|, j) + 1 (which would rescan ranks outside it, O(|P|) per median).
    cdef Py_ssize_t concave_end = max(lp, min(rp, min(n_pos, j) + 1))
    cdef Py_ssize_t low = lp, high = concave_end, mid, i, t
    cdef Py_ssize_t i1, i2
    cdef double g = 0.0, best_g = 0.0, drop = 0.0
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
    # Algorithm 3, lines 3–4: the rest by a scan, measured from concave_end …
    i2 = concave_end
    for i in range(concave_end, rp):
        g += _step(pos_desc, s_neg, j, i, code, n_pos, n_neg, table, scale)
        if g >= best_g:
            best_g = g
            i2 = i + 1
    # … and compared with f_j(i1): f_j(i2) − f_j(i1) = Σ_{t=i1}^{concave_end−1} step(t) + best_g.
    for t in range(i1, concave_end):
        drop += _step(pos_desc, s_neg, j, t, code, n_pos, n_neg, table, scale)
    return i2 if drop + best_g >= 0.0 else i1


cdef inline bint _before(const pair[floating, Py_ssize_t]& a,
                         const pair[floating, Py_ssize_t]& b) noexcept nogil:
    # rankopt's order (pairs hold −score): bitwise, so that it compiles without branches.
    return (a.first < b.first) | ((a.first == b.first) & (a.second < b.second))


cdef Py_ssize_t _split(pair[floating, Py_ssize_t]* items, pair[floating, Py_ssize_t]* sample,
                       Py_ssize_t lo, Py_ssize_t hi, bint exact) except -1 nogil:
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
    if exact or n < SAMPLE_MIN_BLOCK:
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


cdef int _opt_ranks(const floating* pos_desc, pair[floating, Py_ssize_t]* items,
                    Py_ssize_t n_pos, Py_ssize_t n_neg, int code, const double* table,
                    bint unimodal, Py_ssize_t* ranks, pair[floating, Py_ssize_t]* sample,
                    bint exact_median) except -1 nogil:
    """Algorithm 2 with an explicit stack; ``ranks`` is written in input order."""
    cdef Frame stack[STACK_SIZE]
    cdef Frame fr, left, right
    cdef Py_ssize_t top = 0, k, m, j, opt
    cdef double s_neg
    cdef double scale = 2.0 / ((<double>n_pos) * n_neg)
    stack[0] = Frame(0, n_neg, 1, n_pos + 1)
    top = 1
    while top > 0:
        top -= 1
        fr = stack[top]
        if fr.lp == fr.rp:  # Algorithm 2, lines 2–3
            for k in range(fr.lo, fr.hi):
                ranks[items[k].second] = fr.lp
            continue
        m = _split(items, sample, fr.lo, fr.hi, exact_median)
        s_neg = -(<double>items[m].first)
        j = m + 1  # the 1-based position of this negative in the full descending order
        if unimodal:
            opt = _best_rank_unimodal(pos_desc, s_neg, j, fr.lp, fr.rp, code, n_pos, n_neg, table, scale)
        else:
            opt = _best_rank_linear(pos_desc, s_neg, j, fr.lp, fr.rp, code, n_pos, n_neg, table, scale)
        ranks[items[m].second] = opt
        left = Frame(fr.lo, m, fr.lp, opt)
        right = Frame(m + 1, fr.hi, opt, fr.rp)
        # The larger block is pushed first, so the stack never holds more than
        # log2 |N| + 1 frames.
        if left.hi - left.lo < right.hi - right.lo:
            left, right = right, left
        if left.lo < left.hi:
            stack[top] = left
            top += 1
        if right.lo < right.hi:
            stack[top] = right
            top += 1
    return 0


def qs_ranks(const floating[::1] pos_desc, const floating[::1] neg_scores, int code,
             const double[::1] table, bint unimodal, Py_ssize_t[::1] ranks, bint exact_median=False):
    """Fill ``ranks[k]`` with the optimal interleaving rank of negative k (input order).

    The caller (``rankopt.inference.qs``) validates everything: ``pos_desc``
    sorted descending (ties by index), both score arrays non-empty and
    finite, ``code`` one of :data:`KERNEL_CODES`, ``table`` holding
    D(1…|P|+|N|)/Z for the position-discount code (any non-empty array
    otherwise), ``ranks`` of length |N|.  ``unimodal`` selects the search of
    §5, which is exact only when f_j is concave on 1…min(|P|, j) + 1 (AP).
    ``exact_median`` splits every block at its exact median with
    ``nth_element`` (slower; same result — the tests compare the two).
    """
    cdef Py_ssize_t n_pos = pos_desc.shape[0]
    cdef Py_ssize_t n_neg = neg_scores.shape[0]
    cdef Py_ssize_t k
    cdef pair[floating, Py_ssize_t] sample[SAMPLE_SIZE]
    cdef pair[floating, Py_ssize_t]* items = <pair[floating, Py_ssize_t]*>malloc(
        n_neg * sizeof(pair[floating, Py_ssize_t]))
    if items == NULL:
        raise MemoryError(f"cannot allocate the work array for {n_neg} negatives")
    try:
        with nogil:
            for k in range(n_neg):
                items[k].first = -neg_scores[k]
                items[k].second = k
            _opt_ranks(&pos_desc[0], items, n_pos, n_neg, code, &table[0], unimodal, &ranks[0],
                       sample, exact_median)
    finally:
        free(items)


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
