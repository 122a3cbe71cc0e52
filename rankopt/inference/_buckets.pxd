# A monotone map of scores to buckets, shared by the kernels that split by value
# (``_qs.pyx``'s level 0, ``_order.pyx``'s sort).  Bucket 0 holds the highest
# scores; the map is non-increasing in the score, so each bucket is a
# contiguous run of the descending order whatever the map's parameters — they
# only decide how evenly the scores spread.

from cython cimport floating
from libc.math cimport isfinite


cdef struct BucketMap:
    double top       # a score mapped to the upper end of bucket 1
    double scale     # buckets per unit of score
    Py_ssize_t size  # number of buckets (at least 3)


cdef enum:
    # The affine map spans the range of this many evenly spaced scores; scores
    # outside it fall into the two end buckets.
    RANGE_SAMPLE = 1024


cdef inline double _clamp(double x, double lo, double hi) noexcept nogil:
    # Ternaries compile to minsd/maxsd; libm's fmin/fmax are calls.  Written
    # so that a NaN maps to lo, a valid bucket, should one ever get through.
    x = x if x >= lo else lo
    return hi if x > hi else x


cdef inline Py_ssize_t bucket_of(double s, BucketMap bm) noexcept nogil:
    # Non-increasing in s (IEEE arithmetic is monotone); clamped in floating
    # point first, since (top − s)·scale may be far beyond any integer.
    return <Py_ssize_t>(_clamp((bm.top - s) * bm.scale, -1.0, <double>(bm.size - 2)) + 1.0)


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
