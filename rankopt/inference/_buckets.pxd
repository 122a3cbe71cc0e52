# A monotone map of scores to buckets, shared by the kernels that split by value
# (``_qs.pyx``'s level 0, ``_ap.pyx``'s select, ``_order.pyx``'s sort).  Bucket 0 holds the highest
# scores; the map is non-increasing in the score, so each bucket is a
# contiguous run of the descending order whatever the map's parameters — they
# only decide how evenly the scores spread.

from cython cimport floating
from libc.float cimport DBL_MAX
from libc.math cimport isfinite
from libc.stdint cimport INT32_MAX, INT64_MAX, INT64_MIN, int32_t, int64_t, uint64_t
from libc.string cimport memcpy


cdef struct BucketMap:
    double top       # a score mapped to the upper end of bucket 1
    double scale     # buckets per unit of score
    Py_ssize_t size  # number of buckets (3 … INT32_MAX: bucket ids are 32-bit)


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


# The map's arithmetic lives in C, once, for the scalar bucket_of and the
# block version: a block is mapped by a loop the compiler vectorises, and on
# x86-64 with glibc it is compiled twice, for AVX2 and for the baseline
# (SSE2), the loader picking one (GCC's target_clones).  Measured on 10⁶
# scores and 2¹⁶ buckets, a counting pass takes 1.25 ms mapping and counting
# score by score, 1.0 ms by blocks (SSE2) and 0.8 ms by blocks with AVX2.
# Every version performs the same IEEE operations, so they agree exactly with
# each other and with upper_edge's search — the kernels rely on that.
cdef extern from *:
    """
    #include <stddef.h>
    #include <stdint.h>

    /* Non-increasing in s (IEEE arithmetic is monotone).  Clamped in floating
       point before the conversion, since (top - s) * scale may be far beyond
       any integer; a NaN maps to -1, i.e. bucket 0, should one get through. */
    static inline int32_t rankopt_bucket_id(double s, double top, double scale, double last) {
        double x = (top - s) * scale;
        x = x >= -1.0 ? x : -1.0;
        x = x > last ? last : x;
        return (int32_t)(x + 1.0);
    }

    #if defined(__x86_64__) && defined(__GLIBC__) && \
        ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6) || \
         (defined(__clang__) && __clang_major__ >= 14))
    #  define RANKOPT_BUCKET_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #  define RANKOPT_BUCKET_CLONES
    #endif

    RANKOPT_BUCKET_CLONES static void rankopt_bucket_ids_f64(
            const double* scores, ptrdiff_t n, double top, double scale, double last, int32_t* ids) {
        for (ptrdiff_t k = 0; k < n; ++k) ids[k] = rankopt_bucket_id(scores[k], top, scale, last);
    }

    RANKOPT_BUCKET_CLONES static void rankopt_bucket_ids_f32(
            const float* scores, ptrdiff_t n, double top, double scale, double last, int32_t* ids) {
        for (ptrdiff_t k = 0; k < n; ++k) ids[k] = rankopt_bucket_id(scores[k], top, scale, last);
    }
    """
    int32_t rankopt_bucket_id(double s, double top, double scale, double last) noexcept nogil
    void rankopt_bucket_ids_f64(const double* scores, Py_ssize_t n, double top, double scale,
                                double last, int32_t* ids) noexcept nogil
    void rankopt_bucket_ids_f32(const float* scores, Py_ssize_t n, double top, double scale,
                                double last, int32_t* ids) noexcept nogil


cdef inline Py_ssize_t bucket_of(double s, BucketMap bm) noexcept nogil:
    return rankopt_bucket_id(s, bm.top, bm.scale, <double>(bm.size - 2))


cdef inline Py_ssize_t buckets_of_block(const floating* scores, Py_ssize_t n_left, BucketMap bm,
                                        int32_t* ids) noexcept nogil:
    """Map the next block: ``ids[k] = bucket_of(scores[k], bm)`` for k < min(n_left, BUCKET_BLOCK).

    ``ids`` holds BUCKET_BLOCK entries (small enough to stay in L1); returns
    how many were mapped, so that a pass over n scores reads

        k0 = 0
        while k0 < n:
            n_block = buckets_of_block(scores + k0, n - k0, bm, ids)
            ...  # use ids[0 … n_block − 1]
            k0 += n_block
    """
    cdef Py_ssize_t n = n_left if n_left < BUCKET_BLOCK else BUCKET_BLOCK
    if floating is double:
        rankopt_bucket_ids_f64(scores, n, bm.top, bm.scale, <double>(bm.size - 2), ids)
    else:
        rankopt_bucket_ids_f32(scores, n, bm.top, bm.scale, <double>(bm.size - 2), ids)
    return n


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
    return (isfinite(bm.scale) and bm.scale > 0.0 and isfinite(hi - lo)
            and 3 <= n_buckets <= INT32_MAX)


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
