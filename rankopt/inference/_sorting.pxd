# rankopt's order of a few thousand scores or fewer — descending, equal
# scores by increasing index — by distribution: the small-input strategy of
# ``_qs.pyx`` and the pairwise kernel's sort (``_pairwise.pyx``).  Header
# only: every function is inline.
#
# An affine map of the score sends the n scores into SORT_BUCKETS_PER_SCORE·n
# buckets; the map is non-increasing, so the buckets come in order, each
# holding its scores in index order.  One insertion pass then orders each
# bucket's few scores (about a comparison per score); past
# SORT_MOVES_PER_SCORE moves per score — scores crowded into few buckets —
# std::sort finishes.  Measured on 90 Gaussian scores: 3.5 ns per score,
# against 34 for std::sort of the pairs.

from cython cimport floating
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport int32_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp.algorithm cimport sort


# The buckets' starts are a running sum over the 4n counts, most of them 0: one add waiting on the last
# per bucket, as long as the rest of the sort for a query's ~100 scores.  Eight counts at a time, each
# group of four summed in its vector (two shifted adds), the running total added to both at once.
cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>
    #include <string.h>

    #if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    #  define RANKOPT_SHUFFLE4(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
    #elif defined(__GNUC__)
    #  define RANKOPT_SHUFFLE4(a, b, i, j, k, l) __builtin_shuffle(a, b, (rankopt_v4i){i, j, k, l})
    #endif

    /* a[k] = a[0] + … + a[k] for k < n (the sums of counts of at most INT32_MAX scores). */
    static inline void rankopt_running_sum_i32(int32_t* a, ptrdiff_t n) {
        ptrdiff_t k = 0;
        int32_t total = 0;
    #ifdef RANKOPT_SHUFFLE4
        typedef int32_t rankopt_v4i __attribute__((vector_size(16)));
        const rankopt_v4i zero = {0, 0, 0, 0};
        rankopt_v4i carry = zero;
        for (; k + 8 <= n; k += 8) {
            rankopt_v4i x, y;
            memcpy(&x, a + k, sizeof x);
            memcpy(&y, a + k + 4, sizeof y);
            x += RANKOPT_SHUFFLE4(zero, x, 0, 4, 5, 6);
            y += RANKOPT_SHUFFLE4(zero, y, 0, 4, 5, 6);
            x += RANKOPT_SHUFFLE4(zero, x, 0, 1, 4, 5);
            y += RANKOPT_SHUFFLE4(zero, y, 0, 1, 4, 5);
            y += RANKOPT_SHUFFLE4(x, x, 3, 3, 3, 3);
            x += carry;
            y += carry;
            memcpy(a + k, &x, sizeof x);
            memcpy(a + k + 4, &y, sizeof y);
            carry = RANKOPT_SHUFFLE4(y, y, 3, 3, 3, 3);
        }
        total = carry[0];
    #endif
        for (; k < n; ++k) {
            total += a[k];
            a[k] = total;
        }
    }
    """
    void rankopt_running_sum_i32(int32_t* a, Py_ssize_t n) noexcept nogil


cdef enum:
    SORT_BUCKETS_PER_SCORE = 4
    SORT_MOVES_PER_SCORE = 4


cdef struct Keyed:
    double key       # −score: ascending keys, then ascending indices, is rankopt's order
    Py_ssize_t idx   # input position


cdef inline uint32_t descending_float_bits(uint32_t bits) noexcept nogil:
    """A float's bits mapped so that a larger float is a smaller integer — a positive one's inverted below the
    sign bit, a negative one's as they are (a mask from the sign, without a branch) — and back: the map is its
    own inverse, the sign bit being kept.  The high half of a packed key (``_batched.packed_descending_keys``)."""
    return bits ^ (~(<uint32_t>(<int32_t>bits >> 31)) & 0x7FFFFFFFU)


cdef inline float packed_key_score(uint64_t key) noexcept nogil:
    """The score a packed key (``_batched.packed_descending_keys``) was made from (+0.0 for −0.0)."""
    cdef uint32_t bits = descending_float_bits(<uint32_t>(key >> 32))
    cdef float x
    memcpy(&x, &bits, 4)
    return x


cdef inline Py_ssize_t packed_key_index(uint64_t key) noexcept nogil:
    """The document's index in its query that a packed key holds (the 31 bits above the class bit)."""
    return <Py_ssize_t>((<uint32_t>key) >> 1)


cdef inline void keyed_from_packed(const uint64_t* keys, Py_ssize_t n, Keyed* items) noexcept nogil:
    """``items`` in the order of n sorted packed keys, as :func:`descending_keyed` would leave them: key −score
    (−0.0 for a score of ±0, the sort's equal keys), the document's index."""
    cdef Py_ssize_t k
    for k in range(n):
        items[k].key = -(<double>packed_key_score(keys[k]))
        items[k].idx = packed_key_index(keys[k])


cdef inline bint _keyed_before(const Keyed& a, const Keyed& b) noexcept nogil:
    return a.key < b.key or (a.key == b.key and a.idx < b.idx)


