# A monotone map of scores to buckets, shared by the kernels that split by value
# (``_qs.pyx``'s level 0, ``_order.pyx``'s sort).  Bucket 0 holds the highest
# scores; the map is non-increasing in the score, so each bucket is a
# contiguous run of the descending order whatever the map's parameters — they
# only decide how evenly the scores spread.

from cython cimport floating
from libc.float cimport DBL_MAX
from libc.math cimport isfinite
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint64_t
from libc.string cimport memcpy


cdef struct BucketMap:
    double top       # a score mapped to the upper end of bucket 1
    double scale     # buckets per unit of score
    Py_ssize_t size  # number of buckets (at least 3)


cdef enum:
    # The affine map spans the range of this many evenly spaced scores; scores
    # outside it fall into the two end buckets.
    RANGE_SAMPLE = 1024
    # Bucket counts of the kernels that bound ranks per bucket (qs's level 0,
    # select's candidates): more buckets pin more of them to one rank, until
    # the count table stops fitting in cache (measured best at 2¹⁶ for 10⁶).
    NEGATIVES_PER_BUCKET = 16
    MAX_RANK_BUCKETS = 1 << 16
    # Scores mapped per call of buckets_of_block: its ids stay in L1.
    BUCKET_BLOCK = 256


cdef inline double _clamp(double x, double lo, double hi) noexcept nogil:
    # Ternaries compile to minsd/maxsd; libm's fmin/fmax are calls.  Written
    # so that a NaN maps to lo, a valid bucket, should one ever get through.
    x = x if x >= lo else lo
    return hi if x > hi else x


cdef inline Py_ssize_t bucket_of(double s, BucketMap bm) noexcept nogil:
    # Non-increasing in s (IEEE arithmetic is monotone); clamped in floating
    # point first, since (top − s)·scale may be far beyond any integer.
    return <Py_ssize_t>(_clamp((bm.top - s) * bm.scale, -1.0, <double>(bm.size - 2)) + 1.0)


cdef inline void buckets_of_block(const floating* scores, Py_ssize_t n, BucketMap bm,
                                  int32_t* ids) noexcept nogil:
    """``ids[k] = bucket_of(scores[k], bm)`` for k < n ≤ BUCKET_BLOCK (bm.size < 2³¹).

    The same arithmetic as bucket_of, in a loop with nothing else in it so
    that the compiler vectorises it: a pass that maps a block and then
    scatters by the ids takes about a third less time than one that maps and
    scatters each score in turn (measured on 10⁶ scores, 2¹⁶ buckets).
    """
    cdef double top = bm.top, scale = bm.scale, last = <double>(bm.size - 2)
    cdef Py_ssize_t k
    for k in range(n):
        ids[k] = <int32_t>(_clamp((top - scores[k]) * scale, -1.0, last) + 1.0)


cdef inline bint sampled_bucket_map(const floating* scores, Py_ssize_t n, Py_ssize_t n_buckets,
                                    BucketMap* bm) noexcept nogil:
    """The affine map spanning a sample of ``scores``; False when it cannot spread them."""
    cdef Py_ssize_t t, n_sample = n if n < RANGE_SAMPLE else RANGE_SAMPLE
    cdef double lo = scores[0], hi = scores[0], s
    for t in range(n_sample):
        s = scores[(t * n) // n_sample]
        lo = s if s < lo else lo
        hi = s if s > hi else hi
    bm.top = hi
    bm.size = n_buckets
    bm.scale = (n_buckets - 2) / (hi - lo) if hi > lo else 0.0
    # No span, or one so small that the scale overflows, cannot spread them.
    return isfinite(bm.scale) and bm.scale > 0.0 and isfinite(hi - lo) and n_buckets >= 3


cdef inline int64_t _order_key(double s) noexcept nogil:
    """An integer increasing with s over the finite doubles (±0 both map to 0)."""
    cdef int64_t bits
    memcpy(&bits, &s, sizeof(double))
    return bits if bits >= 0 else -(bits & INT64_MAX)


cdef inline double _from_order_key(int64_t key) noexcept nogil:
    cdef int64_t bits = key if key >= 0 else ((-key) | INT64_MIN)
    cdef double s
    memcpy(&s, &bits, sizeof(double))
    return s


cdef inline double upper_edge(Py_ssize_t b, BucketMap bm) noexcept nogil:
    """The largest finite double s with bucket_of(s) ≥ b (1 ≤ b < size): every score of bucket b is ≤ it.

    Searched over the doubles in order, from the affine estimate: galloping
    brackets the answer, bisection pins it, so the cost is logarithmic in the
    estimate's error counted in doubles (a few when the edge is not near 0).
    """
    cdef int64_t lowest = _order_key(-DBL_MAX), highest = _order_key(DBL_MAX)
    cdef int64_t good, bad, step = 1, mid
    cdef int64_t guess = _order_key(bm.top - (<double>(b - 1)) / bm.scale)
    # Invariant: bucket_of(good) ≥ b > bucket_of(bad), good < bad.  Key distances
    # can exceed the int64 range; they are taken in uint64, where they fit.
    if bucket_of(_from_order_key(guess), bm) >= b:
        good = guess
        while True:
            if <uint64_t>step >= <uint64_t>highest - <uint64_t>good:
                if bucket_of(DBL_MAX, bm) >= b:
                    return DBL_MAX
                bad = highest
                break
            bad = good + step
            if bucket_of(_from_order_key(bad), bm) < b:
                break
            good = bad
            step = step * 2 if step < INT64_MAX // 2 else step
    else:
        bad = guess
        while True:
            # bucket_of(−DBL_MAX) is the last bucket, ≥ b: the search stops there at the latest.
            good = bad - step if <uint64_t>step < <uint64_t>bad - <uint64_t>lowest else lowest
            if bucket_of(_from_order_key(good), bm) >= b:
                break
            bad = good
            step = step * 2 if step < INT64_MAX // 2 else step
    while <uint64_t>bad - <uint64_t>good > 1:
        mid = good + <int64_t>((<uint64_t>bad - <uint64_t>good) // 2)
        if bucket_of(_from_order_key(mid), bm) >= b:
            good = mid
        else:
            bad = mid
    return _from_order_key(good)
