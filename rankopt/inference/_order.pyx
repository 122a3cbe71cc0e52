# cython: language_level=3
"""rankopt's order of scores — descending, equal scores by increasing index — computed fast.

A distribution sort: one pass counts the scores per bucket of a monotone
value map (``_buckets.pxd``), one pass scatters (−score, index) pairs into
their buckets, and each bucket — a contiguous run of the final order,
typically a few pairs — is sorted with ``std::sort``.  Lexicographic order of
the pairs is exactly rankopt's order, so ties need no special case.  Expected
O(n) on spread-out scores (about 2 passes over the data), O(n log n) when a
bucket holds most of them (e.g. all scores equal), like a comparison sort.
"""
from cython cimport floating
from libc.math cimport INFINITY
from libc.stdlib cimport calloc, free, malloc
from libcpp.algorithm cimport sort
from libcpp.utility cimport pair

from libc.stdint cimport int32_t

from rankopt.inference._buckets cimport BUCKET_BLOCK, BucketMap, buckets_of_block, sampled_bucket_map
from rankopt.inference._sorting cimport SORT_BUCKETS_PER_SCORE, Keyed, descending_keyed_down_to

cdef enum:
    # Below this many scores one std::sort of the pairs is as fast.
    DISTRIBUTE_MIN = 1 << 10
    SCORES_PER_BUCKET = 4
    MAX_BUCKETS = 1 << 20


cdef int _sort_pairs(const floating* scores, Py_ssize_t n, pair[double, Py_ssize_t]* items,
                     Py_ssize_t* order) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        items[k].first = -(<double>scores[k])
        items[k].second = k
    sort(items, items + n)
    for k in range(n):
        order[k] = items[k].second
    return 0


cdef int _distribution_sort(const floating* scores, Py_ssize_t n, BucketMap bm,
                            pair[double, Py_ssize_t]* items, Py_ssize_t* start,
                            Py_ssize_t* order) noexcept nogil:
    cdef Py_ssize_t k, k0, n_block, b, t, nb = bm.size
    cdef int32_t ids[BUCKET_BLOCK]
    k0 = 0
    while k0 < n:
        n_block = buckets_of_block(scores + k0, n - k0, bm, ids)
        for k in range(n_block):
            start[ids[k] + 1] += 1
        k0 += n_block
    for b in range(nb):
        start[b + 1] += start[b]
    # start[b] is now where bucket b begins; it advances as the bucket fills.
    k0 = 0
    while k0 < n:
        n_block = buckets_of_block(scores + k0, n - k0, bm, ids)
        for k in range(n_block):
            b = ids[k]
            t = start[b]
            items[t].first = -(<double>scores[k0 + k])
            items[t].second = k0 + k
            start[b] = t + 1
        k0 += n_block
    # After the scatter start[b] is where bucket b ends.
    t = 0
    for b in range(nb):
        if start[b] - t > 1:
            sort(items + t, items + start[b])
        t = start[b]
    for k in range(n):
        order[k] = items[k].second
    return 0


def descending_order_into(const floating[::1] scores, Py_ssize_t[::1] order):
    """Fill ``order`` with the indices sorting ``scores`` high to low, ties by increasing index.

    The caller validates: ``order`` as long as ``scores``, scores finite (a
    NaN would fall in an arbitrary bucket).
    """
    cdef Py_ssize_t n = scores.shape[0], nb
    cdef BucketMap bm
    cdef pair[double, Py_ssize_t]* items
    cdef Py_ssize_t* start = NULL
    if order.shape[0] != n:
        raise ValueError(f"expected order of length {n}, got {order.shape[0]} instead")
    if n == 0:
        return
    items = <pair[double, Py_ssize_t]*>malloc(n * sizeof(pair[double, Py_ssize_t]))
    if items == NULL:
        raise MemoryError(f"cannot allocate the work array for {n} scores")
    try:
        nb = min(<Py_ssize_t>MAX_BUCKETS, max(n // SCORES_PER_BUCKET, 3))
        if n >= DISTRIBUTE_MIN and sampled_bucket_map(&scores[0], n, nb, &bm):
            start = <Py_ssize_t*>calloc(nb + 1, sizeof(Py_ssize_t))
            if start == NULL:
                raise MemoryError(f"cannot allocate the bucket table for {nb} buckets")
            with nogil:
                _distribution_sort(&scores[0], n, bm, items, start, &order[0])
        else:
            with nogil:
                _sort_pairs(&scores[0], n, items, &order[0])
    finally:
        free(items)
        free(start)


def small_descending_order_into(const floating[::1] scores, Py_ssize_t[::1] order, double floor=-INFINITY,
                                n_first=None):
    """:func:`descending_order_into` by the kernels' sort of a query's few scores (``_sorting.pxd``: buckets
    four per score, then insertion, std::sort when they crowd), which the inference kernels call inline.
    Same order, same contract; the tests hold the two against each other.  Returns n.

    With ``floor`` or ``n_first`` (1 … n), the top-k method's partial sort (``descending_keyed_down_to``):
    ``order`` is rankopt's up to the place returned, which passes the first ``n_first`` and every score ≥
    ``floor``; after it the rest, each lower than every score before it, in no promised order."""
    cdef Py_ssize_t n = scores.shape[0], k, first = n if n_first is None else n_first, upto = n
    cdef Keyed* items
    cdef int32_t* ids
    cdef int32_t* ends
    if order.shape[0] != n:
        raise ValueError(f"expected order of length {n}, got {order.shape[0]} instead")
    if n == 0:
        return 0
    if not 1 <= first <= n:
        raise ValueError(f"expected n_first in 1 … {n}, got {n_first} instead")
    items = <Keyed*>malloc(n * sizeof(Keyed))
    ids = <int32_t*>malloc(n * sizeof(int32_t))
    ends = <int32_t*>malloc((SORT_BUCKETS_PER_SCORE * n + 1) * sizeof(int32_t))
    try:
        if items == NULL or ids == NULL or ends == NULL:
            raise MemoryError(f"cannot allocate the work arrays for {n} scores")
        with nogil:
            upto = descending_keyed_down_to(&scores[0], n, items, ids, ends, floor, first)
            for k in range(n):
                order[k] = items[k].idx
    finally:
        free(items)
        free(ids)
        free(ends)
    return upto