cdef inline bint _insertion_sort(Keyed* items, Py_ssize_t n, Py_ssize_t budget, int32_t* late) noexcept nogil:
    """Stable insertion sort by key, abandoned after ``budget`` moves; True when it finished.

    Stable: rankopt's order when equal keys come in index order already.  A first pass lists, without a
    branch, the places whose key is below the largest before them (``late``: n entries of work space), the
    only ones insertion moves (8 % after the buckets); the others are read once and never stored back.
    Those are then inserted in order, each into a prefix already sorted, as insertion sort would.
    """
    cdef Py_ssize_t k, t, a, n_late = 0
    cdef Keyed x
    cdef double largest
    if n < 2:
        return True
    largest = items[0].key
    for k in range(1, n):
        late[n_late] = <int32_t>k
        n_late += items[k].key < largest
        largest = items[k].key if items[k].key > largest else largest
    for a in range(n_late):
        k = late[a]
        x = items[k]
        t = k - 1
        items[k] = items[t]
        while t > 0 and x.key < items[t - 1].key:
            items[t] = items[t - 1]
            t -= 1
        items[t] = x
        budget -= k - t
        if budget < 0:
            return False
    return True


cdef inline void _finish_sort(Keyed* items, Py_ssize_t n, int32_t* late) noexcept nogil:
    """rankopt's order on ``items`` that come in index order within equal keys and are nearly sorted;
    ``late`` is work space of n entries."""
    if not _insertion_sort(items, n, SORT_MOVES_PER_SCORE * n, late):
        sort(items, items + n, _keyed_before)


cdef inline void descending_keyed(const floating* scores, Py_ssize_t n, Keyed* items, int32_t* ids,
                                  int32_t* ends) noexcept nogil:
    """``items``: (−score, index) of the n ≥ 1 finite scores in rankopt's order.

    ``ids`` (n entries) and ``ends`` (SORT_BUCKETS_PER_SCORE·n + 1) are work
    space.  Scores that cannot be spread (all equal, or a range beyond the
    doubles) go unbucketed to the same final sort.
    """
    descending_keyed_down_to(scores, n, items, ids, ends, -INFINITY, n)


cdef inline Py_ssize_t descending_keyed_down_to(const floating* scores, Py_ssize_t n, Keyed* items, int32_t* ids,
                                                int32_t* ends, double floor, Py_ssize_t n_first) noexcept nogil:
    """:func:`descending_keyed` as far as it is read: ``items`` in rankopt's order up to the place returned,
    which passes every score ≥ ``floor`` and the first ``n_first`` (1 … n); the rest after it, lower, in the
    order of their buckets.  The final insertion pass stops there: a caller that reads the scores below a
    bound only as a group (the top-k method, below its lowest positive) skips their ordering.
    """
    cdef Py_ssize_t k, b, t, nb = SORT_BUCKETS_PER_SCORE * n, upto
    cdef double hi, low, scale = 0.0, x
    cdef double last = <double>(nb - 1)
    # The extremes in the scores' own type (a float's selected, not converted, at each step), four running
    # ones each, so that consecutive comparisons do not wait on each other.
    cdef floating h0 = scores[0], h1 = scores[0], h2 = scores[0], h3 = scores[0]
    cdef floating l0 = scores[0], l1 = scores[0], l2 = scores[0], l3 = scores[0]
    for k in range(0, n - 3, 4):
        h0 = scores[k] if scores[k] > h0 else h0
        l0 = scores[k] if scores[k] < l0 else l0
        h1 = scores[k + 1] if scores[k + 1] > h1 else h1
        l1 = scores[k + 1] if scores[k + 1] < l1 else l1
        h2 = scores[k + 2] if scores[k + 2] > h2 else h2
        l2 = scores[k + 2] if scores[k + 2] < l2 else l2
        h3 = scores[k + 3] if scores[k + 3] > h3 else h3
        l3 = scores[k + 3] if scores[k + 3] < l3 else l3
    for k in range(n - n % 4, n):
        h0 = scores[k] if scores[k] > h0 else h0
        l0 = scores[k] if scores[k] < l0 else l0
    h0 = h1 if h1 > h0 else h0
    h2 = h3 if h3 > h2 else h2
    l0 = l1 if l1 < l0 else l0
    l2 = l3 if l3 < l2 else l2
    hi = <double>(h2 if h2 > h0 else h0)
    low = <double>(l2 if l2 < l0 else l0)
    if hi > low:
        scale = last / (hi - low)
    if not (scale > 0.0 and isfinite(scale) and isfinite(hi - low)):
        for k in range(n):
            items[k].key = -(<double>scores[k])
            items[k].idx = k
        _finish_sort(items, n, ids)
        return n
    for k in range(n):  # a loop the compiler vectorises
        x = (hi - scores[k]) * scale
        ids[k] = <int32_t>(x if x < last else last)
    for b in range(nb + 1):
        ends[b] = 0
    for k in range(n):
        ends[ids[k] + 1] += 1
    rankopt_running_sum_i32(ends, nb + 1)
    # ends[b] starts where bucket b begins and advances as it fills, to where it ends.
    for k in range(n):
        b = ids[k]
        t = ends[b]
        items[t].key = -(<double>scores[k])
        items[t].idx = k
        ends[b] = t + 1
    upto = n
    if n_first < n and floor > low:
        # Through the bucket of the n_first-th score, and of the floor: the buckets before a score's hold
        # higher scores only, those after it lower ones (the map is monotone).
        x = (hi + items[n_first - 1].key) * scale
        b = <Py_ssize_t>(x if x < last else last)
        if floor <= hi:
            x = (hi - floor) * scale
            b = max(b, <Py_ssize_t>(x if x < last else last))
        upto = ends[b]
    _finish_sort(items, upto, ids)
    return upto
